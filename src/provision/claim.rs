//! What to do next for one claim, decided from the claim, its class and the PV named after it.
//!
//! The life of a dynamically provisioned claim, and the action at each stage:
//!
//! | claim | PV named after it | action |
//! |---|---|---|
//! | ours, no intent finalizer, inputs valid | — | `RecordIntent` (finalizer + provisioner annotations) |
//! | intent, not deleting | absent | `Provision` (CreateVolume, record the PV, bind) |
//! | intent or unbound | bound to this claim | `Bind` (claim side of the binding, drops the intent) |
//! | intent, deleting or bound elsewhere | absent | `Abandon` (make sure no volume is left behind) |
//! | intent, deleting | bound to this claim | `DropIntent` (the PV's reclaim takes over) |
//!
//! Beside kube-controller-manager's binder (`binds` false) a claim is ours to provision only
//! once that binder has handed it to the driver (`volume.kubernetes.io/storage-provisioner`),
//! which it does only when no existing PV matches. The binder binds the PV we made pre-bound to
//! the claim, and `Bind` only drops our intent, once the claim is Bound (not while the binder is
//! writing the claim, which would make its writes conflict).

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;

use super::plan::PlanFacts;
use super::plan::{self, Features, Plan, PlanError, Settings};
use super::source::{self, Source};
use super::volume::claim_ref_uid;
use crate::names::*;

/// What the stores say about a claim's surroundings.
#[derive(Debug, Clone, Copy)]
pub struct ClaimContext<'a> {
    pub settings: &'a Settings,
    pub features: Features,
    /// The claim's StorageClass, if it exists.
    pub class: Option<&'a StorageClass>,
    /// The PV whose name is this claim's volume name, if it exists.
    pub volume: Option<&'a PersistentVolume>,
    /// The data source's claim and PV (a clone) or snapshot (a restore), the attributes class.
    pub facts: PlanFacts<'a>,
    /// This process binds (`--binder` driver or all); false beside kube-controller-manager's.
    pub binds: bool,
    /// The claim's intent is in the intent journal (`--intent-journal`) rather than a finalizer.
    pub journaled: bool,
}

#[derive(Debug, Clone)]
pub enum ClaimAction {
    /// Not this driver's claim, or nothing to do now.
    None,
    /// WaitForFirstConsumer: nothing until the scheduler picks a node.
    WaitForConsumer,
    /// A data source for an external populator; provisioning is left to it.
    Populator {
        group: String,
        kind: String,
        name: String,
    },
    /// The claim clones another claim, which must carry the cloning-protection finalizer
    /// before any CreateVolume copies it (namespace, name).
    ProtectSource { namespace: String, name: String },
    /// Cannot be provisioned as asked: warn, create nothing, keep the claim Pending.
    Reject(PlanError),
    /// Ours, and valid: make the intent durable before any CreateVolume (once the plan's
    /// secret is known to exist: a claim that cannot be provisioned gets no intent).
    RecordIntent(Box<Plan>),
    /// Create the volume (again, idempotently), record it in a PV and bind.
    Provision(Box<Plan>),
    /// The PV exists and points at the claim: finish the claim side of the binding (beside
    /// kube-controller-manager's binder: only drop the intent; it binds).
    Bind { volume: String },
    /// The intent is settled (the volume is recorded in a PV).
    DropIntent,
    /// The claim no longer wants the volume its intent may have created: find out (CreateVolume
    /// is idempotent and returns it) and delete it, or record it when the class retains volumes.
    Abandon(Box<Plan>),
    /// As Abandon, but the request cannot be rebuilt; the user must fix the input.
    CannotAbandon(PlanError),
}

impl ClaimAction {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            ClaimAction::None => "none",
            ClaimAction::WaitForConsumer => "wait-for-consumer",
            ClaimAction::Populator { .. } => "populator",
            ClaimAction::ProtectSource { .. } => "protect-source",
            ClaimAction::Reject(_) => "reject",
            ClaimAction::RecordIntent(_) => "record-intent",
            ClaimAction::Provision(_) => "provision",
            ClaimAction::Bind { .. } => "bind",
            ClaimAction::DropIntent => "drop-intent",
            ClaimAction::Abandon(_) => "abandon",
            ClaimAction::CannotAbandon(_) => "cannot-abandon",
        }
    }
}

