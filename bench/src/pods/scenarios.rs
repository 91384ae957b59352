//! The pod scenarios, run against whichever stack the cluster has. They talk to the apiserver,
//! read the watches' timeline and the relay's call spans, and ask the driver how many volumes
//! it holds: the same code measures both stacks.

use std::collections::HashMap;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::cluster::{Cluster, NAMESPACE};
use crate::common::each;
use crate::objects::{self, GROWN_SIZE, IMMEDIATE_CLASS};
use crate::splits::{PodMarks, split};
use crate::stats::percentile;
use crate::timeline::{Mark, Recorder};

/// Requests the benchmark keeps in flight when it makes or changes many objects.
const IN_FLIGHT: usize = 32;

/// One measured figure of a scenario.
#[derive(Debug, Clone)]
pub struct Measured {
    pub metric: &'static str,
    pub unit: &'static str,
    pub value: f64,
}

/// What a scenario measured, and each pod's split of its wait.
#[derive(Debug, Default)]
pub struct Outcome {
    pub figures: Vec<Measured>,
    pub splits: Vec<[f64; 7]>,
}

impl Outcome {
    fn add(&mut self, metric: &'static str, unit: &'static str, value: f64) {
        self.figures.push(Measured { metric, unit, value });
    }
}

pub const ALL_RUNNING: &str = "time to all pods Running";
pub const RUNNING_RATE: &str = "pods Running per second";
pub const GROWN: &str = "time until every pod sees the new size";
pub const GROWN_RATE: &str = "pods seeing the new size per second";
pub const DRIVER_EMPTY: &str = "time until the driver holds no volume";

pub struct Scenarios<'a> {
    pub cluster: &'a Cluster,
    pub recorder: &'a Recorder,
    /// Longest wait for one step.
    pub limit: Duration,
}

/// The first field of a CSI request: the volume's name in CreateVolume, its id in the calls
/// on a volume (publish, stage, expand, delete).
#[derive(Clone, PartialEq, prost::Message)]
struct FirstField {
    #[prost(string, tag = "1")]
    value: String,
}

/// Per (method, volume name or id): when its first call came and its first success answered.
struct Calls(HashMap<(String, String), (SystemTime, Option<SystemTime>)>);

impl Calls {
    fn read(cluster: &Cluster) -> Calls {
        let mut calls: HashMap<(String, String), (SystemTime, Option<SystemTime>)> = HashMap::new();
        for span in cluster.relay.spans() {
            let Ok(first) = <FirstField as prost::Message>::decode(span.request.as_ref()) else {
                continue;
            };
            let entry =
                calls.entry((span.method.clone(), first.value)).or_insert((span.arrived, None));
            entry.0 = entry.0.min(span.arrived);
            if span.ok && entry.1.is_none_or(|t| span.answered < t) {
                entry.1 = Some(span.answered);
            }
        }
        Calls(calls)
    }

    fn get(&self, method: &str, key: &str) -> Option<(SystemTime, Option<SystemTime>)> {
        self.0.get(&(method.to_string(), key.to_string())).copied()
    }
}

/// The largest of `values` (each scenario's are never empty).
fn last(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::MIN, f64::max)
}

