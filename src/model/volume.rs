//! What decisions read from a PersistentVolume.

use k8s_openapi::api::core::v1::{
    ObjectReference, PersistentVolume, PersistentVolumeClaim, SecretReference,
};

use super::VolumeMode;
use super::quantity::parse_bytes;

/// A PV's `status.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumePhase {
    Pending,
    Available,
    Bound,
    Released,
    Failed,
}

impl VolumePhase {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Pending" => Some(VolumePhase::Pending),
            "Available" => Some(VolumePhase::Available),
            "Bound" => Some(VolumePhase::Bound),
            "Released" => Some(VolumePhase::Released),
            "Failed" => Some(VolumePhase::Failed),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VolumePhase::Pending => "Pending",
            VolumePhase::Available => "Available",
            VolumePhase::Bound => "Bound",
            VolumePhase::Released => "Released",
            VolumePhase::Failed => "Failed",
        }
    }

    /// Released or Failed: the claim is gone and reclaim is what is left.
    pub fn awaits_reclaim(phase: Option<Self>) -> bool {
        matches!(phase, Some(VolumePhase::Released | VolumePhase::Failed))
    }
}

/// A PV's `spec.persistentVolumeReclaimPolicy`; absent means Retain, as the API defaults it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReclaimPolicy<'a> {
    Retain,
    Delete,
    Recycle,
    Unknown(&'a str),
}

impl<'a> ReclaimPolicy<'a> {
    /// A policy as written (present).
    pub fn parse(written: &'a str) -> Self {
        match written {
            "Retain" => ReclaimPolicy::Retain,
            "Delete" => ReclaimPolicy::Delete,
            "Recycle" => ReclaimPolicy::Recycle,
            other => ReclaimPolicy::Unknown(other),
        }
    }

    /// As the API spells it.
    pub fn as_str(&self) -> &'a str {
        match self {
            ReclaimPolicy::Retain => "Retain",
            ReclaimPolicy::Delete => "Delete",
            ReclaimPolicy::Recycle => "Recycle",
            ReclaimPolicy::Unknown(written) => written,
        }
    }
}

/// Accessors over a PV, so that each is spelled once.
pub trait VolumeExt {
    fn name(&self) -> &str;
    fn claim_ref(&self) -> Option<&ObjectReference>;
    /// The claimRef's UID as written (None when absent, possibly empty: pre-bound by name).
    fn claim_ref_uid(&self) -> Option<&str> {
        self.claim_ref()?.uid.as_deref()
    }
    /// The claimRef names this claim, with its UID or with none (upstream's
    /// IsVolumeBoundToClaim).
    fn bound_to_claim(&self, namespace: &str, name: &str, uid: &str) -> bool {
        self.claim_ref().is_some_and(|r| {
            r.name.as_deref() == Some(name)
                && r.namespace.as_deref() == Some(namespace)
                && r.uid.as_deref().is_none_or(|u| u.is_empty() || u == uid)
        })
    }
    /// The claimRef names `claim`, as `bound_to_claim` reads it.
    fn bound_to(&self, claim: &PersistentVolumeClaim) -> bool {
        let meta = &claim.metadata;
        self.bound_to_claim(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
            meta.uid.as_deref().unwrap_or_default(),
        )
    }
    /// `status.phase`, when it is one the API knows.
    fn phase(&self) -> Option<VolumePhase>;
    /// `status.phase` as written, "" when absent: for messages.
    fn phase_text(&self) -> &str;
    fn reclaim_policy(&self) -> ReclaimPolicy<'_>;
    /// The class: the beta annotation first, then the field; "" if none.
    fn class(&self) -> &str;
    fn volume_mode(&self) -> VolumeMode<'_>;
    /// `spec.capacity.storage` in bytes; 0 when absent or unreadable.
    fn capacity_bytes(&self) -> u64;
    /// The CSI driver named in `spec.csi`, if the PV is a CSI volume.
    fn csi_driver(&self) -> Option<&str>;
    /// The driver's id of the volume (`spec.csi.volumeHandle`), if the PV is a CSI volume.
    fn csi_handle(&self) -> Option<&str>;
    /// The CSI driver that serves the PV: `spec.csi`'s, or, for an in-tree PV of a migrated
    /// plugin, that plugin's CSI driver (`crate::migration`).
    fn served_by(&self) -> Option<&str>;
    /// `spec.accessModes`, empty when absent.
    fn access_modes(&self) -> &[String];
    /// `spec.csi.controllerExpandSecretRef`: the secret ControllerExpandVolume and
    /// ControllerModifyVolume carry.
    fn expand_secret(&self) -> Option<&SecretReference>;
}

