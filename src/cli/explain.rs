//! `csi-pv-controller explain <namespace>/<claim>` and `explain --all`: one look at the
//! cluster, and what `csi_pv_controller::explain` makes of it. The driver at `--csi-address`,
//! when it answers within two seconds, gives its capabilities for its own claims; claims of
//! other drivers, or with no driver there, are judged as if every capability were present.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{StorageClass, VolumeAttributesClass};
use kube::api::{Api, ListParams};

use csi_pv_controller::binder::{VolumeIndex, claim::ClaimView, matching};
use csi_pv_controller::config::Config;
use csi_pv_controller::config::features;
use csi_pv_controller::csi::{ControllerCapability, CsiClient, DriverInfo};
use csi_pv_controller::expand::{Expander, Resizer};
use csi_pv_controller::explain::{self, Facts};
use csi_pv_controller::model::ClaimExt;
use csi_pv_controller::model::copy::ClaimCopy;
use csi_pv_controller::provision::claim::ClaimContext;
use csi_pv_controller::provision::inputs::{self, Lookup, Newer};
use csi_pv_controller::provision::snapshot::SnapshotLookup;
use csi_pv_controller::provision::source::{self, Source};

/// How long the driver may take to answer before it is left out.
const DRIVER_LIMIT: Duration = Duration::from_secs(2);

/// Everything read from the cluster and the driver, once.
struct Cluster {
    client: kube::Client,
    claims: Vec<PersistentVolumeClaim>,
    classes: Vec<StorageClass>,
    volumes: VolumeIndex,
    by_name: HashMap<String, PersistentVolume>,
    attributes: Vec<VolumeAttributesClass>,
    driver: Option<DriverInfo>,
}

/// `explain <namespace>/<claim>` (`target`), or with `all` one line per unsettled claim.
pub async fn run(config: &Config, target: Option<&str>, all: bool) -> anyhow::Result<()> {
    let wanted = match (target, all) {
        (Some(target), false) => Some(
            target
                .split_once('/')
                .filter(|(ns, n)| !ns.is_empty() && !n.is_empty())
                .context("expected <namespace>/<claim>")?,
        ),
        (None, true) => None,
        _ => anyhow::bail!("give either <namespace>/<claim> or --all"),
    };
    let cluster = read(config).await?;
    let now = csi_pv_controller::model::condition_time(k8s_openapi::jiff::Timestamp::now());
    let note = match &cluster.driver {
        Some(d) => format!("driver at --csi-address: {}", d.name),
        None => "no driver answered at --csi-address: every capability is assumed present".into(),
    };
    eprintln!("{note}");
    let Some((namespace, name)) = wanted else {
        let mut unsettled = 0;
        for claim in &cluster.claims {
            let snapshot = restored_snapshot(&cluster.client, claim).await;
            with_facts(config, &cluster, claim, snapshot.as_ref(), &now, |facts| {
                if !explain::line(facts).settled() {
                    unsettled += 1;
                    println!("{}", explain::one_line(facts));
                }
            });
        }
        eprintln!("{unsettled} of {} claims not settled", cluster.claims.len());
        return Ok(());
    };
    let claim = cluster
        .claims
        .iter()
        .find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace)
                && c.metadata.name.as_deref() == Some(name)
        })
        .with_context(|| format!("claim {namespace}/{name} not found"))?;
    let snapshot = restored_snapshot(&cluster.client, claim).await;
    let print = |facts: &Facts<'_>| print!("{}", explain::report(facts));
    with_facts(config, &cluster, claim, snapshot.as_ref(), &now, print);
    Ok(())
}

async fn read(config: &Config) -> anyhow::Result<Cluster> {
    let client = super::client(config, "explain").await?;
    let all = ListParams::default();
    let claims = Api::<PersistentVolumeClaim>::all(client.clone())
        .list(&all)
        .await
        .context("cannot list PersistentVolumeClaims")?
        .items;
    let classes = Api::<StorageClass>::all(client.clone())
        .list(&all)
        .await
        .context("cannot list StorageClasses")?
        .items;
    let pvs = Api::<PersistentVolume>::all(client.clone())
        .list(&all)
        .await
        .context("cannot list PersistentVolumes")?
        .items;
    // Clusters that do not serve VolumeAttributesClass have none to change to.
    let attributes = Api::<VolumeAttributesClass>::all(client.clone())
        .list(&all)
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    let mut volumes = VolumeIndex::default();
    let mut by_name = HashMap::new();
    for pv in pvs {
        volumes.upsert(&pv);
        by_name.insert(pv.metadata.name.clone().unwrap_or_default(), pv);
    }
    let driver = driver(config).await;
    Ok(Cluster { client, claims, classes, volumes, by_name, attributes, driver })
}

