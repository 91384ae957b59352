//! Moving back to csi-provisioner: which of our provisioning finalizers may go. Ours is the only
//! mark we leave that upstream does not know (the PV finalizer is upstream's own); a claim left
//! with it would hang in Terminating once nothing removes it.
//!
//! The finalizer promises that a volume CreateVolume may have made is never left behind. It may
//! go when a PV records the volume, or when the claim lives on: csi-provisioner provisions it
//! with the same volume name (`<prefix>-<claim UID>`), and CreateVolume is idempotent by name,
//! so it finds any volume made already. A claim already being deleted with no PV is the one case
//! where dropping the mark could leave a volume nobody deletes: it is kept and reported, unless
//! the operator, having checked the driver, says `--force`.

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use crate::model::names::FINALIZER_PROVISIONING;
use crate::model::{ClaimExt, VolumeExt};

/// What to do with one claim's finalizer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Remove it; why that is safe.
    Remove(String),
    /// Keep it; what the operator must check first.
    Keep(String),
}

/// None when the claim has no finalizer of ours. `volumes`: every PV; `volume_name`: the name
/// CreateVolume was (or would be) called with for this claim.
pub fn judge(
    claim: &PersistentVolumeClaim,
    volumes: &[PersistentVolume],
    volume_name: &str,
    force: bool,
) -> Option<Verdict> {
    let ours = claim.metadata.finalizers.iter().flatten().any(|f| f == FINALIZER_PROVISIONING);
    if !ours {
        return None;
    }
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    let named = claim.volume_name();
    let recorded = volumes.iter().find(|pv| {
        let claim_ref = pv.claim_ref();
        pv.metadata.name.as_deref() == named && named.is_some()
            || claim_ref.and_then(|r| r.uid.as_deref()) == Some(uid) && !uid.is_empty()
    });
    if let Some(pv) = recorded {
        let name = pv.metadata.name.as_deref().unwrap_or_default();
        return Some(Verdict::Remove(format!("its volume is recorded in PersistentVolume {name}")));
    }
    if claim.metadata.deletion_timestamp.is_none() {
        return Some(Verdict::Remove(format!(
            "no PersistentVolume yet: csi-provisioner provisions it as {volume_name}, and CreateVolume finds a volume made already under that name"
        )));
    }
    let check = format!(
        "being deleted, and no PersistentVolume records its volume: a CreateVolume may have made {volume_name} in the driver, and nothing would delete it"
    );
    Some(match force {
        true => Verdict::Remove(format!("{check} (--force)")),
        false => Verdict::Keep(format!(
            "{check}; delete it in the driver if it exists, then run again with --force"
        )),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn claim(finalizer: bool, volume: Option<&str>, deleting: bool) -> PersistentVolumeClaim {
        let mut c = fixtures::pvc("c").uid("u-1").with(json!({"spec": {"volumeName": volume}}));
        if finalizer {
            c = c.finalizers(&["kubernetes.io/pvc-protection", FINALIZER_PROVISIONING]);
        }
        if deleting {
            c = c.deleting();
        }
        c.build()
    }

    fn pv(name: &str, claim_uid: Option<&str>) -> PersistentVolume {
        fixtures::pv(name).claim_ref_if(claim_uid).build()
    }

    #[test]
    fn table() {
        let pvs = [pv("pv-a", Some("u-1")), pv("pv-other", Some("u-2"))];
        let none: [PersistentVolume; 0] = [];
        let kind = |v: Option<Verdict>| match v {
            None => "leave",
            Some(Verdict::Remove(_)) => "remove",
            Some(Verdict::Keep(_)) => "keep",
        };
        // (case, has our finalizer / names a PV / is deleting, PVs, --force, verdict)
        let table: [(&str, PersistentVolumeClaim, &[PersistentVolume], bool, &str); 7] = [
            ("not ours", claim(false, None, true), &pvs, false, "leave"),
            ("bound", claim(true, Some("pv-a"), false), &pvs, false, "remove"),
            ("a PV names its UID", claim(true, None, true), &pvs, false, "remove"),
            ("alive: upstream goes on", claim(true, None, false), &none, false, "remove"),
            ("deleting, nothing recorded", claim(true, None, true), &none, false, "keep"),
            ("its PV is gone", claim(true, Some("pv-gone"), true), &none, false, "keep"),
            ("--force", claim(true, None, true), &none, true, "remove"),
        ];
        for (case, c, volumes, force, verdict) in table {
            assert_eq!(kind(judge(&c, volumes, "pvc-u-1", force)), verdict, "{case}");
        }
        let Some(Verdict::Keep(why)) = judge(&claim(true, None, true), &none, "pvc-u-1", false)
        else {
            unreachable!()
        };
        assert!(why.contains("pvc-u-1") && why.contains("--force"), "{why}");
    }
}
