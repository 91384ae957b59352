//! What decisions read from a PersistentVolumeClaim.

use k8s_openapi::api::core::v1::{
    ModifyVolumeStatus, PersistentVolumeClaim, PersistentVolumeClaimCondition,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

use super::VolumeMode;
use crate::model::names::{
    ANN_BETA_STORAGE_CLASS, ANN_BETA_STORAGE_PROVISIONER, ANN_STORAGE_PROVISIONER,
    FINALIZER_PROVISIONING, annotation, has_finalizer,
};

/// A claim's `status.phase`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimPhase {
    Pending,
    Bound,
    Lost,
}

impl ClaimPhase {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Pending" => Some(ClaimPhase::Pending),
            "Bound" => Some(ClaimPhase::Bound),
            "Lost" => Some(ClaimPhase::Lost),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ClaimPhase::Pending => "Pending",
            ClaimPhase::Bound => "Bound",
            ClaimPhase::Lost => "Lost",
        }
    }
}

/// Accessors over a claim, so that each is spelled once.
pub trait ClaimExt {
    /// `namespace/name`.
    fn key(&self) -> String;
    /// `spec.volumeName` as written: None when absent, possibly empty.
    fn volume_name(&self) -> Option<&str>;
    /// The PV the claim names: `spec.volumeName` when set and not empty.
    fn named_volume(&self) -> Option<&str> {
        self.volume_name().filter(|v| !v.is_empty())
    }
    /// `status.phase`, when it is one of the three the API knows.
    fn phase(&self) -> Option<ClaimPhase>;
    fn is_bound(&self) -> bool {
        self.phase() == Some(ClaimPhase::Bound)
    }
    /// The class as the binder reads it: the beta annotation first, then the field; "" if none.
    fn class(&self) -> &str;
    /// Neither the annotation nor the field names a class, so a default class may be given.
    fn names_no_class(&self) -> bool;
    /// `spec.volumeMode`; absent means Filesystem.
    fn volume_mode(&self) -> VolumeMode<'_>;
    /// The provisioner the binder handed the claim to (the GA annotation, else the beta one).
    fn provisioner(&self) -> Option<&str>;
    /// The binder handed the claim to `driver`: its provisioner annotation names it, or, for a
    /// claim handed to an in-tree plugin before that plugin was migrated,
    /// `pv.kubernetes.io/migrated-to` does.
    fn handed_to(&self, driver: &str) -> bool {
        self.provisioner() == Some(driver) || (!driver.is_empty() && self.migrated_to() == driver)
    }
    /// `pv.kubernetes.io/migrated-to`; "" if absent.
    fn migrated_to(&self) -> &str;
    /// Our provisioning intent is written on the claim (its finalizer).
    fn has_intent(&self) -> bool;
    /// `status.conditions`, empty when absent.
    fn conditions(&self) -> &[PersistentVolumeClaimCondition];
    /// The condition of that type, if the claim has one.
    fn condition(&self, kind: &str) -> Option<&PersistentVolumeClaimCondition> {
        self.conditions().iter().find(|c| c.type_ == kind)
    }
    /// `spec.resources.requests.storage`: the size the user asks for.
    fn requested_storage(&self) -> Option<&Quantity>;
    /// `status.capacity.storage`: the size the claim records as had.
    fn recorded_capacity(&self) -> Option<&Quantity>;
    /// `spec.volumeAttributesClassName`: the class the user asks for.
    fn wanted_attributes_class(&self) -> Option<&str>;
    /// `status.currentVolumeAttributesClassName`: the class the volume has.
    fn current_attributes_class(&self) -> Option<&str>;
    /// `status.modifyVolumeStatus`: a change of attributes class under way.
    fn modify_status(&self) -> Option<&ModifyVolumeStatus>;
}

/// A `status.conditions` value for a patch: the claim's conditions that `keep` accepts, as
/// they are, then `added`. (A merge patch replaces the whole list.)
pub fn conditions_with(
    claim: &PersistentVolumeClaim,
    keep: impl Fn(&PersistentVolumeClaimCondition) -> bool,
    added: impl IntoIterator<Item = Value>,
) -> Value {
    let kept = claim.conditions().iter().filter(|c| keep(c));
    let kept = kept.map(|c| serde_json::to_value(c).unwrap_or(Value::Null));
    Value::Array(kept.chain(added).collect())
}

