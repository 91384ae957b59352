//! Keeps the CSIStorageCapacity objects current: a round asks GetCapacity for every wanted
//! (class, segment) and writes what `reconcile` says, every `--capacity-poll-interval` and soon
//! after a volume is made or deleted, a class changes or a node registers. Runs while leading,
//! on its own client (`--kube-api-capacity-qps/-burst`) behind the same fence as every write.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::storage::v1::CSIStorageCapacity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Client, ResourceExt};
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use super::{Answer, Change, Item};
use crate::cluster::Stores;
use crate::csi::{CsiClient, v1 as csi};

/// How the flags set the publisher up.
#[derive(Debug, Clone)]
pub struct Options {
    pub namespace: String,
    pub owner: Option<OwnerReference>,
    /// `--capacity-poll-interval`.
    pub poll: Duration,
    /// `--capacity-for-immediate-binding`.
    pub immediate: bool,
    /// `--capacity-threads`: GetCapacity calls at once.
    pub threads: usize,
}

pub struct Publisher {
    pub client: Client,
    pub csi: CsiClient,
    pub stores: Stores,
    pub driver: String,
    pub topology: bool,
    pub options: Options,
    pub nudge: Nudge,
    /// Where a round the API refuses is reported, for /readyz.
    pub checks: Arc<crate::runtime::failing::Failing>,
}

/// The name /readyz gives this work when it fails.
const CHECK: &str = "capacity publishing";

/// An API error in one line: the server's own message where it gave one.
fn said(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} (HTTP {})", status.message, status.code),
        other => other.to_string(),
    }
}

/// Why capacity publishing cannot start; the process stops with it, as csi-provisioner does.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "--enable-capacity needs the NAMESPACE environment variable (the namespace for CSIStorageCapacity objects)"
    )]
    NoNamespace,
    #[error("--capacity-ownerref-level 0 or more needs the POD_NAME environment variable")]
    NoPod,
    #[error("cannot build the capacity client: {0}")]
    Client(#[from] crate::cluster::client::ClientError),
    #[error("cannot find the owner of CSIStorageCapacity objects: {0}")]
    Owner(String),
}

impl Publisher {
    /// Set up from the flags and env NAMESPACE and POD_NAME, as csi-provisioner does; the owner
    /// is looked up now, so that a wrong level stops the process at start.
    pub async fn from_config(
        config: &crate::config::Config,
        fence: &crate::runtime::fence::Fence,
        csi: &CsiClient,
        stores: &Stores,
        driver: &crate::csi::DriverInfo,
        (nudge, checks): (Nudge, Arc<crate::runtime::failing::Failing>),
    ) -> Result<Publisher, SetupError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let namespace = env("NAMESPACE").ok_or(SetupError::NoNamespace)?;
        let client = crate::cluster::client::build_fenced(
            config.kubeconfig.as_deref(),
            config.kube_api_capacity_qps,
            config.kube_api_capacity_burst,
            "capacity",
            fence,
        )
        .await?;
        let owner = match config.capacity_ownerref_level {
            level if level < 0 => None,
            level => {
                let pod = env("POD_NAME").ok_or(SetupError::NoPod)?;
                owner(&client, &namespace, &pod, level).await.map_err(SetupError::Owner)?
            }
        };
        if let Some(o) = &owner {
            info!(kind = %o.kind, name = %o.name, "owner of CSIStorageCapacity objects");
        }
        Ok(Publisher {
            client,
            csi: csi.clone(),
            stores: stores.clone(),
            driver: driver.name.clone(),
            topology: driver.plugin.accessibility_constraints,
            options: Options {
                namespace,
                owner,
                poll: config.capacity_poll_interval,
                immediate: config.capacity_for_immediate_binding,
                threads: config.capacity_threads,
            },
            nudge,
            checks,
        })
    }
}

/// How the controller tells the publisher that capacity may have changed: one handle, cloned
/// into both, made in `main`. Free when capacity tracking is off (nobody waits on it).
#[derive(Debug, Clone, Default)]
pub struct Nudge {
    answers: Arc<Notify>,
    nodes: Arc<Notify>,
}

