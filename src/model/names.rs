//! Names shared with Kubernetes and the upstream sidecars: annotations, finalizers, event
//! reasons. Upstream's names wherever the meaning is the same; ours only where upstream has none.

// Claim annotations.
pub const ANN_STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
pub const ANN_BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
pub const ANN_ALPHA_SELECTED_NODE: &str = "volume.alpha.kubernetes.io/selected-node";
pub const ANN_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";

// Volume annotations.
pub const ANN_PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
pub const ANN_DELETION_SECRET_NAME: &str = "volume.kubernetes.io/provisioner-deletion-secret-name";
pub const ANN_DELETION_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/provisioner-deletion-secret-namespace";
pub const ANN_MODIFY_SECRET_NAME: &str = "volume.kubernetes.io/controller-modify-secret-name";
pub const ANN_MODIFY_SECRET_NAMESPACE: &str =
    "volume.kubernetes.io/controller-modify-secret-namespace";
/// The claim's capacity before a resize the node has not finished; the binder uses it as the
/// claim's capacity when it binds the PV again.
pub const ANN_PRE_RESIZE_CAPACITY: &str = "volume.alpha.kubernetes.io/pre-resize-capacity";
/// On a claim: the controller finished the resize, the node has nothing to do.
pub const ANN_NODE_EXPANSION_NOT_REQUIRED: &str =
    "volume.kubernetes.io/node-expansion-not-required";
/// Key in `spec.csi.volumeAttributes`; informational, as upstream.
pub const ATTR_PROVISIONER_IDENTITY: &str = "storage.kubernetes.io/csiProvisionerIdentity";

/// On a PV of ours with reclaim policy Delete: the backend volume goes before the PV does.
pub const FINALIZER_VOLUME: &str = "external-provisioner.volume.kubernetes.io/finalizer";
/// Ours, on a claim: a volume for it may exist in the driver and is not yet recorded in a PV.
/// Written before the first CreateVolume and removed only once the volume is in a PV or known
/// not to exist, so that a crash at any instant leaves a trace to resume from (upstream keeps
/// this in memory and leaks volumes on restart: external-provisioner#486).
pub const FINALIZER_PROVISIONING: &str = "csi-pv-controller.storage.k8s.io/provisioning";
/// On the source claim of a clone while a CreateVolume that copies it may be under way, so that
/// the source cannot go before the copy is made; csi-provisioner's name, so that either can
/// take it off after a switch.
pub const FINALIZER_CLONING_PROTECTION: &str =
    "provisioner.storage.kubernetes.io/cloning-protection";
/// On a VolumeSnapshot a pending claim restores from (snapshot-controller's): a snapshot being
/// deleted still serves a restore while it holds.
pub const FINALIZER_SNAPSHOT_SOURCE_PROTECTION: &str =
    "snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection";
/// Ours on a VolumeSnapshot from before a CreateVolume restores it until no claim needs it, so
/// that a restore whose claim is deleted while we are down can still be undone: snapshot-
/// controller lets go of a deleted claim's snapshot at once. csi-provisioner's name (v6.2), so
/// that either can take it off after a switch.
pub const FINALIZER_RESTORE_PROTECTION: &str =
    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection";
/// On a VolumeSnapshotContent: `"true"` lets a restore change the volume mode.
pub const ANN_ALLOW_VOLUME_MODE_CHANGE: &str =
    "snapshot.storage.kubernetes.io/allow-volume-mode-change";

/// The value of annotation `key`, if the object has it.
pub fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// `finalizers` with `added` at the end, unless it is there already.
pub fn with_finalizer(finalizers: &[String], added: &str) -> Vec<String> {
    let mut all = finalizers.to_vec();
    if !all.iter().any(|f| f == added) {
        all.push(added.to_string());
    }
    all
}

/// `finalizers` without `removed`.
pub fn without_finalizer(finalizers: &[String], removed: &str) -> Vec<String> {
    finalizers.iter().filter(|f| *f != removed).cloned().collect()
}

/// The object carries `finalizer`.
pub fn has_finalizer(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    finalizer: &str,
) -> bool {
    meta.finalizers.as_ref().is_some_and(|f| f.iter().any(|f| f == finalizer))
}
