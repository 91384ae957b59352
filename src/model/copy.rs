//! Which copy of a claim a pass decided on. A driver call goes only on a copy the API gave in
//! this pass (or one a write's precondition proves current): the watch store's may lag behind a
//! deletion, a binding or our own last write. Every pass over a claim (provisioning, resize,
//! modify) decides on the copy it has; a decision that would call the driver on the store's copy
//! answers "confirm live" instead, and the pass decides again on the live one.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// Where a pass's copy of the claim comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimCopy {
    /// The watch store's.
    Cached,
    /// Read from the API, or answered by our own write, in this pass.
    Live,
    /// The API no longer has the claim (an intent journal entry's): decided as being deleted.
    Gone,
}

impl ClaimCopy {
    /// The claim is on its way out: being deleted, or already gone from the API.
    pub fn deleting(self, claim: &PersistentVolumeClaim) -> bool {
        claim.metadata.deletion_timestamp.is_some() || self == ClaimCopy::Gone
    }
}