/// The claim carries our provisioning intent: a volume for it may exist in the driver.
pub fn has_intent(claim: &PersistentVolumeClaim) -> bool {
    claim
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == FINALIZER_PROVISIONING))
}

/// Decides the next step for `claim`.
pub fn decide(claim: &PersistentVolumeClaim, ctx: &ClaimContext<'_>) -> ClaimAction {
    let finalizer = has_intent(claim);
    let has_intent = finalizer || ctx.journaled;
    let deleting = claim.metadata.deletion_timestamp.is_some();
    let volume_name = plan::volume_name_for(claim, ctx.settings);
    let bound_to = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty());
    let claim_uid = claim.metadata.uid.as_deref().unwrap_or_default();
    if !is_ours(claim, ctx) {
        return ClaimAction::None;
    }
    let our_pv = ctx.volume.filter(|pv| {
        pv.metadata.name.as_deref() == Some(volume_name.as_str())
            && pv
                .spec
                .as_ref()
                .and_then(|s| s.csi.as_ref())
                .map(|c| c.driver.as_str())
                == Some(ctx.settings.driver.as_str())
            && pv.metadata.deletion_timestamp.is_none()
            && claim_ref_uid(pv) == Some(claim_uid)
    });

    if !has_intent {
        if deleting {
            return ClaimAction::None;
        }
        return match (bound_to, our_pv) {
            // Bound by kube-controller-manager's binder, or not yet: either way not ours to do.
            (_, Some(_)) if !ctx.binds => ClaimAction::None,
            (None, None) if !ctx.binds && !handed_over(claim, &ctx.settings.driver) => {
                ClaimAction::None
            }
            // A PV of ours points at the claim (recorded by a run that stopped before binding).
            (None, Some(_)) => ClaimAction::Bind {
                volume: volume_name,
            },
            (Some(b), Some(_)) if b == volume_name && !claim_bound(claim) => ClaimAction::Bind {
                volume: volume_name,
            },
            (Some(_), _) => ClaimAction::None,
            (None, None) => decide_new(claim, ctx),
        };
    }

    // The intent exists: a volume may exist in the driver.
    if our_pv.is_some() {
        return if deleting || bound_to.is_some_and(|b| b != volume_name) {
            ClaimAction::DropIntent
        } else if !ctx.binds && !finalizer {
            // A journal entry goes at once: no claim write to conflict with the binder's.
            ClaimAction::DropIntent
        } else if !ctx.binds && !claim_bound(claim) {
            // The cluster's binder is binding it; our claim write then would conflict with
            // its own. The intent goes once the claim is Bound.
            ClaimAction::None
        } else {
            ClaimAction::Bind {
                volume: volume_name,
            }
        };
    }
    let abandoned = deleting || bound_to.is_some_and(|b| b != volume_name);
    // The scheduler took its node choice back: wait for the next one rather than create a
    // volume with no placement.
    let delayed = ctx
        .class
        .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"));
    if !abandoned && delayed && selected_node(claim).is_none() {
        return ClaimAction::WaitForConsumer;
    }
    // The intent is there: a copy of a clone source may be under way.
    let facts = PlanFacts {
        in_flight: true,
        ..ctx.facts
    };
    let built = ctx
        .class
        .ok_or_else(|| missing_class(claim))
        .and_then(|class| plan::build(claim, class, ctx.settings, ctx.features, facts));
    // A CreateVolume may copy the source claim: it must not go before the copy is made.
    if built.is_ok()
        && let Some(unprotected) = source::unprotected_clone_source(&facts)
    {
        return ClaimAction::ProtectSource {
            namespace: unprotected.metadata.namespace.clone().unwrap_or_default(),
            name: unprotected.metadata.name.clone().unwrap_or_default(),
        };
    }
    match (abandoned, built) {
        (true, Ok(plan)) => ClaimAction::Abandon(Box::new(plan)),
        (true, Err(e)) => ClaimAction::CannotAbandon(e),
        (false, Ok(plan)) => ClaimAction::Provision(Box::new(plan)),
        (false, Err(e)) => ClaimAction::Reject(e),
    }
}

