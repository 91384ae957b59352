//! `--feature-gates`, as the Go sidecars take it: `Name=value`, comma-separated, the value as Go
//! reads a boolean (`True` too). Gates that are GA upstream are accepted when on (the behaviour
//! is always there) and refused when off, but for Topology, which csi-provisioner lets a user
//! switch off: then no topology is asked of the driver or written on a PV. The gates both
//! sidecars register from the Kubernetes libraries (API server and client features) are taken
//! and have no effect, as in the sidecars, which serve no API. A gate neither knows is refused,
//! so that a typo never passes for a setting.

use std::collections::BTreeMap;

/// The gates that change what this process does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// csi-resizer's alpha gate (off by default there too): keep the claim's old capacity in
    /// `volume.alpha.kubernetes.io/pre-resize-capacity` on the PV while the node grows the
    /// filesystem, so that a claim bound to the PV again still gets its node expansion.
    pub annotate_fs_resize: bool,
    /// csi-provisioner's Topology (GA, on by default): off, the driver's accessibility
    /// constraints are not used, as if it had none.
    pub topology_off: bool,
    /// Gates taken that change nothing here, each with why: said once at start.
    pub no_effect: Vec<String>,
}

/// Both sidecars' gate (alpha, off by default): give the Lease up on exit. We always do.
const RELEASE_ON_EXIT: &str = "ReleaseLeaderElectionOnExit";

/// The gates csi-provisioner v6 and csi-resizer v2 register from the Kubernetes libraries:
/// switches of API-server and client-library code that neither sidecar runs.
const LIBRARY_GATES: &[&str] = &[
    "APIResponseCompression",
    "APIServerIdentity",
    "APIServingWithRoutine",
    "AllAlpha",
    "AllBeta",
    "AllowParsingUserUIDFromCertAuth",
    "AllowUnsafeMalformedObjectDeletion",
    "CBORServingAndStorage",
    "ComponentFlagz",
    "ComponentStatusz",
    "ConcurrentWatchObjectDecode",
    "ConstrainedImpersonation",
    "CoordinatedLeaderElection",
    "DeclarativeValidationBeta",
    "DetectCacheInconsistency",
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
];

/// Gates that are GA in the sidecars we replace: always on here.
const ALWAYS_ON: &[&str] =
    &["HonorPVReclaimPolicy", "RecoverVolumeExpansionFailure", "VolumeAttributesClass"];

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
                        "unknown feature gate {n:?} (known: AnnotateFsResize, Topology, and {} which are always on)",
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
        let on = crate::args::go_bool(value.trim())
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
        let table: [(&str, Result<bool, &str>); 14] = [
            ("Topology=True", Ok(false)),
            ("AnnotateFsResize=TRUE,VolumeAttributesClass=t", Ok(true)),
            ("ReleaseLeaderElectionOnExit=true", Ok(false)),
            ("WatchList=false,AllAlpha=true", Ok(false)),
            ("CrossNamespaceVolumeDataSource=false", Ok(false)),
            ("CrossNamespaceVolumeDataSource=true", Err("not implemented")),
            ("", Ok(false)),
            ("AnnotateFsResize=true", Ok(true)),
            ("Topology=true, AnnotateFsResize=true", Ok(true)),
            ("AnnotateFsResize=false", Ok(false)),
            ("VolumeAttributesClass=false", Err("always on")),
            ("Nonsense=true", Err("unknown feature gate")),
            ("AnnotateFsResize", Err("expected Name=true")),
            ("AnnotateFsResize=yes", Err("not a boolean")),
        ];
        let off: FeatureGates = "Topology=false".parse().unwrap_or_default();
        assert!(off.topology_off && off.no_effect.is_empty());
        assert!(!"Topology=true".parse::<FeatureGates>().unwrap_or_default().topology_off);
        for (text, want) in table {
            let got = text.parse::<FeatureGates>();
            match (got, want) {
                (Ok(g), Ok(on)) => {
                    assert_eq!(g.annotate_fs_resize, on, "{text}");
                    let library = text.contains("WatchList") || text.contains("Release");
                    assert_eq!(g.no_effect.is_empty(), !library, "{text}: {:?}", g.no_effect);
                }
                (Err(e), Err(part)) => assert!(e.contains(part), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }
}