impl ClaimExt for PersistentVolumeClaim {
    fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    fn volume_name(&self) -> Option<&str> {
        self.spec.as_ref()?.volume_name.as_deref()
    }

    fn phase(&self) -> Option<ClaimPhase> {
        ClaimPhase::parse(self.status.as_ref()?.phase.as_deref()?)
    }

    fn class(&self) -> &str {
        let field = self.spec.as_ref().and_then(|s| s.storage_class_name.as_deref());
        super::class_named(&self.metadata, field)
    }

    fn names_no_class(&self) -> bool {
        annotation(&self.metadata, ANN_BETA_STORAGE_CLASS).is_none()
            && self.spec.as_ref().and_then(|s| s.storage_class_name.as_ref()).is_none()
    }

    fn volume_mode(&self) -> VolumeMode<'_> {
        VolumeMode::from_field(self.spec.as_ref().and_then(|s| s.volume_mode.as_deref()))
    }

    fn provisioner(&self) -> Option<&str> {
        annotation(&self.metadata, ANN_STORAGE_PROVISIONER)
            .or_else(|| annotation(&self.metadata, ANN_BETA_STORAGE_PROVISIONER))
    }

    fn migrated_to(&self) -> &str {
        crate::migration::migrated_to(&self.metadata)
    }

    fn has_intent(&self) -> bool {
        has_finalizer(&self.metadata, FINALIZER_PROVISIONING)
    }

    fn conditions(&self) -> &[PersistentVolumeClaimCondition] {
        let status = self.status.as_ref();
        status.and_then(|s| s.conditions.as_deref()).unwrap_or_default()
    }

    fn requested_storage(&self) -> Option<&Quantity> {
        self.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?.get("storage")
    }

    fn recorded_capacity(&self) -> Option<&Quantity> {
        self.status.as_ref()?.capacity.as_ref()?.get("storage")
    }

    fn wanted_attributes_class(&self) -> Option<&str> {
        self.spec.as_ref()?.volume_attributes_class_name.as_deref()
    }

    fn current_attributes_class(&self) -> Option<&str> {
        self.status.as_ref()?.current_volume_attributes_class_name.as_deref()
    }

    fn modify_status(&self) -> Option<&ModifyVolumeStatus> {
        self.status.as_ref()?.modify_volume_status.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::pvc;
    use serde_json::json;

    #[test]
    fn phases_parse_only_what_the_api_knows() {
        let cases = [
            (None, None),
            (Some("Bound"), Some(ClaimPhase::Bound)),
            (Some("Pending"), Some(ClaimPhase::Pending)),
            (Some("Lost"), Some(ClaimPhase::Lost)),
            (Some("bound"), None),
            (Some(""), None),
        ];
        for (field, want) in cases {
            let c = pvc("c").with(json!({"status": {"phase": field}})).build();
            assert_eq!(c.phase(), want, "{field:?}");
            assert_eq!(c.is_bound(), want == Some(ClaimPhase::Bound));
        }
        assert_eq!(PersistentVolumeClaim::default().phase(), None);
    }

    #[test]
    fn the_beta_class_annotation_wins_over_the_field() {
        let mut c = pvc("c").class("field").build();
        assert_eq!(c.class(), "field");
        assert!(!c.names_no_class());
        c.metadata.annotations = Some([(ANN_BETA_STORAGE_CLASS.into(), "beta".into())].into());
        assert_eq!(c.class(), "beta");
        let none = PersistentVolumeClaim::default();
        assert_eq!(none.class(), "");
        assert!(none.names_no_class());
        let empty = pvc("c").class("").build();
        assert!(!empty.names_no_class(), "an empty class is a choice: no default");
    }

    #[test]
    fn the_ga_provisioner_annotation_wins_over_the_beta_one() {
        let mut c = PersistentVolumeClaim::default();
        assert_eq!(c.provisioner(), None);
        c.metadata.annotations = Some([(ANN_BETA_STORAGE_PROVISIONER.into(), "b".into())].into());
        assert_eq!(c.provisioner(), Some("b"));
        c.metadata
            .annotations
            .get_or_insert_default()
            .insert(ANN_STORAGE_PROVISIONER.into(), "a".into());
        assert_eq!(c.provisioner(), Some("a"));
    }
}
