//! The driver behind its adaptive limit: each state-changing call waits for room in its budgets
//! (the driver's, its method's; a create's class's and topology segment's too), and, in a
//! budget cut below its ceiling, for its pacing interval since the last start; it is made, and
//! tells its budget what it heard; a refusal pauses the budget. Work on existing volumes
//! (deletions, expansions, modifies) waits ahead of creates, and creates take turns by
//! namespace (the pass says whose with `in_share`). The limits and the order are decided in
//! `limit`; this is the waiting and counting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;
use tokio::time::Instant;

use super::driver::{About, Answer};
use super::limit::{Heard, Limit, Queued, Settings, Waiter, admissible, fair_order, joined};
use super::{CsiError, Driver, v1 as csi};

/// The budget every call needs room in: `--worker-threads` calls at most, all methods together.
pub const DRIVER: &str = "driver";

/// The method budgets of work on existing volumes.
const DELETE: &str = "DeleteVolume";
const EXPAND: &str = "ControllerExpandVolume";
const MODIFY: &str = "ControllerModifyVolume";
/// Those no create waits for.
const EXISTING_ONLY: [&str; 3] = [DELETE, EXPAND, MODIFY];

/// The budgets a call of `method` needs: the driver's and its method's. A refusal is told to
/// the most specific budget, so a backend that throttles CreateVolume holds back creates, not
/// the deletions and expansions of volumes that exist; one whose throttle is shared refuses
/// those too, and their own budgets learn it.
fn method_budgets(method: &str) -> Vec<String> {
    vec![DRIVER.to_string(), method.to_string()]
}

struct Budget {
    limit: Limit,
    in_flight: usize,
    /// No call goes before this: the pacing interval after a start, the pause after a refusal.
    not_before: Option<Instant>,
}

impl Budget {
    fn room(&self, now: Instant) -> usize {
        if self.not_before.is_some_and(|at| now < at) {
            return 0;
        }
        self.limit.allowed().saturating_sub(self.in_flight)
    }

    /// Holds the budget's next call back for `gap` from `now`, if that is later than it
    /// already is; true when it is.
    fn hold(&mut self, now: Instant, gap: std::time::Duration) -> bool {
        let at = now + gap;
        if gap.is_zero() || self.not_before.is_some_and(|t| t >= at) {
            return false;
        }
        self.not_before = Some(at);
        true
    }
}

struct Waiting {
    id: u64,
    /// Work on an existing volume: waits ahead of creates.
    existing: bool,
    /// The namespace of the claim the call is for.
    share: String,
    budgets: Vec<String>,
}

#[derive(Default)]
struct State {
    budgets: HashMap<String, Budget>,
    waiting: Vec<Waiting>,
    /// Calls admitted per share (`limit::fair_order`).
    served: HashMap<String, u64>,
    next_id: u64,
}

impl State {
    /// The waiting calls that need room in budget `name`.
    fn waiting_for<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Waiting> + 'a {
        self.waiting.iter().filter(move |w| w.budgets.iter().any(|b| b == name))
    }
}

/// Whose calls a claim's pass makes.
#[derive(Debug, Clone, Default)]
struct Turn {
    /// The claim's namespace: its turn in the fair order.
    share: String,
    /// The claim's StorageClass: a budget of its own for its creates.
    class: Option<String>,
}

tokio::task_local! {
    static TURN: Turn;
}

/// Runs `work` with its driver calls counted in `share`'s turn (a claim's namespace), and its
/// creates in `class`'s budget.
pub async fn in_share<F: std::future::Future>(
    share: String,
    class: Option<String>,
    work: F,
) -> F::Output {
    TURN.scope(Turn { share, class }, work).await
}

fn current_turn() -> Turn {
    TURN.try_with(Turn::clone).unwrap_or_default()
}

/// The budgets' limits and the calls waiting for them, shared by every call.
pub struct Gate {
    settings: Settings,
    state: Mutex<State>,
    wake: Notify,
}

