//! Certificates: a job walked here the way a fleet walks it (prefix units, budget stops
//! and their continuations, some continuations split into sibling prefixes), written as a
//! certificate and audited; then every kind of tampering, each caught with a message that
//! names what is wrong.

use e2fleet_engine::certificate::audit::{
    AuditError, check_structure, choose_sample, compare_run, spec, unit_of,
};
use e2fleet_engine::certificate::{
    self, CertUnit, Certificate, CertificateError, JobInfo, decode, encode, merkle_root, seal,
};
use e2fleet_engine::formats::to_site_json;
use e2fleet_engine::search::{NoControl, RunOptions, Walker};
use e2fleet_engine::unit::{add_counts, result_digest};
use e2fleet_engine::{SearchSpec, Unit, UnitResult};

use crate::load;

/// Walks `rel` as a fleet would: split at `split_depth`, runs of at most `budget` nodes,
/// every `split_every`-th budget stop split into sibling prefixes instead of continued.
fn fleet_job(
    rel: &str,
    split_depth: usize,
    budget: Option<u64>,
    split_every: usize,
) -> Certificate {
    let puzzle = load(rel);
    let spec = SearchSpec::from_site_json(&to_site_json(&puzzle), "row-major").unwrap();
    let plan = &spec.plan;
    let depths = plan.len();
    let mut prefixes = Vec::new();
    let enumeration = Walker::new(plan)
        .enumerate(&[], split_depth, &mut |p| prefixes.push(p.to_vec()))
        .unwrap();
    let mut queue: std::collections::VecDeque<Unit> =
        prefixes.into_iter().map(Unit::prefix).collect();
    let mut split = vec![0u64; depths];
    let mut done: Vec<(Unit, UnitResult)> = Vec::new();
    let mut stops = 0;
    let options = RunOptions {
        budget,
        max_solutions: 64,
    };
    while let Some(unit) = queue.pop_front() {
        let r = Walker::new(plan)
            .run(&unit, options, &mut NoControl)
            .unwrap();
        if let Some(cursor) = &r.cursor {
            stops += 1;
            let mut next = unit.continuation(cursor.clone());
            while stops % split_every == 0 && !next.cursor.is_empty() {
                let parts = Walker::new(plan).split_continuation(&next).unwrap();
                split[next.prefix.len()] += parts.siblings.len() as u64;
                queue.extend(parts.siblings);
                next = parts.remaining;
                if next.cursor.len() < 2 {
                    break;
                }
            }
            queue.push_back(next);
        }
        done.push((unit, r));
    }
    let mut totals = enumeration.clone();
    add_counts(&mut totals, &split);
    let mut solutions_count = 0;
    let mut solutions = Vec::new();
    for (_, r) in &done {
        add_counts(&mut totals, &r.nodes_by_depth);
        solutions_count += r.solutions_count;
        solutions.extend(r.solutions.iter().cloned());
    }
    let units: Vec<CertUnit> = done
        .iter()
        .enumerate()
        .map(|(i, (u, r))| CertUnit::new(i as u64 + 1, u, Some((r, &result_digest(r), 1))))
        .collect();
    let best = certificate::best_boards(
        &spec.puzzle,
        done.iter().enumerate().map(|(i, (_, r))| (i as u64 + 1, r)),
        10,
    );
    Certificate {
        format: certificate::FORMAT.into(),
        job: JobInfo {
            id: "00000000-0000-4000-8000-000000000001".into(),
            name: rel.into(),
            created_ms: 0,
            finished_ms: Some(1),
            complete: true,
        },
        puzzle: to_site_json(&spec.puzzle),
        order: spec.order.spec().to_string(),
        depths,
        split_depth,
        budget,
        solutions_cap: 64,
        enumeration,
        enumeration_solutions: 0,
        split,
        totals,
        solutions_count,
        merkle_root: merkle_root(&units),
        units,
        solutions,
        best,
    }
}

/// Re-seals a changed certificate the way a forger would: root and digest recomputed.
fn forge(mut cert: Certificate, change: impl FnOnce(&mut Certificate)) -> Certificate {
    change(&mut cert);
    cert.merkle_root = merkle_root(&cert.units);
    decode(&encode(&cert)).expect("a re-sealed certificate reads")
}

fn structure_error(cert: &Certificate) -> AuditError {
    let s = spec(cert).unwrap();
    check_structure(cert, &s).expect_err("the audit must fail")
}