/// The VolumeSnapshot the claim restores, read as the controller reads it; None when it
/// restores none. A read that fails is said as unreadable.
async fn restored_snapshot(
    client: &kube::Client,
    claim: &PersistentVolumeClaim,
) -> Option<SnapshotLookup> {
    let Source::Snapshot { name } = source::of(claim) else {
        return None;
    };
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    Some(
        csi_pv_controller::cluster::snapshots::lookup(client, &namespace, &name)
            .await
            .unwrap_or_else(|(action, e)| {
                SnapshotLookup::Unreadable(format!("cannot {action}: {e}"))
            }),
    )
}

/// The driver at `--csi-address`, if it answers in time.
async fn driver(config: &Config) -> Option<DriverInfo> {
    let csi = CsiClient::new(&config.csi_address, DRIVER_LIMIT).ok()?;
    let asked = async {
        csi.wait_ready(Some(DRIVER_LIMIT)).await.ok()?;
        csi.discover().await.ok()
    };
    tokio::time::timeout(DRIVER_LIMIT * 2, asked).await.ok().flatten()
}

/// Builds the decisions' facts for `claim` and hands them to `use_facts`.
fn with_facts(
    config: &Config,
    cluster: &Cluster,
    claim: &PersistentVolumeClaim,
    snapshot: Option<&SnapshotLookup>,
    now: &str,
    use_facts: impl FnOnce(&Facts<'_>),
) {
    let class = cluster.class_named(claim.class());
    let default =
        matching::default_class(cluster.classes.iter()).and_then(|c| c.metadata.name.clone());
    let driver_name = class
        .map(|c| c.provisioner.clone())
        .or_else(|| claim.provisioner().map(str::to_string))
        .unwrap_or_default();
    let info = cluster.driver.as_ref().filter(|d| d.name == driver_name);
    // No driver to ask: every capability is assumed.
    let gates = &config.feature_gates;
    let features = info.map_or_else(|| features::assumed(gates), |d| features::features(d, gates));
    let expander = Expander::of(
        info.is_none_or(|d| d.controller.has(ControllerCapability::ExpandVolume)),
        info.is_some_and(|d| d.node_expansion),
    );
    let settings = config.settings(&driver_name, String::new());
    let binds = config.binder().binds();
    let named = claim.named_volume().and_then(|v| cluster.by_name.get(v));
    // The controller's own lookup rules, over the listed cluster.
    let found = inputs::look_up(claim, &settings, binds, Newer::default(), cluster);
    let lookup = |name: &str| cluster.attributes_class_named(name).cloned();
    let facts = Facts {
        claim,
        binder: ClaimView { class, default_class: default.as_deref(), volumes: &cluster.volumes },
        provisioning: ClaimContext {
            settings: &settings,
            features,
            class: found.class.as_deref(),
            volume: found.volume.as_deref(),
            facts: found.plan_facts(snapshot),
            binds,
            // The journal lives beside the running controller, not here.
            journaled: false,
            binder_takes_ours: found.binder_takes_ours,
            copy: ClaimCopy::Live,
            hold: None,
            now: std::time::Instant::now(),
        },
        volume: named,
        resizer: Resizer {
            driver: &driver_name,
            expander,
            handle_in_use: config.handle_volume_inuse_error,
            annotate_fs_resize: config.feature_gates.annotate_fs_resize,
        },
        attributes_class: &lookup,
        now,
        clock: std::time::Instant::now(),
    };
    use_facts(&facts);
}

impl Cluster {
    fn class_named(&self, name: &str) -> Option<&StorageClass> {
        self.classes.iter().find(|c| c.metadata.name.as_deref() == Some(name))
    }

    fn attributes_class_named(&self, name: &str) -> Option<&VolumeAttributesClass> {
        self.attributes.iter().find(|a| a.metadata.name.as_deref() == Some(name))
    }
}

/// The provisioning decision's inputs, from the listing (`provision::inputs`).
impl Lookup for Cluster {
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.class_named(name).cloned().map(Arc::new)
    }

    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.by_name.get(name).cloned().map(Arc::new)
    }

    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        let found = self.claims.iter().find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace)
                && c.metadata.name.as_deref() == Some(name)
        });
        found.cloned().map(Arc::new)
    }

    fn attributes_class(&self, name: &str) -> Option<Arc<VolumeAttributesClass>> {
        self.attributes_class_named(name).cloned().map(Arc::new)
    }

    fn binder_takes_only(&self, claim: &PersistentVolumeClaim, volume: &str) -> bool {
        matching::ClaimFacts::of(claim).is_ok_and(|f| self.volumes.takes_only(&f, volume))
    }
}
