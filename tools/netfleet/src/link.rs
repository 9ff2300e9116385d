//! A link emulator in userspace: a TCP relay that gives the bytes crossing it the
//! behaviour of a real link, since this machine's kernel has no netem.
//!
//! Each direction of each relayed connection is a pump: a reader takes bytes as they
//! come and stamps them with the time they may arrive (one-way delay plus jitter, never
//! earlier than the bytes before them: TCP does not reorder), a writer delivers them then,
//! no faster than the link's bandwidth. Between the two sits a bounded queue, so a slow
//! link pushes back on its sender as TCP flow control would.
//!
//! A link can be told, at any time:
//! - [`Link::partition`]: nothing crosses until [`Link::heal`]; bytes sent meanwhile are
//!   held and delivered after the heal (TCP's retransmissions after a short outage), new
//!   connections wait too;
//! - [`Link::blackhole`]: every byte of the connections open now vanishes, without a
//!   reset (a router that lost the route, a NAT that forgot the mapping): the peers must
//!   find out by themselves; connections made afterwards work;
//! - [`Link::reset`]: every open connection is reset at once (`RST`);
//! - [`Link::set_shape`]: another delay, jitter or bandwidth from now on.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Bytes one read takes at most.
const CHUNK: usize = 16 * 1024;
/// Chunks queued in one direction before the reader waits (~4 MiB).
const QUEUE: usize = 256;

/// How a link carries bytes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    /// One-way delay.
    pub delay: Duration,
    /// Up to this much more delay, drawn per chunk (uniform).
    pub jitter: Duration,
    /// Bytes per second, each way (`None`: as fast as the machine goes).
    pub bandwidth: Option<u64>,
}

impl Shape {
    /// No delay, no cap: loopback.
    pub const LOOPBACK: Shape = Shape {
        delay: Duration::ZERO,
        jitter: Duration::ZERO,
        bandwidth: None,
    };

    /// A link of round trip `rtt` (half of it each way), with 10% of the one-way delay as
    /// jitter.
    pub fn rtt(rtt: Duration) -> Shape {
        let delay = rtt / 2;
        Shape {
            delay,
            jitter: delay / 10,
            bandwidth: None,
        }
    }

    /// The same shape capped at `bits_per_second`.
    pub fn capped(self, bits_per_second: u64) -> Shape {
        Shape {
            bandwidth: Some((bits_per_second / 8).max(1)),
            ..self
        }
    }
}

/// Whether bytes cross.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Up,
    Partitioned,
}

/// One relayed connection's handles (to reset or blackhole it).
struct Conn {
    /// Set: every byte of this connection vanishes from now on.
    dead: watch::Sender<bool>,
    /// Its client-side socket, to reset.
    client: Arc<Mutex<Option<std::net::TcpStream>>>,
    tasks: Vec<JoinHandle<()>>,
}

struct Inner {
    shape: Mutex<Shape>,
    state: watch::Sender<State>,
    conns: Mutex<Vec<Conn>>,
    /// Connections accepted so far.
    accepted: AtomicU64,
    /// Bytes delivered, both ways.
    delivered: AtomicU64,
}

/// A running link: a listener on one address relaying to a target. Dropping it stops
/// the relay and every connection through it.
pub struct Link {
    inner: Arc<Inner>,
    listen: SocketAddr,
    acceptor: JoinHandle<()>,
}

impl Link {
    /// Relays connections made to `listen` to `target` (dialled from `source` when given,
    /// so the target sees each link's host at an address of its own).
    pub async fn start(
        listen: SocketAddr,
        target: SocketAddr,
        source: Option<IpAddr>,
        shape: Shape,
    ) -> std::io::Result<Link> {
        let listener = TcpListener::bind(listen).await?;
        let listen = listener.local_addr()?;
        let (state, _) = watch::channel(State::Up);
        let inner = Arc::new(Inner {
            shape: Mutex::new(shape),
            state,
            conns: Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
        });
        let acceptor = tokio::spawn(accept_loop(listener, target, source, inner.clone()));
        Ok(Link {
            inner,
            listen,
            acceptor,
        })
    }

    /// The address clients dial.
    pub fn addr(&self) -> SocketAddr {
        self.listen
    }

    /// Another shape from now on (bytes already stamped keep their times).
    pub fn set_shape(&self, shape: Shape) {
        *self.inner.shape.lock().expect("shape") = shape;
    }

    /// Nothing crosses until [`Link::heal`].
    pub fn partition(&self) {
        self.inner.state.send_replace(State::Partitioned);
    }

