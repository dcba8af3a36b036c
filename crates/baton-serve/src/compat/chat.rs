//! `POST /v1/chat/completions` in the OpenAI shape: a chat completion is a
//! job.
//!
//! - `model` names a template (unknown: 404, code `model_not_found`).
//! - The messages become the prompt. Content is a string or an array of
//!   `{"type": "text", "text": ...}` parts (joined without separator; other
//!   part types are refused with 400). One message: the prompt is its text.
//!   Several: each becomes a block `<role>: <text>`, and the blocks are
//!   joined by a blank line (`"\n\n"`), in order.
//! - Fields OpenAI clients send that mean nothing here (`temperature`,
//!   `max_tokens`, `n`, `user`, `tools`, ...) are accepted and ignored.
//! - The call waits for the job: in the queue as long as it takes (the
//!   queue is bounded by `max_queue_depth`, each job by its timeout), then
//!   for its run, which the job's timeout bounds (the service stops it at
//!   its timeout, then grace). As a safety net the wait gives up 30 s after
//!   that (503, code `wait_timeout`).
//! - The answer's content is the job's captured stdout. `stream: true` sends
//!   it as server-sent `chat.completion.chunk` events while it is produced:
//!   a first chunk with the role, content deltas, a last chunk with
//!   `finish_reason: "stop"` (and a usage chunk when
//!   `stream_options.include_usage`), then `data: [DONE]`.
//! - 503 when the queue is full (with `Retry-After`; clients may retry),
//!   and when the job failed, timed out, or was cancelled, superseded,
//!   skipped or interrupted: the code says which (`job_failed`,
//!   `job_timed_out`, ...) and `job_id` names the job. Those carry
//!   `x-should-retry: false`: the job ran, and OpenAI clients would otherwise
//!   run it again. A job that ends badly after a stream has started sends a
//!   last `data: {"error": ...}` event instead of `[DONE]`.
//! - **A client that disconnects before the answer cancels its job** (as
//!   `DELETE /v1/jobs/{id}` does): nobody else knows the job's id, so its
//!   result could never be read. For a stream, disconnecting before the
//!   last chunk cancels it too.
//! - **On shutdown** (a drain) a call whose job is still queued is answered
//!   503 `draining` with `Retry-After` and `x-should-retry: true`, and its
//!   job is cancelled before the service exits, so it does not run after the
//!   restart: a client's retry runs the prompt once. A call whose job runs
//!   gets its result (or `job_cancelled` if the drain times out).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{json, Value};

use super::OpenAiError;
use crate::api::{self, ApiError, AppState, SubmitRequest};
use crate::model::{now_ms, Job, JobStatus};
use crate::output::{self, Stream as OutStream};
use crate::service::{Service, Waiting};

/// How long after a job's timeout and grace a waiting call gives up.
const WAIT_MARGIN: Duration = Duration::from_secs(30);

