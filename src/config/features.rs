//! What the driver's capabilities, under the flags' feature gates, let a plan contain: one rule
//! for the controller, the capacity publisher and `explain`.

use super::feature_gates::FeatureGates;
use crate::csi::{ControllerCapability, DriverInfo};
use crate::provision::plan::Features;

/// The driver as the gates let us use it. With `Topology=false` (csi-provisioner's gate) its
/// accessibility constraints are not used: no CSINode watch, no requirement asked, no node
/// affinity recorded.
pub fn gated(mut driver: DriverInfo, gates: &FeatureGates) -> DriverInfo {
    driver.plugin.accessibility_constraints &= !gates.topology_off;
    driver
}

/// What a plan may contain: the driver's capabilities, less what the gates switch off.
pub fn features(driver: &DriverInfo, gates: &FeatureGates) -> Features {
    let has = |capability| driver.controller.has(capability);
    Features {
        single_node_multi_writer: has(ControllerCapability::SingleNodeMultiWriter),
        clone: has(ControllerCapability::CloneVolume),
        snapshot: has(ControllerCapability::CreateDeleteSnapshot),
        modify: has(ControllerCapability::ModifyVolume),
        topology: driver.plugin.accessibility_constraints && !gates.topology_off,
        attributes_classes_off: gates.attributes_classes_off,
    }
}

/// With no driver to ask (`explain` away from it): every capability assumed, less what the
/// gates switch off.
pub fn assumed(gates: &FeatureGates) -> Features {
    Features {
        single_node_multi_writer: true,
        clone: true,
        snapshot: true,
        modify: true,
        topology: !gates.topology_off,
        attributes_classes_off: gates.attributes_classes_off,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::csi::{ControllerCapabilities, PluginCapabilities};

    fn driver(topology: bool) -> DriverInfo {
        DriverInfo {
            name: "d".into(),
            vendor_version: "1".into(),
            plugin: PluginCapabilities {
                accessibility_constraints: topology,
                ..Default::default()
            },
            controller: ControllerCapabilities::default(),
            node_expansion: false,
        }
    }

    #[test]
    fn the_gates_switch_off_what_the_driver_offers_and_never_add() {
        let off: FeatureGates =
            "Topology=false,VolumeAttributesClass=false".parse().unwrap_or_default();
        let on = FeatureGates::default();
        for (topology, gates, want) in
            [(true, &on, true), (true, &off, false), (false, &on, false), (false, &off, false)]
        {
            assert_eq!(features(&driver(topology), gates).topology, want, "{topology} {gates:?}");
            let gated = gated(driver(topology), gates);
            assert_eq!(gated.plugin.accessibility_constraints, want, "{topology} {gates:?}");
        }
        assert!(features(&driver(true), &off).attributes_classes_off);
        assert!(!assumed(&off).topology && assumed(&on).topology && assumed(&on).clone);
    }
}