    /// Bytes cross again (held ones first).
    pub fn heal(&self) {
        self.inner.state.send_replace(State::Up);
    }

    /// Every byte of the connections open now vanishes from now on, without a reset;
    /// new connections work. How many connections went dark.
    pub fn blackhole(&self) -> usize {
        let conns = self.inner.conns.lock().expect("connections");
        for c in conns.iter() {
            c.dead.send_replace(true);
        }
        conns.len()
    }

    /// Resets every open connection now. How many.
    pub fn reset(&self) -> usize {
        let mut conns = self.inner.conns.lock().expect("connections");
        let n = conns.len();
        for c in conns.drain(..) {
            for t in &c.tasks {
                t.abort();
            }
            if let Some(s) = c.client.lock().expect("socket").take() {
                // SO_LINGER 0: the close sends a reset
                let s = socket2::SockRef::from(&s);
                let _ = s.set_linger(Some(Duration::ZERO));
            }
        }
        n
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.inner.accepted.load(Ordering::Relaxed)
    }

    /// Connections open now (some may have ended without the relay noticing yet).
    pub fn open(&self) -> usize {
        let mut conns = self.inner.conns.lock().expect("connections");
        conns.retain(|c| c.tasks.iter().any(|t| !t.is_finished()));
        conns.len()
    }

    /// Bytes delivered so far, both ways.
    pub fn delivered(&self) -> u64 {
        self.inner.delivered.load(Ordering::Relaxed)
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.acceptor.abort();
        for c in self.inner.conns.lock().expect("connections").drain(..) {
            for t in c.tasks {
                t.abort();
            }
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    source: Option<IpAddr>,
    inner: Arc<Inner>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        inner.accepted.fetch_add(1, Ordering::Relaxed);
        let _ = client.set_nodelay(true);
        let inner2 = inner.clone();
        let (dead, dead_rx) = watch::channel(false);
        let client_std = Arc::new(Mutex::new(None));
        let keep = client_std.clone();
        let task = tokio::spawn(async move {
            // a partitioned link does not even let the connection through
            let mut state = inner2.state.subscribe();
            while *state.borrow_and_update() == State::Partitioned {
                if state.changed().await.is_err() {
                    return;
                }
            }
            let Ok(server) = dial(target, source).await else {
                return;
            };
            let _ = server.set_nodelay(true);
            let Ok(std_client) = client.into_std() else {
                return;
            };
            if let Ok(copy) = std_client.try_clone() {
                *keep.lock().expect("socket") = Some(copy);
            }
            let Ok(client) = TcpStream::from_std(std_client) else {
                return;
            };
            let (cr, cw) = client.into_split();
            let (sr, sw) = server.into_split();
            // not spawned: aborting this task (a reset) drops both directions' sockets;
            // a dark connection's sockets are held until both sides gave up on their own
            // (closing one would tell the other: a blackhole tells nobody anything)
            let _held = tokio::join!(
                pump(cr, sw, inner2.clone(), dead_rx.clone()),
                pump(sr, cw, inner2, dead_rx)
            );
        });
        inner.conns.lock().expect("connections").push(Conn {
            dead,
            client: client_std,
            tasks: vec![task],
        });
    }
}

async fn dial(target: SocketAddr, source: Option<IpAddr>) -> std::io::Result<TcpStream> {
    let socket = if target.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    if let Some(ip) = source {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    tokio::time::timeout(Duration::from_secs(10), socket.connect(target))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))?
}

