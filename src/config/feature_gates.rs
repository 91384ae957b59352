//! `--feature-gates`, as the Go sidecars take it: `Name=value`, comma-separated, the value as Go
//! reads a boolean (`True` too). The GA gates the sidecars still let a user switch off are taken
//! both ways: Topology off asks the driver for no topology and writes none on a PV;
//! VolumeAttributesClass off leaves classes out of provisioning and modifies nothing. The gates both
//! sidecars register from the Kubernetes libraries (API server and client features) are taken
//! and have no effect, as in the sidecars, which serve no API. A gate neither knows is refused,
//! so that a typo never passes for a setting.

use std::collections::BTreeMap;

/// The gates that change what this process does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureGates {
    /// csi-resizer's gate (beta and on by default since v2.3, alpha and off before): keep the
    /// claim's old capacity in `volume.alpha.kubernetes.io/pre-resize-capacity` on the PV while
    /// the node grows the filesystem, so that a claim bound to the PV again still gets its node
    /// expansion.
    pub annotate_fs_resize: bool,
    /// csi-provisioner's Topology (GA, on by default): off, the driver's accessibility
    /// constraints are not used, as if it had none.
    pub topology_off: bool,
    /// Both sidecars' VolumeAttributesClass (GA, on by default): off, a claim's class is left
    /// out of CreateVolume and its PV, and no volume is modified.
    pub attributes_classes_off: bool,
    /// Gates taken that change nothing here, each with why: said once at start.
    pub no_effect: Vec<String>,
}

impl Default for FeatureGates {
    fn default() -> Self {
        FeatureGates {
            annotate_fs_resize: true,
            topology_off: false,
            attributes_classes_off: false,
            no_effect: Vec::new(),
        }
    }
}

/// Both sidecars' gate (alpha, off by default): give the Lease up on exit. We always do.
const RELEASE_ON_EXIT: &str = "ReleaseLeaderElectionOnExit";

/// The gates csi-provisioner v6 and csi-resizer v2 register from the Kubernetes libraries (v0.36
/// and v0.37):
/// switches of API-server and client-library code that neither sidecar runs.
const LIBRARY_GATES: &[&str] = &[
    "APIResponseCompression",
    "APIServerIdentity",
    "APIServerWebhookAuthenticationToken",
    "APIServingWithRoutine",
    "AllAlpha",
    "AllBeta",
    "AllowParsingUserUIDFromCertAuth",
    "AllowUnsafeMalformedObjectDeletion",
    "CBORServingAndStorage",
    "ComponentFlagz",
    "ComponentStatusz",
    "ConcurrentWatchObjectDecode",
    "ConsistentListFromCacheSkipTimeoutFallback",
    "ConstrainedImpersonation",
    "CoordinatedLeaderElection",
    "DeclarativeValidationBeta",
    "DetectCacheInconsistency",
    "EtcdRangeStream",
    "ExcludeAdmissionWebhookVirtualResources",
    "ListFromCacheSnapshot",
    "ManifestBasedAdmissionControlConfig",
    "NativeHistograms",
    "OpenAPIEnums",
    "RemoteRequestHeaderUID",
    "ShardedListAndWatch",
    "SizeBasedListCostEstimate",
    "StorageVersionAPI",
    "StorageVersionHash",
    "StructuredAuthenticationConfigurationEgressSelector",
    "StructuredAuthenticationConfigurationJWKSMetrics",
    "TokenRequestServiceAccountUIDValidation",
    "UnauthenticatedHTTP2DOSMitigation",
    "UnknownVersionInteroperabilityProxy",
    "WatchCacheInitializationPostStartHook",
    "WatchList",
    "WatchListCompression",
    "WebhookRoundTripLoadBalancing",
];

/// csi-resizer's RecoverVolumeExpansionFailure (GA): off, it resizes without recording
/// `status.allocatedResources` and `allocatedResourceStatuses`. Kubernetes 1.34 and later lock
/// the gate on in kube-controller-manager and kubelet, which read those fields, so we keep them.
const RECOVER_EXPANSION: &str = "RecoverVolumeExpansionFailure";

/// Gates that are GA, or gone, in the sidecars we replace, and always on here: csi-provisioner
/// v5 knew HonorPVReclaimPolicy (v6 refuses the name; we take =true from older manifests).
const ALWAYS_ON: &[&str] = &["HonorPVReclaimPolicy"];

/// Gates that are off by default upstream too, and that we do not implement: accepted when off,
/// refused when on, so that nobody believes the behaviour is there.
const NOT_IMPLEMENTED: &[(&str, &str)] = &[(
    "CrossNamespaceVolumeDataSource",
    "cross-namespace data sources (dataSourceRef.namespace with a ReferenceGrant) are not implemented; such claims get a ProvisioningFailed event",
)];