impl Gate {
    pub fn new(settings: Settings) -> Arc<Gate> {
        Arc::new(Gate { settings, state: Mutex::default(), wake: Notify::new() })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Each budget's limit now and the calls it has in flight.
    pub fn budgets(&self) -> Vec<(String, f64, usize)> {
        let state = self.state();
        let mut out: Vec<_> =
            state.budgets.iter().map(|(n, b)| (n.clone(), b.limit.value(), b.in_flight)).collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// The creates that may be in flight now, as the tightest budget a create may need says
    /// (the driver's, CreateVolume's, a class's or a topology segment's) among those with calls
    /// in flight or waiting: where a backend throttles one segment, that segment is what
    /// creates wait for; a budget cut long ago that nothing uses now holds nothing back.
    pub fn creates_allowed(&self) -> usize {
        let state = self.state();
        let busy = |name: &str, budget: &Budget| {
            budget.in_flight > 0 || state.waiting_for(name).next().is_some()
        };
        state
            .budgets
            .iter()
            .filter(|(name, _)| !EXISTING_ONLY.contains(&name.as_str()))
            .filter(|(name, budget)| busy(name, budget))
            .map(|(_, budget)| budget.limit.allowed())
            .min()
            .unwrap_or_else(|| Limit::new(self.settings).allowed())
    }

    /// Calls waiting for room.
    pub fn waiting(&self) -> usize {
        self.state().waiting.len()
    }

    /// Waits until the call may go; the permit gives the room back when dropped.
    async fn admit(self: &Arc<Self>, budgets: Vec<String>, existing: bool) -> Permit {
        let share = current_turn().share;
        let id = {
            let mut state = self.state();
            state.next_id += 1;
            let id = state.next_id;
            for name in &budgets {
                state.budgets.entry(name.clone()).or_insert_with(|| Budget {
                    limit: Limit::new(self.settings),
                    in_flight: 0,
                    not_before: None,
                });
            }
            if !existing && !state.waiting.iter().any(|w| !w.existing && w.share == share) {
                let others: Vec<u64> = state
                    .waiting
                    .iter()
                    .filter(|w| !w.existing)
                    .map(|w| state.served.get(&w.share).copied().unwrap_or(0))
                    .collect();
                let own = state.served.get(&share).copied().unwrap_or(0);
                state.served.insert(share.clone(), joined(own, others.into_iter()));
            }
            state.waiting.push(Waiting { id, existing, share, budgets: budgets.clone() });
            id
        };
        let leave = Leave { gate: self, id, armed: true };
        loop {
            let woken = self.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some(permit) = self.try_take(id, &budgets) {
                leave.disarm();
                return permit;
            }
            woken.await;
        }
    }

    fn try_take(self: &Arc<Self>, id: u64, names: &[String]) -> Option<Permit> {
        let mut state = self.state();
        let now = Instant::now();
        let go = {
            let queued: Vec<Queued<'_>> = state
                .waiting
                .iter()
                .map(|w| Queued { id: w.id, existing: w.existing, share: &w.share })
                .collect();
            let served = |share: &str| state.served.get(share).copied().unwrap_or(0);
            let order = fair_order(&queued, &served);
            let by_id: HashMap<u64, &Waiting> = state.waiting.iter().map(|w| (w.id, w)).collect();
            let waiters: Vec<Waiter<'_>> = order
                .iter()
                .filter_map(|id| by_id.get(id))
                .map(|w| Waiter { id: w.id, budgets: &w.budgets })
                .collect();
            let room = |name: &str| state.budgets.get(name).map_or(0, |b| b.room(now));
            admissible(&waiters, &room)
        };
        if !go.contains(&id) {
            return None;
        }
        let at = state.waiting.iter().position(|w| w.id == id)?;
        let admitted = state.waiting.remove(at);
        if !admitted.existing {
            *state.served.entry(admitted.share).or_default() += 1;
        }
        let mut epochs = Vec::with_capacity(names.len());
        let mut paced = std::time::Duration::ZERO;
        for name in names {
            if let Some(budget) = state.budgets.get_mut(name) {
                budget.in_flight += 1;
                epochs.push((name.clone(), budget.limit.epoch()));
                let interval = budget.limit.interval();
                if budget.hold(now, interval) {
                    paced = paced.max(interval);
                }
            }
        }
        self.measure(&state, names);
        drop(state);
        if !paced.is_zero() {
            self.wake_after(paced);
        }
        if go.len() > 1 {
            // Others may go too: let them look.
            self.wake.notify_waiters();
        }
        Some(Permit { gate: self.clone(), epochs, started: Instant::now() })
    }

    /// Wakes the waiting calls once a pause or a pacing interval is over.
    fn wake_after(self: &Arc<Self>, pause: std::time::Duration) {
        let gate = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep(pause).await;
            if let Some(gate) = gate.upgrade() {
                gate.wake.notify_waiters();
            }
        });
    }

    fn measure(&self, state: &State, names: &[String]) {
        let m = crate::metrics::metrics();
        for name in names {
            let Some(budget) = state.budgets.get(name) else {
                continue;
            };
            let labels = crate::metrics::BudgetLabels { budget: name.clone() };
            m.driver_limit.get_or_create(&labels).set(budget.limit.value());
            m.driver_in_flight
                .get_or_create(&labels)
                .set(i64::try_from(budget.in_flight).unwrap_or(i64::MAX));
            let waiting = state.waiting_for(name).count();
            m.driver_waiting.get_or_create(&labels).set(i64::try_from(waiting).unwrap_or(0));
        }
    }
}

/// Takes a waiter that gave up (its pass was cancelled) out of the line.
struct Leave<'a> {
    gate: &'a Arc<Gate>,
    id: u64,
    armed: bool,
}

impl Leave<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.gate.state().waiting.retain(|w| w.id != self.id);
            self.gate.wake.notify_waiters();
        }
    }
}

