//! Living with the machine's owner: signals (SIGINT/SIGTERM stop with exact cursors, a
//! second one exits; SIGUSR1/SIGUSR2 pause and resume), a lower CPU priority, and the
//! status line shown when a person is watching.

use std::time::Duration;

use tracing::info;

use super::controls::Controls;

/// Lowers this process's CPU priority by `n` (0 keeps it).
pub fn set_nice(n: u8) {
    if n == 0 {
        return;
    }
    let pid = std::process::id().to_string();
    let ok = std::process::Command::new("renice")
        .args(["-n", &n.to_string(), "-p", &pid])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        info!("could not lower the priority (renice unavailable); running at normal priority");
    }
}

/// What a person watching sees: a live status line on a terminal (text logs), and the
/// moments worth a line of their own (verifying this machine, compiling an engine) —
/// printed above the status line there, logged otherwise.
#[derive(Clone)]
pub struct Console {
    bar: Option<indicatif::ProgressBar>,
}

impl Console {
    /// A console; the status line only when `text_logs` go to a terminal.
    pub fn new(text_logs: bool) -> Console {
        let bar = (text_logs && std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .then(|| {
                let bar = indicatif::ProgressBar::new_spinner();
                let style =
                    indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                        .ok()?;
                bar.set_style(style);
                bar.enable_steady_tick(Duration::from_millis(250));
                Some(bar)
            })
            .flatten();
        Console { bar }
    }

    /// A moment worth a line of its own.
    pub fn say(&self, message: &str) {
        match &self.bar {
            Some(bar) => bar.println(format!("e2fleet-worker: {message}")),
            None => info!("{message}"),
        }
    }

    /// Replaces the status line (nothing without a terminal).
    pub fn status(&self, message: String) {
        if let Some(bar) = &self.bar {
            bar.set_message(message);
        }
    }
}

/// Steers `controls` from signals: SIGINT/SIGTERM stop (engines report their exact
/// cursors; before the worker holds anything, see [`Controls::holding`], and at a second
/// signal, the process exits at once), SIGUSR1 pauses and SIGUSR2 resumes. Started before
/// anything else the worker does.
pub fn spawn_handler(controls: Controls) {
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int), Ok(mut usr1), Ok(mut usr2)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::user_defined1()),
            signal(SignalKind::user_defined2()),
        ) else {
            return;
        };
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
                _ = usr1.recv() => { controls.set_paused(true); continue; }
                _ = usr2.recv() => { controls.set_paused(false); continue; }
            }
            if !controls.holding() {
                eprintln!("e2fleet-worker: stopped (no unit held yet)");
                std::process::exit(130);
            }
            if controls.stopping() {
                eprintln!(
                    "e2fleet-worker: second signal, exiting now (unsent results stay in the journal)"
                );
                std::process::exit(130);
            }
            eprintln!(
                "e2fleet-worker: stopping; engines report their exact cursors (signal again to exit at once)"
            );
            controls.stop();
        }
    });
}
