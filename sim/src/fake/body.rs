//! The response body type of the fake server: a whole body at once, or chunks from a task
//! that can end the body cleanly or cut it.

use hyper::body::{Body, Bytes, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::sync::mpsc;

/// The error that cuts a body: hyper then closes the connection without the terminating
/// chunk, so the client sees an incomplete body, never a clean end.
#[derive(Debug, thiserror::Error)]
#[error("the fake provider cut the response body (scripted fault)")]
pub(crate) struct Cut;

/// A response body: fixed bytes (sent with a `content-length`) or a chunked stream.
#[derive(Debug)]
pub(crate) enum FakeBody {
    /// The whole body; `None` once sent.
    Full(Option<Bytes>),
    /// Chunks from a producer task; an `Err` cuts the body.
    Stream(mpsc::Receiver<Result<Bytes, Cut>>),
}

impl FakeBody {
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        FakeBody::Full(Some(bytes.into()))
    }
}

impl Body for FakeBody {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        match self.get_mut() {
            FakeBody::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            FakeBody::Stream(rx) => match rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(b))) => Poll::Ready(Some(Ok(Frame::data(b)))),
                Poll::Ready(Some(Err(cut))) => Poll::Ready(Some(Err(cut))),
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, FakeBody::Full(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            FakeBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            FakeBody::Full(None) => SizeHint::with_exact(0),
            FakeBody::Stream(_) => SizeHint::default(),
        }
    }
}