fn secs(t: SystemTime, origin: SystemTime) -> f64 {
    match t.duration_since(origin) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

impl Scenarios<'_> {
    fn sets(&self) -> Api<StatefulSet> {
        Api::namespaced(self.cluster.client.clone(), NAMESPACE)
    }

    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.cluster.client.clone(), NAMESPACE)
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.cluster.client.clone(), NAMESPACE)
    }

    /// A StatefulSet of `n` on `class` scaled 0 → n; with `bound_before`, its claims are made
    /// and Bound before the scale-up (the limit: only the scheduler and the node remain).
    pub async fn start_set(
        &self,
        set: &str,
        class: &str,
        n: usize,
        bound_before: bool,
    ) -> Result<Outcome, String> {
        let claims: Vec<String> = (0..n).map(|i| objects::set_claim_name(set, i)).collect();
        if bound_before {
            each(claims.clone(), IN_FLIGHT, |name| async move {
                let claim = objects::claim(&name, IMMEDIATE_CLASS)?;
                self.claims()
                    .create(&PostParams::default(), &claim)
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("claim {name}: {e}"))
            })
            .await?;
            let bound: Vec<Mark> = claims.iter().cloned().map(Mark::ClaimBound).collect();
            self.recorder.wait_all(&bound, self.limit, "claims Bound before the scale-up").await?;
        }
        let object = objects::statefulset(set, class, 0)?;
        self.sets()
            .create(&PostParams::default(), &object)
            .await
            .map_err(|e| format!("StatefulSet {set}: {e}"))?;
        let origin = SystemTime::now();
        self.scale(set, n).await?;
        let pods: Vec<String> = (0..n).map(|i| objects::set_pod_name(set, i)).collect();
        let outcome = self.until_running(origin, &pods, &claims, !bound_before).await?;
        Ok(outcome)
    }

    async fn scale(&self, set: &str, replicas: usize) -> Result<(), String> {
        let patch = json!({"spec": {"replicas": replicas}});
        self.sets()
            .patch(set, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| format!("scale {set} to {replicas}: {e}"))
    }

    /// Waits for `pods` Running and measures them from `origin`; `provisioned` says whether
    /// their claims were made for them (so CreateVolume is on their path).
    async fn until_running(
        &self,
        origin: SystemTime,
        pods: &[String],
        claims: &[String],
        provisioned: bool,
    ) -> Result<Outcome, String> {
        let running: Vec<Mark> = pods.iter().cloned().map(Mark::PodRunning).collect();
        self.recorder.wait_all(&running, self.limit, "pods Running").await?;
        let last = self.recorder.last_of(&running).ok_or("no pod Running")?;
        let total = secs(last, origin);
        // The node's calls are answered just before the pod runs: give the relay a moment.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let calls = Calls::read(self.cluster);
        let mut outcome = Outcome::default();
        let mut waits = Vec::new();
        for (pod, claim) in pods.iter().zip(claims) {
            let marks = self.marks(origin, pod, claim, &calls, provisioned)?;
            waits.push(marks.running - marks.created);
            outcome.splits.push(split(&marks));
        }
        outcome.add(ALL_RUNNING, "s", total);
        outcome.add(RUNNING_RATE, "pods/s", pods.len() as f64 / total.max(1e-3));
        outcome.add("p50 pod creation to Running", "s", percentile(&waits, 50.0).unwrap_or(0.0));
        outcome.add("p99 pod creation to Running", "s", percentile(&waits, 99.0).unwrap_or(0.0));
        Ok(outcome)
    }

    fn marks(
        &self,
        origin: SystemTime,
        pod: &str,
        claim: &str,
        calls: &Calls,
        provisioned: bool,
    ) -> Result<PodMarks, String> {
        let r = self.recorder;
        let at = |mark: Mark| {
            r.at(&mark).map(|t| secs(t, origin)).ok_or_else(|| format!("{pod}: never saw {mark:?}"))
        };
        let volume = r.volume_of_claim(claim).ok_or_else(|| format!("{claim}: no PV seen"))?;
        let handle = r.handle_of_claim(claim).ok_or_else(|| format!("{claim}: no handle seen"))?;
        let create = calls.get("CreateVolume", &volume).filter(|_| provisioned);
        let publish = calls.get("NodePublishVolume", &handle).and_then(|c| c.1);
        let bound = at(Mark::ClaimBound(claim.to_string()))?;
        Ok(PodMarks {
            created: at(Mark::PodCreated(pod.to_string()))?,
            node_selected: r
                .at(&Mark::ClaimNodeSelected(claim.to_string()))
                .map(|t| secs(t, origin)),
            create_start: create.map(|c| secs(c.0, origin)),
            create_end: create.and_then(|c| c.1).map(|t| secs(t, origin)),
            bound: Some(bound),
            scheduled: at(Mark::PodScheduled(pod.to_string()))?,
            attached: at(Mark::Attached(volume))?,
            mounted: publish
                .map(|t| secs(t, origin))
                .ok_or(format!("{pod}: no NodePublishVolume"))?,
            running: at(Mark::PodRunning(pod.to_string()))?,
        })
    }

    /// Every claim of the set's `n` pods grown while they run, until each claim's status
    /// reports the new size: kubelet writes it once its NodeExpandVolume has grown the
    /// filesystem the pod sees.
    pub async fn grow(&self, set: &str, n: usize) -> Result<Outcome, String> {
        let claims: Vec<String> = (0..n).map(|i| objects::set_claim_name(set, i)).collect();
        let origin = SystemTime::now();
        let patch = json!({"spec": {"resources": {"requests": {"storage": GROWN_SIZE}}}});
        each(claims.clone(), IN_FLIGHT, |name| {
            let patch = patch.clone();
            async move {
                self.claims()
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
                    .map_err(|e| format!("grow {name}: {e}"))
            }
        })
        .await?;
        let grown: Vec<Mark> =
            claims.iter().map(|c| Mark::ClaimCapacity(c.clone(), GROWN_SIZE.into())).collect();
        self.recorder.wait_all(&grown, self.limit, "claims at the new size").await?;
        let total = secs(self.recorder.last_of(&grown).ok_or("nothing grown")?, origin);
        let calls = Calls::read(self.cluster);
        let mut controller = Vec::new();
        let mut node = Vec::new();
        for claim in &claims {
            let handle = self.recorder.handle_of_claim(claim).unwrap_or_default();
            let answered = |method| calls.get(method, &handle).and_then(|c| c.1);
            let (Some(c), Some(n)) =
                (answered("ControllerExpandVolume"), answered("NodeExpandVolume"))
            else {
                return Err(format!("{claim}: not expanded by both the controller and the node"));
            };
            controller.push(secs(c, origin));
            node.push(secs(n, origin));
        }
        let mut outcome = Outcome::default();
        outcome.add(GROWN, "s", total);
        outcome.add(GROWN_RATE, "pods/s", n as f64 / total.max(1e-3));
        outcome.add("last ControllerExpandVolume answered", "s", last(&controller));
        outcome.add("last NodeExpandVolume answered", "s", last(&node));
        Ok(outcome)
    }

    /// Scales the set to 0: its claims are deleted with its pods; until the driver holds no
    /// volume.
    pub async fn scale_down(&self, set: &str, n: usize) -> Result<Outcome, String> {
        let (origin, wall) = (Instant::now(), SystemTime::now());
        self.scale(set, 0).await?;
        let emptied = self.until_driver_empty(origin).await?;
        let gone: Vec<Mark> =
            (0..n).map(|i| Mark::PodGone(objects::set_pod_name(set, i))).collect();
        self.recorder.wait_all(&gone, self.limit, "pods gone").await?;
        self.sets()
            .delete(set, &DeleteParams::default())
            .await
            .map_err(|e| format!("delete {set}: {e}"))?;
        let mut outcome = Outcome::default();
        outcome.add(DRIVER_EMPTY, "s", emptied);
        self.release_then_delete(wall, &mut outcome)?;
        Ok(outcome)
    }

    /// Whose wait a deletion is: when the last PV became Released (kube-controller-manager's
    /// binder, once the claim is gone: after kubelet's unmount lets the claim's protection go)
    /// and the last DeleteVolume was answered (the stack's), and how long each volume's
    /// DeleteVolume came after its PV was Released: the stack's own lag. (hostpathplugin attaches
    /// nothing itself, so its VolumeAttachments gate no deletion.)
    fn release_then_delete(&self, origin: SystemTime, outcome: &mut Outcome) -> Result<(), String> {
        let calls = Calls::read(self.cluster);
        let (mut released, mut deleted, mut lag) = (Vec::new(), Vec::new(), Vec::new());
        for ((method, handle), (asked, answered)) in &calls.0 {
            if method != "DeleteVolume" || *asked < origin {
                continue;
            }
            let answered = answered.ok_or_else(|| format!("DeleteVolume {handle}: no success"))?;
            let pv = self.recorder.volume_of_handle(handle).ok_or(format!("no PV for {handle}"))?;
            let free = self
                .recorder
                .at(&Mark::Released(pv.clone()))
                .ok_or(format!("{pv}: deleted, but never seen Released"))?;
            deleted.push(secs(answered, origin));
            released.push(secs(free, origin));
            lag.push(secs(*asked, free));
        }
        if deleted.is_empty() {
            return Err("no DeleteVolume".into());
        }
        outcome.add("last PV Released", "s", last(&released));
        outcome.add("last DeleteVolume answered", "s", last(&deleted));
        let p50 = percentile(&lag, 50.0).unwrap_or(0.0);
        outcome.add("DeleteVolume asked after its PV was Released, p50", "s", p50);
        outcome.add("DeleteVolume asked after its PV was Released, max", "s", last(&lag));
        Ok(())
    }

    /// Asks the driver every half second (hostpathplugin answers ListVolumes under the lock its
    /// other calls take: asking more often would slow what is measured). A ListVolumes that
    /// fails while the driver is busy is asked again.
    async fn until_driver_empty(&self, origin: Instant) -> Result<f64, String> {
        loop {
            let held = self.cluster.driver_volumes().await;
            if held == Ok(0) {
                return Ok(origin.elapsed().as_secs_f64());
            }
            if origin.elapsed() > self.limit {
                return Err(format!(
                    "the driver still holds volumes after {:?}: {held:?}",
                    self.limit
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// `n` pods with generic ephemeral volumes of `class`: to Running, then deleted until the
    /// driver holds none of their volumes.
    pub async fn ephemeral(&self, class: &str, n: usize) -> Result<(Outcome, Outcome), String> {
        let pods: Vec<String> = (0..n).map(|i| format!("scratch-{i}")).collect();
        let claims: Vec<String> = pods.iter().map(|p| objects::ephemeral_claim_name(p)).collect();
        let origin = SystemTime::now();
        each(pods.clone(), IN_FLIGHT, |name| async move {
            let pod = objects::ephemeral_pod(&name, class)?;
            self.pods()
                .create(&PostParams::default(), &pod)
                .await
                .map(|_| ())
                .map_err(|e| format!("pod {name}: {e}"))
        })
        .await?;
        let started = self.until_running(origin, &pods, &claims, true).await?;
        let (deleted, wall) = (Instant::now(), SystemTime::now());
        each(pods, IN_FLIGHT, |name| async move {
            self.pods()
                .delete(&name, &DeleteParams::default())
                .await
                .map(|_| ())
                .map_err(|e| format!("delete pod {name}: {e}"))
        })
        .await?;
        let mut gone = Outcome::default();
        gone.add(DRIVER_EMPTY, "s", self.until_driver_empty(deleted).await?);
        self.release_then_delete(wall, &mut gone)?;
        Ok((started, gone))
    }
}