/// Room in each of a call's budgets, given back on drop.
struct Permit {
    gate: Arc<Gate>,
    /// Each budget, and its epoch when the call went.
    epochs: Vec<(String, u64)>,
    started: Instant,
}

impl Permit {
    /// Tells the most specific budget what the call heard: a segment's refusal is that
    /// segment's, not the whole driver's.
    fn heard<T>(&self, answer: &Result<T, CsiError>) {
        // A call that never reached the driver (its socket refused, the connection dropped)
        // says nothing of the backend: the driver is down, which the executor waits out.
        if let Err(CsiError::Transport { .. }) = answer {
            return;
        }
        let code = answer.as_ref().err().and_then(CsiError::code);
        let heard = match code {
            Some(tonic::Code::ResourceExhausted) => Heard::Overloaded,
            Some(tonic::Code::Unavailable) => Heard::Unavailable,
            _ => Heard::Answered(self.started.elapsed()),
        };
        let Some((name, epoch)) = self.epochs.last() else {
            return;
        };
        let mut state = self.gate.state();
        let mut paused = None;
        if let Some(budget) = state.budgets.get_mut(name) {
            budget.limit.heard(*epoch, heard);
            let pause = budget.limit.pause();
            if budget.hold(Instant::now(), pause) {
                paused = Some(pause);
            }
        }
        drop(state);
        if let Some(pause) = paused {
            self.gate.wake_after(pause);
        }
        if let (Heard::Overloaded | Heard::Unavailable, Some(code)) = (heard, code) {
            let labels = crate::metrics::RefusalLabels {
                budget: name.clone(),
                grpc_status_code: crate::metrics::code_name(code),
            };
            crate::metrics::metrics().driver_refusals.get_or_create(&labels).inc();
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut state = self.gate.state();
        let names: Vec<String> = self.epochs.iter().map(|(n, _)| n.clone()).collect();
        for name in &names {
            if let Some(budget) = state.budgets.get_mut(name) {
                budget.in_flight = budget.in_flight.saturating_sub(1);
            }
        }
        self.gate.measure(&state, &names);
        drop(state);
        self.gate.wake.notify_waiters();
    }
}

/// The budgets a create needs: the driver's, CreateVolume's, its class's (`storageclass/NAME`:
/// a class may name a pool or a tier of its own), and its first preferred (else requisite)
/// topology segment's, where it names one.
fn create_budgets(request: &csi::CreateVolumeRequest, class: Option<&str>) -> Vec<String> {
    let mut budgets = method_budgets("CreateVolume");
    budgets.extend(class.filter(|c| !c.is_empty()).map(|c| format!("storageclass/{c}")));
    let segment = request.accessibility_requirements.as_ref().and_then(|r| {
        r.preferred.first().or_else(|| r.requisite.first()).map(|t| {
            let mut pairs: Vec<String> =
                t.segments.iter().map(|(k, v)| format!("{k}={v}")).collect();
            pairs.sort();
            pairs.join(",")
        })
    });
    budgets.extend(segment.filter(|s| !s.is_empty()));
    budgets
}

/// A driver whose calls pass the gate.
pub struct Limited<D> {
    inner: D,
    gate: Arc<Gate>,
}

impl<D: Driver> Limited<D> {
    pub fn new(inner: D, gate: Arc<Gate>) -> Limited<D> {
        Limited { inner, gate }
    }

    fn through<'a, T: Send + 'a>(
        &'a self,
        budgets: Vec<String>,
        existing: bool,
        call: impl FnOnce(&'a D) -> Answer<'a, T> + Send + 'a,
    ) -> Answer<'a, T> {
        Box::pin(async move {
            let permit = self.gate.admit(budgets, existing).await;
            let answer = call(&self.inner).await;
            permit.heard(&answer);
            answer
        })
    }
}

impl<D: Driver> Driver for Limited<D> {
    fn create_volume(
        &self,
        request: csi::CreateVolumeRequest,
        about: About,
    ) -> Answer<'_, csi::Volume> {
        let budgets = create_budgets(&request, current_turn().class.as_deref());
        self.through(budgets, false, move |d| d.create_volume(request, about))
    }

    fn delete_volume(&self, request: csi::DeleteVolumeRequest, about: About) -> Answer<'_, ()> {
        self.through(method_budgets(DELETE), true, move |d| d.delete_volume(request, about))
    }

    fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
        about: About,
    ) -> Answer<'_, csi::ControllerExpandVolumeResponse> {
        let budgets = method_budgets(EXPAND);
        self.through(budgets, true, move |d| d.controller_expand_volume(request, about))
    }

    fn controller_modify_volume(
        &self,
        request: csi::ControllerModifyVolumeRequest,
    ) -> Answer<'_, ()> {
        let budgets = method_budgets(MODIFY);
        self.through(budgets, true, move |d| d.controller_modify_volume(request))
    }

    fn probe(&self) -> Answer<'_, bool> {
        self.inner.probe()
    }
}

#[cfg(test)]
#[path = "limited_tests.rs"]
mod tests;
