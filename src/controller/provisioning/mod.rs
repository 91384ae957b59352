//! The provisioning executor: carries out what `provision::claim` decides for a claim (the
//! intent, CreateVolume, the PV, the binding) and the undo of volumes whose claim went away.
//! Its parts: the intent (`intent`), the data sources and their protection (`sources`,
//! `restore_protection`), and the sweep of journaled intents whose claim is gone
//! (`journal_sweep`).

mod intent;
mod journal_sweep;
mod restore_protection;
mod sources;

use std::collections::HashMap;

use std::sync::Arc;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::ResourceExt;
use tracing::{info, warn};

use super::Part;
use super::drive::{Flow, InHand, Pass};
use super::error::is_status;
use super::{ClaimKey, Controller, Outcome, SyncError, reference};
use crate::cluster::objects::SecretError;
use crate::csi::{About, Operation, v1 as csi};
use crate::model::copy::ClaimCopy;
use crate::model::gate::Gated;
use crate::model::names::*;
use crate::model::reason::Reason;
use crate::model::{ClaimExt, VolumeExt};
use crate::provision::answer::{self, AfterCreate, Undo};
use crate::provision::claim::{self, ClaimAction, ClaimContext};
use crate::provision::inputs::{self, Newer};
use crate::provision::plan::Plan;
use crate::provision::secrets::SecretRef;
use crate::provision::snapshot::SnapshotLookup;
use crate::provision::source;
use crate::provision::topology::TopologyError;
use crate::provision::waiting::{Cause, Wait};

/// A provisioning pass over one claim: what it learnt in its earlier steps, newer than the
/// stores' copies.
struct ProvisionPass<'c> {
    controller: &'c Controller,
    key: &'c ClaimKey,
    /// The provisioner secret read before the intent, for the CreateVolume of the same pass.
    read: Option<(Option<SecretRef>, HashMap<String, String>)>,
    /// The clone source as this pass protected it.
    protected: Option<Arc<PersistentVolumeClaim>>,
    /// The restore's snapshot, read live.
    snapshot: Option<SnapshotLookup>,
    /// The PV this pass made: what follows is decided on it.
    made: Option<PersistentVolume>,
    made_here: bool,
}

