//! The accept loop: what a client without a token can cost the coordinator is bounded
//! here, before a request reaches any handler.
//!
//! - at most [`ServerLimits::max_connections`] connections at once, and
//!   [`ServerLimits::max_connections_per_ip`] from one address that have not shown a
//!   valid token (more are closed at once);
//! - a connection must finish its TLS handshake and send its first bytes within
//!   [`ServerLimits::handshake_timeout`] (a silent TCP connection is closed);
//! - HTTP/1 request headers within [`ServerLimits::header_read_timeout`]; HTTP/2 streams
//!   per connection capped, flow-control windows bounded, keep-alive pings to find dead
//!   peers ([`KEEPALIVE_INTERVAL`], [`KEEPALIVE_TIMEOUT`]);
//! - a connection with no traffic for [`ServerLimits::idle_timeout`] is closed (clients
//!   reconnect when they need to), and one that never showed a valid token is closed after
//!   [`ServerLimits::untrusted_lifetime`] whatever it does (a stranger cannot sit on a
//!   slot); new connections per address are rate-limited;
//! - HTTP/2 flow-control windows ([`STREAM_WINDOW`], [`CONNECTION_WINDOW`]) bound what a
//!   peer can make the coordinator buffer: with the connection caps, a figure the
//!   operator chose (docs/security.md);
//! - shutdown: stop accepting, let requests in flight finish for a while, then close.
//!
//! The request-level guards (authentication before any body is read, body limits per
//! method, body timeouts) are [`super::guard`]'s.

use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

use crate::fleet::refusals::{Connection as Refused, Refusals};

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
    /// Connections open at once from one IP address that have not shown a valid token
    /// (a connection that has is counted only in [`ServerLimits::max_connections`]: a
    /// lab's workers behind one address are the identities' and accounts' concern).
    pub max_connections_per_ip: usize,
    /// New connections one IP address may open a second (four times that in a burst: a
    /// lab behind one address starting its workers together).
    pub new_connections_per_ip_per_second: u32,
    /// A connection that has not shown a valid token (worker, admin or enrolment) this
    /// long after it opened is closed (a browser reading the dashboard opens another).
    pub untrusted_lifetime: Duration,
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
            max_connections_per_ip: 128,
            new_connections_per_ip_per_second: 256,
            untrusted_lifetime: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_concurrent_streams: 64,
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

/// The peer of a request's connection (an extension on every request).
#[derive(Clone, Copy, Debug)]
pub struct Peer(pub SocketAddr);

/// Whether a request on this connection showed a valid token (an extension on every
/// request; [`super::guard`] sets it). A connection is a stranger's until then: counted
/// against its address's limit, and closed after [`ServerLimits::untrusted_lifetime`].
#[derive(Clone, Default)]
pub struct Trust(Arc<TrustInner>);

#[derive(Default)]
struct TrustInner {
    set: AtomicBool,
    /// The connection's place among its address's strangers, given back when trusted.
    stranger: Mutex<Option<StrangerSlot>>,
}

impl Trust {
    /// The connection showed a valid token.
    pub fn set(&self) {
        self.0.set.store(true, Ordering::Relaxed);
        self.0.stranger.lock().expect("stranger slot").take();
    }

    /// Whether it did.
    pub fn is_set(&self) -> bool {
        self.0.set.load(Ordering::Relaxed)
    }
}

/// HTTP/2 flow-control window of one stream: what a peer may send before the
/// coordinator reads it (a report is kilobytes; at 300 ms this still moves ~400 KB/s).
pub const STREAM_WINDOW: u32 = 128 * 1024;
/// The same for a whole connection: with [`ServerLimits::max_connections`] it bounds what
/// strangers can make the coordinator buffer.
pub const CONNECTION_WINDOW: u32 = 256 * 1024;

/// Connections per IP address that have not shown a token.
#[derive(Default)]
struct PerIp(Mutex<HashMap<IpAddr, usize>>);

/// One stranger's connection counted against its address; given back when dropped.
struct StrangerSlot {
    per_ip: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    fn enter(self: &Arc<Self>, ip: IpAddr, max: usize) -> Option<StrangerSlot> {
        let mut map = self.0.lock().expect("per-ip counts");
        let n = map.entry(ip).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(StrangerSlot {
            per_ip: self.clone(),
            ip,
        })
    }
}

