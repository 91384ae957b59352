//! The objects a provisioning decision reads beside the claim, found one way for the controller
//! (its watch stores, and what its pass has just made or protected) and for `explain` (the
//! listed cluster): both decide on inputs gathered by the same rules.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};

use super::plan::{self, PlanFacts, Settings};
use super::snapshot::SnapshotLookup;
use super::source::{self, Source};
use crate::model::ClaimExt;

/// Where the objects come from.
pub trait Lookup {
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    fn attributes_class(&self, name: &str) -> Option<Arc<VolumeAttributesClass>>;
    /// Beside the cluster's binder: its matching can take only PV `volume` for `claim`, and no
    /// other PV is pre-bound to the claim.
    fn binder_takes_only(&self, claim: &PersistentVolumeClaim, volume: &str) -> bool;
}

/// What a pass knows newer than the lookup's copies: the clone source it protected, the PV it
/// made.
#[derive(Debug, Clone, Copy, Default)]
pub struct Newer<'a> {
    pub source_claim: Option<&'a Arc<PersistentVolumeClaim>>,
    pub volume: Option<&'a PersistentVolume>,
}

/// The inputs, owned; `ClaimContext` borrows them.
#[derive(Debug, Clone, Default)]
pub struct Inputs {
    /// The claim's StorageClass.
    pub class: Option<Arc<StorageClass>>,
    /// The PV named after the claim.
    pub volume: Option<Arc<PersistentVolume>>,
    /// A clone's source claim and its PV.
    pub source_claim: Option<Arc<PersistentVolumeClaim>>,
    pub source_volume: Option<Arc<PersistentVolume>>,
    /// The VolumeAttributesClass the claim asks for.
    pub attributes_class: Option<Arc<VolumeAttributesClass>>,
    /// `ClaimContext::binder_takes_ours`.
    pub binder_takes_ours: bool,
}

impl Inputs {
    /// The plan's facts over these inputs, with the restore's snapshot as read.
    pub fn plan_facts<'a>(&'a self, snapshot: Option<&'a SnapshotLookup>) -> PlanFacts<'a> {
        PlanFacts {
            claim: self.source_claim.as_deref(),
            volume: self.source_volume.as_deref(),
            snapshot,
            in_flight: false,
            probe: false,
            attributes_class: self.attributes_class.as_deref(),
        }
    }
}

/// The inputs of `claim`'s provisioning decision. `binds`: this process binds.
pub fn look_up(
    claim: &PersistentVolumeClaim,
    settings: &Settings,
    binds: bool,
    newer: Newer<'_>,
    lookup: &impl Lookup,
) -> Inputs {
    let class = plan::class_name(claim).and_then(|name| lookup.class(name));
    let volume = match newer.volume {
        Some(pv) => Some(Arc::new(pv.clone())),
        None => lookup.volume(&settings.naming.for_claim(claim)),
    };
    let (source_claim, source_volume) = match source::of(claim) {
        Source::Clone { name } => {
            let namespace = claim.metadata.namespace.as_deref().unwrap_or_default();
            let found = newer
                .source_claim
                .filter(|p| {
                    p.metadata.name.as_deref() == Some(name.as_str())
                        && p.metadata.namespace.as_deref() == Some(namespace)
                })
                .cloned()
                .or_else(|| lookup.claim(namespace, &name));
            let pv = found.as_ref().and_then(|c| c.named_volume()).and_then(|v| lookup.volume(v));
            (found, pv)
        }
        _ => (None, None),
    };
    let attributes_class = claim
        .wanted_attributes_class()
        .filter(|name| !name.is_empty())
        .and_then(|name| lookup.attributes_class(name));
    let binder_takes_ours = !binds
        && volume
            .as_ref()
            .and_then(|pv| pv.metadata.name.as_deref())
            .is_some_and(|name| lookup.binder_takes_only(claim, name));
    Inputs { class, volume, source_claim, source_volume, attributes_class, binder_takes_ours }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Listed {
        classes: BTreeMap<String, Arc<StorageClass>>,
        volumes: BTreeMap<String, Arc<PersistentVolume>>,
        claims: BTreeMap<(String, String), Arc<PersistentVolumeClaim>>,
        takes: bool,
    }

    impl Lookup for Listed {
        fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
            self.classes.get(name).cloned()
        }
        fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
            self.volumes.get(name).cloned()
        }
        fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
            self.claims.get(&(namespace.into(), name.into())).cloned()
        }
        fn attributes_class(&self, _: &str) -> Option<Arc<VolumeAttributesClass>> {
            None
        }
        fn binder_takes_only(&self, _: &PersistentVolumeClaim, _: &str) -> bool {
            self.takes
        }
    }

    #[test]
    fn the_pass_knows_better_than_the_lookup() {
        let settings = fixtures::settings();
        let clone = fixtures::pvc("c")
            .namespace("ns")
            .uid("u1")
            .with(json!({"spec": {"dataSource": {"kind": "PersistentVolumeClaim", "name": "src"}}}))
            .build();
        let own = settings.naming.for_claim(&clone);
        let stored_source = fixtures::pvc("src").namespace("ns").volume("pv-src").build();
        let mut listed = Listed { takes: true, ..Listed::default() };
        listed.volumes.insert(own.clone(), Arc::new(fixtures::pv(&own).build()));
        listed.volumes.insert("pv-src".into(), Arc::new(fixtures::pv("pv-src").build()));
        listed.claims.insert(("ns".into(), "src".into()), Arc::new(stored_source));

        let found = look_up(&clone, &settings, false, Newer::default(), &listed);
        assert_eq!(found.volume.as_ref().and_then(|v| v.metadata.name.clone()), Some(own.clone()));
        assert!(found.source_claim.is_some() && found.source_volume.is_some());
        assert!(found.binder_takes_ours, "beside the binder, asked of the lookup");
        assert!(!look_up(&clone, &settings, true, Newer::default(), &listed).binder_takes_ours);

        // What the pass made and protected wins over the lookup's copies.
        let made = fixtures::pv(&own).version("9").build();
        let protected = Arc::new(fixtures::pvc("src").namespace("ns").version("5").build());
        let newer = Newer { source_claim: Some(&protected), volume: Some(&made) };
        let found = look_up(&clone, &settings, false, newer, &listed);
        assert_eq!(
            found.volume.and_then(|v| v.metadata.resource_version.clone()),
            Some("9".into())
        );
        let source = found.source_claim.and_then(|c| c.metadata.resource_version.clone());
        assert_eq!(source, Some("5".into()));
        // A protected claim of another name is not the source.
        let other = Arc::new(fixtures::pvc("other").namespace("ns").build());
        let newer = Newer { source_claim: Some(&other), volume: None };
        let found = look_up(&clone, &settings, false, newer, &listed);
        assert_eq!(found.source_claim.and_then(|c| c.metadata.name.clone()), Some("src".into()));
    }
}