impl VolumeExt for PersistentVolume {
    fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    fn claim_ref(&self) -> Option<&ObjectReference> {
        self.spec.as_ref()?.claim_ref.as_ref()
    }

    fn phase(&self) -> Option<VolumePhase> {
        VolumePhase::parse(self.phase_text())
    }

    fn phase_text(&self) -> &str {
        self.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("")
    }

    fn reclaim_policy(&self) -> ReclaimPolicy<'_> {
        let spec = self.spec.as_ref();
        match spec.and_then(|s| s.persistent_volume_reclaim_policy.as_deref()) {
            None => ReclaimPolicy::Retain,
            Some(written) => ReclaimPolicy::parse(written),
        }
    }

    fn class(&self) -> &str {
        let spec = self.spec.as_ref();
        super::class_named(&self.metadata, spec.and_then(|s| s.storage_class_name.as_deref()))
    }

    fn volume_mode(&self) -> VolumeMode<'_> {
        VolumeMode::from_field(self.spec.as_ref().and_then(|s| s.volume_mode.as_deref()))
    }

    fn capacity_bytes(&self) -> u64 {
        self.spec
            .as_ref()
            .and_then(|s| s.capacity.as_ref()?.get("storage"))
            .and_then(|q| parse_bytes(&q.0).ok())
            .unwrap_or(0)
    }

    fn csi_driver(&self) -> Option<&str> {
        Some(self.spec.as_ref()?.csi.as_ref()?.driver.as_str())
    }

    fn csi_handle(&self) -> Option<&str> {
        Some(self.spec.as_ref()?.csi.as_ref()?.volume_handle.as_str())
    }

    fn served_by(&self) -> Option<&str> {
        self.csi_driver().or_else(|| Some(crate::migration::Plugin::of_volume(self)?.csi_driver()))
    }

    fn access_modes(&self) -> &[String] {
        self.spec.as_ref().and_then(|s| s.access_modes.as_deref()).unwrap_or_default()
    }

    fn expand_secret(&self) -> Option<&SecretReference> {
        self.spec.as_ref()?.csi.as_ref()?.controller_expand_secret_ref.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pv(policy: Option<&str>, phase: Option<&str>) -> PersistentVolume {
        let fields =
            json!({"spec": {"persistentVolumeReclaimPolicy": policy}, "status": {"phase": phase}});
        crate::fixtures::pv("v").with(fields).build()
    }

    #[test]
    fn reclaim_policy_defaults_to_retain_and_keeps_unknown_text() {
        let cases = [
            (None, ReclaimPolicy::Retain),
            (Some("Retain"), ReclaimPolicy::Retain),
            (Some("Delete"), ReclaimPolicy::Delete),
            (Some("Recycle"), ReclaimPolicy::Recycle),
            (Some("Shred"), ReclaimPolicy::Unknown("Shred")),
        ];
        for (field, want) in cases {
            assert_eq!(pv(field, None).reclaim_policy(), want, "{field:?}");
        }
    }

    #[test]
    fn phases_parse_only_what_the_api_knows() {
        for phase in [
            VolumePhase::Pending,
            VolumePhase::Available,
            VolumePhase::Bound,
            VolumePhase::Released,
            VolumePhase::Failed,
        ] {
            assert_eq!(pv(None, Some(phase.as_str())).phase(), Some(phase));
        }
        assert_eq!(pv(None, Some("Lost")).phase(), None);
        assert_eq!(pv(None, None).phase(), None);
        assert!(VolumePhase::awaits_reclaim(Some(VolumePhase::Failed)));
        assert!(!VolumePhase::awaits_reclaim(Some(VolumePhase::Bound)));
        assert!(!VolumePhase::awaits_reclaim(None));
    }

    #[test]
    fn bound_to_claim_accepts_a_missing_or_empty_uid() {
        let mut v = pv(None, None);
        assert!(!v.bound_to_claim("ns", "c", "u1"));
        let reference = |uid: Option<&str>| ObjectReference {
            namespace: Some("ns".into()),
            name: Some("c".into()),
            uid: uid.map(Into::into),
            ..Default::default()
        };
        for (uid, want) in [(None, true), (Some(""), true), (Some("u1"), true), (Some("u2"), false)]
        {
            v.spec.get_or_insert_default().claim_ref = Some(reference(uid));
            assert_eq!(v.bound_to_claim("ns", "c", "u1"), want, "{uid:?}");
            assert!(!v.bound_to_claim("other", "c", "u1"));
        }
    }
}
