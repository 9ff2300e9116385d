//! What the worker says about itself: this machine's verification at start (and what
//! status shows meanwhile), the status line and the snapshot `e2fleet-worker status`
//! reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::warn;

use super::FleetLoop;
use crate::run::RunConfig;
use crate::run::controls::{Controls, Snapshot};
use crate::run::executor::Executor;
use crate::run::jobs::verify_class;
use crate::run::pause::Reason;
use crate::run::signals::Console;

impl FleetLoop {
    /// Runs the verification units this machine's hardware class lacks (they are
    /// computing too: not on battery, not while paused; a pause that begins holds them
    /// still). A failure is logged: real work may still come.
    pub(in crate::run) async fn verify_this_machine(&mut self) {
        let mut told = None;
        while let Some(reason) = self.pause_reason() {
            tell_verification_pause(&self.console, Some(reason), &mut told, "waits");
            publish_verifying(&self.controls, &self.config, Some(reason));
            if self.controls.stopping() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        publish_verifying(&self.controls, &self.config, None);
        let hold = Arc::new(AtomicBool::new(false));
        let hostname = self.config.hostname.clone();
        let verified = {
            let verify = verify_class(
                &mut self.conn,
                &mut self.engine,
                hostname.as_deref(),
                &self.console,
                hold.clone(),
            );
            tokio::pin!(verify);
            loop {
                tokio::select! {
                    done = &mut verify => break done,
                    _ = tokio::time::sleep(Duration::from_millis(500)) => {
                        let reason = self.conditions.reason(self.controls.paused());
                        hold.store(reason.is_some(), Ordering::SeqCst);
                        tell_verification_pause(&self.console, reason, &mut told, "holds still");
                        publish_verifying(&self.controls, &self.config, reason);
                    }
                }
            }
        };
        if let Err(e) = verified {
            warn!(error = %format!("{e:#}"), "could not run the verification units now");
        }
    }

    /// The status line a person watching sees.
    /// The status line a person watching sees, and the snapshot `e2fleet-worker status`
    /// reads.
    pub(super) fn show_status(&self, executor: &Executor) {
        let (queued, running) = executor.load();
        let state = match self.pause {
            Some(reason) => format!("paused ({reason})"),
            None if self.stopping.is_some() => "stopping".to_string(),
            None if self.config.cpu_percent < 100 => {
                format!("running {}% of the time", self.config.cpu_percent)
            }
            None => "running".to_string(),
        };
        let coordinator = if self.conn.up() && self.conn.failures() == 0 {
            match self.conn.round_trip() {
                Some(rtt) => format!("connected ({} ms round trip)", rtt.as_millis()),
                None => "connected".to_string(),
            }
        } else {
            format!("waiting for it ({} failures)", self.conn.failures())
        };
        let snapshot = Snapshot {
            state,
            paused_by_owner: self.controls.paused(),
            threads: executor.threads(),
            engines_busy: running,
            queued: queued + self.waiting.len(),
            units_reported: self.units_reported,
            per_core_nodes_per_s: executor.per_core_rate(),
            coordinator,
        };
        self.console.status(format!(
            "{} | {running}/{} engines busy, {} queued | {} units reported | {:.1} M nodes/s per core | coordinator {}",
            snapshot.state,
            snapshot.threads,
            snapshot.queued,
            snapshot.units_reported,
            snapshot.per_core_nodes_per_s / 1e6,
            snapshot.coordinator,
        ));
        self.controls.publish(snapshot);
    }
}

/// What `status` says while this machine's verification runs, or waits on `pause`.
fn publish_verifying(controls: &Controls, config: &RunConfig, pause: Option<Reason>) {
    controls.publish(Snapshot {
        state: match pause {
            Some(reason) => format!("paused ({reason}): this machine's verification waits"),
            None => "verifying this machine".to_string(),
        },
        threads: config.threads,
        coordinator: config.coordinator.clone(),
        ..Snapshot::default()
    });
}

/// Says why this machine's verification `verb`s when the reason changes (not when a busy
/// machine's percentage moves), and that it goes on when the pause ends.
fn tell_verification_pause(
    console: &Console,
    reason: Option<Reason>,
    told: &mut Option<std::mem::Discriminant<Reason>>,
    verb: &str,
) {
    let kind = reason.map(|r| std::mem::discriminant(&r));
    if kind != *told {
        match reason {
            Some(reason) => console.say(&format!(
                "paused ({reason}): this machine's verification {verb}"
            )),
            None => console.say("resumed: this machine's verification goes on"),
        }
        *told = kind;
    }
}
