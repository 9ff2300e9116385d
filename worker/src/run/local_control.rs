//! The local control socket: `e2fleet-worker status | pause | resume | stop` reach a running
//! worker through `control.sock` in its data directory, which only its user can open (the
//! directory is 0700 and the socket 0600). One request line in, one JSON line out:
//!
//! | request | answer |
//! |---|---|
//! | `status` | `{"ok": true, "status": Snapshot}` |
//! | `pause`, `resume` | the owner's pause on or off (as SIGUSR1 and SIGUSR2), then the status |
//! | `stop` | a stop (as SIGTERM: running units report their exact cursors), then the status |
//!
//! Anything else is `{"ok": false, "error": ...}`. A request is at most
//! [`MAX_REQUEST`] bytes and must arrive within [`REQUEST_TIME`]; at most
//! [`CONNECTIONS`] are served at once, the rest closed unanswered. A second worker started
//! on the same data directory finds the socket answering and refuses to start (two workers
//! would share one identity and one journal).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;

use super::controls::{Controls, Snapshot};

/// The socket's file name in the data directory.
pub const SOCKET: &str = "control.sock";

/// Longest request line, bytes.
pub const MAX_REQUEST: u64 = 64;

/// How long a client has to send its request.
pub const REQUEST_TIME: Duration = Duration::from_secs(2);

/// Requests served at once.
pub const CONNECTIONS: usize = 4;

/// The socket of the worker whose data directory is `data_dir`.
pub fn socket_path(data_dir: &Path) -> PathBuf {
    data_dir.join(SOCKET)
}

/// The answer to a request.
#[derive(Debug, Serialize, Deserialize)]
pub struct Answer {
    /// Whether the request was understood and done.
    pub ok: bool,
    /// The worker's status after it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Snapshot>,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The serving socket: removed, and its task ended, when dropped.
pub struct Server {
    path: PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves `controls` on the socket in `data_dir` (which exists, 0700). Refuses when a
/// worker already answers there; a socket left by a worker that died is replaced.
pub fn serve(data_dir: &Path, controls: Controls) -> Result<Server> {
    let path = socket_path(data_dir);
    if path.exists() {
        if std::os::unix::net::UnixStream::connect(&path).is_ok() {
            bail!(
                "another worker runs with the data directory {} (its control socket answers): give each worker a --data-dir of its own",
                data_dir.display()
            );
        }
        std::fs::remove_file(&path)
            .with_context(|| format!("cannot remove the stale socket {}", path.display()))?;
    }
    let listener = UnixListener::bind(&path)
        .with_context(|| format!("cannot make the control socket {}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .with_context(|| format!("cannot make {} private", path.display()))?;
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS));
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                continue; // busy: the connection closes unanswered
            };
            let controls = controls.clone();
            tokio::spawn(async move {
                let _slot = slot;
                let _ = tokio::time::timeout(REQUEST_TIME, answer(stream, &controls)).await;
            });
        }
    });
    Ok(Server { path, task })
}

/// Reads one request from `stream` and answers it.
async fn answer(stream: tokio::net::UnixStream, controls: &Controls) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    BufReader::new(read.take(MAX_REQUEST))
        .read_line(&mut line)
        .await?;
    let answer = match line.trim() {
        "status" => None,
        "pause" => {
            controls.set_paused(true);
            None
        }
        "resume" => {
            controls.set_paused(false);
            None
        }
        "stop" => {
            controls.stop();
            None
        }
        other => Some(format!(
            "unknown request {:?}: status, pause, resume or stop",
            other.chars().take(32).collect::<String>()
        )),
    };
    let answer = match answer {
        None => Answer {
            ok: true,
            status: Some(controls.snapshot()),
            error: None,
        },
        Some(error) => Answer {
            ok: false,
            status: None,
            error: Some(error),
        },
    };
    let mut text = serde_json::to_string(&answer).unwrap_or_else(|_| "{\"ok\":false}".into());
    text.push('\n');
    write.write_all(text.as_bytes()).await?;
    write.shutdown().await
}

/// Sends `request` to the worker whose data directory is `data_dir`: its answer.
pub fn request(data_dir: &Path, request: &str) -> Result<Answer> {
    use std::io::{BufRead, Read, Write};
    let path = socket_path(data_dir);
    let mut stream = std::os::unix::net::UnixStream::connect(&path).with_context(|| {
        format!(
            "no worker answers at {} (is one running with --data-dir {}?)",
            path.display(),
            data_dir.display()
        )
    })?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.set_write_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(format!("{request}\n").as_bytes())?;
    let mut line = String::new();
    std::io::BufReader::new(stream.take(1 << 16))
        .read_line(&mut line)
        .context("the worker did not answer")?;
    serde_json::from_str(&line).with_context(|| format!("a malformed answer: {line:?}"))
}
