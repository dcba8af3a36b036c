//! Telling when the client closes stdin, the moment it does: the session
//! releases what it holds then, before the SDK's orderly shutdown (which
//! waits a few seconds for requests still running).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// A reader that calls `on_eof` once, when a read finds the end of input
/// (or fails: the client is gone either way).
pub(crate) struct EofWatch<R> {
    inner: R,
    on_eof: Option<Box<dyn FnOnce() + Send>>,
}

impl<R> EofWatch<R> {
    /// Watches `inner`.
    pub(crate) fn new(inner: R, on_eof: impl FnOnce() + Send + 'static) -> EofWatch<R> {
        EofWatch {
            inner,
            on_eof: Some(Box::new(on_eof)),
        }
    }

    fn ended(&mut self) {
        if let Some(f) = self.on_eof.take() {
            f();
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for EofWatch<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let wanted = buf.remaining() > 0;
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if wanted && buf.filled().len() == before => self.ended(),
            Poll::Ready(Err(_)) => self.ended(),
            _ => {}
        }
        polled
    }
}