/// The claim belongs to this driver: its class names the driver, or, with the class gone, the
/// provisioner annotation does. Other drivers' claims are never touched, intent or not.
fn is_ours(claim: &PersistentVolumeClaim, ctx: &ClaimContext<'_>) -> bool {
    match ctx.class {
        Some(class) => class.provisioner == ctx.settings.driver,
        None => handed_over(claim, &ctx.settings.driver),
    }
}

/// The claim's provisioner annotation (GA or beta) names `driver`: a binder found no PV for it
/// and handed it to the driver.
pub fn handed_over(claim: &PersistentVolumeClaim, driver: &str) -> bool {
    annotation(&claim.metadata, ANN_STORAGE_PROVISIONER)
        .or_else(|| annotation(&claim.metadata, ANN_BETA_STORAGE_PROVISIONER))
        == Some(driver)
}

/// What a claim pass does beside kube-controller-manager's binder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handover {
    /// Nothing: the binder has not handed the claim to us, or is binding it.
    None,
    /// Handed to our driver, or carrying our intent: provisioning decides the rest.
    Provision,
    /// Bound: its size may need to grow.
    Expand,
}

/// The claim pass beside kube-controller-manager's binder. `journaled`: its intent is in the
/// intent journal.
pub fn handover(claim: &PersistentVolumeClaim, driver: &str, journaled: bool) -> Handover {
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty());
    if has_intent(claim) || journaled {
        Handover::Provision
    } else if volume.is_some() {
        if claim_bound(claim) {
            Handover::Expand
        } else {
            Handover::None
        }
    } else if handed_over(claim, driver) {
        Handover::Provision
    } else {
        Handover::None
    }
}

/// An unbound claim of the driver's class that no binder has handed over within `grace` of its
/// creation (`age`): with `--binder=external` that is the cluster's binder missing, as the binder
/// hands a claim over at once when no PV matches. WaitForFirstConsumer claims wait for the
/// scheduler first, and are not counted until it chose a node.
pub fn awaits_handover(
    claim: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    driver: &str,
    age: std::time::Duration,
    grace: std::time::Duration,
) -> bool {
    let Some(class) = class.filter(|c| c.provisioner == driver) else {
        return false;
    };
    let unbound = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_none_or(str::is_empty);
    let waits_for_node = class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
        && selected_node(claim).is_none();
    age >= grace
        && unbound
        && !waits_for_node
        && !handed_over(claim, driver)
        && !has_intent(claim)
        && claim.metadata.deletion_timestamp.is_none()
}

/// What a claim that `awaits_handover` is told.
pub fn handover_missing_note(driver: &str, age: std::time::Duration) -> String {
    format!(
        "no PersistentVolume binder has handed this claim to {driver} in {}s: kube-controller-manager's persistentvolume-binder-controller does so at once when no PersistentVolume matches (annotation volume.kubernetes.io/storage-provisioner). If this cluster runs without that controller, start csi-pv-controller with --binder=driver or --bind-all",
        age.as_secs()
    )
}

/// A claim of ours without intent: can it be provisioned?
fn decide_new(claim: &PersistentVolumeClaim, ctx: &ClaimContext<'_>) -> ClaimAction {
    let Some(class) = ctx.class else {
        return if plan::class_name(claim).is_some_and(|c| !c.is_empty()) {
            ClaimAction::Reject(missing_class(claim))
        } else {
            ClaimAction::None
        };
    };
    if class.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
        && selected_node(claim).is_none()
    {
        return ClaimAction::WaitForConsumer;
    }
    if let Source::Populator { group, kind, name } = source::of(claim) {
        return ClaimAction::Populator { group, kind, name };
    }
    match plan::build(claim, class, ctx.settings, ctx.features, ctx.facts) {
        Ok(plan) => ClaimAction::RecordIntent(Box::new(plan)),
        Err(e) => ClaimAction::Reject(e),
    }
}

