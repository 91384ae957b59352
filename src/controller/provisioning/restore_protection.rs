//! Carrying out the restore protection (`provision::snapshot`): our finalizer on a
//! VolumeSnapshot before a CreateVolume reads it, taken off once no claim needs the snapshot,
//! and a sweep for the ones a crash or a refused write left behind.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use tracing::{info, warn};

use super::sources::{parsed_snapshot, snapshot_resource};
use crate::controller::error::is_status;
use crate::controller::{Controller, SyncError};
use crate::provision::patches;
use crate::provision::snapshot::{self, Snapshot, SnapshotLookup};

impl Controller {
    /// Writes `finalizers` on the snapshot, on the version it was read at.
    async fn set_snapshot_finalizers(
        &self,
        snapshot: &Snapshot,
        finalizers: Vec<String>,
        action: &str,
    ) -> Result<Option<Snapshot>, SyncError> {
        let patch = patches::snapshot_finalizers(snapshot, finalizers);
        match self
            .snapshots(&snapshot.namespace)
            .patch(&snapshot.name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(updated) => {
                let mut parsed = parsed_snapshot(&updated);
                parsed.content = snapshot.content.clone();
                Ok(Some(parsed))
            }
            Err(e) if is_status(&e, 404) => Ok(None),
            Err(e) => Err(SyncError::api(action, e)),
        }
    }

    /// Puts our restore protection on the snapshot before the intent and any CreateVolume; a
    /// snapshot changed or deleted since it was read makes this fail, and the next pass decides
    /// again from what it is then.
    pub(in crate::controller) async fn protect_snapshot(
        &self,
        snapshot: &Snapshot,
    ) -> Result<SnapshotLookup, SyncError> {
        let action = "protect the VolumeSnapshot restored from";
        let finalizers = snapshot::protected_finalizers(snapshot);
        let written = match self.set_snapshot_finalizers(snapshot, finalizers, action).await {
            // As csi-provisioner: RBAC without patch on volumesnapshots (an older deploy/)
            // does not stop restores. Taken as protected for this pass, so that it moves on.
            Err(SyncError::Api { source, .. }) if is_status(&source, 403) => {
                warn!(error = %source, "restoring without the snapshot's restore protection: grant patch on volumesnapshots (deploy/rbac/rbac.yaml), or a restore whose claim and snapshot are both deleted while csi-pv-controller is down cannot be undone");
                let mut taken = snapshot.clone();
                taken.held = true;
                return Ok(SnapshotLookup::Found(Box::new(taken)));
            }
            other => other?,
        };
        match written {
            Some(updated) => {
                info!(snapshot = %format!("{}/{}", snapshot.namespace, snapshot.name), "snapshot protected until its restore is over");
                Ok(SnapshotLookup::Found(Box::new(updated)))
            }
            None => Ok(SnapshotLookup::Missing),
        }
    }

    /// `claim`'s restore is over: our protection of its snapshot goes unless another claim
    /// of the namespace still needs it (listed live: one just given an intent may not be in the
    /// store yet). Best effort: what fails here, the sweep takes off later.
    pub(in crate::controller) async fn release_snapshot(
        &self,
        claim: &PersistentVolumeClaim,
        lookup: Option<&SnapshotLookup>,
    ) {
        let Some(SnapshotLookup::Found(snapshot)) = lookup else {
            return;
        };
        if !snapshot.held {
            return;
        }
        let claims = match self
            .cluster
            .claims
            .list(claim.namespace().as_deref(), &ListParams::default())
            .await
        {
            Ok(claims) => claims,
            Err(e) => {
                warn!(error = %e, "cannot list the claims that may restore the snapshot; the sweep takes its protection off later");
                return;
            }
        };
        let finished = claim.metadata.uid.as_deref();
        if snapshot::may_release(snapshot, &claims, finished, |c| self.journaled(c)) {
            self.unprotect(snapshot).await;
        }
    }

    /// Takes our finalizer off the snapshot, read again first: snapshot-controller writes its
    /// own finalizers meanwhile, and a write on an older version would only meet a conflict.
    async fn unprotect(&self, snapshot: &Snapshot) {
        let name = format!("{}/{}", snapshot.namespace, snapshot.name);
        let action = "take the restore protection off the VolumeSnapshot";
        for _ in 0..3 {
            let live = match self.snapshots(&snapshot.namespace).get_opt(&snapshot.name).await {
                Ok(Some(live)) => parsed_snapshot(&live),
                Ok(None) => return,
                Err(e) => {
                    warn!(snapshot = %name, error = %e, "restore protection left for the next sweep");
                    return;
                }
            };
            if !live.held {
                return;
            }
            let finalizers = snapshot::released_finalizers(&live);
            match self.set_snapshot_finalizers(&live, finalizers, action).await {
                Ok(_) => {
                    info!(snapshot = %name, "no claim needs the snapshot: restore protection removed");
                    return;
                }
                Err(SyncError::Api { source, .. }) if is_status(&source, 409) => continue,
                Err(e) => {
                    warn!(snapshot = %name, error = %e, "restore protection left for the next sweep");
                    return;
                }
            }
        }
        warn!(snapshot = %name, "the snapshot kept changing; restore protection left for the next sweep");
    }

    /// Every VolumeSnapshot with our protection that no claim needs any more (a crash between
    /// the protection and the intent, or after the intent went): the protection goes. Claims
    /// from the store; a cluster without the snapshot API has nothing to sweep.
    pub async fn sweep_restore_protection(&self) {
        let all: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &snapshot_resource("VolumeSnapshot", "volumesnapshots"),
        );
        let listed = match all.list(&ListParams::default()).await {
            Ok(listed) => listed,
            Err(e) if is_status(&e, 404) => return,
            Err(e) => {
                warn!(error = %e, "cannot list VolumeSnapshots to sweep the restore protection; trying at the next sweep");
                return;
            }
        };
        let held = self.stores.claims.held_state();
        for found in listed {
            let parsed = parsed_snapshot(&found);
            if !parsed.held {
                continue;
            }
            let claims: Vec<_> = held
                .iter()
                .filter(|c| c.namespace.as_deref() == Some(parsed.namespace.as_str()))
                .filter_map(|c| c.open())
                .collect();
            let claims = claims.iter().map(|c| &**c);
            if snapshot::may_release(&parsed, claims, None, |c| self.journaled(c)) {
                self.unprotect(&parsed).await;
            }
        }
    }
}
