//! Hosts on one machine: each a Linux network namespace with its own address, its own
//! `/etc/hosts` (through `ip netns exec`'s `/etc/netns/NAME/`) and, for the programs it
//! runs, its own host name (a UTS namespace). A host's one link is a veth pair whose
//! other end sits in this process's namespace, which plays the internet: a host reaches
//! nothing but the far end of its link, where the harness's relays listen, so every byte
//! between two hosts crosses a relay of the harness ([`crate::link`]) and a worker host
//! can only dial out, as behind a home router.
//!
//! Addresses: host `k` of a run is `10.N.k.2/24`, the far end of its link `10.N.k.1`
//! (plus any addresses [`Net::add_far_address`] puts there), `N` a second octet no other
//! interface of this machine uses. Names carry this process's id, so a run that died
//! leaves nothing another run trips over: [`Net::create`] removes namespaces of dead
//! processes first.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Context, Result, bail};

/// Runs within this process made so far (names stay unique).
static RUNS: AtomicU32 = AtomicU32::new(0);

/// Why hosts cannot be made here (not root, no `ip`, namespaces refused).
pub fn unavailable() -> Option<String> {
    if !is_root() {
        return Some("network namespaces need root".into());
    }
    match Command::new("ip")
        .args(["netns", "list"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        Ok(s) if s.success() => {}
        _ => return Some("`ip netns` is not available (iproute2)".into()),
    }
    let probe = format!("e2nf-probe-{}", std::process::id());
    let made = ip(&["netns", "add", &probe]);
    let _ = ip(&["netns", "del", &probe]);
    match made {
        Ok(()) => None,
        Err(e) => Some(format!("cannot make a network namespace: {e:#}")),
    }
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .with_context(|| format!("ip {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// One host.
#[derive(Clone, Debug)]
pub struct Host {
    /// Its name (its host name, and its part of the namespace's name).
    pub name: String,
    /// The namespace.
    pub netns: String,
    /// Its address.
    pub addr: Ipv4Addr,
    /// The far end of its link (in the harness's namespace).
    pub far: Ipv4Addr,
    /// The far end's interface (to take the link down and up).
    pub far_if: String,
}

/// The hosts of one run; removed when dropped.
pub struct Net {
    tag: String,
    octet: u8,
    hosts: Vec<Host>,
}

impl Net {
    /// An empty network, after removing what dead runs left.
    pub fn create() -> Result<Net> {
        sweep_dead_runs();
        let run = RUNS.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{:x}{run:x}", std::process::id());
        let octet = free_octet()?;
        Ok(Net {
            tag,
            octet,
            hosts: Vec::new(),
        })
    }

    /// Adds a host named `name` whose `/etc/hosts` maps each of `dials` (the names it
    /// reaches) to the far end of its own link, where the harness relays them.
    pub fn add_host(&mut self, name: &str, dials: &[&str]) -> Result<Host> {
        let k = self.hosts.len() as u8 + 1;
        let netns = format!("e2nf-{}-{}-{name}", std::process::id(), self.tag);
        let far_if = format!("nf{}h{k}", &self.tag[self.tag.len().saturating_sub(8)..]);
        let addr = Ipv4Addr::new(10, self.octet, k, 2);
        let far = Ipv4Addr::new(10, self.octet, k, 1);
        ip(&["netns", "add", &netns])?;
        let host = Host {
            name: name.to_string(),
            netns: netns.clone(),
            addr,
            far,
            far_if: far_if.clone(),
        };
        // registered first: a failure below still removes the namespace
        self.hosts.push(host.clone());
        ip(&[
            "link", "add", &far_if, "type", "veth", "peer", "name", "eth0", "netns", &netns,
        ])?;
        ip(&["addr", "add", &format!("{far}/24"), "dev", &far_if])?;
        ip(&["link", "set", &far_if, "up"])?;
        ip(&[
            "-n",
            &netns,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "eth0",
        ])?;
        ip(&["-n", &netns, "link", "set", "eth0", "up"])?;
        ip(&["-n", &netns, "link", "set", "lo", "up"])?;
        let etc = etc_dir(&netns);
        std::fs::create_dir_all(&etc)?;
        let mut hosts = format!("127.0.0.1 localhost\n{addr} {name}\n");
        for n in dials {
            hosts.push_str(&format!("{far} {n}\n"));
        }
        std::fs::write(etc.join("hosts"), hosts)?;
        std::fs::write(etc.join("hostname"), format!("{name}\n"))?;
        Ok(host)
    }

    /// Another address at the far end of `host`'s link (a relay dials from it, so the
    /// host on the other side sees each of its peers at an address of its own).
    pub fn add_far_address(&self, host: &Host, last_octet: u8) -> Result<Ipv4Addr> {
        let a = Ipv4Addr::new(10, self.octet, host.far.octets()[2], last_octet);
        ip(&["addr", "add", &format!("{a}/24"), "dev", &host.far_if])?;
        Ok(a)
    }

    /// A command that runs `program` on `host`: in its namespace, under its host name.
    pub fn command(&self, host: &Host, program: &std::path::Path) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &host.netns,
            "unshare",
            "--uts",
            "--",
            "sh",
            "-c",
        ])
        .arg(r#"hostname "$1" && shift && exec "$@""#)
        .arg("sh")
        .arg(&host.name)
        .arg(program);
        c
    }

    /// Whether a TCP connection from `host` to `addr:port` opens within two seconds
    /// (from the harness's own namespace when `host` is `None`).
    pub fn dials(&self, host: Option<&Host>, addr: Ipv4Addr, port: u16) -> bool {
        let probe = format!("exec 3<>/dev/tcp/{addr}/{port}");
        let mut c = match host {
            Some(h) => {
                let mut c = Command::new("ip");
                c.args([
                    "netns", "exec", &h.netns, "timeout", "2", "bash", "-c", &probe,
                ]);
                c
            }
            None => {
                let mut c = Command::new("timeout");
                c.args(["2", "bash", "-c", &probe]);
                c
            }
        };
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Takes `host`'s link down (`false`: packets to and from it are lost, as when its
    /// cable is pulled) or up again.
    pub fn set_link_up(&self, host: &Host, up: bool) -> Result<()> {
        ip(&["link", "set", &host.far_if, if up { "up" } else { "down" }])
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for h in &self.hosts {
            let _ = ip(&["netns", "del", &h.netns]);
            let _ = ip(&["link", "del", &h.far_if]);
            let _ = std::fs::remove_dir_all(etc_dir(&h.netns));
        }
    }
}

fn etc_dir(netns: &str) -> PathBuf {
    PathBuf::from("/etc/netns").join(netns)
}

/// A second octet `N` with no `10.N.*` address on this machine.
fn free_octet() -> Result<u8> {
    let out = Command::new("ip").args(["-o", "-4", "addr"]).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let start = 64 + (std::process::id() % 64) as u8;
    (0..64u8)
        .map(|i| 64 + (start - 64 + i) % 64)
        .find(|n| !text.contains(&format!(" 10.{n}.")))
        .context("no free 10.N.0.0/16 for the hosts")
}

/// Removes namespaces (and their `/etc/netns` files) left by runs whose process is gone.
fn sweep_dead_runs() {
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return;
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix("e2nf-") else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = ip(&["netns", "del", name]);
            let _ = std::fs::remove_dir_all(etc_dir(name));
        }
    }
}
