//! When the engines run: the machine's owner comes first, as in BOINC's computing
//! preferences.
//!
//! The engines pause while any of these holds (checked in this order, the first one named):
//! - the pause file exists (`--pause-file`, default `<data-dir>/pause`);
//! - SIGUSR1 was received (until SIGUSR2);
//! - the machine runs on battery (`--on-battery pause`, the default; Linux reads
//!   `/sys/class/power_supply`, macOS asks `pmset`);
//! - the local time is outside `--run-hours` (a daily window such as `19:00-07:00`; off
//!   unless set);
//! - other programs use more than `--max-other-cpu` percent of the machine's CPU time
//!   (off unless set; Linux, from `/proc`), averaged over [`CPU_WINDOW`]. The worker's own
//!   process tree (its engines, and the rustc building an engine) does not count.
//!
//! A paused engine holds still (a compiled one is told to, through its protocol's `pause`,
//! since it walks on between the worker's looks at its progress), keeps its place in the
//! tree, and its time does not count as engine time (the per-core rate is of time
//! walking); so do the rests of `--cpu-percent` (the executor's, not a pause to report). A pause longer than `--give-back-after` gives
//! the held units back (the loop in [`super`] does it): running units stop at their exact
//! cursor and report it, so the coordinator leases the rest as a continuation; unstarted
//! leases are released; nothing more is leased until the pause ends. A laptop unplugged for
//! an afternoon then never holds a job's last units hostage.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use clap::ValueEnum;

/// How often the power source and the clock are read.
const POWER_EVERY: Duration = Duration::from_secs(2);
/// The window other programs' CPU use is averaged over.
pub const CPU_WINDOW: Duration = Duration::from_secs(10);

/// Why the engines are paused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The pause file exists.
    File,
    /// Its owner paused it (`e2fleet-worker pause`, or SIGUSR1); `resume` or SIGUSR2
    /// resumes.
    Signal,
    /// The machine runs on battery.
    Battery,
    /// Other programs use this percentage of the machine's CPU time.
    Busy(u32),
    /// The local time is outside the window the engines may run in.
    Hours(Hours),
    /// A program named in `--pause-while` runs (its name as given).
    Program(&'static str),
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::File => write!(f, "the pause file exists"),
            Reason::Signal => write!(
                f,
                "by its owner: `e2fleet-worker resume` (or SIGUSR2) resumes"
            ),
            Reason::Battery => write!(f, "on battery"),
            Reason::Busy(pct) => write!(f, "other programs use {pct}% of the CPU"),
            Reason::Hours(h) => write!(f, "outside the hours set, {h}"),
            Reason::Program(name) => write!(f, "while {name} runs"),
        }
    }
}

/// What to do on battery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OnBattery {
    /// Pause the engines until the machine is plugged in again.
    Pause,
    /// Keep computing.
    Run,
}

/// A daily window of local time the engines may run in: `19:00-07:00` (across midnight)
/// or `09:30-17:00`; minutes of the day, the end excluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hours {
    from: u16,
    to: u16,
}

impl Hours {
    /// Whether the minute of the day `m` (0..1440) is inside.
    pub fn contains(&self, m: u16) -> bool {
        if self.from < self.to {
            self.from <= m && m < self.to
        } else {
            m >= self.from || m < self.to
        }
    }

    /// Whether the machine's local time now is inside (its time zone: `TZ`, else the
    /// system's). A time zone that cannot be read counts as UTC.
    pub fn now_inside(&self) -> bool {
        let now = jiff::Zoned::now();
        self.contains(now.hour() as u16 * 60 + now.minute() as u16)
    }
}

impl FromStr for Hours {
    type Err = String;

    fn from_str(s: &str) -> Result<Hours, String> {
        let minute = |t: &str| -> Option<u16> {
            let (h, m) = t.trim().split_once(':')?;
            let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
            (h < 24 && m < 60 && !t.trim().starts_with('+')).then_some(h * 60 + m)
        };
        let bad = || "hours are a daily window HH:MM-HH:MM, e.g. 19:00-07:00".to_string();
        let (a, b) = s.split_once('-').ok_or_else(bad)?;
        let (from, to) = (minute(a).ok_or_else(bad)?, minute(b).ok_or_else(bad)?);
        if from == to {
            return Err("an empty window (leave --run-hours out to run at any hour)".to_string());
        }
        Ok(Hours { from, to })
    }
}