impl Nudge {
    /// Something the answers depend on changed (a volume made or deleted, a class): the next
    /// round comes soon.
    pub fn answers_changed(&self) {
        self.answers.notify_one();
    }

    /// A CSINode or Node changed. Nodes change all the time (status, labels of no interest),
    /// so this brings a round only when the wanted objects are no longer those of the last
    /// round.
    pub fn nodes_changed(&self) {
        self.nodes.notify_one();
    }
}

/// Rounds wait this long after a nudge, so that a burst of changes costs one round.
const SETTLE: Duration = Duration::from_secs(1);

impl Publisher {
    pub async fn run(self, stop: impl Future<Output = ()>) {
        info!(namespace = %self.options.namespace, poll = ?self.options.poll, "publishing storage capacity");
        tokio::pin!(stop);
        let mut last = self.wanted();
        self.contained_round(last.clone()).await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(self.options.poll) => {}
                _ = self.nudge.answers.notified() => tokio::time::sleep(SETTLE).await,
                _ = self.nudge.nodes.notified() => {
                    tokio::time::sleep(SETTLE).await;
                    if self.wanted() == last {
                        continue;
                    }
                }
                _ = &mut stop => return,
            }
            last = self.wanted();
            self.contained_round(last.clone()).await;
        }
    }

    /// A round that panics is counted and logged; what it left is the next round's to mend.
    async fn contained_round(&self, items: Vec<Item>) {
        crate::runtime::panics::contain_or_log("capacity", self.round(items)).await;
    }

    /// The (class, segment) pairs that should have an object, from the stores.
    fn wanted(&self) -> Vec<Item> {
        let classes = self.stores.classes.state();
        let (csi_nodes, nodes) = match &self.stores.topology {
            Some(t) => (t.csi_nodes.state(), t.nodes.state()),
            None => (Vec::new(), Vec::new()),
        };
        let segments = super::segments(
            &self.driver,
            self.topology,
            &csi_nodes.iter().map(|c| &**c).collect::<Vec<_>>(),
            &nodes.iter().map(|n| &n.metadata).collect::<Vec<_>>(),
        );
        let class_refs: Vec<_> = classes.iter().map(|c| &**c).collect();
        super::wanted(&class_refs, &self.driver, &segments, self.options.immediate)
    }

    /// One pass over `items`: ask, compare, write. Failures are logged; the next round tries
    /// again.
    async fn round(&self, items: Vec<Item>) {
        let answers: Vec<(Item, Option<Answer>)> = futures::stream::iter(items)
            .map(|item| async move {
                let answer = self.ask(&item).await;
                (item, answer)
            })
            .buffer_unordered(self.options.threads.max(1))
            .collect()
            .await;
        let api: Api<CSIStorageCapacity> =
            Api::namespaced(self.client.clone(), &self.options.namespace);
        let existing = match api
            .list(&ListParams::default().labels(&super::selector(&self.driver)))
            .await
        {
            Ok(list) => list.items,
            Err(e) => {
                warn!(error = %e, "cannot list CSIStorageCapacity objects; trying at the next round");
                self.checks
                    .failed(CHECK, format!("cannot list CSIStorageCapacity objects: {}", said(&e)));
                return;
            }
        };
        let changes = super::reconcile(
            &answers,
            &existing.iter().collect::<Vec<_>>(),
            &self.driver,
            self.options.owner.as_ref(),
        );
        let created = changes.iter().filter(|c| matches!(c, Change::Create(_))).count();
        let obsolete = changes.iter().filter(|c| matches!(c, Change::Delete { .. })).count();
        crate::metrics::metrics().capacity(answers.len(), answers.len() - created, obsolete);
        let mut refused = None;
        for change in changes {
            if let Err(e) = self.apply(&api, &existing, change).await {
                warn!(error = %e, "cannot update storage capacity; trying at the next round");
                refused = Some(e);
            }
        }
        match refused {
            Some(e) => {
                self.checks.failed(CHECK, format!("cannot write CSIStorageCapacity: {}", said(&e)));
            }
            None => self.checks.passed(CHECK),
        }
    }

    /// GetCapacity for the item's class parameters in its segment; None when it failed.
    async fn ask(&self, item: &Item) -> Option<Answer> {
        let class =
            self.stores.classes.get(&kube::runtime::reflector::ObjectRef::new(&item.class))?;
        let request = csi::GetCapacityRequest {
            volume_capabilities: Vec::new(),
            // The class's parameters as csi-provisioner passes them, less our own options.
            parameters: class
                .parameters
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|(key, _)| !key.starts_with(crate::provision::claim_metadata::PREFIX))
                .collect(),
            accessible_topology: (!item.segment.is_empty())
                .then(|| csi::Topology { segments: item.segment.clone().into_iter().collect() }),
        };
        match self.csi.get_capacity(request).await {
            Ok(r) => Some(Answer {
                available: r.available_capacity,
                maximum_volume_size: r.maximum_volume_size,
            }),
            Err(e) => {
                warn!(class = %item.class, segment = ?item.segment, error = %e, "GetCapacity failed; the capacity object stays as it was");
                None
            }
        }
    }

    async fn apply(
        &self,
        api: &Api<CSIStorageCapacity>,
        existing: &[CSIStorageCapacity],
        change: Change,
    ) -> Result<(), kube::Error> {
        match change {
            Change::Create(object) => {
                let made = api.create(&PostParams::default(), &object).await?;
                debug!(name = %made.name_any(), class = %made.storage_class_name, "storage capacity published");
            }
            Change::Update { name, version, answer, owner } => {
                let owners = owner.map(|o| {
                    let mut all = existing
                        .iter()
                        .find(|e| e.metadata.name.as_deref() == Some(name.as_str()))
                        .and_then(|e| e.metadata.owner_references.clone())
                        .unwrap_or_default();
                    all.push(o);
                    all
                });
                let patch = super::update_patch(version.as_deref(), answer, owners);
                api.patch(&name, &PatchParams::default(), &Patch::Merge(patch)).await?;
                debug!(%name, "storage capacity updated");
            }
            Change::Delete { name } => match api.delete(&name, &Default::default()).await {
                Ok(_) => debug!(%name, "obsolete storage capacity deleted"),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            },
        }
        Ok(())
    }
}