fn rerun_all(cert: &Certificate) -> Result<usize, AuditError> {
    let s = spec(cert).unwrap();
    let options = RunOptions {
        budget: cert.budget,
        max_solutions: cert.solutions_cap,
    };
    let sample = choose_sample(cert, usize::MAX, 7);
    for &i in &sample {
        let unit = unit_of(&s, &cert.units[i])?;
        let r = Walker::new(&s.plan)
            .run(&unit, options, &mut NoControl)
            .unwrap();
        compare_run(&s, &cert.units[i], &r)?;
    }
    Ok(sample.len())
}

#[test]
fn a_budgeted_job_with_splits_round_trips_and_audits_whole() {
    let cert = fleet_job("brendan/set1/pieces_05x05.txt", 2, Some(2_000), 3);
    assert_eq!(cert.totals.iter().sum::<u64>(), 113_211);
    assert_eq!(cert.solutions_count, 16);
    assert!(
        cert.split.iter().sum::<u64>() > 0,
        "some continuation was split"
    );
    assert!(cert.units.iter().any(|u| !u.cursor.is_empty()));
    let file = encode(&cert);
    let back = decode(&file).unwrap();
    assert_eq!(back, cert);
    let s = spec(&back).unwrap();
    let structure = check_structure(&back, &s).unwrap();
    assert_eq!(structure.units, cert.units.len());
    assert_eq!(structure.nodes, 113_211);
    assert_eq!(structure.solutions_verified, 16);
    assert_eq!(rerun_all(&back).unwrap(), cert.units.len());
}

#[test]
fn a_changed_byte_anywhere_fails_the_digest() {
    let cert = fleet_job("brendan/set1/pieces_04x04.txt", 2, None, usize::MAX);
    let body = serde_json::to_vec(&cert).unwrap();
    let digest = cert.digest();
    for at in [0, body.len() / 3, body.len() / 2, body.len() - 1] {
        let mut changed = body.clone();
        changed[at] ^= 0x01;
        let err = decode(&seal(&changed, &digest)).unwrap_err();
        assert!(
            matches!(err, CertificateError::Digest { .. }),
            "byte {at}: {err}"
        );
    }
    // a changed digest line fails too, and so does a file cut short
    let mut wrong = digest.clone();
    wrong.replace_range(0..1, if wrong.starts_with('0') { "1" } else { "0" });
    assert!(matches!(
        decode(&seal(&body, &wrong)),
        Err(CertificateError::Digest { .. })
    ));
    let file = encode(&cert);
    assert!(decode(&file[..file.len() - 9]).is_err());
}

#[test]
fn units_edited_without_a_new_root_fail_the_root() {
    let cert = fleet_job("brendan/set1/pieces_04x04.txt", 2, None, usize::MAX);
    let mut edited = cert.clone();
    edited.units[0].result.as_mut().unwrap().agreed = 5;
    let edited = decode(&encode(&edited)).unwrap();
    assert!(matches!(structure_error(&edited), AuditError::Root { .. }));
}

#[test]
fn one_units_counts_changed_is_named() {
    let cert = fleet_job("brendan/set1/pieces_05x05.txt", 2, Some(2_000), 3);
    let victim = cert
        .units
        .iter()
        .position(|u| {
            let r = u.result.as_ref().unwrap();
            r.nodes.len() > 2 && r.stop.is_none() && r.committed() < 2_000
        })
        .unwrap();
    let id = cert.units[victim].id;
    // the counts alone: the sums no longer equal the totals
    let forged = forge(cert.clone(), |c| {
        let r = c.units[victim].result.as_mut().unwrap();
        r.nodes[1] += 1;
    });
    let err = structure_error(&forged);
    assert!(
        matches!(
            err,
            AuditError::Sum {
                what: "total nodes",
                ..
            }
        ),
        "{err}"
    );
    // counts and totals changed together: the structure holds, re-running the unit does not
    let forged = forge(cert, |c| {
        let r = c.units[victim].result.as_mut().unwrap();
        r.nodes[1] += 1;
        let depth = r.from + 1;
        c.totals[depth] += 1;
    });
    let s = spec(&forged).unwrap();
    check_structure(&forged, &s).unwrap();
    let err = rerun_all(&forged).unwrap_err();
    assert!(
        matches!(err, AuditError::Rerun { id: named, .. } if named == id),
        "{err}"
    );
    assert!(err.to_string().contains(&format!("unit {id}")), "{err}");
}

