//! Bodies with a deadline for the whole of them, not per frame: a request body that
//! must have arrived within its time (a stranger dripping a byte every few seconds is cut
//! off), and a response body that ends within its time (a stream opened without a token,
//! such as `grpc.health.v1.Health/Watch`, ends with `DEADLINE_EXCEEDED` instead of holding
//! a stream for ever). Either can carry what must be held while it lives and let go when
//! it ends (the caller's admission permits).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use tokio::time::{Instant, Sleep};
use tonic::Status;

/// A request body that fails once `limit` has passed since it was made.
pub struct RequestDeadline<B> {
    inner: B,
    sleep: Pin<Box<Sleep>>,
    limit: Duration,
}

impl<B> RequestDeadline<B> {
    /// `inner`, to arrive whole within `limit`.
    pub fn new(inner: B, limit: Duration) -> RequestDeadline<B> {
        RequestDeadline {
            inner,
            sleep: Box::pin(tokio::time::sleep_until(Instant::now() + limit)),
            limit,
        }
    }
}

impl<B> HttpBody for RequestDeadline<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<Status>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                "the request body did not arrive within {} s",
                self.limit.as_secs()
            ))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that ends with `DEADLINE_EXCEEDED` trailers once `limit` has passed,
/// holding `held` until it ends (or is dropped).
pub struct ResponseDeadline<H> {
    inner: Body,
    sleep: Pin<Box<Sleep>>,
    ended: bool,
    _held: H,
}

impl<H> ResponseDeadline<H> {
    /// `inner`, ended at `limit`, holding `held`.
    pub fn new(inner: Body, limit: Duration, held: H) -> ResponseDeadline<H> {
        ResponseDeadline {
            inner,
            sleep: Box::pin(tokio::time::sleep_until(Instant::now() + limit)),
            ended: false,
            _held: held,
        }
    }
}

impl<H: Unpin + Send + 'static> HttpBody for ResponseDeadline<H> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Poll::Ready(frame) = Pin::new(&mut self.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        match self.sleep.as_mut().poll(cx) {
            Poll::Ready(()) => {
                self.ended = true;
                let mut trailers = axum::http::HeaderMap::new();
                trailers.insert("grpc-status", axum::http::HeaderValue::from_static("4"));
                trailers.insert(
                    "grpc-message",
                    axum::http::HeaderValue::from_static(
                        "a call without a token may last only so long; call again",
                    ),
                );
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn a_dripping_body_fails_at_its_deadline() {
        // a body that never ends
        let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Status>>(1);
        let never =
            http_body_util::StreamBody::new(tokio_stream::wrappers::ReceiverStream::new(rx));
        let mut body = RequestDeadline::new(never, Duration::from_millis(100));
        let got = body.frame().await.expect("a frame");
        assert_eq!(got.unwrap_err().code(), tonic::Code::DeadlineExceeded);
    }

    #[tokio::test]
    async fn an_endless_stream_ends_with_deadline_exceeded() {
        let (_tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, axum::Error>>(1);
        let endless = Body::new(http_body_util::StreamBody::new(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ));
        let held = std::sync::Arc::new(());
        let mut body = ResponseDeadline::new(endless, Duration::from_millis(100), held.clone());
        let frame = body.frame().await.expect("a frame").unwrap();
        assert_eq!(frame.trailers_ref().unwrap()["grpc-status"], "4");
        assert!(body.frame().await.is_none());
        drop(body);
        assert_eq!(std::sync::Arc::strong_count(&held), 1, "let go at the end");
    }
}
