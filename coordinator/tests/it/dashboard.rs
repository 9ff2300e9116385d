//! The dashboard in a real headless browser (Debian's `chromium`): every page loads with
//! no script error, a running job shows its progress moving and both rate figures, a
//! board renders one SVG cell per board cell, a study draws its ranking, chart and shapes,
//! and names from workers, puzzle files and studies are shown as text, never run as
//! markup.
//!
//! Without a `chromium` on PATH (or `$CHROMIUM`) at build time these tests are marked
//! ignored with the reason (`coordinator/build.rs`), unless `E2FLEET_REQUIRE_BROWSER=1`
//! (set by `.ci/run`, which installs chromium) makes a
//! missing browser a failure.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use crate::harness::*;
use e2fleet_proto::v2;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn chromium() -> Option<PathBuf> {
    let name = std::env::var("CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(&name))
            .find(|p| p.is_file())
    });
    let found = found.or_else(|| Some(PathBuf::from(&name)).filter(|p| p.is_file()));
    if found.is_none() {
        assert!(
            std::env::var("E2FLEET_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "no chromium on PATH: install Debian's chromium (apt-get install chromium), as .ci/run does"
        );
        eprintln!("NOTE: dashboard browser test skipped: no chromium on PATH");
    }
    found
}

/// The page's DOM after its scripts ran and fetched data.
fn dump_dom(browser: &PathBuf, profile: &std::path::Path, url: &str) -> String {
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=5000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .output()
        .expect("chromium runs");
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "chromium failed on {url}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        dom.contains("data-loaded="),
        "{url}: the page never finished a refresh:\n{dom}"
    );
    assert!(
        dom.contains("<pre id=\"js-errors\" hidden=\"\"></pre>"),
        "{url}: script errors on the page:\n{dom}"
    );
    dom
}