#[test]
fn a_dropped_unit_leaves_part_of_the_tree_uncovered() {
    let cert = fleet_job("brendan/set1/pieces_05x05.txt", 2, Some(2_000), 3);
    for victim in [0, cert.units.len() / 2, cert.units.len() - 1] {
        let forged = forge(cert.clone(), |c| {
            c.units.remove(victim);
        });
        let err = structure_error(&forged);
        assert!(
            matches!(err, AuditError::Uncovered { .. }),
            "unit {victim}: {err}"
        );
    }
}

#[test]
fn a_duplicated_prefix_is_named() {
    let cert = fleet_job("brendan/set1/pieces_05x05.txt", 2, Some(2_000), 3);
    let forged = forge(cert.clone(), |c| {
        let mut copy = c.units[3].clone();
        copy.id = 999_999;
        c.units.push(copy);
    });
    let err = structure_error(&forged);
    assert!(
        matches!(err, AuditError::Duplicate { first, second: 999_999 } if first == cert.units[3].id),
        "{err}"
    );
}

#[test]
fn a_stray_unit_is_named() {
    // a unit below a prefix some other unit already covers whole
    let cert = fleet_job("brendan/set1/pieces_04x04.txt", 1, None, usize::MAX);
    let s = spec(&cert).unwrap();
    let parent = unit_of(&s, &cert.units[0]).unwrap();
    let mut deeper = Vec::new();
    Walker::new(&s.plan)
        .enumerate(&parent.prefix, parent.prefix.len() + 1, &mut |p| {
            if deeper.is_empty() {
                deeper = p.to_vec();
            }
        })
        .unwrap();
    let r = Walker::new(&s.plan)
        .run(
            &Unit::prefix(deeper.clone()),
            RunOptions::default(),
            &mut NoControl,
        )
        .unwrap();
    let forged = forge(cert, |c| {
        c.units.push(CertUnit::new(
            777,
            &Unit::prefix(deeper),
            Some((&r, &result_digest(&r), 1)),
        ));
    });
    let err = structure_error(&forged);
    assert!(matches!(err, AuditError::Stray { id: 777, .. }), "{err}");
}

#[test]
fn edited_totals_and_solutions_are_caught() {
    let cert = fleet_job("brendan/set1/pieces_05x05.txt", 2, Some(2_000), 3);
    let forged = forge(cert.clone(), |c| c.totals[10] += 1);
    assert!(matches!(
        structure_error(&forged),
        AuditError::Sum {
            what: "total nodes",
            depth: 11,
            ..
        }
    ));
    let forged = forge(cert.clone(), |c| c.solutions_count += 1);
    assert!(matches!(
        structure_error(&forged),
        AuditError::Sum {
            what: "solutions",
            ..
        }
    ));
    let forged = forge(cert.clone(), |c| c.enumeration[0] += 1);
    assert!(matches!(
        structure_error(&forged),
        AuditError::Sum {
            what: "enumeration nodes",
            ..
        }
    ));
    // a solution board that breaks a rule
    let forged = forge(cert.clone(), |c| {
        let s = &mut c.solutions[0];
        let (a, b) = (s[0].piece, s[1].piece);
        s[0].piece = b;
        s[1].piece = a;
    });
    assert!(matches!(structure_error(&forged), AuditError::Board { .. }));
    // a best board that claims a better score
    let forged = forge(cert, |c| c.best[0].score += 1);
    let err = structure_error(&forged);
    assert!(matches!(err, AuditError::Board { .. }), "{err}");
}

#[test]
fn a_stop_that_goes_back_or_a_budget_overrun_is_named() {
    let cert = fleet_job("brendan/set1/pieces_05x05.txt", 2, Some(2_000), usize::MAX);
    let stopped = cert
        .units
        .iter()
        .position(|u| !u.cursor.is_empty() && u.result.as_ref().unwrap().stop.is_some())
        .unwrap();
    let id = cert.units[stopped].id;
    let forged = forge(cert.clone(), |c| {
        let u = &mut c.units[stopped];
        u.result.as_mut().unwrap().stop = Some(u.cursor.clone());
    });
    let err = structure_error(&forged);
    assert!(
        matches!(err, AuditError::Unit { id: named, .. } if named == id),
        "{err}"
    );
    let forged = forge(cert, |c| c.budget = Some(10));
    let err = structure_error(&forged);
    assert!(matches!(err, AuditError::Unit { .. }), "{err}");
}
