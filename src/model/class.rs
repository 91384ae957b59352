//! What decisions read from a StorageClass: its binding mode and the reclaim policy of the PVs
//! it provisions, as enums rather than strings.

use k8s_openapi::api::storage::v1::StorageClass;

use super::ReclaimPolicy;

/// A StorageClass's `volumeBindingMode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindingMode {
    Immediate,
    WaitForFirstConsumer,
    /// Not set. The API defaults the field to Immediate, so only an object stored without that
    /// default has none. kube-controller-manager's binder refuses such a class (so does ours);
    /// csi-provisioner, and our provisioning, take it as Immediate.
    Unset,
}

/// Accessors over a StorageClass, so that each is spelled once.
pub trait ClassExt {
    /// Any value but WaitForFirstConsumer binds at once, as both upstream components read it.
    fn binding_mode(&self) -> BindingMode;

    /// WaitForFirstConsumer: nothing is bound or provisioned before the scheduler picks a node.
    fn waits_for_consumer(&self) -> bool {
        self.binding_mode() == BindingMode::WaitForFirstConsumer
    }

    /// `reclaimPolicy`, given to the PVs the class provisions; absent means Delete, as the API
    /// defaults it.
    fn reclaim_policy(&self) -> ReclaimPolicy<'_>;
    /// `driver` provisions the class's claims: the class names it, or names the in-tree plugin
    /// whose volumes it serves through CSI migration.
    fn served_by(&self, driver: &str) -> bool;
}

impl ClassExt for StorageClass {
    fn served_by(&self, driver: &str) -> bool {
        self.provisioner == driver
            || crate::migration::Plugin::by_in_tree_name(&self.provisioner)
                .is_some_and(|p| p.csi_driver() == driver)
    }

    fn binding_mode(&self) -> BindingMode {
        match self.volume_binding_mode.as_deref() {
            None => BindingMode::Unset,
            Some("WaitForFirstConsumer") => BindingMode::WaitForFirstConsumer,
            Some(_) => BindingMode::Immediate,
        }
    }

    fn reclaim_policy(&self) -> ReclaimPolicy<'_> {
        match self.reclaim_policy.as_deref() {
            None => ReclaimPolicy::Delete,
            Some(written) => ReclaimPolicy::parse(written),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::class;
    use serde_json::json;

    #[test]
    fn binding_modes_and_reclaim_policies_read_as_upstream_reads_them() {
        let modes = [
            (json!({}), BindingMode::Unset),
            (json!({"volumeBindingMode": "Immediate"}), BindingMode::Immediate),
            (
                json!({"volumeBindingMode": "WaitForFirstConsumer"}),
                BindingMode::WaitForFirstConsumer,
            ),
            (json!({"volumeBindingMode": "Later"}), BindingMode::Immediate),
        ];
        for (extra, want) in modes {
            let c = class(extra.clone());
            assert_eq!(c.binding_mode(), want, "{extra}");
            assert_eq!(c.waits_for_consumer(), want == BindingMode::WaitForFirstConsumer);
        }
        let policies = [
            (json!({}), ReclaimPolicy::Delete),
            (json!({"reclaimPolicy": "Retain"}), ReclaimPolicy::Retain),
            (json!({"reclaimPolicy": "Delete"}), ReclaimPolicy::Delete),
            (json!({"reclaimPolicy": "Recycle"}), ReclaimPolicy::Recycle),
            (json!({"reclaimPolicy": "Shred"}), ReclaimPolicy::Unknown("Shred")),
        ];
        for (extra, want) in policies {
            let c = class(extra.clone());
            assert_eq!(c.reclaim_policy(), want, "{extra}");
        }
        assert_eq!(ReclaimPolicy::Unknown("Shred").as_str(), "Shred");
        assert_eq!(ReclaimPolicy::Retain.as_str(), "Retain");
    }
}