impl fmt::Display for Hours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:02}:{:02}-{:02}:{:02}",
            self.from / 60,
            self.from % 60,
            self.to / 60,
            self.to % 60
        )
    }
}

/// The conditions the loop polls.
pub struct Conditions {
    file: PathBuf,
    on_battery: OnBattery,
    power_supply_dir: PathBuf,
    next_power: Instant,
    battery: bool,
    cpu: Option<CpuWatch>,
    hours: Option<Hours>,
    outside: bool,
    /// `--pause-while`: program names as given and lowercase, and where processes are
    /// listed.
    programs: Vec<&'static str>,
    lowercase: Vec<String>,
    proc_dir: PathBuf,
    program: Option<usize>,
}

impl Conditions {
    /// Conditions for these flags. `power_supply_dir` is Linux's `/sys/class/power_supply`
    /// (a test points it at a tree of its own). Fails when `--max-other-cpu` is set where
    /// this machine's CPU time cannot be read.
    pub fn new(
        file: PathBuf,
        on_battery: OnBattery,
        max_other_cpu: Option<u8>,
        hours: Option<Hours>,
        power_supply_dir: PathBuf,
    ) -> Result<Conditions> {
        let cpu = match max_other_cpu {
            None => None,
            Some(limit) => Some(CpuWatch::start(Path::new("/proc"), limit)?),
        };
        Ok(Conditions {
            file,
            on_battery,
            power_supply_dir,
            next_power: Instant::now(),
            battery: false,
            cpu,
            hours,
            outside: false,
            programs: Vec::new(),
            lowercase: Vec::new(),
            proc_dir: PathBuf::from("/proc"),
            program: None,
        })
    }

    /// Also pauses while a process named one of `programs` runs (its name as the kernel
    /// keeps it, or the file name of its command), looked for under `proc_dir` (Linux's
    /// `/proc`; a test points it at a tree of its own) every few seconds.
    /// (The names live as long as the program: a few short strings, given once.)
    pub fn pause_while(mut self, programs: &[String], proc_dir: PathBuf) -> Conditions {
        self.lowercase = programs.iter().map(|p| p.to_lowercase()).collect();
        self.programs = programs
            .iter()
            .map(|p| &*Box::leak(p.clone().into_boxed_str()))
            .collect();
        self.proc_dir = proc_dir;
        self
    }

    /// Why the engines should pause now, if they should. `signalled`: SIGUSR1 is in force.
    pub fn reason(&mut self, signalled: bool) -> Option<Reason> {
        let now = Instant::now();
        if now >= self.next_power {
            self.next_power = now + POWER_EVERY;
            self.battery =
                self.on_battery == OnBattery::Pause && on_battery(&self.power_supply_dir);
            self.outside = self.hours.is_some_and(|h| !h.now_inside());
            self.program = running_program(&self.proc_dir, &self.lowercase);
        }
        let busy = self.cpu.as_mut().and_then(|c| c.poll(now));
        if self.file.exists() {
            Some(Reason::File)
        } else if signalled {
            Some(Reason::Signal)
        } else if self.battery {
            Some(Reason::Battery)
        } else if let (true, Some(h)) = (self.outside, self.hours) {
            Some(Reason::Hours(h))
        } else if let Some(i) = self.program {
            Some(Reason::Program(self.programs[i]))
        } else {
            busy.map(Reason::Busy)
        }
    }
}

