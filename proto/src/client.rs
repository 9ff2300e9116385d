//! How clients (workers, the admin CLI, tests) reach the coordinator: URL checks, the
//! channel (`http://` in the clear, or `https://` trusting the system's roots or a given
//! CA certificate), and requests carrying a bearer token.

use std::path::Path;
use std::time::Duration;

use tonic::Request;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};

/// How long a client waits for a TCP (and TLS) connection to the coordinator.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a client pings the coordinator over an open HTTP/2 connection, idle or not.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a ping may go unanswered before the connection is given up as dead.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Exponential backoff with jitter, for a client whose calls fail because the
/// coordinator is away: the n-th failure in a row waits a random time between half of and
/// the whole of `base x 2^n` (at most `cap`), so a thousand clients cut off at the same
/// moment (a coordinator restart) come back spread over seconds, not in one stampede.
#[derive(Clone, Debug)]
pub struct Backoff {
    failures: u32,
    base: Duration,
    cap: Duration,
}

impl Backoff {
    /// A backoff from `base` doubling to `cap`.
    pub fn new(base: Duration, cap: Duration) -> Backoff {
        Backoff {
            failures: 0,
            base,
            cap: cap.max(base),
        }
    }

    /// The worker's: from 0.5 s doubling to 30 s.
    pub fn worker() -> Backoff {
        Backoff::new(Duration::from_millis(500), Duration::from_secs(30))
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// A call failed: how long to wait before the next.
    pub fn failed(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        let ceiling = self
            .base
            .saturating_mul(1u32 << self.failures.min(16))
            .min(self.cap);
        ceiling.mul_f64(rand::random_range(0.5..=1.0))
    }

    /// A call succeeded: whether it had been failing.
    pub fn succeeded(&mut self) -> bool {
        std::mem::replace(&mut self.failures, 0) > 0
    }
}

/// Checks a coordinator URL before anything connects to it: it must be `http://` or
/// `https://` with a host. Returns what is wrong and what to write instead.
pub fn check_url(url: &str) -> Result<(), String> {
    let rest = if let Some(r) = url.strip_prefix("http://") {
        r
    } else if let Some(r) = url.strip_prefix("https://") {
        r
    } else if url.contains("://") {
        return Err(format!(
            "coordinator URL {url:?}: the scheme must be http:// or https://"
        ));
    } else {
        return Err(format!(
            "coordinator URL {url:?} has no scheme: write http://{url} (or https:// for a TLS coordinator)"
        ));
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() {
        return Err(format!("coordinator URL {url:?} has no host"));
    }
    if url.parse::<tonic::codegen::http::Uri>().is_err() {
        return Err(format!("coordinator URL {url:?} is not a valid URL"));
    }
    Ok(())
}

/// The host of a plain `http://` URL that is not this machine (`localhost`, `127.0.0.0/8`,
/// `::1`), or `None`: what crosses the network in clear.
pub fn plaintext_remote_host(url: &str) -> Option<String> {
    let rest = url.strip_prefix("http://")?;
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority.rsplit('@').next().unwrap_or(authority);
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.split(':').next().unwrap_or("")
    };
    let loopback = host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    (!loopback).then(|| host.to_string())
}

/// An endpoint for `url`; `ca_cert` is a PEM file of certificates to trust for `https://`
/// (the system's roots when `None`).
pub fn endpoint(url: &str, ca_cert: Option<&Path>) -> Result<Endpoint, String> {
    check_url(url)?;
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| format!("coordinator URL {url:?}: {e}"))?
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        // a link that dies without a word (a sleeping router, a blackholed route) is
        // found by pings within KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT, and the next call
        // dials again instead of waiting on a half-open connection
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true)
        .tcp_keepalive(Some(Duration::from_secs(30)));
    if url.starts_with("https://") {
        let mut tls = ClientTlsConfig::new();
        tls = match ca_cert {
            Some(path) => {
                let pem = std::fs::read(path).map_err(|e| {
                    format!("cannot read the CA certificate {}: {e}", path.display())
                })?;
                tls.ca_certificate(Certificate::from_pem(pem))
            }
            None => tls.with_native_roots(),
        };
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|e| format!("TLS setup for {url}: {e}"))?;
    } else if ca_cert.is_some() {
        return Err(format!(
            "--ca-cert needs an https:// coordinator URL, and {url} is http://"
        ));
    }
    Ok(endpoint)
}

