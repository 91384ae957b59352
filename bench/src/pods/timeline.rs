//! When each object was first seen in each state, from watches on the pods, claims, volumes and
//! VolumeAttachments the scenarios make: the API half of every pod's timeline. The driver's
//! half comes from the relay in front of it (`CsiRelay::spans`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::Api;
use kube::runtime::watcher;
use serde::de::DeserializeOwned;
use tokio::task::JoinHandle;

/// A state an object reaches, by the object it is told of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Mark {
    PodCreated(String),
    PodScheduled(String),
    PodRunning(String),
    /// The pod is gone from the API.
    PodGone(String),
    ClaimCreated(String),
    /// The scheduler chose a node for a claim that waits for its first consumer.
    ClaimNodeSelected(String),
    ClaimBound(String),
    /// The claim's status reports this capacity (as written, e.g. `2Mi`).
    ClaimCapacity(String, String),
    /// A VolumeAttachment of this PV says attached.
    Attached(String),
    /// This PV is Released: its claim is gone.
    Released(String),
}

/// What the watches learnt: first-seen instants, and which PV and volume handle each claim got.
#[derive(Default)]
struct Seen {
    marks: HashMap<Mark, SystemTime>,
    /// Claim name → PV name, and PV name → the driver's volume id.
    volume_of_claim: HashMap<String, String>,
    handle_of_volume: HashMap<String, String>,
}

/// Watches a namespace's pods and claims and the cluster's PVs and VolumeAttachments until
/// dropped.
pub struct Recorder {
    seen: Arc<Mutex<Seen>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Recorder {
    pub fn start(client: &kube::Client, namespace: &str) -> Recorder {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let tasks = vec![
            watch(Api::<Pod>::namespaced(client.clone(), namespace), seen.clone(), on_pod),
            watch(
                Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace),
                seen.clone(),
                on_claim,
            ),
            watch(Api::<PersistentVolume>::all(client.clone()), seen.clone(), on_volume),
            watch(Api::<VolumeAttachment>::all(client.clone()), seen.clone(), on_attachment),
        ];
        Recorder { seen, tasks }
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn at(&self, mark: &Mark) -> Option<SystemTime> {
        self.seen().marks.get(mark).copied()
    }

    /// How many of `marks` have been seen.
    pub fn count(&self, marks: &[Mark]) -> usize {
        let seen = self.seen();
        marks.iter().filter(|m| seen.marks.contains_key(m)).count()
    }

    /// The latest instant among `marks`, once every one has been seen.
    pub fn last_of(&self, marks: &[Mark]) -> Option<SystemTime> {
        let seen = self.seen();
        marks
            .iter()
            .map(|m| seen.marks.get(m).copied())
            .collect::<Option<Vec<_>>>()?
            .into_iter()
            .max()
    }

    /// The driver's volume id behind a claim, once its PV is seen.
    pub fn handle_of_claim(&self, claim: &str) -> Option<String> {
        let seen = self.seen();
        seen.handle_of_volume.get(seen.volume_of_claim.get(claim)?).cloned()
    }

    /// The PV that records a driver's volume id.
    pub fn volume_of_handle(&self, handle: &str) -> Option<String> {
        let seen = self.seen();
        seen.handle_of_volume.iter().find(|(_, h)| *h == handle).map(|(pv, _)| pv.clone())
    }

    pub fn volume_of_claim(&self, claim: &str) -> Option<String> {
        self.seen().volume_of_claim.get(claim).cloned()
    }

    /// Waits until every one of `marks` is seen, polling; an error naming how many are missing
    /// after `limit`.
    pub async fn wait_all(
        &self,
        marks: &[Mark],
        limit: Duration,
        what: &str,
    ) -> Result<(), String> {
        let start = std::time::Instant::now();
        loop {
            let done = self.count(marks);
            if done == marks.len() {
                return Ok(());
            }
            if start.elapsed() > limit {
                let seen = self.seen();
                let missing: Vec<&Mark> =
                    marks.iter().filter(|m| !seen.marks.contains_key(m)).take(3).collect();
                return Err(format!(
                    "{what}: {done} of {} after {limit:?}; missing e.g. {missing:?}",
                    marks.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

/// What a watch makes of one object: seen as it is now, or deleted.
type OnEvent<K> = fn(&mut Seen, &K, SystemTime, bool);

fn watch<K>(api: Api<K>, seen: Arc<Mutex<Seen>>, on: OnEvent<K>) -> JoinHandle<()>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    tokio::spawn(async move {
        let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(event) = events.next().await {
            let now = SystemTime::now();
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            match event {
                Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                    on(&mut seen, &object, now, false)
                }
                Ok(watcher::Event::Delete(object)) => on(&mut seen, &object, now, true),
                _ => {}
            }
        }
    })
}

fn first(seen: &mut Seen, mark: Mark, now: SystemTime) {
    seen.marks.entry(mark).or_insert(now);
}

fn on_pod(seen: &mut Seen, pod: &Pod, now: SystemTime, deleted: bool) {
    let name = pod.metadata.name.clone().unwrap_or_default();
    if deleted {
        return first(seen, Mark::PodGone(name), now);
    }
    first(seen, Mark::PodCreated(name.clone()), now);
    if pod.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
        first(seen, Mark::PodScheduled(name.clone()), now);
    }
    if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
        first(seen, Mark::PodRunning(name), now);
    }
}

fn on_claim(seen: &mut Seen, claim: &PersistentVolumeClaim, now: SystemTime, deleted: bool) {
    if deleted {
        return;
    }
    let name = claim.metadata.name.clone().unwrap_or_default();
    first(seen, Mark::ClaimCreated(name.clone()), now);
    let annotations = claim.metadata.annotations.as_ref();
    if annotations.is_some_and(|a| a.contains_key("volume.kubernetes.io/selected-node")) {
        first(seen, Mark::ClaimNodeSelected(name.clone()), now);
    }
    let status = claim.status.as_ref();
    if status.and_then(|s| s.phase.as_deref()) == Some("Bound") {
        first(seen, Mark::ClaimBound(name.clone()), now);
    }
    if let Some(size) = status.and_then(|s| s.capacity.as_ref()?.get("storage")) {
        first(seen, Mark::ClaimCapacity(name, size.0.clone()), now);
    }
}

fn on_volume(seen: &mut Seen, volume: &PersistentVolume, now: SystemTime, _deleted: bool) {
    let name = volume.metadata.name.clone().unwrap_or_default();
    if volume.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released") {
        first(seen, Mark::Released(name.clone()), now);
    }
    let spec = volume.spec.as_ref();
    if let Some(claim) = spec.and_then(|s| s.claim_ref.as_ref()?.name.clone()) {
        seen.volume_of_claim.insert(claim, name.clone());
    }
    if let Some(handle) = spec.and_then(|s| s.csi.as_ref()).map(|c| c.volume_handle.clone()) {
        seen.handle_of_volume.insert(name, handle);
    }
}

fn on_attachment(seen: &mut Seen, attachment: &VolumeAttachment, now: SystemTime, _: bool) {
    let Some(volume) = attachment.spec.source.persistent_volume_name.clone() else { return };
    if attachment.status.as_ref().is_some_and(|s| s.attached) {
        first(seen, Mark::Attached(volume), now);
    }
}