/// One direction: read, stamp, queue; deliver each chunk at its time, at the link's
/// bandwidth, held while the link is partitioned, dropped once the connection is dark.
/// Ends when its source ends (or its destination fails); a dark connection's destination
/// comes back unclosed, for the caller to hold.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    inner: Arc<Inner>,
    dead: watch::Receiver<bool>,
) -> Option<tokio::net::tcp::OwnedWriteHalf> {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let stamps = inner.clone();
    let reader = async move {
        let mut last_due = Instant::now();
        loop {
            let mut buf = vec![0u8; CHUNK];
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            buf.truncate(n);
            let shape = *stamps.shape.lock().expect("shape");
            let jitter = if shape.jitter.is_zero() {
                Duration::ZERO
            } else {
                shape.jitter.mul_f64(rand::rng().random_range(0.0..1.0))
            };
            let due = (Instant::now() + shape.delay + jitter).max(last_due);
            last_due = due;
            if tx.send((due, buf)).await.is_err() {
                break;
            }
        }
        // the queue's sender goes with this future: the writer drains, then ends
    };
    let writer = async {
        let mut state = inner.state.subscribe();
        let mut wire_free = Instant::now();
        while let Some((due, chunk)) = rx.recv().await {
            if *dead.borrow() {
                continue;
            }
            while *state.borrow_and_update() == State::Partitioned {
                if state.changed().await.is_err() {
                    return;
                }
            }
            let start = due.max(wire_free);
            let bandwidth = inner.shape.lock().expect("shape").bandwidth;
            wire_free = match bandwidth {
                Some(bytes_per_s) => {
                    start + Duration::from_secs_f64(chunk.len() as f64 / bytes_per_s as f64)
                }
                None => start,
            };
            tokio::time::sleep_until(wire_free).await;
            if *dead.borrow() {
                continue;
            }
            if to.write_all(&chunk).await.is_err() {
                return;
            }
            inner
                .delivered
                .fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        if !*dead.borrow() {
            let _ = to.shutdown().await;
        }
    };
    // `to` is borrowed by the writer until it ends
    {
        tokio::pin!(reader, writer);
        let mut read_all = false;
        loop {
            tokio::select! {
                _ = &mut reader, if !read_all => read_all = true,
                _ = &mut writer => break,
            }
        }
    }
    dead.borrow().then_some(to)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server on loopback; its address.
    async fn echo() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(c: &mut TcpStream, bytes: usize) -> Duration {
        let t = Instant::now();
        c.write_all(&vec![7u8; bytes]).await.unwrap();
        let mut got = vec![0u8; bytes];
        c.read_exact(&mut got).await.unwrap();
        t.elapsed()
    }

    #[tokio::test]
    async fn a_link_delays_each_way_and_caps_bandwidth() {
        let target = echo().await;
        let link = Link::start(
            "127.0.0.1:0".parse().unwrap(),
            target,
            None,
            Shape {
                delay: Duration::from_millis(50),
                jitter: Duration::ZERO,
                bandwidth: None,
            },
        )
        .await
        .unwrap();
        let mut c = TcpStream::connect(link.addr()).await.unwrap();
        let rtt = round_trip(&mut c, 10).await;
        assert!(rtt >= Duration::from_millis(100), "{rtt:?}");
        assert!(rtt < Duration::from_millis(400), "{rtt:?}");
        // 100 KB at 1 Mbit/s (125 KB/s) each way: at least 0.8 s
        link.set_shape(Shape::LOOPBACK.capped(1_000_000));
        let t = round_trip(&mut c, 100_000).await;
        assert!(t >= Duration::from_millis(780), "{t:?}");
    }

    #[tokio::test]
    async fn a_partition_holds_bytes_until_the_heal() {
        let target = echo().await;
        let link = Link::start(
            "127.0.0.1:0".parse().unwrap(),
            target,
            None,
            Shape::LOOPBACK,
        )
        .await
        .unwrap();
        let mut c = TcpStream::connect(link.addr()).await.unwrap();
        round_trip(&mut c, 10).await;
        link.partition();
        c.write_all(b"held").await.unwrap();
        let mut got = [0u8; 4];
        assert!(
            tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut got))
                .await
                .is_err(),
            "nothing crosses a partition"
        );
        link.heal();
        tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut got))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got, b"held");
    }

    #[tokio::test]
    async fn a_blackhole_loses_open_connections_and_a_reset_ends_them() {
        let target = echo().await;
        let link = Link::start(
            "127.0.0.1:0".parse().unwrap(),
            target,
            None,
            Shape::LOOPBACK,
        )
        .await
        .unwrap();
        let mut dark = TcpStream::connect(link.addr()).await.unwrap();
        round_trip(&mut dark, 10).await;
        assert_eq!(link.blackhole(), 1);
        dark.write_all(b"gone").await.unwrap();
        let mut got = [0u8; 4];
        assert!(
            tokio::time::timeout(Duration::from_millis(500), dark.read_exact(&mut got))
                .await
                .is_err(),
            "bytes vanish, and nothing says so"
        );
        // a new connection works
        let mut fresh = TcpStream::connect(link.addr()).await.unwrap();
        round_trip(&mut fresh, 10).await;
        assert!(link.reset() >= 1);
        let mut buf = [0u8; 1];
        let read = tokio::time::timeout(Duration::from_secs(5), fresh.read(&mut buf))
            .await
            .unwrap();
        assert!(
            matches!(read, Err(_) | Ok(0)),
            "a reset connection ends: {read:?}"
        );
    }
}
