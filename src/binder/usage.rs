//! Which claim each PV served. A Delete-policy PV is deleted with its volume only for the claim
//! it served: one made for that claim, or one that claim named in `spec.volumeName`. A PV that
//! a claim's claimRef points at but that the claim never used (two binders each gave the claim
//! a PV in the same instant) keeps its data when that claim goes.

use crate::model::{ClaimExt, VolumeExt};
use std::collections::HashMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};

use super::claim::Notice;
use crate::model::reason::Reason;

/// PV name → UID of the last claim seen naming it in `spec.volumeName`, from every claim the
/// watch shows (the initial listing included), kept after the claim is gone and dropped with
/// the PV. In memory: a claim deleted while this process was down is not in it.
#[derive(Debug, Default)]
pub struct ClaimUse {
    used_by: HashMap<String, String>,
    /// PVs whose deletion was refused and said so, to say it once.
    refused: std::collections::HashSet<String>,
}

impl ClaimUse {
    /// Records the PV the claim names, if any.
    pub fn saw_claim(&mut self, claim: &PersistentVolumeClaim) {
        let volume = claim.named_volume();
        if let (Some(volume), Some(uid)) = (volume, claim.metadata.uid.as_deref())
            && self.used_by.get(volume).map(String::as_str) != Some(uid)
        {
            self.used_by.insert(volume.to_string(), uid.to_string());
        }
    }

    pub fn volume_gone(&mut self, name: &str) {
        self.used_by.remove(name);
        self.refused.remove(name);
    }

    /// The UID of the claim last seen naming `volume`.
    pub fn user_of(&self, volume: &str) -> Option<&str> {
        self.used_by.get(volume).map(String::as_str)
    }

    /// True the first time a refusal for `volume` is noted.
    pub fn first_refusal(&mut self, volume: &str) -> bool {
        self.refused.insert(volume.to_string())
    }
}

/// Whether `pv` served the claim its claimRef names: it is the volume provisioned for that
/// claim (`provisioned_name` gives the name a volume made for a claim UID gets), or that claim
/// was seen naming it (`user`).
pub fn served_its_claim(
    pv: &PersistentVolume,
    provisioned_name: impl Fn(&str) -> String,
    user: Option<&str>,
) -> bool {
    let Some(uid) = pv.claim_ref_uid().filter(|u| !u.is_empty()) else {
        return false;
    };
    pv.metadata.name.as_deref() == Some(provisioned_name(uid).as_str()) || user == Some(uid)
}

/// The event on a PV whose deletion is refused by `served_its_claim`.
pub fn refusal(pv: &PersistentVolume) -> Notice {
    let claim = pv
        .spec
        .as_ref()
        .and_then(|s| s.claim_ref.as_ref())
        .map(|r| {
            format!(
                "{}/{}",
                r.namespace.as_deref().unwrap_or_default(),
                r.name.as_deref().unwrap_or_default()
            )
        })
        .unwrap_or_default();
    Notice {
        warning: true,
        reason: Reason::VolumeDeletionRefused,
        message: format!(
            "not deleting this volume although its reclaim policy is Delete: claim {claim} never used it (the claim was not made for it and was never seen naming it in spec.volumeName, e.g. two binders gave the claim a PersistentVolume each, or the claim went while csi-pv-controller was down). The data is kept: delete the PersistentVolume to delete the volume, or remove its claimRef to make it Available again"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;

    fn pv(name: &str, uid: Option<&str>) -> PersistentVolume {
        fixtures::pv(name).claim_ref_if(uid).build()
    }

    fn claim(uid: &str, volume: Option<&str>) -> PersistentVolumeClaim {
        fixtures::pvc("c").uid(uid).with(json!({"spec": {"volumeName": volume}})).build()
    }

    fn named(uid: &str) -> String {
        format!("pvc-{uid}")
    }

    #[test]
    fn a_volume_is_deleted_only_for_the_claim_it_served() {
        let mut seen = ClaimUse::default();
        seen.saw_claim(&claim("u1", Some("static-a")));
        seen.saw_claim(&claim("u2", None));
        let table = [
            ("made for the claim", pv("pvc-u2", Some("u2")), true),
            ("named by the claim", pv("static-a", Some("u1")), true),
            ("claimRef by a race, the claim named another PV", pv("static-b", Some("u1")), false),
            ("never seen in use", pv("static-c", Some("u3")), false),
            ("made for another claim's UID", pv("pvc-u9", Some("u2")), false),
            ("no claimRef UID", pv("pvc-u1", None), false),
        ];
        for (case, pv, want) in table {
            let user = seen.user_of(pv.metadata.name.as_deref().unwrap_or_default());
            assert_eq!(served_its_claim(&pv, named, user), want, "{case}");
        }
    }

    #[test]
    fn the_record_follows_the_claims_and_ends_with_the_volume() {
        let mut seen = ClaimUse::default();
        seen.saw_claim(&claim("u1", Some("v")));
        assert_eq!(seen.user_of("v"), Some("u1"));
        // Released by u1, bound again to u2.
        seen.saw_claim(&claim("u2", Some("v")));
        assert_eq!(seen.user_of("v"), Some("u2"));
        assert!(seen.first_refusal("v"));
        assert!(!seen.first_refusal("v"));
        seen.volume_gone("v");
        assert_eq!(seen.user_of("v"), None);
        assert!(seen.first_refusal("v"));
    }

    #[test]
    fn the_refusal_names_the_claim_and_what_to_do() {
        let n = refusal(&pv("static-b", Some("u1")));
        assert!(n.warning);
        assert!(n.message.contains("ns/c"), "{}", n.message);
        assert!(n.message.contains("delete the PersistentVolume"));
    }
}