/// The value of `attr` on the element with `id`.
fn attr_of(dom: &str, id: &str, attr: &str) -> String {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in\n{dom}"));
    let tag_start = dom[..at].rfind('<').unwrap();
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>').unwrap()];
    let key = format!("{attr}=\"");
    let v = tag
        .find(&key)
        .unwrap_or_else(|| panic!("no {attr} on #{id}: {tag}"));
    let rest = &tag[v + key.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_browser),
    ignore = "no chromium on PATH: apt-get install chromium to run the dashboard in a real browser"
)]
async fn pages_load_and_show_a_running_job_moving() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("chrome");
    let clock = Arc::new(AtomicI64::new(now_ms()));
    let c = Coordinator::start_with_clock(&temp_db(&dir), 3, clock.clone()).await;
    let job = c.submit("brendan/set1/pieces_05x05.txt", 3, 0, 1).await;
    let mut w = SimWorker::register(&c.url, "browser-host", Behaviour::Honest).await;
    w.work(2).await;
    clock.store(now_ms(), std::sync::atomic::Ordering::SeqCst);

    let page = format!("{}/jobs/{job}", c.url);
    let first = tokio::task::spawn_blocking({
        let (b, p, u) = (browser.clone(), profile.clone(), page.clone());
        move || dump_dom(&b, &p, &u)
    })
    .await
    .unwrap();
    let nodes_before: u64 = attr_of(&first, "nodes-total", "data-value")
        .parse()
        .unwrap();
    assert!(nodes_before > 0);
    for id in ["per-core-rate", "aggregate-rate"] {
        let v: f64 = attr_of(&first, id, "data-value").parse().unwrap();
        assert!(v > 0.0, "#{id} is {v}");
    }
    assert!(first.contains("Per-core speed") && first.contains("Aggregate speed"));
    // the deepest board: one <g class="cell..."> per cell of the 5x5 board
    assert_eq!(attr_of_board(&first, "data-cells"), "25");
    assert_eq!(first.matches("<g class=\"cell").count(), 25, "{first}");
    assert!(
        first.contains("<polygon"),
        "placed cells are drawn as triangles"
    );

    w.work(4).await;
    clock.store(now_ms(), std::sync::atomic::Ordering::SeqCst);
    let second = tokio::task::spawn_blocking({
        let (b, p, u) = (browser.clone(), profile.clone(), page.clone());
        move || dump_dom(&b, &p, &u)
    })
    .await
    .unwrap();
    let nodes_after: u64 = attr_of(&second, "nodes-total", "data-value")
        .parse()
        .unwrap();
    assert!(
        nodes_after > nodes_before,
        "progress moves: {nodes_before} -> {nodes_after}"
    );

    // a hardware class that disagrees, for the verification page
    let mut odd = SimWorker::register_as(&c.url, "odd-host", "CPU Odd", Behaviour::Honest).await;
    assert!(odd.verify("", &["clue1-budget"]).await.class_flagged);
    w.verify("", &[]).await;
    // a worker whose engines are paused says why, on the workers page
    odd.client
        .heartbeat(odd.req(v2::HeartbeatRequest {
            paused: "on battery".into(),
            ..Default::default()
        }))
        .await
        .unwrap();
    // a volunteer account in a team, for the stats page
    c.admin()
        .await
        .add_account_in("tess", Some("night-owls"))
        .await
        .unwrap();
    for path in ["/", "/jobs", "/workers", "/verification", "/stats"] {
        let url = format!("{}{path}", c.url);
        let dom = tokio::task::spawn_blocking({
            let (b, p) = (browser.clone(), profile.clone());
            move || dump_dom(&b, &p, &url)
        })
        .await
        .unwrap();
        assert!(dom.contains("browser-host") || path != "/workers", "{dom}");
        if path == "/workers" {
            assert!(
                dom.contains("badge-paused") && dom.contains("on battery"),
                "{dom}"
            );
        }
        if path == "/" {
            assert!(dom.contains("1 of them paused"), "{dom}");
        }
        if path == "/stats" {
            // the team's row and the account's team
            assert!(
                dom.contains("1 team<") && dom.contains("1 account<"),
                "{dom}"
            );
            assert_eq!(dom.matches(">night-owls<").count(), 2, "{dom}");
        }
        if path == "/verification" {
            assert!(
                dom.contains("CPU Odd") && dom.contains("DISAGREES"),
                "{dom}"
            );
            assert!(dom.contains("badge-flagged"), "{dom}");
            assert_eq!(
                dom.matches("class=\"cell-agrees\"").count(),
                12 + 11,
                "{dom}"
            );
        }
        if path == "/" {
            for id in ["per-core-rate", "aggregate-rate"] {
                attr_of(&dom, id, "data-value");
            }
            assert!(dom.contains("Aggregate fleet speed") && dom.contains("Per-core speed"));
        }
    }
    // an hour later every worker is offline: its last word is no pause any more, in the
    // API and so on the page
    clock.fetch_add(3_600_000, std::sync::atomic::Ordering::SeqCst);
    let (_, body) = crate::http_api::get(&c.url, "/api/workers").await;
    let workers: serde_json::Value = serde_json::from_str(&body).unwrap();
    let odd: Vec<(&serde_json::Value, &serde_json::Value)> = workers
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["hostname"] == "odd-host")
        .map(|w| (&w["state"], &w["paused"]))
        .collect();
    assert!(!odd.is_empty(), "{workers}");
    for (state, paused) in odd {
        assert_eq!(
            (state.as_str(), paused.as_str()),
            (Some("offline"), Some("")),
            "{workers}"
        );
    }
    let url = format!("{}/workers", c.url);
    let dom = tokio::task::spawn_blocking({
        let (b, p) = (browser.clone(), profile.clone());
        move || dump_dom(&b, &p, &url)
    })
    .await
    .unwrap();
    assert!(!dom.contains("badge-paused"), "{dom}");
    c.stop().await;
}

