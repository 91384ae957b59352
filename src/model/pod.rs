//! What decisions read from a Pod.

use k8s_openapi::api::core::v1::Pod;

pub trait PodExt {
    /// Succeeded or Failed: the pod will not run again and no longer uses its volumes.
    fn finished(&self) -> bool;
    /// One of the pod's volumes is the claim `claim` (a persistentVolumeClaim source).
    fn names_claim(&self, claim: &str) -> bool;
}

impl PodExt for Pod {
    fn finished(&self) -> bool {
        matches!(
            self.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
    }

    fn names_claim(&self, claim: &str) -> bool {
        self.spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .any(|v| v.persistent_volume_claim.as_ref().is_some_and(|c| c.claim_name == claim))
    }
}
