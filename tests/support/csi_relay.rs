//! A gRPC relay between the sidecar and a real CSI driver's unix socket that a test can make
//! misbehave, call by call: the failure paths run against hostpathplugin in the mode users run,
//! with faults hostpath cannot make on its own.
//!
//! Each call's method is looked up in the faults queued for it (one fault per call, in order);
//! a call with none queued is passed through untouched. Every request is recorded, so a test can
//! decode what the sidecar asked for, and every call the driver saw is counted.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::{AbortHandle, JoinHandle};
use tonic::Code;

/// What the relay does to one call.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answered by the relay with this code; the driver never sees the call.
    Fail(Code, String),
    /// Held unanswered until the caller gives up; the driver never sees the call.
    Hang,
    /// Passed to the driver at once; its answer is held back this long (past the caller's
    /// timeout, the driver has acted and the caller does not know).
    AnswerLate(Duration),
    /// Passed to the driver; once it has answered, the caller's connection is dropped instead.
    DropAfter,
    /// Passed to the driver; once it has answered, the relay goes down for this long: every
    /// connection dropped, new ones refused, as a driver container that dies after acting.
    DieAfter(Duration),
    /// The driver's own check of a request (e.g. its credentials): when the function gives a
    /// code, the call is refused with it; otherwise it is passed through.
    Check(fn(&[u8]) -> Option<(Code, String)>),
    /// Passed to the driver; its answer's message is replaced by what the function makes of it
    /// (e.g. capabilities the driver does not report).
    Rewrite(fn(&[u8]) -> Vec<u8>),
}

/// A backend's capacity for one method: past `knee` calls in flight each call takes longer in
/// proportion (`latency` times in-flight over knee), and above `per_second` (a token bucket
/// holding a second's worth) a call is refused with ResourceExhausted before the driver sees it.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    pub knee: usize,
    pub per_second: f64,
    pub latency: Duration,
}

impl Capacity {
    /// The most calls a second it can answer: the rate, or what the knee lets through.
    pub fn calls_per_second(&self) -> f64 {
        let by_knee = self.knee as f64 / self.latency.as_secs_f64().max(1e-6);
        self.per_second.min(by_knee)
    }
}

/// The capacity in force and its token bucket.
#[derive(Debug)]
struct Limited {
    capacity: Capacity,
    tokens: f64,
    filled: Instant,
}