/// True when the machine runs on battery (macOS: `pmset`; elsewhere Linux's power
/// supplies under `power_supply_dir`). Anything unreadable counts as mains: a worker never
/// pauses on a guess.
fn on_battery(power_supply_dir: &Path) -> bool {
    if cfg!(target_os = "macos") {
        return std::process::Command::new("pmset")
            .args(["-g", "batt"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .is_some_and(|o| pmset_on_battery(&String::from_utf8_lossy(&o.stdout)));
    }
    sysfs_on_battery(power_supply_dir)
}

/// Most processes looked at in one scan for `--pause-while` (a machine has a few hundred).
const MAX_PROCESSES: usize = 100_000;

/// The index in `programs` (lowercase names) of one that runs: a process under
/// `proc_dir` whose kernel name (`comm`, cut at 15 bytes) or command's file name (the
/// first word of `cmdline`) is that name. `None` when none runs or nothing can be read.
pub fn running_program(proc_dir: &Path, programs: &[String]) -> Option<usize> {
    if programs.is_empty() {
        return None;
    }
    let entries = std::fs::read_dir(proc_dir).ok()?;
    for entry in entries.flatten().take(MAX_PROCESSES) {
        let name = entry.file_name();
        if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let dir = entry.path();
        let comm = std::fs::read_to_string(dir.join("comm"))
            .map(|c| c.trim_end().to_lowercase())
            .unwrap_or_default();
        let command = std::fs::read(dir.join("cmdline"))
            .ok()
            .and_then(|c| {
                let first = c.split(|&b| b == 0).next()?.to_vec();
                let first = String::from_utf8_lossy(&first).to_lowercase();
                Some(first.rsplit('/').next().unwrap_or_default().to_string())
            })
            .unwrap_or_default();
        let hit = programs.iter().position(|p| {
            (!comm.is_empty() && (*p == comm || (comm.len() == 15 && p.starts_with(&comm))))
                || (!command.is_empty() && *p == command)
        });
        if hit.is_some() {
            return hit;
        }
    }
    None
}

/// Linux's power supplies, the way systemd's `on_ac_power` reads them: on mains when any
/// supply that is not a battery (mains, USB, ...) is online; on battery when there are
/// such supplies and none is online, or when there are none and a system battery is
/// discharging. Batteries of devices (a mouse, a headset: `scope` `Device`) do not count.
pub fn sysfs_on_battery(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let read = |p: &Path, name: &str| {
        std::fs::read_to_string(p.join(name))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    };
    let (mut supplies, mut online, mut discharging) = (0, 0, 0);
    for entry in entries.flatten() {
        let p = entry.path();
        if read(&p, "scope").eq_ignore_ascii_case("device") {
            continue;
        }
        if read(&p, "type") == "Battery" {
            if read(&p, "status") == "Discharging" {
                discharging += 1;
            }
        } else {
            match read(&p, "online").as_str() {
                "" => {}
                "0" => supplies += 1,
                _ => {
                    supplies += 1;
                    online += 1;
                }
            }
        }
    }
    if supplies > 0 {
        online == 0
    } else {
        discharging > 0
    }
}

/// `pmset -g batt` on macOS: "Now drawing from 'Battery Power'" on battery.
pub fn pmset_on_battery(out: &str) -> bool {
    out.lines()
        .next()
        .is_some_and(|l| l.contains("'Battery Power'"))
}

/// Other programs' share of the machine's CPU time, from `/proc`.
struct CpuWatch {
    proc: PathBuf,
    limit: u8,
    last: CpuSample,
    next: Instant,
    busy: Option<u32>,
}

impl CpuWatch {
    fn start(proc: &Path, limit: u8) -> Result<CpuWatch> {
        if !(1..=100).contains(&limit) {
            bail!("--max-other-cpu is a percentage of the machine, 1 to 100");
        }
        let Some(last) = CpuSample::read(proc) else {
            bail!(
                "--max-other-cpu needs the machine's CPU times from {}/stat (Linux)",
                proc.display()
            );
        };
        Ok(CpuWatch {
            proc: proc.to_path_buf(),
            limit,
            last,
            next: Instant::now() + CPU_WINDOW,
            busy: None,
        })
    }

    /// Once a window: Some(percent) while other programs use more than the limit.
    fn poll(&mut self, now: Instant) -> Option<u32> {
        if now >= self.next {
            self.next = now + CPU_WINDOW;
            if let Some(sample) = CpuSample::read(&self.proc) {
                self.busy = other_percent(&self.last, &sample)
                    .filter(|pct| *pct > f64::from(self.limit))
                    .map(|pct| pct.round() as u32);
                self.last = sample;
            }
        }
        self.busy
    }
}

/// CPU time in clock ticks: the machine's busy and total time (all CPUs), and this
/// process tree's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    /// Ticks the machine's CPUs spent on anything but idling and waiting for I/O.
    pub busy: u64,
    /// All ticks but those the hypervisor stole.
    pub total: u64,
    /// Ticks of this process and its descendants (reaped ones included).
    pub ours: u64,
}

impl CpuSample {
    /// Reads `proc`/stat and this process tree's `proc`/PID/stat.
    pub fn read(proc: &Path) -> Option<CpuSample> {
        let (busy, total) = machine_ticks(&std::fs::read_to_string(proc.join("stat")).ok()?)?;
        let ours = tree_ticks(proc, std::process::id());
        Some(CpuSample { busy, total, ours })
    }
}

/// (busy, total) ticks from `/proc/stat`'s first line: user nice system idle iowait irq
/// softirq steal ... (guest time is already inside user).
pub fn machine_ticks(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    if v.len() < 5 {
        return None;
    }
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6);
    Some((busy, busy + at(3) + at(4)))
}

