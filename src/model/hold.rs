//! A failed attempt's hold on a claim: the same attempt on the same version of the claim waits
//! for its retry, while any change to the claim (someone else's write) lets it go at once. One
//! rule for every pass over a claim: provisioning and attribute changes.

use std::time::Instant;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// The version a failed attempt was made on, and when its retry is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub version: String,
    pub until: Instant,
}

impl Hold {
    /// The retry is not due yet and the claim is the version that failed.
    pub fn holds(&self, claim: &PersistentVolumeClaim, now: Instant) -> bool {
        claim.metadata.resource_version.as_deref().unwrap_or_default() == self.version
            && now < self.until
    }
}

/// Whether `hold` (if any) holds `claim` at `now`.
pub fn held(hold: Option<&Hold>, claim: &PersistentVolumeClaim, now: Instant) -> bool {
    hold.is_some_and(|h| h.holds(claim, now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_hold_lasts_until_its_retry_on_the_version_that_failed() {
        let t0 = crate::fixtures::instant();
        let hold = Hold { version: "7".into(), until: t0 + Duration::from_secs(2) };
        let at = |rv: &str| {
            let mut c = PersistentVolumeClaim::default();
            c.metadata.resource_version = Some(rv.into());
            c
        };
        // (claim version, seconds after the failure, held)
        for (rv, after, want) in [("7", 0, true), ("7", 1, true), ("7", 2, false), ("8", 0, false)]
        {
            let now = t0 + Duration::from_secs(after);
            assert_eq!(held(Some(&hold), &at(rv), now), want, "rv {rv} at +{after}s");
        }
        assert!(!held(None, &at("7"), t0), "no failure, no hold");
    }
}