/// The owner of the objects, csi-provisioner's `--capacity-ownerref-level`: -1 none, 0 the pod
/// itself, 1 its controller (a StatefulSet or DaemonSet), 2 that one's (a Deployment), …
pub async fn owner(
    client: &Client,
    namespace: &str,
    pod: &str,
    level: i32,
) -> Result<Option<OwnerReference>, String> {
    if level < 0 {
        return Ok(None);
    }
    let pods: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod")),
    );
    let mut object =
        pods.get(pod).await.map_err(|e| format!("cannot read Pod {namespace}/{pod}: {e}"))?;
    if level == 0 {
        return Ok(Some(OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.to_string(),
            uid: object.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: None,
        }));
    }
    // The owner's reference is read from the object below it: only the objects in between
    // are read (a ReplicaSet for a Deployment), as csi-provisioner's RBAC expects.
    for step in 1..=level {
        let parent = object
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "{namespace}/{} has no controller owner at level {step}; lower --capacity-ownerref-level",
                    object.name_any()
                )
            })?;
        if step == level {
            return Ok(Some(OwnerReference {
                block_owner_deletion: None,
                controller: Some(true),
                ..parent
            }));
        }
        let (group, version) = match parent.api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), parent.api_version.clone()),
        };
        let resource =
            ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, &parent.kind));
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        object = api
            .get(&parent.name)
            .await
            .map_err(|e| format!("cannot read {} {namespace}/{}: {e}", parent.kind, parent.name))?;
    }
    Ok(None)
}