impl Pass for ProvisionPass<'_> {
    type Step = ClaimAction;
    type Subject = InHand;
    /// Protect a source, record the intent, provision, then what the recorded volume calls
    /// for (bind, drop the intent).
    const STEPS: usize = 6;

    fn decide(&mut self, held: &InHand) -> Gated<ClaimAction> {
        let learnt = (self.protected.as_ref(), self.made.as_ref());
        self.controller.decide_claim(&held.claim, held.copy, learnt, self.snapshot.as_ref())
    }

    async fn confirm(&mut self, held: &InHand) -> Result<Option<InHand>, SyncError> {
        self.controller.confirm_claim(held).await
    }

    fn name(step: &ClaimAction) -> &'static str {
        step.name()
    }

    fn op(_: &ClaimAction) -> Option<&'static str> {
        Some("provision")
    }

    async fn act(&mut self, action: ClaimAction, held: &InHand) -> Result<Flow<InHand>, SyncError> {
        let (c, key) = (self.controller, self.key);
        let (claim, copy) = (&held.claim, held.copy);
        let end = |outcome| Ok(Flow::End(outcome));
        match action {
            ClaimAction::None => end(Outcome::Done),
            ClaimAction::WaitForConsumer => {
                let note = claim::CONSUMER_NOTE;
                c.tell_wait(claim, Wait::on(Cause::WaitForFirstConsumer, note)).await;
                end(Outcome::Done)
            }
            ClaimAction::Populator { group, kind, name } => {
                end(c.populator_source(key, claim, (&group, &kind, &name)).await)
            }
            ClaimAction::ProtectSource { namespace, name } => {
                self.protected = Some(c.protect_source(&namespace, &name).await?);
                Ok(Flow::Again)
            }
            ClaimAction::ProtectSnapshot(found) => {
                self.snapshot = Some(c.protect_snapshot(&found).await?);
                Ok(Flow::Again)
            }
            ClaimAction::ReleaseSnapshot => {
                c.release_snapshot(claim, self.snapshot.as_ref()).await;
                end(Outcome::Done)
            }
            ClaimAction::Reject(e) => {
                end(c.refused(key, claim, Cause::of_plan(&e), e.to_string(), false).await)
            }
            ClaimAction::RecordIntent(plan) => {
                // A missing secret is refused before the intent: nothing was created, so
                // nothing may hold the claim back when it is deleted.
                match c.provisioner_secrets(&plan).await {
                    Ok(secrets) => self.read = Some((plan.provisioner_secret.clone(), secrets)),
                    Err(e) => {
                        let cause = secret_cause(&e);
                        return end(c.refused(key, claim, cause, e.to_string(), false).await);
                    }
                }
                crate::runtime::crash_point::here(crate::runtime::crash_point::BEFORE_INTENT);
                // The finalizer's write answered with the live claim. A journaled intent wrote
                // nothing, and the cache's copy is as good: it shows the binder's hand-over,
                // moments old, and should the claim have been deleted or bound elsewhere
                // since, the intent that now outlives us makes `Abandon` take the volume back
                // (docs/provisioning.md §3.2). No read of the claim per volume.
                Ok(InHand::live(c.record_intent(claim).await?))
            }
            ClaimAction::Provision(plan) => {
                let known = self
                    .read
                    .take()
                    .filter(|(secret, _)| *secret == plan.provisioner_secret)
                    .map(|(_, secrets)| secrets);
                match c.provision(key, claim, &plan, known).await? {
                    Ok(pv) => {
                        (self.made, self.made_here) = (Some(pv), true);
                        Ok(Flow::Again)
                    }
                    Err(outcome) => end(outcome),
                }
            }
            ClaimAction::Abandon(plan) => {
                let outcome = c.abandon(key, claim, &plan, copy).await?;
                if outcome == Outcome::Done {
                    c.release_snapshot(claim, self.snapshot.as_ref()).await;
                }
                end(outcome)
            }
            ClaimAction::CannotAbandon(e) => {
                let note = format!(
                    "the claim no longer needs volume {}, but cannot check whether the driver made it: {e}. Fix that, or remove finalizer {FINALIZER_PROVISIONING} from the claim once the volume is known not to exist in the driver",
                    c.volume_name(claim)
                );
                end(c.failed(key, claim, Reason::ProvisioningCleanupFailed, note, false).await)
            }
            ClaimAction::Bind { volume, drop_intent } => {
                let pv = match self.made.take() {
                    Some(pv) => pv,
                    None => match c.live_volume_if_missing(&volume).await? {
                        Some(pv) => pv,
                        None => return end(Outcome::Done),
                    },
                };
                // Said when the PV was recorded, if this pass recorded it; beside the
                // cluster's binder, always then.
                let say = claim.has_intent() && c.scope.binder.binds() && !self.made_here;
                let bound = c.bind(claim, &pv).await?;
                if drop_intent {
                    c.drop_intent(&bound).await?;
                }
                c.clear_backoff(key);
                if say {
                    c.succeeded(claim, &volume).await;
                }
                c.release_snapshot(claim, self.snapshot.as_ref()).await;
                end(Outcome::Done)
            }
            ClaimAction::DropIntent => {
                c.drop_intent(claim).await?;
                c.clear_backoff(key);
                c.release_snapshot(claim, self.snapshot.as_ref()).await;
                end(Outcome::Done)
            }
        }
    }
}

impl Controller {
    /// Dynamic provisioning of a claim the binder found no PV for, or that carries our intent.
    pub(in crate::controller) async fn sync_provisioning(
        &self,
        key: &ClaimKey,
        claim: PersistentVolumeClaim,
    ) -> Result<Outcome, SyncError> {
        let snapshot = self.snapshot_facts(&claim).await?;
        let mut pass = ProvisionPass {
            controller: self,
            key,
            read: None,
            protected: None,
            snapshot,
            made: None,
            made_here: false,
        };
        self.drive(&mut pass, InHand { claim, copy: ClaimCopy::Cached }).await
    }

    /// Decides from the stores (`provision::inputs`, the lookup `explain` shares).
    /// `protected`: a clone source this pass protected, and `made`: the PV this pass made (each
    /// newer than the store's); `snapshot`: the restore's snapshot, read live.
    pub(super) fn decide_claim(
        &self,
        claim: &PersistentVolumeClaim,
        copy: ClaimCopy,
        (protected, made): (Option<&Arc<PersistentVolumeClaim>>, Option<&PersistentVolume>),
        snapshot: Option<&SnapshotLookup>,
    ) -> Gated<ClaimAction> {
        let binds = self.scope.binder.binds();
        let newer = Newer { source_claim: protected, volume: made };
        let found = inputs::look_up(claim, &self.settings, binds, newer, self);
        let hold = self.hold(claim);
        claim::decide(
            claim,
            &ClaimContext {
                settings: &self.settings,
                features: self.features,
                class: found.class.as_deref(),
                volume: found.volume.as_deref(),
                facts: found.plan_facts(snapshot),
                binds,
                journaled: self.journaled(claim),
                binder_takes_ours: found.binder_takes_ours,
                copy,
                hold: hold.as_ref(),
                now: Instant::now().into_std(),
            },
        )
    }