fn missing_class(claim: &PersistentVolumeClaim) -> PlanError {
    PlanError::MissingClass(plan::class_name(claim).unwrap_or_default().to_string())
}

/// The node the scheduler picked for a WaitForFirstConsumer claim.
pub fn selected_node(claim: &PersistentVolumeClaim) -> Option<&str> {
    annotation(&claim.metadata, ANN_SELECTED_NODE)
        .or_else(|| annotation(&claim.metadata, ANN_ALPHA_SELECTED_NODE))
        .filter(|n| !n.is_empty())
}

/// Both halves of the claim side of a binding are written.
pub fn claim_bound(claim: &PersistentVolumeClaim) -> bool {
    annotation(&claim.metadata, ANN_BIND_COMPLETED).is_some()
        && claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(PHASE_BOUND)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const DRIVER: &str = "d.csi";
    const UID: &str = "11111111-2222-3333-4444-555555555555";

    fn settings() -> Settings {
        Settings {
            driver: DRIVER.into(),
            volume_name_prefix: "pvc".into(),
            volume_name_uuid_length: None,
            default_fs_type: None,
            extra_create_metadata: false,
            controller_publish_readonly: false,
            identity: "id".into(),
            prevent_volume_mode_conversion: true,
            topology: Default::default(),
            extra_modify_metadata: false,
        }
    }

    fn class(provisioner: &str, extra: Value) -> StorageClass {
        let mut v = json!({"metadata": {"name": "gold"}, "provisioner": provisioner});
        crate::provision::plan::tests::merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn claim(extra: Value) -> PersistentVolumeClaim {
        let mut v = json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": UID, "resourceVersion": "1"},
            "spec": {"storageClassName": "gold", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}
        });
        crate::provision::plan::tests::merge(&mut v, extra);
        serde_json::from_value(v).unwrap()
    }

    fn pv(driver: &str, claim_uid: &str) -> PersistentVolume {
        serde_json::from_value(json!({
            "metadata": {"name": format!("pvc-{UID}")},
            "spec": {"csi": {"driver": driver, "volumeHandle": "h"},
                     "claimRef": {"name": "c", "namespace": "ns", "uid": claim_uid}}
        }))
        .unwrap()
    }

    const INTENT: &str = FINALIZER_PROVISIONING;

    /// (case, claim patch, class, PV named after the claim, expected action)
    type Row<'a> = (
        &'static str,
        Value,
        Option<&'a StorageClass>,
        Option<&'a PersistentVolume>,
        &'static str,
    );

    /// Runs a decision table; `binds`: whether this process binds.
    fn check(s: &Settings, table: Vec<Row<'_>>, binds: bool) {
        check_with(s, table, binds, false)
    }

    /// As `check`; `journaled`: the claim's intent is in the intent journal.
    fn check_with(s: &Settings, table: Vec<Row<'_>>, binds: bool, journaled: bool) {
        for (case, patch, class, volume, want) in table {
            let c = claim(patch);
            let ctx = ClaimContext {
                settings: s,
                features: Features::default(),
                class,
                volume,
                facts: PlanFacts::default(),
                binds,
                journaled,
            };
            assert_eq!(decide(&c, &ctx).name(), want, "{case}");
        }
    }

    #[test]
    fn decision_table() {
        let s = settings();
        let ours = class(DRIVER, json!({}));
        let theirs = class("other.csi", json!({}));
        let wffc = class(DRIVER, json!({"volumeBindingMode": "WaitForFirstConsumer"}));
        let bad = class(
            DRIVER,
            json!({"parameters": {"csi.storage.k8s.io/nope": "x"}}),
        );
        let our_pv = pv(DRIVER, UID);
        let their_pv = pv("other.csi", UID);
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let with_intent = json!({"metadata": {"finalizers": [INTENT]}});
        let gone_deleting = json!({"metadata": {"finalizers": [INTENT], "deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let intent_deleting = json!({"metadata": {"finalizers": [INTENT], "deletionTimestamp": "2026-01-01T00:00:00Z"}});
        let node = json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}});
        let annotated = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let annotated_intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let elsewhere =
            json!({"metadata": {"finalizers": [INTENT]}, "spec": {"volumeName": "static-1"}});
        let populated =
            json!({"spec": {"dataSourceRef": {"apiGroup": "x.io", "kind": "Thing", "name": "t"}}});

        let table: Vec<Row<'_>> = vec![
            (
                "other driver's class",
                json!({}),
                Some(&theirs),
                None,
                "none",
            ),
            (
                "other driver's class, even with an intent",
                with_intent.clone(),
                Some(&theirs),
                None,
                "none",
            ),
            (
                "new claim of ours",
                json!({}),
                Some(&ours),
                None,
                "record-intent",
            ),
            (
                "deleting before any intent",
                deleting.clone(),
                Some(&ours),
                None,
                "none",
            ),
            (
                "pre-bound by the user",
                json!({"spec": {"volumeName": "pv-x"}}),
                Some(&ours),
                None,
                "none",
            ),
            (
                "WFFC without a node",
                json!({}),
                Some(&wffc),
                None,
                "wait-for-consumer",
            ),
            (
                "WFFC with a node",
                node.clone(),
                Some(&wffc),
                None,
                "record-intent",
            ),
            ("bad class", json!({}), Some(&bad), None, "reject"),
            (
                "populator source",
                populated,
                Some(&ours),
                None,
                "populator",
            ),
            ("class gone, no annotation", json!({}), None, None, "none"),
            (
                "class gone, annotated ours",
                annotated,
                None,
                None,
                "reject",
            ),
            (
                "intent, no PV",
                with_intent.clone(),
                Some(&ours),
                None,
                "provision",
            ),
            (
                "intent, PV recorded",
                with_intent.clone(),
                Some(&ours),
                Some(&our_pv),
                "bind",
            ),
            (
                "intent, PV of another driver with our name",
                with_intent.clone(),
                Some(&ours),
                Some(&their_pv),
                "provision",
            ),
            (
                "no intent, PV recorded (crash before binding)",
                json!({}),
                Some(&ours),
                Some(&our_pv),
                "bind",
            ),
            (
                "intent, deleting, no PV",
                intent_deleting.clone(),
                Some(&ours),
                None,
                "abandon",
            ),
            (
                "intent, deleting, PV recorded",
                intent_deleting,
                Some(&ours),
                Some(&our_pv),
                "drop-intent",
            ),
            (
                "intent, bound elsewhere",
                elsewhere,
                Some(&ours),
                None,
                "abandon",
            ),
            ("intent, class gone", annotated_intent, None, None, "reject"),
            (
                "intent, deleting, class gone",
                gone_deleting,
                None,
                None,
                "cannot-abandon",
            ),
            (
                "intent, class now bad",
                with_intent,
                Some(&bad),
                None,
                "reject",
            ),
        ];
        check(&s, table, true);
    }

    /// Beside kube-controller-manager's binder: nothing before its hand-over, no claim-side
    /// bind writes, and the intent still guards every CreateVolume.
    #[test]
    fn decision_table_beside_the_cluster_binder() {
        let s = settings();
        let ours = class(DRIVER, json!({}));
        let our_pv = pv(DRIVER, UID);
        let handed = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let beta = json!({"metadata": {"annotations": {ANN_BETA_STORAGE_PROVISIONER: DRIVER}}});
        let other = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: "x.csi"}}});
        let handed_intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let bound_intent = json!({"metadata": {"finalizers": [INTENT], "annotations": {ANN_STORAGE_PROVISIONER: DRIVER, ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": format!("pvc-{UID}")}, "status": {"phase": "Bound"}});
        let deleting_intent = json!({"metadata": {"finalizers": [INTENT], "deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let bound_by_binder = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER, ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": format!("pvc-{UID}")}, "status": {"phase": "Bound"}});
        let table: Vec<Row<'_>> = vec![
            ("not handed over yet", json!({}), Some(&ours), None, "none"),
            ("handed to another driver", other, Some(&ours), None, "none"),
            (
                "handed over",
                handed.clone(),
                Some(&ours),
                None,
                "record-intent",
            ),
            (
                "handed over (beta annotation)",
                beta,
                Some(&ours),
                None,
                "record-intent",
            ),
            (
                "intent",
                handed_intent.clone(),
                Some(&ours),
                None,
                "provision",
            ),
            (
                "intent, PV made: the binder binds",
                handed_intent.clone(),
                Some(&ours),
                Some(&our_pv),
                "none",
            ),
            (
                "intent, PV made, bound by the binder: drop the intent",
                bound_intent,
                Some(&ours),
                Some(&our_pv),
                "bind",
            ),
            (
                "intent, PV made, claim deleted",
                deleting_intent,
                Some(&ours),
                Some(&our_pv),
                "drop-intent",
            ),
            (
                "PV made, no intent: the binder's to bind",
                handed,
                Some(&ours),
                Some(&our_pv),
                "none",
            ),
            (
                "bound by the binder",
                bound_by_binder,
                Some(&ours),
                Some(&our_pv),
                "none",
            ),
        ];
        check(&s, table, false);
    }

    /// The intent in the journal (`--intent-journal`): the same guard before CreateVolume, and
    /// it goes as soon as the PV records the volume, with no claim write.
    #[test]
    fn decision_table_with_the_intent_journal() {
        let s = settings();
        let ours = class(DRIVER, json!({}));
        let our_pv = pv(DRIVER, UID);
        let handed = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let deleting = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let elsewhere = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}, "spec": {"volumeName": "static-1"}});
        let table: Vec<Row<'_>> = vec![
            ("journaled", handed.clone(), Some(&ours), None, "provision"),
            (
                "journaled, PV made: dropped at once",
                handed,
                Some(&ours),
                Some(&our_pv),
                "drop-intent",
            ),
            (
                "journaled, claim deleted (or gone: its copy)",
                deleting.clone(),
                Some(&ours),
                None,
                "abandon",
            ),
            (
                "journaled, claim deleted, PV made",
                deleting.clone(),
                Some(&ours),
                Some(&our_pv),
                "drop-intent",
            ),
            (
                "journaled, claim deleted, class gone",
                deleting,
                None,
                None,
                "cannot-abandon",
            ),
            (
                "journaled, bound to another PV",
                elsewhere,
                Some(&ours),
                None,
                "abandon",
            ),
        ];
        check_with(&s, table, false, true);
    }

    #[test]
    fn a_claim_no_binder_handed_over_is_noticed_after_the_grace() {
        use std::time::Duration;
        let ours = class(DRIVER, json!({}));
        let theirs = class("other.csi", json!({}));
        let wffc = class(DRIVER, json!({"volumeBindingMode": "WaitForFirstConsumer"}));
        let old = Duration::from_secs(120);
        let young = Duration::from_secs(5);
        let grace = Duration::from_secs(60);
        let handed = json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}});
        let node = json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}});
        let table = [
            ("unbound, old, ours", json!({}), &ours, old, true),
            ("young", json!({}), &ours, young, false),
            ("handed over", handed, &ours, old, false),
            ("another provisioner's", json!({}), &theirs, old, false),
            (
                "bound",
                json!({"spec": {"volumeName": "v"}}),
                &ours,
                old,
                false,
            ),
            (
                "WaitForFirstConsumer, no node yet",
                json!({}),
                &wffc,
                old,
                false,
            ),
            ("WaitForFirstConsumer, node chosen", node, &wffc, old, true),
            (
                "carrying our intent",
                json!({"metadata": {"finalizers": [INTENT]}}),
                &ours,
                old,
                false,
            ),
        ];
        for (case, patch, class, age, want) in table {
            assert_eq!(
                awaits_handover(&claim(patch), Some(class), DRIVER, age, grace),
                want,
                "{case}"
            );
        }
        assert!(handover_missing_note(DRIVER, old).contains("--binder=driver"));
    }

    #[test]
    fn the_pass_beside_the_cluster_binder() {
        let table = [
            ("no annotation", json!({}), Handover::None),
            (
                "handed over",
                json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}}),
                Handover::Provision,
            ),
            (
                "another driver's",
                json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: "x"}}}),
                Handover::None,
            ),
            (
                "intent",
                json!({"metadata": {"finalizers": [INTENT]}}),
                Handover::Provision,
            ),
            (
                "binder half-way: volumeName without bind-completed",
                json!({"metadata": {"annotations": {ANN_STORAGE_PROVISIONER: DRIVER}}, "spec": {"volumeName": "v"}}),
                Handover::None,
            ),
            (
                "bound",
                json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": "v"}, "status": {"phase": "Bound"}}),
                Handover::Expand,
            ),
        ];
        for (case, patch, want) in table {
            assert_eq!(handover(&claim(patch), DRIVER, false), want, "{case}");
        }
        // A journaled intent is ours to finish, whatever the binder did meanwhile.
        for patch in [json!({}), json!({"spec": {"volumeName": "v"}})] {
            assert_eq!(handover(&claim(patch), DRIVER, true), Handover::Provision);
        }
    }

    #[test]
    fn a_claim_is_bound_only_with_both_halves() {
        assert!(!claim_bound(&claim(json!({}))));
        assert!(!claim_bound(&claim(
            json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}})
        )));
        assert!(claim_bound(&claim(json!({
            "metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}},
            "status": {"phase": "Bound"}
        }))));
    }

    #[test]
    fn a_clone_protects_its_source_after_the_intent_and_before_create_volume() {
        let s = settings();
        let ours = class(DRIVER, json!({}));
        let source = |finalizers: Value, deleting: bool| -> PersistentVolumeClaim {
            let mut v = json!({
                "metadata": {"name": "src", "namespace": "ns", "uid": "src-uid",
                             "finalizers": finalizers},
                "spec": {"volumeName": "pv-src", "resources": {"requests": {"storage": "1Gi"}}},
                "status": {"phase": "Bound"}
            });
            if deleting {
                v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            }
            serde_json::from_value(v).unwrap()
        };
        let source_pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv-src"},
            "spec": {"csi": {"driver": DRIVER, "volumeHandle": "h-src"},
                     "claimRef": {"uid": "src-uid"}}
        }))
        .unwrap();
        let bare = source(json!([]), false);
        let protected = source(json!([FINALIZER_CLONING_PROTECTION]), false);
        let bare_deleting = source(json!([]), true);
        let protected_deleting = source(json!([FINALIZER_CLONING_PROTECTION]), true);
        let clone =
            json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}});
        let mut with_intent = clone.clone();
        with_intent["metadata"] = json!({"finalizers": [FINALIZER_PROVISIONING]});
        let mut abandoned = with_intent.clone();
        abandoned["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let table: [(&str, &Value, &PersistentVolumeClaim, &str); 8] = [
            (
                "no intent yet: the intent first",
                &clone,
                &bare,
                "record-intent",
            ),
            ("intent, source bare", &with_intent, &bare, "protect-source"),
            (
                "intent, source protected",
                &with_intent,
                &protected,
                "provision",
            ),
            (
                "intent, source going",
                &with_intent,
                &bare_deleting,
                "reject",
            ),
            (
                "intent, source protected and going",
                &with_intent,
                &protected_deleting,
                "provision",
            ),
            (
                "given up, source protected and going",
                &abandoned,
                &protected_deleting,
                "abandon",
            ),
            ("given up, source bare", &abandoned, &bare, "protect-source"),
            (
                "given up, source gone unprotected",
                &abandoned,
                &bare_deleting,
                "cannot-abandon",
            ),
        ];
        for (case, patch, src, want) in table {
            let c = claim(patch.clone());
            let ctx = ClaimContext {
                settings: &s,
                features: Features {
                    clone: true,
                    ..Features::default()
                },
                class: Some(&ours),
                volume: None,
                facts: PlanFacts {
                    claim: Some(src),
                    volume: Some(&source_pv),
                    ..PlanFacts::default()
                },
                binds: true,
                journaled: false,
            };
            assert_eq!(decide(&c, &ctx).name(), want, "{case}");
        }
    }
}