/// The fields of a chat completion request that mean something here; the
/// rest are ignored.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// The template to run.
    pub model: String,
    /// The conversation; it becomes the prompt.
    pub messages: Vec<Message>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` (all zeros: a command has no tokens).
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// One chat message.
#[derive(Debug, Deserialize)]
pub struct Message {
    /// `system`, `user`, `assistant`, ...
    pub role: String,
    /// Its content (absent or null for some assistant messages).
    #[serde(default)]
    pub content: Option<Content>,
}

/// A message's content: a string, or an array of parts.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Typed parts; only `text` parts are accepted.
    Parts(Vec<Part>),
}

/// One content part.
#[derive(Debug, Deserialize)]
pub struct Part {
    /// The part's type (`text`).
    #[serde(rename = "type")]
    pub kind: String,
    /// Its text.
    #[serde(default)]
    pub text: Option<String>,
}

/// The prompt a conversation becomes (see the module doc); 400 naming the
/// bad message otherwise.
pub fn prompt_of(messages: &[Message]) -> Result<String, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::bad(
            "invalid field 'messages': it must hold at least one message",
        ));
    }
    let mut texts = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        // A role reaches the prompt when there are several messages: a NUL
        // byte there is refused whatever the count, as the document says.
        if m.role.contains('\0') {
            return Err(ApiError::bad(format!(
                "invalid field 'messages[{i}].role': it contains a NUL byte (U+0000), which no command argument can hold"
            )));
        }
        let text = match &m.content {
            None => String::new(),
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut s = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => s.push_str(t),
                        ("text", None) => {
                            return Err(ApiError::bad(format!(
                                "invalid field 'messages[{i}].content[{j}]': a text part needs 'text'"
                            )))
                        }
                        (other, _) => {
                            return Err(ApiError::bad(format!(
                                "invalid field 'messages[{i}].content[{j}]': part type '{other}' is not supported (only 'text')"
                            )))
                        }
                    }
                }
                s
            }
        };
        texts.push(text);
    }
    if let [only] = texts.as_slice() {
        return Ok(only.clone());
    }
    let blocks: Vec<String> = messages
        .iter()
        .zip(texts)
        .map(|(m, t)| format!("{}: {t}", m.role))
        .collect();
    Ok(blocks.join("\n\n"))
}

/// `POST /v1/chat/completions`.
pub async fn completions(
    State(service): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, OpenAiError> {
    let req: ChatRequest = api::parse_body(body)?;
    if !service.config.templates.contains_key(&req.model) {
        return Err(OpenAiError::unknown_model(&service, &req.model));
    }
    let prompt = prompt_of(&req.messages).map_err(|e| OpenAiError {
        param: Some("messages"),
        ..e.into()
    })?;
    api::check_prompt(
        &service,
        service.config.templates.get(&req.model),
        &prompt,
        "messages",
    )
    .map_err(|e| OpenAiError {
        param: Some("messages"),
        ..e.into()
    })?;
    let mut job = api::resolve(
        &service,
        SubmitRequest {
            template: Some(req.model.clone()),
            prompt: Some(prompt),
            ..SubmitRequest::default()
        },
    )?;
    // Stored with the job: if this node goes (kill -9), nobody waits for it.
    job.waiter = Some(service.node.clone());
    // Armed before the job is stored: a client that goes away while it is
    // being stored must not leave it to run for nobody.
    let guard = Waiting::new(Arc::clone(&service), job.id.clone());
    let (job, _) = match api::submit(&service, job).await {
        Ok(submitted) => submitted,
        Err(mut e) => {
            guard.disarm();
            // The chat route answers a full queue with 503 (clients retry it).
            if e.status == StatusCode::TOO_MANY_REQUESTS {
                e.status = StatusCode::SERVICE_UNAVAILABLE;
            }
            return Err(OpenAiError {
                retry: Some(true),
                ..e.into()
            });
        }
    };
    let id = job.spec.id.clone();
    // A drain that began meanwhile may have missed this job: it is then
    // cancelled here, and the caller answered as the drain would.
    if service.cancel_if_draining(&id).await {
        guard.disarm();
        return Err(drained(&id));
    }
    let head = Head {
        id: format!("chatcmpl-{id}"),
        created: job.spec.created_at / 1000,
        model: req.model,
    };
    if req.stream.unwrap_or(false) {
        let usage = req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        let events = chunks(service, job, head, usage, guard);
        return Ok(Sse::new(events)
            .keep_alive(KeepAlive::new())
            .into_response());
    }
    let ended = wait_final(&service, &job).await;
    guard.disarm();
    let ended = ended?;
    if ended.status != JobStatus::Succeeded {
        return Err(job_error(&ended));
    }
    let path = service.files(&id).stream(OutStream::Stdout);
    let content = output::read_from(&path, 0, u64::MAX)
        .map_err(|e| ApiError::internal("io", &format!("read the output of job '{id}'"), e))?;
    let content = String::from_utf8_lossy(&content);
    Ok(Json(json!({
        "id": head.id,
        "object": "chat.completion",
        "created": head.created,
        "model": head.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "logprobs": null,
            "finish_reason": "stop",
        }],
        "usage": zero_usage(),
        "job_id": id,
    }))
    .into_response())
}

/// What every chunk of one completion repeats.
struct Head {
    id: String,
    created: i64,
    model: String,
}

impl Head {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        let v = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        });
        Event::default().data(v.to_string())
    }
}

fn zero_usage() -> Value {
    json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
}

/// 503 for a job that ended without succeeding, saying how.
fn job_error(job: &Job) -> OpenAiError {
    let id = &job.spec.id;
    let (code, how) = match job.status {
        JobStatus::TimedOut => ("job_timed_out", "timed out"),
        JobStatus::Cancelled => ("job_cancelled", "was cancelled"),
        JobStatus::Superseded => ("job_superseded", "was superseded"),
        JobStatus::Skipped => ("job_skipped", "was skipped"),
        JobStatus::Interrupted => ("job_interrupted", "was interrupted"),
        _ => ("job_failed", "failed"),
    };
    let mut message = format!("job '{id}' {how}");
    if let Some(c) = job.exit_code {
        message.push_str(&format!(" (exit code {c})"));
    }
    if let Some(e) = &job.error {
        message.push_str(&format!(": {e}"));
    }
    OpenAiError {
        inner: ApiError::new(StatusCode::SERVICE_UNAVAILABLE, code, message),
        param: None,
        job_id: Some(id.clone()),
        retry: Some(false),
    }
}

/// 503 `draining` for a job the drain cancelled before it ran: the caller
/// may retry (with `Retry-After`), the prompt has not run.
fn drained(id: &str) -> OpenAiError {
    let mut inner = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "draining",
        format!(
            "the service is shutting down: job '{id}' was cancelled before it ran; retry later"
        ),
    );
    inner.retry_after = Some(5);
    OpenAiError {
        inner,
        param: None,
        job_id: Some(id.to_string()),
        retry: Some(true),
    }
}

/// Waits until `job` has ended (see the module doc for the bounds).
async fn wait_final(service: &Service, job: &Job) -> Result<Job, OpenAiError> {
    let id = job.spec.id.as_str();
    let run_limit = Duration::from_millis(job.spec.timeout_ms) + service.config.grace + WAIT_MARGIN;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(live) = service.live(id) {
            let mut done = live.done.clone();
            let _ = tokio::time::timeout(run_limit, done.wait_for(|d| *d)).await;
        }
        let now = api::find_job(service, id).await?;
        if now.status.is_final() {
            if now.status == JobStatus::Cancelled && service.was_drained(id) {
                return Err(drained(id));
            }
            return Ok(now);
        }
        if let Some(started) = now.started_at {
            let limit = i64::try_from(run_limit.as_millis()).unwrap_or(i64::MAX);
            if now_ms().saturating_sub(started) > limit {
                return Err(OpenAiError {
                    inner: ApiError::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "wait_timeout",
                        format!(
                            "job '{id}' has not ended {} after its start, beyond its timeout and grace",
                            humantime::format_duration(run_limit)
                        ),
                    ),
                    param: None,
                    job_id: Some(id.to_string()),
                    retry: Some(false),
                });
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

enum Phase {
    Role,
    Body,
    End,
    Usage,
    Done,
    Over,
}

struct ChunkState {
    service: AppState,
    job: Job,
    head: Head,
    usage: bool,
    out: ByteStream,
    carry: Vec<u8>,
    phase: Phase,
    guard: Option<Waiting>,
}

/// The server-sent events of a streamed completion.
fn chunks(
    service: AppState,
    job: Job,
    head: Head,
    usage: bool,
    guard: Waiting,
) -> impl Stream<Item = Result<Event, Infallible>> + Send {
    let path = service.files(&job.spec.id).stream(OutStream::Stdout);
    let out: ByteStream = Box::pin(crate::follow::follow(
        Arc::clone(&service),
        job.spec.id.clone(),
        path,
    ));
    let st = ChunkState {
        service,
        job,
        head,
        usage,
        out,
        carry: Vec::new(),
        phase: Phase::Role,
        guard: Some(guard),
    };
    futures_util::stream::unfold(st, |mut st| async move {
        loop {
            match st.phase {
                Phase::Role => {
                    st.phase = Phase::Body;
                    let ev = st
                        .head
                        .chunk(json!({"role": "assistant", "content": ""}), None);
                    return Some((Ok(ev), st));
                }
                Phase::Body => match st.out.next().await {
                    Some(Ok(bytes)) => {
                        let text = utf8_prefix(&mut st.carry, &bytes);
                        if !text.is_empty() {
                            let ev = st.head.chunk(json!({"content": text}), None);
                            return Some((Ok(ev), st));
                        }
                    }
                    Some(Err(e)) => {
                        st.phase = Phase::Over;
                        let doing = format!("read the output of job '{}'", st.job.spec.id);
                        let err: OpenAiError = ApiError::internal("io", &doing, e).into();
                        return Some((Ok(error_event(&err)), st));
                    }
                    None => {
                        st.phase = Phase::End;
                        if !st.carry.is_empty() {
                            let text = String::from_utf8_lossy(&st.carry).into_owned();
                            st.carry.clear();
                            let ev = st.head.chunk(json!({"content": text}), None);
                            return Some((Ok(ev), st));
                        }
                    }
                },
                Phase::End => {
                    let ended = wait_final(&st.service, &st.job).await;
                    if let Some(g) = st.guard.take() {
                        g.disarm();
                    }
                    match ended {
                        Ok(j) if j.status == JobStatus::Succeeded => {
                            st.phase = if st.usage { Phase::Usage } else { Phase::Done };
                            return Some((Ok(st.head.chunk(json!({}), Some("stop"))), st));
                        }
                        Ok(j) => {
                            st.phase = Phase::Over;
                            return Some((Ok(error_event(&job_error(&j))), st));
                        }
                        Err(e) => {
                            st.phase = Phase::Over;
                            return Some((Ok(error_event(&e)), st));
                        }
                    }
                }
                Phase::Usage => {
                    st.phase = Phase::Done;
                    let v = json!({
                        "id": st.head.id,
                        "object": "chat.completion.chunk",
                        "created": st.head.created,
                        "model": st.head.model,
                        "choices": [],
                        "usage": zero_usage(),
                    });
                    return Some((Ok(Event::default().data(v.to_string())), st));
                }
                Phase::Done => {
                    st.phase = Phase::Over;
                    return Some((Ok(Event::default().data("[DONE]")), st));
                }
                Phase::Over => return None,
            }
        }
    })
}

/// An error as the last event of a stream. The response has been sent:
/// an error with a detail for the log (see `api::log_errors`) is logged here.
fn error_event(e: &OpenAiError) -> Event {
    if let Some(logged) = &e.inner.logged {
        tracing::error!(error = %logged.detail, "{}", logged.what);
    }
    Event::default().data(json!({"error": e.error_json()}).to_string())
}

/// The longest valid UTF-8 text of `carry` + `bytes`; an incomplete
/// character at the end stays in `carry` for the next chunk, invalid bytes
/// become U+FFFD.
fn utf8_prefix(carry: &mut Vec<u8>, bytes: &[u8]) -> String {
    carry.extend_from_slice(bytes);
    let mut out = String::new();
    let mut rest: &[u8] = carry;
    loop {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                out.push_str(s);
                rest = &[];
                break;
            }
            Err(e) => {
                let (valid, after) = rest.split_at(e.valid_up_to());
                out.push_str(&String::from_utf8_lossy(valid));
                match e.error_len() {
                    Some(n) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        rest = &after[n..];
                    }
                    None => {
                        rest = after;
                        break;
                    }
                }
            }
        }
    }
    let keep = rest.len();
    let len = carry.len();
    carry.drain(..len - keep);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, content: Value) -> Message {
        serde_json::from_value(json!({"role": role, "content": content})).unwrap()
    }

    #[test]
    fn one_message_is_its_text_and_several_are_role_blocks() {
        assert_eq!(prompt_of(&[msg("user", json!("hi"))]).unwrap(), "hi");
        let parts = json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        assert_eq!(prompt_of(&[msg("user", parts)]).unwrap(), "ab");
        let several = [msg("system", json!("be brief")), msg("user", json!("hi"))];
        assert_eq!(prompt_of(&several).unwrap(), "system: be brief\n\nuser: hi");
        assert!(prompt_of(&[]).is_err());
        let image = json!([{"type": "image_url", "image_url": {"url": "x"}}]);
        let err = prompt_of(&[msg("user", image)]).unwrap_err();
        assert!(
            err.message.contains("messages[0].content[0]"),
            "{}",
            err.message
        );
    }

    #[test]
    fn utf8_prefix_keeps_a_split_character_for_the_next_chunk() {
        let mut carry = Vec::new();
        let e = "é".as_bytes();
        assert_eq!(utf8_prefix(&mut carry, &[b'a', e[0]]), "a");
        assert_eq!(carry, vec![e[0]]);
        assert_eq!(utf8_prefix(&mut carry, &[e[1], b'b']), "éb");
        assert!(carry.is_empty());
        assert_eq!(utf8_prefix(&mut carry, &[0xff, b'c']), "\u{fffd}c");
        assert!(carry.is_empty());
    }
}