    /// CreateVolume and the PV that records its answer; what follows is decided again on that
    /// PV. A failed driver call waits for its backoff (Err: how the pass ends). `known`: the
    /// plan's provisioner secret, when this pass has read it already.
    async fn provision(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        plan: &Plan,
        known: Option<HashMap<String, String>>,
    ) -> Result<Result<PersistentVolume, Outcome>, SyncError> {
        let not_done = |outcome: Outcome| Ok(Err(outcome));
        let (mut request, secrets) = match self.with_secrets(plan, known).await {
            Ok(with_secrets) => with_secrets,
            Err(e) => {
                let cause = secret_cause(&e);
                return not_done(self.refused(key, claim, cause, e.to_string(), false).await);
            }
        };
        request.accessibility_requirements = match self.topology(claim, plan).await? {
            Ok(requirement) => requirement,
            Err(e) => {
                if matches!(e, TopologyError::NodeGone(_)) {
                    self.reschedule(claim).await?;
                }
                let note = e.to_string();
                return not_done(
                    self.refused(key, claim, Cause::of_topology(&e), note, false).await,
                );
            }
        };
        let class = plan.class.metadata.name.as_deref().unwrap_or_default();
        let source = source::of(claim);
        let source = source.kind();
        let started = tokio::time::Instant::now();
        crate::runtime::crash_point::here(crate::runtime::crash_point::BEFORE_CREATE);
        let about = About::migrated(plan.migrated.is_some());
        let created = self.csi.create_volume(request, about).await;
        if created.is_ok() {
            crate::runtime::crash_point::here(crate::runtime::crash_point::AFTER_CREATE);
        }
        if let Err(e) = &created {
            self.strand_claim(key, e);
        }
        let unreachable = created.as_ref().err().is_some_and(|e| e.unreachable());
        let failure = created.as_ref().map_err(|e| e.failure(Operation::Create));
        let can_reschedule = self.features.topology && claim::selected_node(claim).is_some();
        let pv = match answer::after_create(
            plan,
            failure.as_ref().copied(),
            can_reschedule,
            &self.settings.identity,
        ) {
            AfterCreate::Record(pv) => pv,
            AfterCreate::TakeBack { volume_id, note } => {
                // Unusable: take it back, so that the retry starts clean.
                let deleted = self.csi.delete_volume_if_present(&volume_id, secrets, about);
                if let Err(d) = deleted.await {
                    warn!(error = %d, "cannot delete the unusable volume yet");
                }
                let cause = Cause::DriverAnswerInvalid;
                return not_done(self.refused(key, claim, cause, note, false).await);
            }
            AfterCreate::Reschedule { note } => {
                self.reschedule(claim).await?;
                return not_done(self.refused(key, claim, Cause::NoCapacity, note, false).await);
            }
            AfterCreate::Fail { note, infeasible } => {
                let cause = match &failure {
                    Err(failure) => Cause::of_driver(failure, unreachable),
                    Ok(_) => Cause::DriverError,
                };
                return not_done(self.refused(key, claim, cause, note, infeasible).await);
            }
        };
        let pv = self.save_volume(&pv, claim).await?;
        crate::runtime::crash_point::here(crate::runtime::crash_point::AFTER_PV);
        self.index_volume(&pv);
        crate::metrics::metrics().provisioned(class, source, started.elapsed());
        self.intake.nudge.answers_changed();
        // Said once the PV records the volume, as upstream does, before the binding is written:
        // a claim is never Bound before its event is on its way.
        self.succeeded(claim, &plan.volume_name).await;
        self.clear_backoff(key);
        Ok(Ok(pv))
    }

    /// Removes `volume.kubernetes.io/selected-node`, so that the scheduler picks a node again.
    /// The intent stays: with no node the claim waits (nothing was created by this attempt).
    async fn reschedule(&self, claim: &PersistentVolumeClaim) -> Result<(), SyncError> {
        let patch = crate::provision::patches::unselect_node(claim);
        self.patch_claim(Part::Object, claim, patch, "remove the claim's selected node").await?;
        info!("selected node removed: the scheduler will choose again");
        Ok(())
    }

    /// The plan's CreateVolume request with the provisioner secret in it (`known`, when this
    /// pass has read it already), and the secret, for a DeleteVolume that may follow.
    async fn with_secrets(
        &self,
        plan: &Plan,
        known: Option<HashMap<String, String>>,
    ) -> Result<(csi::CreateVolumeRequest, HashMap<String, String>), SecretError> {
        let secrets = match known {
            Some(secrets) => secrets,
            None => self.provisioner_secrets(plan).await?,
        };
        let mut request = plan.request.clone();
        request.secrets = secrets.clone();
        Ok((request, secrets))
    }

