//! The accept loop: what a client without a token can cost the coordinator is bounded
//! here, before a request reaches any handler.
//!
//! - at most [`ServerLimits::max_connections`] connections at once, and
//!   [`ServerLimits::max_connections_per_ip`] from one address (more are closed at once);
//! - a connection must finish its TLS handshake and send its first bytes within
//!   [`ServerLimits::handshake_timeout`] (a silent TCP connection is closed);
//! - HTTP/1 request headers within [`ServerLimits::header_read_timeout`]; HTTP/2 streams
//!   per connection capped, flow-control windows bounded, keep-alive pings to find dead
//!   peers ([`KEEPALIVE_INTERVAL`], [`KEEPALIVE_TIMEOUT`]);
//! - a connection with no traffic for [`ServerLimits::idle_timeout`] is closed (clients
//!   reconnect when they need to);
//! - shutdown: stop accepting, let requests in flight finish for a while, then close.
//!
//! The request-level guards (authentication before any body is read, body limits per
//! method, body timeouts) are [`super::guard`]'s.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::ServerConfig;
use tower::ServiceExt;
use tracing::{debug, warn};

/// How often the coordinator pings each HTTP/2 connection.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(20);
/// How long a ping may go unanswered before the connection is closed: a client whose
/// link went silent (a sleeping laptop, a lost route) holds its connection for at most
/// [`KEEPALIVE_INTERVAL`] + this.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// What one coordinator lets connections do.
#[derive(Clone, Debug)]
pub struct ServerLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one IP address.
    pub max_connections_per_ip: usize,
    /// Time to finish the TLS handshake and send the first bytes.
    pub handshake_timeout: Duration,
    /// Time to send an HTTP/1 request's headers.
    pub header_read_timeout: Duration,
    /// A connection with no traffic for this long is closed.
    pub idle_timeout: Duration,
    /// HTTP/2 streams (requests) in flight per connection.
    pub max_concurrent_streams: u32,
    /// How long requests in flight may finish after shutdown begins.
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> ServerLimits {
        ServerLimits {
            max_connections: 8_192,
            max_connections_per_ip: 1_024,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_concurrent_streams: 256,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// The peer of a request's connection (an extension on every request).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// Connections per IP address.
#[derive(Default)]
struct PerIp(Mutex<HashMap<IpAddr, usize>>);

impl PerIp {
    fn enter(&self, ip: IpAddr, max: usize) -> bool {
        let mut map = self.0.lock().expect("per-ip counts");
        let n = map.entry(ip).or_insert(0);
        if *n >= max {
            return false;
        }
        *n += 1;
        true
    }

    fn leave(&self, ip: IpAddr) {
        let mut map = self.0.lock().expect("per-ip counts");
        if let Some(n) = map.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&ip);
            }
        }
    }
}

/// An IO that remembers when it last moved a byte (for the idle timeout).
struct Watched<T> {
    inner: T,
    last: Arc<AtomicU64>,
    epoch: Instant,
}

impl<T> Watched<T> {
    fn touch(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let out = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.touch();
        }
        out
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let out = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(out, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        out
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Serves `router` on `listener` (over TLS with `tls`) until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
    tls: Option<Arc<ServerConfig>>,
    limits: ServerLimits,
) -> std::io::Result<()> {
    let limits = Arc::new(limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let per_ip = Arc::new(PerIp::default());
    let acceptor = tls.map(TlsAcceptor::from);
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(64 * 1024);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .initial_stream_window_size(1 << 20)
        .initial_connection_window_size(4 << 20)
        .max_header_list_size(64 * 1024)
        .keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%peer, "connection refused: too many connections");
            continue;
        };
        if !per_ip.enter(peer.ip(), limits.max_connections_per_ip) {
            debug!(%peer, "connection refused: too many from this address");
            continue;
        }
        // gRPC is many small request/response pairs: without TCP_NODELAY, Nagle's
        // algorithm and delayed ACKs hold a response written in pieces for ~40 ms
        if let Err(e) = tcp.set_nodelay(true) {
            warn!(error = %e, "cannot set TCP_NODELAY");
        }
        let (router, builder, limits, acceptor, per_ip, stop) = (
            router.clone(),
            builder.clone(),
            limits.clone(),
            acceptor.clone(),
            per_ip.clone(),
            stop_rx.clone(),
        );
        tokio::spawn(async move {
            let service = TowerToHyperService::new(router.map_request(
                move |mut r: axum::http::Request<hyper::body::Incoming>| {
                    r.extensions_mut().insert(Peer(peer));
                    r
                },
            ));
            match acceptor {
                Some(acceptor) => {
                    match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await
                    {
                        Ok(Ok(tls)) => connection(tls, service, &builder, &limits, stop).await,
                        Ok(Err(e)) => debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => debug!(%peer, "TLS handshake timed out"),
                    }
                }
                None => {
                    if first_bytes(&tcp, limits.handshake_timeout).await {
                        connection(tcp, service, &builder, &limits, stop).await;
                    } else {
                        debug!(%peer, "connection closed: nothing sent");
                    }
                }
            }
            per_ip.leave(peer.ip());
            drop(slot);
        });
    }
    // stop accepting; connections finish what is in flight, then close
    let _ = stop_tx.send(true);
    let started = Instant::now();
    let everyone = limits.max_connections as u32;
    while started.elapsed() < limits.shutdown_grace + Duration::from_secs(1) {
        if slots.available_permits() as u32 == everyone {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Whether the peer sends something within `limit` (a TCP connection that never does is
/// only holding a slot).
async fn first_bytes(tcp: &TcpStream, limit: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(limit, tcp.peek(&mut byte)).await,
        Ok(Ok(n)) if n > 0
    )
}

/// Serves one connection until it ends, goes idle, or shutdown's grace runs out.
async fn connection<IO, S>(
    io: IO,
    service: TowerToHyperService<S>,
    builder: &Builder<TokioExecutor>,
    limits: &ServerLimits,
    mut stop: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: tower::Service<
            axum::http::Request<hyper::body::Incoming>,
            Response = axum::response::Response,
            Error = std::convert::Infallible,
        > + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    let last = Arc::new(AtomicU64::new(0));
    let epoch = Instant::now();
    let io = Watched {
        inner: io,
        last: last.clone(),
        epoch,
    };
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    let mut tick = tokio::time::interval(Duration::from_secs(5).min(limits.idle_timeout));
    let idle_ms = limits.idle_timeout.as_millis() as u64;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = tick.tick() => {
                let quiet = epoch.elapsed().as_millis() as u64 - last.load(Ordering::Relaxed);
                if quiet >= idle_ms {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(limits.shutdown_grace, conn.as_mut()).await;
                    return;
                }
            }
            _ = stop.changed() => {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(limits.shutdown_grace, conn.as_mut()).await;
                return;
            }
        }
    }
}