impl Limited {
    /// Takes a token if one is there.
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let burst = self.capacity.per_second.max(1.0);
        let refill = now.duration_since(self.filled).as_secs_f64() * self.capacity.per_second;
        self.tokens = (self.tokens + refill).min(burst);
        self.filled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

type Body = BoxBody<Bytes, hyper::Error>;

#[derive(Default)]
struct State {
    /// One-shot faults by method, taken in order.
    queued: HashMap<String, VecDeque<Fault>>,
    /// Faults applied to every call of a method until cleared.
    standing: HashMap<String, Fault>,
    /// Each request's message (gRPC framing removed), by method.
    requests: BTreeMap<String, Vec<Bytes>>,
    /// Calls the driver saw, by method.
    forwarded: BTreeMap<String, usize>,
    /// Every call that reached the relay: when, the calling process (its socket's peer), and
    /// the method.
    callers: Vec<(std::time::SystemTime, Option<i32>, String)>,
    connections: Vec<AbortHandle>,
    down_until: Option<Instant>,
    /// Calls of each method not yet answered, and the most there have been at once.
    in_flight: HashMap<String, usize>,
    peak: HashMap<String, usize>,
    /// Every call the driver answered: its method, request, and when it came and was answered.
    spans: Vec<Span>,
    /// The capacity each limited method has.
    limited: HashMap<String, Limited>,
    /// Calls refused for capacity, by method, and when.
    refused: HashMap<String, Vec<std::time::SystemTime>>,
}

/// One call the driver answered, for a timeline of where time goes.
#[derive(Debug, Clone)]
pub struct Span {
    pub method: String,
    /// The request's message (gRPC framing removed).
    pub request: Bytes,
    pub arrived: std::time::SystemTime,
    pub answered: std::time::SystemTime,
    /// Whether the driver's answer carried gRPC status OK.
    pub ok: bool,
}

/// A running relay; stops when dropped.
pub struct CsiRelay {
    pub socket: PathBuf,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl CsiRelay {
    /// Listens on `socket` and relays to the driver's socket `driver`.
    pub fn start(socket: &Path, driver: &Path) -> CsiRelay {
        let _ = std::fs::remove_file(socket);
        let listener = UnixListener::bind(socket).expect("bind the relay's socket");
        let state: Arc<Mutex<State>> = Arc::default();
        let accept = tokio::spawn(accept_loop(listener, driver.to_path_buf(), state.clone()));
        CsiRelay { socket: socket.to_path_buf(), state, accept }
    }

    /// `unix:///…`, for `--csi-address`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// The next call of `method` gets `fault` (after the ones queued before it).
    pub fn inject(&self, method: &str, fault: Fault) {
        self.state().queued.entry(method.to_string()).or_default().push_back(fault);
    }

    /// Every call of `method` gets `fault`, until `clear`.
    pub fn always(&self, method: &str, fault: Fault) {
        self.state().standing.insert(method.to_string(), fault);
    }

    /// Every call of `method` fails with `code`, until `clear`.
    pub fn fail(&self, method: &str, code: Code) {
        self.always(method, Fault::Fail(code, format!("injected by the test relay: {code:?}")));
    }

    /// Drops the faults of `method`, queued and standing.
    pub fn clear(&self, method: &str) {
        let mut state = self.state();
        state.queued.remove(method);
        state.standing.remove(method);
    }

    /// How many calls of `method` the sidecar made (whatever happened to them).
    pub fn calls(&self, method: &str) -> usize {
        self.state().requests.get(method).map_or(0, Vec::len)
    }

    /// How many calls of `method` reached the driver.
    pub fn forwarded(&self, method: &str) -> usize {
        self.state().forwarded.get(method).copied().unwrap_or(0)
    }

    /// The requests of `method`, decoded.
    pub fn requests<M: prost::Message + Default>(&self, method: &str) -> Vec<M> {
        let raw = self.state().requests.get(method).cloned().unwrap_or_default();
        raw.iter().map(|m| M::decode(m.as_ref()).expect("a request the sidecar sent")).collect()
    }

    /// Every call that reached the relay, with when and the calling process's pid.
    pub fn callers(&self) -> Vec<(std::time::SystemTime, Option<i32>, String)> {
        self.state().callers.clone()
    }

    /// The most calls of `method` the relay has held unanswered at once (since `reset_peak`).
    pub fn peak_in_flight(&self, method: &str) -> usize {
        self.state().peak.get(method).copied().unwrap_or(0)
    }

    /// How many calls of `method` the driver answered with OK.
    pub fn answered_ok(&self, method: &str) -> usize {
        self.handle().answered_ok(method)
    }

    /// How many calls of `method` were refused for capacity.
    pub fn refused_count(&self, method: &str) -> usize {
        self.handle().refused_count(method)
    }

    /// The calls of `method` the relay holds unanswered now.
    pub fn in_flight(&self, method: &str) -> usize {
        self.handle().in_flight(method)
    }

    /// A handle that reads the relay's counts from another task.
    pub fn handle(&self) -> RelayProbe {
        RelayProbe { state: self.state.clone() }
    }

    /// Starts counting `peak_in_flight` of `method` again from the calls now in flight.
    pub fn reset_peak(&self, method: &str) {
        let mut state = self.state();
        let now = state.in_flight.get(method).copied().unwrap_or(0);
        state.peak.insert(method.to_string(), now);
    }

    /// The calls the driver has answered so far, in the order of their answers.
    pub fn spans(&self) -> Vec<Span> {
        self.state().spans.clone()
    }

    /// From now on, `method` meets a backend of this capacity (its bucket starts full).
    pub fn limit(&self, method: &str, capacity: Capacity) {
        let limited =
            Limited { capacity, tokens: capacity.per_second.max(1.0), filled: Instant::now() };
        self.state().limited.insert(method.to_string(), limited);
    }

    /// Lifts the capacity of `method`.
    pub fn unlimit(&self, method: &str) {
        self.state().limited.remove(method);
    }

    /// When each call of `method` refused for capacity came.
    pub fn refused(&self, method: &str) -> Vec<std::time::SystemTime> {
        self.state().refused.get(method).cloned().unwrap_or_default()
    }

    /// Whether the relay is down after a `DieAfter`.
    pub fn is_down(&self) -> bool {
        self.state().down_until.is_some_and(|t| Instant::now() < t)
    }
}

/// Reads a relay's counts; cloneable, for a task that samples them.
#[derive(Clone)]
pub struct RelayProbe {
    state: Arc<Mutex<State>>,
}

impl RelayProbe {
    pub fn answered_ok(&self, method: &str) -> usize {
        lock(&self.state).spans.iter().filter(|s| s.ok && s.method == method).count()
    }

