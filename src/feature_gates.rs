//! `--feature-gates`, as the Go sidecars take it: `Name=true|false`, comma-separated. Gates that
//! are GA upstream are accepted when on (the behaviour is always there) and refused when off; a
//! gate we do not know is refused, so that a typo never passes for a setting.

use std::collections::BTreeMap;

/// The gates that change what this process does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// csi-resizer's alpha gate (off by default there too): keep the claim's old capacity in
    /// `volume.alpha.kubernetes.io/pre-resize-capacity` on the PV while the node grows the
    /// filesystem, so that a claim bound to the PV again still gets its node expansion.
    pub annotate_fs_resize: bool,
}

/// Gates that are GA in the sidecars we replace: always on here.
const ALWAYS_ON: &[&str] =
    &["Topology", "HonorPVReclaimPolicy", "RecoverVolumeExpansionFailure", "VolumeAttributesClass"];

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
                n if ALWAYS_ON.contains(&n) && on => {}
                n if ALWAYS_ON.contains(&n) => {
                    return Err(format!("{n} is always on in csi-pv-controller"));
                }
                n => {
                    return Err(format!(
                        "unknown feature gate {n:?} (known: AnnotateFsResize, and {} which are always on)",
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
        let on = match value.trim() {
            "true" => true,
            "false" => false,
            other => return Err(format!("{name}={other}: the value must be true or false")),
        };
        gates.insert(name.trim().to_string(), on);
    }
    Ok(gates)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_parse_as_the_go_sidecars_write_them() {
        let table: [(&str, Result<bool, &str>); 10] = [
            ("CrossNamespaceVolumeDataSource=false", Ok(false)),
            ("CrossNamespaceVolumeDataSource=true", Err("not implemented")),
            ("", Ok(false)),
            ("AnnotateFsResize=true", Ok(true)),
            ("Topology=true, AnnotateFsResize=true", Ok(true)),
            ("AnnotateFsResize=false", Ok(false)),
            ("Topology=false", Err("always on")),
            ("Nonsense=true", Err("unknown feature gate")),
            ("AnnotateFsResize", Err("expected Name=true")),
            ("AnnotateFsResize=yes", Err("must be true or false")),
        ];
        for (text, want) in table {
            let got = text.parse::<FeatureGates>();
            match (got, want) {
                (Ok(g), Ok(on)) => assert_eq!(g.annotate_fs_resize, on, "{text}"),
                (Err(e), Err(part)) => assert!(e.contains(part), "{text}: {e}"),
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }
}