impl std::str::FromStr for FeatureGates {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let mut gates = FeatureGates::default();
        for (name, on) in parse(text)? {
            if let Some((_, why)) = NOT_IMPLEMENTED.iter().find(|(g, _)| *g == name) {
                if on {
                    return Err(format!("{name}=true: {why}"));
                }
                continue;
            }
            match name.as_str() {
                "AnnotateFsResize" => gates.annotate_fs_resize = on,
                "Topology" => gates.topology_off = !on,
                "VolumeAttributesClass" => gates.attributes_classes_off = !on,
                RECOVER_EXPANSION if on => {}
                RECOVER_EXPANSION => gates.no_effect.push(format!(
                    "{RECOVER_EXPANSION}=false: expansion still records status.allocatedResources and allocatedResourceStatuses, which Kubernetes 1.34 and later require"
                )),
                RELEASE_ON_EXIT => gates
                    .no_effect
                    .push(format!("{RELEASE_ON_EXIT}={on}: the Lease is always given up on exit")),
                n if LIBRARY_GATES.contains(&n) => gates.no_effect.push(format!(
                    "{n}={on}: a switch of Kubernetes library code this process does not run"
                )),
                n if ALWAYS_ON.contains(&n) && on => {}
                n if ALWAYS_ON.contains(&n) => {
                    return Err(format!("{n} is always on in csi-pv-controller"));
                }
                n => {
                    return Err(format!(
                        "unknown feature gate {n:?} (known: AnnotateFsResize, Topology, VolumeAttributesClass, {RECOVER_EXPANSION}, {} and the Kubernetes library gates)",
                        ALWAYS_ON.join(", ")
                    ));
                }
            }
        }
        Ok(gates)
    }
}

fn parse(text: &str) -> Result<BTreeMap<String, bool>, String> {
    let mut gates = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (name, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("{pair:?}: expected Name=true or Name=false"))?;
        let on = crate::config::args::go_bool(value.trim())
            .map_err(|e| format!("{name}={}: {e}", value.trim()))?;
        gates.insert(name.trim().to_string(), on);
    }
    Ok(gates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_as_the_go_sidecars_write_them() {
        let table: [(&str, Result<bool, &str>); 16] = [
            ("Topology=True", Ok(true)),
            ("AnnotateFsResize=TRUE,VolumeAttributesClass=t", Ok(true)),
            ("ReleaseLeaderElectionOnExit=true", Ok(true)),
            ("WatchList=false,AllAlpha=true", Ok(true)),
            ("CrossNamespaceVolumeDataSource=false", Ok(true)),
            ("CrossNamespaceVolumeDataSource=true", Err("not implemented")),
            ("", Ok(true)),
            ("AnnotateFsResize=true", Ok(true)),
            ("Topology=true, AnnotateFsResize=true", Ok(true)),
            ("AnnotateFsResize=false", Ok(false)),
            ("HonorPVReclaimPolicy=false", Err("always on")),
            ("HonorPVReclaimPolicy=true,VolumeAttributesClass=false", Ok(true)),
            ("RecoverVolumeExpansionFailure=true", Ok(true)),
            ("Nonsense=true", Err("unknown feature gate")),
            ("AnnotateFsResize", Err("expected Name=true")),
            ("AnnotateFsResize=yes", Err("not a boolean")),
        ];
        let off: FeatureGates = "Topology=false".parse().unwrap_or_default();
        assert!(off.topology_off && off.no_effect.is_empty());
        assert!(!"Topology=true".parse::<FeatureGates>().unwrap_or_default().topology_off);
        let vac: FeatureGates = "VolumeAttributesClass=false".parse().unwrap_or_default();
        assert!(vac.attributes_classes_off && vac.no_effect.is_empty());
        let recover: FeatureGates =
            "RecoverVolumeExpansionFailure=false".parse().unwrap_or_default();
        assert!(recover.no_effect[0].contains("allocatedResources"), "{:?}", recover.no_effect);
        for (text, want) in table {
            let got = text.parse::<FeatureGates>();
            match (got, want) {
                (Ok(g), Ok(on)) => {
                    assert_eq!(g.annotate_fs_resize, on, "{text}");
                    let library = text.contains("WatchList") || text.contains("Release");
                    assert_eq!(
                        g.attributes_classes_off,
                        text.contains("VolumeAttributesClass=false")
                    );
                    assert_eq!(g.no_effect.is_empty(), !library, "{text}: {:?}", g.no_effect);
                }
                (Err(e), Err(part)) => assert!(e.contains(part), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }
}
