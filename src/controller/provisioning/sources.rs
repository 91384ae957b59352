//! Carrying out what data sources need: the snapshot read live, the cloning-protection
//! finalizer put on before a clone and taken off once no clone is in flight, and a populator's
//! kind looked up in discovery.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use tracing::{info, warn};

use crate::controller::Part;
use crate::controller::reference;
use crate::controller::{ClaimKey, Controller, Outcome, SyncError};
use crate::model::reason::Reason;
use crate::provision::snapshot::SnapshotLookup;
use crate::provision::source::{self, Source};

pub(in crate::controller) use crate::cluster::snapshots::{
    parsed as parsed_snapshot, resource as snapshot_resource,
};

impl Controller {
    /// The VolumeSnapshots of `namespace`.
    pub(in crate::controller) fn snapshots(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &snapshot_resource("VolumeSnapshot", "volumesnapshots"),
        )
    }

    /// The VolumeSnapshot a claim restores from, with its bound content, read live (as
    /// csi-provisioner reads them: snapshots are few and not watched). None: not a restore.
    pub(in crate::controller) async fn snapshot_facts(
        &self,
        claim: &PersistentVolumeClaim,
    ) -> Result<Option<SnapshotLookup>, SyncError> {
        let Source::Snapshot { name } = source::of(claim) else {
            return Ok(None);
        };
        let namespace = claim.namespace().unwrap_or_default();
        crate::cluster::snapshots::lookup(&self.client, &namespace, &name)
            .await
            .map(Some)
            .map_err(|(action, e)| SyncError::api(action, e))
    }

    /// Puts the cloning-protection finalizer on the source claim, on the version the decision
    /// read (a source deleted meanwhile makes this fail, and the next pass refuses the clone).
    pub(in crate::controller) async fn protect_source(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Arc<PersistentVolumeClaim>, SyncError> {
        let Some(cached) = self.stores.claims.get(&ObjectRef::new(name).within(namespace)) else {
            return Err(SyncError::Inconsistent(format!(
                "the clone source {namespace}/{name} went away"
            )));
        };
        let patch = crate::provision::patches::protect_clone_source(&cached);
        let updated =
            self.patch_claim(Part::Object, &cached, patch, "protect the clone source").await?;
        info!(source = %format!("{namespace}/{name}"), "clone source protected until the copy is made");
        Ok(Arc::new(updated))
    }

    /// A data source for a volume populator: said once per claim when the cluster serves its
    /// kind; a Warning, looked at again after a backoff, when nothing can fill it.
    pub(in crate::controller) async fn populator_source(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        (group, kind, name): (&str, &str, &str),
    ) -> Outcome {
        let served = match self.kind_served(group, kind).await {
            Ok(served) => served,
            Err(e) => {
                warn!(error = %e, "cannot look up the data source's kind; assuming it is served");
                true
            }
        };
        let (warning, note) = source::populator_notice(group, kind, name, served);
        if warning {
            if self.backing_off(claim) {
                return Outcome::Waiting;
            }
            let cause = crate::provision::waiting::Cause::DataSourceRefused;
            return self.refused(key, claim, cause, note, false).await;
        }
        let first = self
            .memory
            .claims
            .update_claim(key, claim, |m| !std::mem::replace(&mut m.announced, true));
        if first {
            info!(%kind, %name, "data source left to a volume populator");
            self.events.normal(&reference(claim), Reason::Provisioning, note.clone()).await;
        }
        let wait = crate::provision::waiting::Wait::on(
            crate::provision::waiting::Cause::WaitingForPopulator,
            note,
        );
        self.tell_wait(claim, wait).await;
        Outcome::Done
    }

    /// Whether the API serves `kind` in `group` (in any version).
    async fn kind_served(&self, group: &str, kind: &str) -> Result<bool, kube::Error> {
        if group.is_empty() {
            let core = self.client.list_core_api_resources("v1").await?;
            return Ok(core.resources.iter().any(|r| r.kind == kind));
        }
        let groups = self.client.list_api_groups().await?;
        let Some(found) = groups.groups.iter().find(|g| g.name == group) else {
            return Ok(false);
        };
        for version in &found.versions {
            if crate::cluster::serves(&self.client, &version.group_version, kind).await? {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