impl Drop for StrangerSlot {
    fn drop(&mut self) {
        let mut map = self.per_ip.0.lock().expect("per-ip counts");
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
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
    refusals: Arc<Refusals>,
) -> std::io::Result<()> {
    let limits = Arc::new(limits);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let per_ip = Arc::new(PerIp::default());
    let new_per_ip: governor::DefaultKeyedRateLimiter<IpAddr> = governor::RateLimiter::keyed(
        governor::Quota::per_second(
            std::num::NonZeroU32::new(limits.new_connections_per_ip_per_second.max(1))
                .expect("positive"),
        )
        .allow_burst(
            std::num::NonZeroU32::new(4 * limits.new_connections_per_ip_per_second.max(1))
                .expect("positive"),
        ),
    );
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
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(16 * 1024)
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
        if new_per_ip.check_key(&peer.ip()).is_err() {
            debug!(%peer, "connection refused: too many new connections from this address");
            refusals.connection(Refused::NewTooFast);
            continue;
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            debug!(%peer, "connection refused: too many connections");
            refusals.connection(Refused::Full);
            continue;
        };
        let Some(stranger) = per_ip.enter(peer.ip(), limits.max_connections_per_ip) else {
            debug!(%peer, "connection refused: too many from this address");
            refusals.connection(Refused::AddressFull);
            continue;
        };
        // gRPC is many small request/response pairs: without TCP_NODELAY, Nagle's
        // algorithm and delayed ACKs hold a response written in pieces for ~40 ms
        if let Err(e) = tcp.set_nodelay(true) {
            warn!(error = %e, "cannot set TCP_NODELAY");
        }
        let (router, builder, limits, acceptor, stop, refusals) = (
            router.clone(),
            builder.clone(),
            limits.clone(),
            acceptor.clone(),
            stop_rx.clone(),
            refusals.clone(),
        );
        let trust = Trust::default();
        *trust.0.stranger.lock().expect("stranger slot") = Some(stranger);
        let seen = trust.clone();
        tokio::spawn(async move {
            let service = TowerToHyperService::new(router.map_request(
                move |mut r: axum::http::Request<hyper::body::Incoming>| {
                    r.extensions_mut().insert(Peer(peer));
                    r.extensions_mut().insert(seen.clone());
                    r
                },
            ));
            match acceptor {
                Some(acceptor) => {
                    match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(tcp)).await
                    {
                        Ok(Ok(tls)) => {
                            let closed = connection(tls, service, &builder, &limits, stop, &trust);
                            if closed.await {
                                refusals.connection(Refused::Stranger);
                            }
                        }
                        Ok(Err(e)) => {
                            debug!(%peer, error = %e, "TLS handshake failed");
                            refusals.connection(Refused::TlsFailed);
                        }
                        Err(_) => {
                            debug!(%peer, "TLS handshake timed out");
                            refusals.connection(Refused::Silent);
                        }
                    }
                }
                None => {
                    if first_bytes(&tcp, limits.handshake_timeout).await {
                        let closed = connection(tcp, service, &builder, &limits, stop, &trust);
                        if closed.await {
                            refusals.connection(Refused::Stranger);
                        }
                    } else {
                        debug!(%peer, "connection closed: nothing sent");
                        refusals.connection(Refused::Silent);
                    }
                }
            }
            // the stranger's slot, if still held, goes with `trust`
            drop(trust);
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

/// Serves one connection until it ends, goes idle, or shutdown's grace runs out; `true`
/// when it was closed because it never showed a valid token.
async fn connection<IO, S>(
    io: IO,
    service: TowerToHyperService<S>,
    builder: &Builder<TokioExecutor>,
    limits: &ServerLimits,
    mut stop: watch::Receiver<bool>,
    trust: &Trust,
) -> bool
where
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
    let mut tick = tokio::time::interval(
        Duration::from_secs(5)
            .min(limits.idle_timeout)
            .min(limits.untrusted_lifetime),
    );
    let idle_ms = limits.idle_timeout.as_millis() as u64;
    loop {
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    debug!(error = %e, "connection ended with an error");
                }
                return false;
            }
            _ = tick.tick() => {
                let quiet = epoch.elapsed().as_millis() as u64 - last.load(Ordering::Relaxed);
                let stranger = !trust.is_set() && epoch.elapsed() >= limits.untrusted_lifetime;
                if quiet >= idle_ms || stranger {
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(limits.shutdown_grace, conn.as_mut()).await;
                    return stranger;
                }
            }
            _ = stop.changed() => {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(limits.shutdown_grace, conn.as_mut()).await;
                return false;
            }
        }
    }
}