    pub fn refused_count(&self, method: &str) -> usize {
        lock(&self.state).refused.get(method).map_or(0, Vec::len)
    }

    pub fn in_flight(&self, method: &str) -> usize {
        lock(&self.state).in_flight.get(method).copied().unwrap_or(0)
    }
}

impl Drop for CsiRelay {
    fn drop(&mut self) {
        self.accept.abort();
        for connection in self.state().connections.drain(..) {
            connection.abort();
        }
    }
}

fn lock(state: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

async fn accept_loop(listener: UnixListener, driver: PathBuf, state: Arc<Mutex<State>>) {
    while let Ok((stream, _)) = listener.accept().await {
        let mut guard = lock(&state);
        if guard.down_until.is_some_and(|t| Instant::now() < t) {
            continue; // refused: the caller sees the connection closed
        }
        guard.connections.retain(|c| !c.is_finished());
        let (driver, state) = (driver.clone(), state.clone());
        let task = tokio::spawn(serve(stream, driver, state));
        guard.connections.push(task.abort_handle());
    }
}

/// One caller connection, relayed over one connection of its own to the driver.
async fn serve(stream: UnixStream, driver: PathBuf, state: Arc<Mutex<State>>) {
    let pid = stream.peer_cred().ok().and_then(|c| c.pid());
    let Ok(upstream) = UnixStream::connect(&driver).await else {
        return;
    };
    let Ok((sender, connection)) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(upstream)).await
    else {
        return;
    };
    let _upstream = AbortOnDrop(tokio::spawn(connection).abort_handle());
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (sender, state) = (sender.clone(), state.clone());
        async move { Ok::<_, Infallible>(relay(request, sender, &state, pid).await) }
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

/// The driver-side connection ends with the caller's, even when the caller's is aborted.
struct AbortOnDrop(AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn relay(
    request: Request<Incoming>,
    mut sender: hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    state: &Mutex<State>,
    pid: Option<i32>,
) -> Response<Body> {
    let method = request.uri().path().rsplit('/').next().unwrap_or_default().to_string();
    let arrived = std::time::SystemTime::now();
    lock(state).callers.push((arrived, pid, method.clone()));
    let _in_flight = InFlight::enter(state, &method);
    let (parts, body) = request.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return status(Code::Internal, "the relay could not read the request");
    };
    let fault = {
        let mut state = lock(state);
        state.requests.entry(method.clone()).or_default().push(body.slice(5.min(body.len())..));
        let queued = state.queued.get_mut(&method).and_then(VecDeque::pop_front);
        queued.or_else(|| state.standing.get(&method).cloned())
    };
    let delay = {
        let mut guard = lock(state);
        let in_flight = guard.in_flight.get(&method).copied().unwrap_or(1);
        let taken = guard.limited.get_mut(&method).map(|l| (l.take(), l.capacity));
        match taken {
            Some((false, _)) => {
                guard.refused.entry(method.clone()).or_default().push(arrived);
                return status(Code::ResourceExhausted, "the backend's rate is exceeded");
            }
            Some((true, c)) => {
                Some(c.latency.mul_f64((in_flight as f64 / c.knee.max(1) as f64).max(1.0)))
            }
            None => None,
        }
    };
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    match &fault {
        Some(Fault::Fail(code, message)) => return status(*code, message),
        Some(Fault::Hang) => std::future::pending::<()>().await,
        Some(Fault::Check(check)) => {
            if let Some((code, message)) = check(body.get(5..).unwrap_or_default()) {
                return status(code, &message);
            }
        }
        _ => {}
    }
    lock(state).forwarded.entry(method.clone()).and_modify(|n| *n += 1).or_insert(1);
    let request_message = body.slice(5.min(body.len())..);
    let Ok(answer) = sender.send_request(Request::from_parts(parts, Full::new(body))).await else {
        return status(Code::Unavailable, "the relay could not reach the driver");
    };
    let (head, body) = answer.into_parts();
    let Ok(collected) = body.collect().await else {
        return status(Code::Unavailable, "the driver dropped its answer");
    };
    let trailers = collected.trailers().cloned();
    let ok = trailers.as_ref().and_then(|t| t.get("grpc-status")).is_none_or(|v| v == "0")
        && head.headers.get("grpc-status").is_none_or(|v| v == "0");
    lock(state).spans.push(Span {
        method,
        request: request_message,
        arrived,
        answered: std::time::SystemTime::now(),
        ok,
    });
    let mut message = collected.to_bytes();
    match fault {
        Some(Fault::AnswerLate(delay)) => tokio::time::sleep(delay).await,
        Some(Fault::DropAfter) => return lost(state, None).await,
        Some(Fault::DieAfter(down)) => return lost(state, Some(Instant::now() + down)).await,
        Some(Fault::Rewrite(rewrite)) if message.len() >= 5 => {
            let new = rewrite(&message[5..]);
            let mut framed = Vec::with_capacity(new.len() + 5);
            framed.push(0);
            framed.extend_from_slice(&u32::try_from(new.len()).unwrap_or(0).to_be_bytes());
            framed.extend_from_slice(&new);
            message = Bytes::from(framed);
        }
        _ => {}
    }
    let mut frames = vec![Ok(Frame::data(message))];
    frames.extend(trailers.map(|t| Ok(Frame::trailers(t))));
    Response::from_parts(head, StreamBody::new(futures::stream::iter(frames)).boxed())
}

/// One call counted in flight from its arrival until its answer is sent or the call is dropped.
struct InFlight<'a> {
    state: &'a Mutex<State>,
    method: String,
}

impl<'a> InFlight<'a> {
    fn enter(state: &'a Mutex<State>, method: &str) -> InFlight<'a> {
        let mut guard = lock(state);
        let now = guard.in_flight.entry(method.to_string()).or_default();
        *now += 1;
        let now = *now;
        let peak = guard.peak.entry(method.to_string()).or_default();
        *peak = (*peak).max(now);
        InFlight { state, method: method.to_string() }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(n) = lock(self.state).in_flight.get_mut(&self.method) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Drops every caller connection (with `until`, also refusing new ones until then), so the
/// answer in hand is lost. The call runs in a task of its own, which ends once its connection is
/// gone: what it returns then reaches no one.
async fn lost(state: &Mutex<State>, until: Option<Instant>) -> Response<Body> {
    {
        let mut state = lock(state);
        if until.is_some() {
            state.down_until = until;
        }
        for connection in state.connections.drain(..) {
            connection.abort();
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    status(Code::Unavailable, "the relay dropped this answer")
}

/// A trailers-only gRPC answer carrying `code`.
fn status(code: Code, message: &str) -> Response<Body> {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from(code as i32));
    if let Ok(message) = HeaderValue::from_str(message) {
        headers.insert("grpc-message", message);
    }
    let mut response = Response::new(Empty::<Bytes>::new().map_err(|never| match never {}).boxed());
    *response.headers_mut() = headers;
    response
}