/// An error and its causes as one line, each distinct cause once ("a: b: c", where a
/// layer that only repeats or wraps its source's text adds nothing).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        // a layer that only repeats (or wraps) the text of its source adds nothing
        if !text.is_empty()
            && !parts
                .iter()
                .any(|p| p.contains(&text) || text.contains(p.as_str()))
        {
            parts.push(text);
        } else if let Some(last) = parts.last_mut()
            && text.len() > last.len()
            && text.contains(last.as_str())
        {
            *last = text;
        }
        next = err.source();
    }
    parts.join(": ")
}

/// A connection failure as one line: the URL, what failed (each distinct cause in the
/// error's chain once, instead of "tcp connect error: tcp connect error: ..."), and the
/// likely reason when it can be told.
pub fn explain_connect_error(url: &str, e: &(dyn std::error::Error + 'static)) -> String {
    let detail = error_chain(e);
    let lower = detail.to_lowercase();
    let hint = if lower.contains("caused as end") || lower.contains("causedasendentity") {
        "the coordinator's certificate is itself a CA certificate, which clients refuse as a server's own \
         (a bare `openssl req -x509` makes one): use serve --tls-self-signed, or a server certificate \
         signed by a CA (docs/operator-guide.md, TLS)"
    } else if lower.contains("connection refused") {
        "nothing is listening there: is the coordinator running, and is the port right?"
    } else if lower.contains("invalidcontenttype")
        || lower.contains("corrupt message")
        || lower.contains("wrong version number")
    {
        "the TLS setting does not match: an https:// URL to a plain-HTTP coordinator (use http://), or the reverse"
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        "the coordinator's certificate is not made for the name in this URL: connect by a name it \
         has, or restart the coordinator with --tls-name listing this one (docs/operator-guide.md, TLS)"
    } else if lower.contains("invalid peer certificate")
        || lower.contains("unknownissuer")
        || lower.contains("certificate")
    {
        "the coordinator's certificate is not trusted: pass its CA with --ca-cert (see docs/operator-guide.md, TLS)"
    } else if lower.contains("dns")
        || lower.contains("failed to lookup")
        || lower.contains("name or service not known")
    {
        "the host name does not resolve"
    } else if lower.contains("timed out") || lower.contains("deadline") {
        "no answer in time: a firewall, or the wrong address"
    } else if url.starts_with("http://")
        && (lower.contains("connection closed")
            || lower.contains("connection reset")
            || lower.contains("broken pipe"))
    {
        "the coordinator closed the connection at once: if it serves TLS, use an https:// URL \
         (and --ca-cert for the fleet's own CA)"
    } else if lower.contains("http2")
        || lower.contains("frame with invalid size")
        || lower.contains("invalid http")
    {
        "the other end does not speak gRPC (HTTP/2): is this the coordinator's port? an http:// URL to a TLS coordinator?"
    } else {
        ""
    };
    if hint.is_empty() {
        format!("cannot reach the coordinator at {url}: {detail}")
    } else {
        format!("cannot reach the coordinator at {url}: {detail} ({hint})")
    }
}

/// A failed call as one line naming the coordinator: a transport failure (the call never
/// reached the coordinator's logic) is explained like a connection error; otherwise what
/// the coordinator answered, in words, without gRPC's boilerplate.
pub fn explain_status(url: &str, s: &tonic::Status) -> String {
    use std::error::Error;
    use tonic::Code;
    if let Some(source) = s.source()
        && matches!(
            s.code(),
            Code::Unknown | Code::Unavailable | Code::Internal | Code::Cancelled
        )
    {
        return explain_connect_error(url, source);
    }
    let what = match s.code() {
        Code::Unauthenticated => "refused: wrong or missing token",
        Code::NotFound => "not found",
        Code::InvalidArgument => "invalid request",
        Code::FailedPrecondition => "not possible now",
        Code::PermissionDenied => "not allowed",
        Code::ResourceExhausted => "too much at once",
        Code::Unavailable => "the coordinator is unavailable (busy or restarting); retry",
        Code::Unimplemented => {
            "the coordinator does not know this call: an older or newer protocol version (this program speaks e2fleet.v2); upgrade the side that is behind"
        }
        Code::DeadlineExceeded => "no answer in time",
        _ => "the coordinator failed",
    };
    if s.message().is_empty() {
        format!("{url}: {what}")
    } else {
        format!("{url}: {what}: {}", s.message())
    }
}

/// A request carrying `authorization: Bearer <token>` (a token that cannot be a header
/// value is left out, and the coordinator answers UNAUTHENTICATED).
pub fn authed<T>(token: &str, message: T) -> Request<T> {
    let mut request = Request::new(message);
    if let Ok(value) = format!("Bearer {token}").parse() {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hints a newcomer needs when TLS does not line up: the name, and http:// to a
    /// TLS coordinator.
    #[test]
    fn tls_mismatches_are_explained() {
        #[derive(Debug)]
        struct E(&'static str);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for E {}
        let name = explain_connect_error(
            "https://localhost:7733",
            &E(
                "invalid peer certificate: certificate not valid for name \"localhost\"; certificate is only valid for IpAddress(127.0.0.1)",
            ),
        );
        assert!(name.contains("--tls-name"), "{name}");
        assert!(!name.contains("pass its CA"), "{name}");
        let plain = explain_connect_error(
            "http://127.0.0.1:7733",
            &E("connection closed before message completed"),
        );
        assert!(plain.contains("https://"), "{plain}");
    }

    #[test]
    fn urls_are_checked_with_a_hint() {
        assert!(check_url("http://127.0.0.1:7733").is_ok());
        assert!(check_url("https://fleet.example.org").is_ok());
        let e = check_url("127.0.0.1:7733").unwrap_err();
        assert!(
            e.contains("no scheme") && e.contains("http://127.0.0.1:7733"),
            "{e}"
        );
        assert!(check_url("ftp://x").unwrap_err().contains("http://"));
        assert!(check_url("http://").unwrap_err().contains("no host"));
    }

    #[test]
    fn plaintext_to_another_machine_is_named() {
        for local in [
            "http://127.0.0.1:7733",
            "http://localhost:7733/",
            "http://[::1]:7733",
            "http://127.8.9.1",
            "https://fleet.example.org",
        ] {
            assert_eq!(plaintext_remote_host(local), None, "{local}");
        }
        assert_eq!(
            plaintext_remote_host("http://fleet.example.org:7733").as_deref(),
            Some("fleet.example.org")
        );
        assert_eq!(
            plaintext_remote_host("http://10.0.0.5:7733").as_deref(),
            Some("10.0.0.5")
        );
        assert_eq!(
            plaintext_remote_host("http://[2001:db8::1]:7733").as_deref(),
            Some("2001:db8::1")
        );
        assert_eq!(
            plaintext_remote_host("http://localhost.evil.org").as_deref(),
            Some("localhost.evil.org")
        );
    }

    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);
    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }
    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn connection_errors_name_the_url_once_each_cause_and_a_hint() {
        let e = Layer(
            "transport error",
            Some(Box::new(Layer(
                "tcp connect error",
                Some(Box::new(Layer(
                    "tcp connect error",
                    Some(Box::new(Layer("Connection refused (os error 111)", None))),
                ))),
            ))),
        );
        let text = explain_connect_error("http://127.0.0.1:9", &e);
        assert_eq!(
            text,
            "cannot reach the coordinator at http://127.0.0.1:9: transport error: tcp connect error: \
             Connection refused (os error 111) (nothing is listening there: is the coordinator running, and is the port right?)"
        );
        let tls = Layer(
            "transport error",
            Some(Box::new(Layer("InvalidContentType", None))),
        );
        assert!(explain_connect_error("https://x:1", &tls).contains("plain-HTTP coordinator"));
    }

    #[test]
    fn authed_requests_carry_the_bearer_token() {
        let r = authed("abc", ());
        assert_eq!(r.metadata().get("authorization").unwrap(), "Bearer abc");
        assert!(
            authed("bad\ntoken", ())
                .metadata()
                .get("authorization")
                .is_none()
        );
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn backoff_doubles_within_jitter_to_its_cap_and_resets() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        for n in 1..=8u32 {
            let wait = b.failed();
            let ceiling = Duration::from_millis(100 << n).min(Duration::from_secs(2));
            assert!(wait <= ceiling && wait >= ceiling / 2, "{n}: {wait:?}");
        }
        assert_eq!(b.failures(), 8);
        assert!(b.succeeded());
        assert!(!b.succeeded());
    }

    #[test]
    fn backoff_spreads_a_crowd() {
        // a thousand clients failing together retry over a window, not at one instant
        let waits: Vec<Duration> = (0..1000)
            .map(|_| {
                let mut b = Backoff::worker();
                b.failed();
                b.failed()
            })
            .collect();
        let (lo, hi) = (waits.iter().min().unwrap(), waits.iter().max().unwrap());
        assert!(*hi - *lo > Duration::from_millis(700), "{lo:?}..{hi:?}");
    }
}