fn attr_of_board(dom: &str, attr: &str) -> String {
    let at = dom.find("class=\"board\"").expect("a board svg");
    let tag_start = dom[..at].rfind('<').unwrap();
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>').unwrap()];
    let key = format!("{attr}=\"");
    let rest = &tag[tag.find(&key).unwrap() + key.len()..];
    rest[..rest.find('"').unwrap()].to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_browser),
    ignore = "no chromium on PATH: apt-get install chromium to run the dashboard in a real browser"
)]
async fn names_from_workers_and_puzzles_are_text_not_markup() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("chrome");
    let clock = Arc::new(AtomicI64::new(now_ms()));
    let c = Coordinator::start_with_clock(&temp_db(&dir), 3, clock).await;
    let hostile = "<img src=x onerror=\"document.title='pwned'\">";
    let mut w = SimWorker::register(&c.url, hostile, Behaviour::Honest).await;
    let job = c
        .submit_named(
            "brendan/set1/pieces_05x05.txt",
            "<script>document.title='pwned'</script>",
        )
        .await;
    w.work(1).await;
    for path in [
        "/workers".to_string(),
        "/".to_string(),
        format!("/jobs/{job}"),
    ] {
        let url = format!("{}{path}", c.url);
        let dom = tokio::task::spawn_blocking({
            let (b, p) = (browser.clone(), profile.clone());
            move || dump_dom(&b, &p, &url)
        })
        .await
        .unwrap();
        assert!(
            !dom.contains("<img src=\"x\""),
            "{path}: markup injected:\n{dom}"
        );
        assert!(!dom.contains("<script>document"), "{path}: markup injected");
        assert!(!dom.contains("pwned</title>"), "{path}: script ran");
        let shown = if path == "/workers" {
            "&lt;img src=x"
        } else {
            "&lt;script&gt;"
        };
        assert!(
            dom.contains(shown),
            "{path}: the name is shown as text:\n{dom}"
        );
    }
    c.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(has_browser),
    ignore = "no chromium on PATH: apt-get install chromium to run the dashboard in a real browser"
)]
async fn a_study_page_draws_its_ranking_chart_and_shapes_with_names_as_text() {
    let Some(browser) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("chrome");
    let clock = Arc::new(AtomicI64::new(now_ms()));
    let c = Coordinator::start_with_clock(&temp_db(&dir), 3, clock).await;
    let mut w = SimWorker::register(&c.url, "prober", Behaviour::Honest).await;
    w.probes = true;
    let orders = ["row-major", "spiral:tl", "comb:2"];
    let created = c
        .admin()
        .await
        .submit_study(&e2fleet_proto::api::StudyRequest {
            name: "<script>document.title='pwned'</script>".into(),
            ..crate::studies::request(&orders)
        })
        .await
        .unwrap();
    for _ in 0..500 {
        if w.work(1).await == 0 {
            break;
        }
    }
    c.fleet.settle_studies().await.unwrap();
    let study = format!("/studies/{}", created.study_id);
    for path in ["/studies", study.as_str()] {
        let url = format!("{}{path}", c.url);
        let dom = tokio::task::spawn_blocking({
            let (b, p) = (browser.clone(), profile.clone());
            move || dump_dom(&b, &p, &url)
        })
        .await
        .unwrap();
        assert!(!dom.contains("<script>document"), "{path}: markup injected");
        assert!(!dom.contains("pwned</title>"), "{path}: script ran");
        assert!(
            dom.contains("&lt;script&gt;"),
            "{path}: the name as text:\n{dom}"
        );
        if path == study {
            // the ranking, one line per order on the chart, one shape per order
            for o in orders {
                assert!(dom.contains(&format!(">{o}<")), "{o}:\n{dom}");
            }
            assert!(dom.contains(">best<"), "{dom}");
            assert!(
                dom.contains("estimated nodes per depth, each order"),
                "{dom}"
            );
            assert_eq!(dom.matches("class=\"board shape\"").count(), 3, "{dom}");
            assert_eq!(
                dom.matches("class=\"chart constraints\"").count(),
                3,
                "{dom}"
            );
        } else {
            assert!(dom.contains(&study), "the list links the study:\n{dom}");
        }
    }
    c.stop().await;
}
