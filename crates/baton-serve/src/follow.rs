//! Following a job's output: a stream of its log file from the start
//! until the job has ended (or the service stops, after its drain: the
//! stream then ends with what was written), woken by the capture's
//! progress, never polling faster than the output arrives.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;

use crate::output;
use crate::service::{Live, Service};

/// Streams a job's output file from the start until the job has ended
/// (and everything it wrote has been sent).
pub fn follow(
    service: Arc<Service>,
    id: String,
    path: std::path::PathBuf,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    struct St {
        service: Arc<Service>,
        id: String,
        path: std::path::PathBuf,
        offset: u64,
        ended: bool,
        // The running job's channels, kept across reads: a receiver marks
        // what it has seen, so a fresh clone each time would report every
        // past write as new, and the loop would never wait (nor let the
        // server flush what it sent).
        live: Option<Live>,
        watch_live: bool,
        stdout_open: bool,
        // The service stops: what is written so far is the answer.
        drain_over: tokio::sync::watch::Receiver<bool>,
    }
    let drain_over = service.drain_over();
    let st = St {
        service,
        id,
        path,
        offset: 0,
        ended: false,
        live: None,
        watch_live: true,
        stdout_open: true,
        drain_over,
    };
    futures_util::stream::unfold(st, |mut st| async move {
        loop {
            if st.live.is_none() && st.watch_live && !st.ended {
                st.live = st.service.live(&st.id);
            }
            if let Some(live) = &mut st.live {
                // Seen before the read: a write after it wakes the wait below.
                live.stdout.borrow_and_update();
                if *live.done.borrow_and_update() {
                    // Ended and stored: what the read below gets is all.
                    st.ended = true;
                }
            }
            let chunk = match output::read_from(&st.path, st.offset, 64 * 1024) {
                Ok(c) => c,
                Err(e) => return Some((Err(e), St { ended: true, ..st })),
            };
            if !chunk.is_empty() {
                st.offset += chunk.len() as u64;
                return Some((Ok(Bytes::from(chunk)), st));
            }
            if st.ended {
                return None;
            }
            if *st.drain_over.borrow() {
                st.ended = true;
                continue;
            }
            // Nothing new: wait for output or the job's end, then read again.
            match &mut st.live {
                Some(live) => {
                    let (stdout, done) = (&mut live.stdout, &mut live.done);
                    tokio::select! {
                        r = stdout.changed(), if st.stdout_open => {
                            // Closed: the capture is over; the end is next.
                            st.stdout_open = r.is_ok();
                        }
                        r = done.changed() => {
                            if r.is_err() {
                                // Gone without saying so: ask the store from now on.
                                st.live = None;
                                st.watch_live = false;
                            }
                        }
                        _ = st.drain_over.changed() => {}
                        _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                    }
                }
                None => {
                    let final_now = match st.service.store.get(&st.id).await {
                        Ok(Some(j)) => j.status.is_final(),
                        _ => true,
                    };
                    if final_now {
                        st.ended = true;
                    } else {
                        tokio::select! {
                            _ = st.drain_over.changed() => {}
                            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                        }
                    }
                }
            }
        }
    })
}