    /// Creates the PV; one that exists already for this claim (an earlier attempt) is taken as is.
    pub(super) async fn save_volume(
        &self,
        pv: &PersistentVolume,
        claim: &PersistentVolumeClaim,
    ) -> Result<PersistentVolume, SyncError> {
        let volumes = &self.cluster.volumes;
        match volumes.create(pv).await {
            Ok(created) => Ok(created),
            Err(e) if is_status(&e, 409) => {
                let name = pv.name_any();
                let existing = volumes
                    .get(None, &name)
                    .await
                    .map_err(|e| SyncError::api("read the existing PersistentVolume", e))?
                    // Gone again since: the next pass creates it anew.
                    .ok_or_else(|| SyncError::Stale {
                        action: "read the existing PersistentVolume".into(),
                    })?;
                if existing.claim_ref_uid() == claim.metadata.uid.as_deref() {
                    Ok(existing)
                } else {
                    let note = format!(
                        "PersistentVolume {name} exists and belongs to another claim; the volume for this claim cannot be recorded"
                    );
                    self.events
                        .warning(&reference(claim), Reason::ProvisioningFailed, note.clone())
                        .await;
                    Err(SyncError::Inconsistent(note))
                }
            }
            Err(e) => Err(SyncError::api("create the PersistentVolume", e)),
        }
    }

    /// The claim no longer wants its volume: CreateVolume (idempotent) tells whether the volume
    /// exists and its id; then delete it, or record it when the class retains volumes.
    /// `copy`: `Gone` for a journal entry whose claim the API no longer has, which is undone
    /// as a deleted claim (a Retain class keeps its volume in a PV).
    pub(super) async fn abandon(
        &self,
        key: &ClaimKey,
        claim: &PersistentVolumeClaim,
        plan: &Plan,
        copy: ClaimCopy,
    ) -> Result<Outcome, SyncError> {
        // The PV may exist though the store has not shown it yet.
        if let Some(pv) = self
            .cluster
            .volumes
            .get(None, &plan.volume_name)
            .await
            .map_err(|e| SyncError::api("read the PersistentVolume", e))?
            && pv.claim_ref_uid() == claim.metadata.uid.as_deref()
        {
            self.drop_intent(claim).await?;
            return Ok(Outcome::Done);
        }
        let (mut request, secrets) = match self.with_secrets(plan, None).await {
            Ok(with_secrets) => with_secrets,
            Err(e) => {
                let reason = Reason::ProvisioningCleanupFailed;
                return Ok(self.failed(key, claim, reason, e.to_string(), false).await);
            }
        };
        // The same arguments as the CreateVolume being undone, as far as they can be rebuilt.
        request.accessibility_requirements = self.topology(claim, plan).await?.unwrap_or(None);
        let deleting = copy.deleting(claim);
        let about = About::migrated(plan.migrated.is_some());
        let probed = self.csi.create_volume(request, about).await;
        if let Err(e) = &probed {
            self.strand_claim(key, e);
        }
        let failure = probed.as_ref().map_err(|e| e.failure(Operation::Create));
        match answer::after_probe(
            plan,
            failure.as_ref().copied(),
            deleting,
            &self.settings.identity,
        ) {
            Undo::Keep(pv) => {
                self.save_volume(&pv, claim).await?;
            }
            Undo::Delete { volume_id } => {
                let deleted = self.csi.delete_volume_if_present(&volume_id, secrets, about);
                if let Err(e) = deleted.await {
                    self.strand_claim(key, &e);
                    let note = format!(
                        "cannot delete volume {volume_id} made for this claim, which no longer needs it: {e}"
                    );
                    return Ok(self
                        .failed(key, claim, Reason::ProvisioningCleanupFailed, note, false)
                        .await);
                }
                info!(volume = %volume_id, "deleted the volume of a claim that no longer needs it");
            }
            Undo::Unknown { note } => {
                return Ok(self
                    .failed(key, claim, Reason::ProvisioningCleanupFailed, note, false)
                    .await);
            }
            Undo::NothingMade => {}
        }
        self.drop_intent(claim).await?;
        Ok(Outcome::Done)
    }
}

/// The waiting cause of a secret that cannot be had: missing (the user must act) or unreadable
/// (the API's trouble, which may pass).
fn secret_cause(error: &SecretError) -> Cause {
    match error {
        SecretError::Missing { .. } => Cause::SecretMissing,
        SecretError::Unreadable { .. } => Cause::SecretUnreadable,
    }
}