/// (ppid, utime + stime + cutime + cstime) from a `/proc/PID/stat` line (the command
/// name, in parentheses, may hold spaces and parentheses).
pub fn process_ticks(stat: &str) -> Option<(u32, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    let ticks = f
        .get(11..15)?
        .iter()
        .map(|x| x.parse::<u64>().ok())
        .sum::<Option<u64>>()?;
    Some((ppid, ticks))
}

/// Ticks of `root` and every live descendant. A descendant's reaped children are in its
/// own `cutime`/`cstime`, and a reaped descendant in its parent's, so the sum never
/// counts a tick twice and never loses one.
fn tree_ticks(proc: &Path, root: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return 0;
    };
    let procs: Vec<(u32, u32, u64)> = entries
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let (ppid, ticks) =
                process_ticks(&std::fs::read_to_string(e.path().join("stat")).ok()?)?;
            Some((pid, ppid, ticks))
        })
        .collect();
    let mut tree = vec![root];
    let mut total = 0;
    while let Some(pid) = tree.pop() {
        for (child, ppid, ticks) in &procs {
            if *child == pid {
                total += ticks;
            }
            if *ppid == pid && *child != pid {
                tree.push(*child);
            }
        }
    }
    total
}

/// Other programs' share of the machine between two samples, in percent of all its CPUs.
pub fn other_percent(a: &CpuSample, b: &CpuSample) -> Option<f64> {
    let total = b.total.checked_sub(a.total).filter(|t| *t > 0)?;
    let busy = b.busy.saturating_sub(a.busy);
    let ours = b.ours.saturating_sub(a.ours);
    Some(100.0 * busy.saturating_sub(ours) as f64 / total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn supply(dir: &Path, name: &str, files: &[(&str, &str)]) {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        for (f, v) in files {
            std::fs::write(d.join(f), format!("{v}\n")).unwrap();
        }
    }

    #[test]
    fn power_supplies_are_read_as_systemd_reads_them() {
        let case = |supplies: &[(&str, &[(&str, &str)])]| {
            let dir = tempfile::tempdir().unwrap();
            for (name, files) in supplies {
                supply(dir.path(), name, files);
            }
            sysfs_on_battery(dir.path())
        };
        let bat = |status: &'static str| [("type", "Battery"), ("status", status)];
        // a desktop or a server: nothing there, or no directory at all
        assert!(!case(&[]));
        assert!(!sysfs_on_battery(Path::new("/nonexistent/power_supply")));
        // a laptop plugged in, and unplugged
        let ac_on: &[(&str, &str)] = &[("type", "Mains"), ("online", "1")];
        let ac_off: &[(&str, &str)] = &[("type", "Mains"), ("online", "0")];
        assert!(!case(&[("AC", ac_on), ("BAT0", &bat("Charging"))]));
        assert!(case(&[("AC", ac_off), ("BAT0", &bat("Discharging"))]));
        // unplugged, battery full: still on battery
        assert!(case(&[("AC", ac_off), ("BAT0", &bat("Full"))]));
        // charged through USB-C while the mains entry says offline
        let usb: &[(&str, &str)] = &[("type", "USB"), ("online", "1")];
        assert!(!case(&[
            ("AC", ac_off),
            ("ucsi-source-psy-1", usb),
            ("BAT0", &bat("Charging"))
        ]));
        // no mains entry at all: the battery's own status decides
        assert!(case(&[("BAT0", &bat("Discharging"))]));
        assert!(!case(&[("BAT0", &bat("Charging"))]));
        // a wireless mouse's battery is not the machine's
        let mouse: &[(&str, &str)] = &[
            ("type", "Battery"),
            ("status", "Discharging"),
            ("scope", "Device"),
        ];
        assert!(!case(&[("hidpp_battery_0", mouse)]));
    }

    #[test]
    fn pmset_says_where_the_power_comes_from() {
        assert!(pmset_on_battery(
            "Now drawing from 'Battery Power'\n -InternalBattery-0 (id=1)\t85%; discharging; 4:12 remaining present: true\n"
        ));
        assert!(!pmset_on_battery(
            "Now drawing from 'AC Power'\n -InternalBattery-0 (id=1)\t100%; charged; 0:00 remaining present: true\n"
        ));
        assert!(!pmset_on_battery(""));
    }

    #[test]
    fn cpu_times_are_parsed_from_proc() {
        let stat = "cpu  100 5 50 800 20 3 2 7 0 0\ncpu0 50 2 25 400 10 1 1 3 0 0\nintr 1\n";
        // busy: user + nice + system + irq + softirq; total adds idle and iowait, not steal
        assert_eq!(machine_ticks(stat), Some((160, 980)));
        assert_eq!(machine_ticks("intr 1\n"), None);
        let line = "4242 (rustc (x) 1) S 17 4242 17 0 -1 4194304 9 0 0 0 31 7 5 2 20 0 1 0 1 1 1\n";
        assert_eq!(process_ticks(line), Some((17, 31 + 7 + 5 + 2)));
        assert_eq!(process_ticks("4242 (x) S"), None);
    }

    #[test]
    fn other_programs_share_leaves_out_this_process_tree() {
        let a = CpuSample {
            busy: 1_000,
            total: 4_000,
            ours: 300,
        };
        // 200 ticks of the machine: 150 busy, of which 100 are ours
        let b = CpuSample {
            busy: 1_150,
            total: 4_200,
            ours: 400,
        };
        assert_eq!(other_percent(&a, &b), Some(25.0));
        // our engines alone: nobody else
        let c = CpuSample {
            busy: 1_200,
            total: 4_200,
            ours: 500,
        };
        assert_eq!(other_percent(&a, &c), Some(0.0));
        assert_eq!(other_percent(&a, &a), None);
    }

    #[test]
    fn this_process_tree_is_found_in_proc() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let sample = CpuSample::read(Path::new("/proc")).expect("a sample");
        assert!(sample.total >= sample.busy);
        // a child burning CPU: its ticks are in this process tree's while it lives
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(600));
        let own = process_ticks(&std::fs::read_to_string("/proc/self/stat").unwrap())
            .unwrap()
            .1;
        let theirs = tree_ticks(Path::new("/proc"), child.id());
        let all = tree_ticks(Path::new("/proc"), std::process::id());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(theirs > 0, "the child's ticks");
        assert!(all >= own + theirs, "{all} < {own} + {theirs}");
    }

    #[test]
    fn hours_are_a_daily_window_that_may_cross_midnight() {
        let night: Hours = "19:00-07:00".parse().unwrap();
        let day: Hours = "09:30-17:00".parse().unwrap();
        let at = |h: u16, m: u16| h * 60 + m;
        assert!(night.contains(at(19, 0)) && night.contains(at(23, 59)));
        assert!(night.contains(at(0, 0)) && night.contains(at(6, 59)));
        assert!(!night.contains(at(7, 0)) && !night.contains(at(12, 0)));
        assert!(!night.contains(at(18, 59)));
        assert!(day.contains(at(9, 30)) && day.contains(at(16, 59)));
        assert!(!day.contains(at(9, 29)) && !day.contains(at(17, 0)));
        assert_eq!(night.to_string(), "19:00-07:00");
        assert_eq!(
            " 9:05 - 17:00".parse::<Hours>().unwrap().to_string(),
            "09:05-17:00"
        );
        for bad in [
            "",
            "19-07",
            "19:00",
            "24:00-07:00",
            "19:60-07:00",
            "07:00-07:00",
            "a:b-c:d",
        ] {
            assert!(bad.parse::<Hours>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_first_reason_in_force_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pause");
        let power = dir.path().join("power");
        supply(&power, "AC", &[("type", "Mains"), ("online", "0")]);
        let mut c =
            Conditions::new(file.clone(), OnBattery::Pause, None, None, power.clone()).unwrap();
        assert_eq!(c.reason(false), Some(Reason::Battery));
        assert_eq!(c.reason(true), Some(Reason::Signal));
        std::fs::write(&file, "").unwrap();
        assert_eq!(c.reason(true), Some(Reason::File));
        let mut run =
            Conditions::new(file.clone(), OnBattery::Run, None, None, power.clone()).unwrap();
        std::fs::remove_file(&file).unwrap();
        assert_eq!(run.reason(false), None);
        assert!(
            Conditions::new(
                file.clone(),
                OnBattery::Run,
                Some(0),
                None,
                dir.path().into()
            )
            .is_err()
        );
        // a window that has just ended, and one that has just begun
        let now = jiff::Zoned::now();
        let m = now.hour() as u16 * 60 + now.minute() as u16;
        let window = |from: u16, to: u16| -> Hours {
            let t = |x: u16| format!("{:02}:{:02}", x % 1440 / 60, x % 60);
            format!("{}-{}", t(from), t(to)).parse().unwrap()
        };
        let ended = window(m + 1440 - 120, m + 1440 - 60);
        let mut off = Conditions::new(
            file.clone(),
            OnBattery::Run,
            None,
            Some(ended),
            power.clone(),
        )
        .unwrap();
        assert_eq!(off.reason(false), Some(Reason::Hours(ended)));
        let begun = window(m + 1440 - 1, m + 120);
        let mut on = Conditions::new(file, OnBattery::Run, None, Some(begun), power).unwrap();
        assert_eq!(on.reason(false), None);
    }

    /// `--pause-while` finds a program by its kernel name (cut at 15 bytes) or by its
    /// command's file name, whatever the case, and not by a part of a name; a process
    /// list it cannot read pauses nothing.
    #[test]
    fn programs_named_to_pause_for_are_found_by_name() {
        let proc_dir = tempfile::tempdir().unwrap();
        let process = |pid: &str, comm: &str, cmdline: &[u8]| {
            let d = proc_dir.path().join(pid);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("comm"), format!("{comm}\n")).unwrap();
            std::fs::write(d.join("cmdline"), cmdline).unwrap();
        };
        process("1", "init", b"/sbin/init\0");
        process(
            "4242",
            "SteamWebHelper",
            b"/opt/steam/steamwebhelper\0--x\0",
        );
        process("77", "averyverylongpr", b"/usr/bin/averyverylongprogram\0");
        std::fs::create_dir_all(proc_dir.path().join("self")).unwrap();
        let names = |n: &[&str]| n.iter().map(|s| s.to_lowercase()).collect::<Vec<_>>();
        let p = proc_dir.path();
        assert_eq!(
            running_program(p, &names(&["zoom", "steamwebhelper"])),
            Some(1)
        );
        assert_eq!(
            running_program(p, &names(&["averyverylongprogram"])),
            Some(0)
        );
        assert_eq!(running_program(p, &names(&["steam", "web"])), None);
        assert_eq!(running_program(p, &[]), None);
        assert_eq!(running_program(&p.join("nothing"), &names(&["init"])), None);
        let file = p.join("pause-file");
        let mut c = Conditions::new(file, OnBattery::Run, None, None, p.join("power"))
            .unwrap()
            .pause_while(
                &["Zoom".to_string(), "SteamWebHelper".to_string()],
                p.to_path_buf(),
            );
        assert_eq!(
            c.reason(false).map(|r| r.to_string()),
            Some("while SteamWebHelper runs".to_string())
        );
    }
}
