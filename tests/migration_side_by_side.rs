//! CSI migration side by side with the Go sidecars it replaces: the same in-tree StorageClasses
//! and claims on two control planes, each with kube-controller-manager's binder and expander and
//! hostpathplugin registered as OpenStack Cinder's CSI driver behind a relay that records every
//! call; on one csi-provisioner v6.3.0 and csi-resizer v2.2.0, on the other ours. Each claim is
//! provisioned, grown and deleted (or released, under Retain). The PVs as written (spec,
//! annotations, labels, finalizers, node affinity), the CreateVolume, ControllerExpandVolume and
//! DeleteVolume requests and the claims' event reasons must be equal once names, UIDs, volume
//! IDs and times are normalized: one row per class shape.

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use csi_pv_controller::csi::v1 as csi;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Patch, PatchParams};
use prost::Message;
use serde_json::{Value, json};

use support::cluster::{World, eventually};
use support::relayed::{Beside, Relayed};
use support::upstream::Upstream;

use csi_pv_controller::migration::Plugin;

const LIMIT: Duration = Duration::from_secs(120);
const NAMESPACE: &str = "mig-diff";

/// (row, class fields beyond the in-tree provisioner, grown)
type Shape = (&'static str, Value, bool);

/// Cinder's rows: parameters renamed, zones, Retain.
fn cinder_shapes() -> Vec<Shape> {
    let zones = json!([{"matchLabelExpressions": [
        {"key": "topology.kubernetes.io/zone", "values": ["nova"]}]}]);
    vec![
        (
            "parameters and fsType, Delete, grown",
            json!({"parameters": {"fsType": "xfs", "availability": "nova", "type": "ssd"}, "allowVolumeExpansion": true}),
            true,
        ),
        ("no parameters, Retain", json!({"reclaimPolicy": "Retain"}), false),
        ("allowedTopologies in the GA zone key", json!({"allowedTopologies": zones}), false),
        (
            "mount options, FSTYPE spelled in capitals",
            json!({"parameters": {"FSTYPE": "ext3"}, "mountOptions": ["noatime"]}),
            false,
        ),
    ]
}

/// What one stack did with the claim of one row, normalized.
#[derive(Debug, Default, PartialEq)]
struct Row {
    pv: Value,
    create: Value,
    expand: Value,
    delete: Value,
    events: Vec<String>,
}

fn class_name(i: usize) -> String {
    format!("shape-{i}")
}

/// A PV with the plane's names, UIDs, times and the driver's volume ID taken out.
fn normalized_pv(pv: &PersistentVolume, volume_id: &str) -> Value {
    let mut v = serde_json::to_value(pv).unwrap();
    v["status"] = Value::Null;
    let meta = v["metadata"].as_object_mut().unwrap();
    for field in ["uid", "resourceVersion", "creationTimestamp", "managedFields", "name"] {
        meta.remove(field);
    }
    let r = &mut v["spec"]["claimRef"];
    for field in ["uid", "resourceVersion"] {
        r.as_object_mut().map(|r| r.remove(field));
    }
    let text = v.to_string().replace(volume_id, "<volume>");
    serde_json::from_str(&text).unwrap()
}

/// A request with the volume's name and ID taken out.
fn normalized<M: Message + serde_debug::Fields>(
    request: Option<&M>,
    name: &str,
    volume_id: &str,
) -> Value {
    match request {
        None => Value::Null,
        Some(r) => {
            let text = r.fields().replace(volume_id, "<volume>").replace(name, "<name>");
            Value::String(text)
        }
    }
}

mod serde_debug {
    /// A request's fields as text, in a form that does not depend on map order.
    pub trait Fields {
        fn fields(&self) -> String;
    }

    fn sorted<K: std::fmt::Debug + Ord, V: std::fmt::Debug>(
        map: &std::collections::HashMap<K, V>,
    ) -> String {
        let mut entries: Vec<(&K, &V)> = map.iter().collect();
        entries.sort_by(|a, b| a.0.cmp(b.0));
        format!("{entries:?}")
    }

    impl Fields for super::csi::CreateVolumeRequest {
        fn fields(&self) -> String {
            format!(
                "name={} capacity={:?} capabilities={:?} parameters={} secrets={} source={:?} topology={:?} mutable={}",
                self.name,
                self.capacity_range,
                self.volume_capabilities,
                sorted(&self.parameters),
                self.secrets.len(),
                self.volume_content_source,
                self.accessibility_requirements,
                sorted(&self.mutable_parameters)
            )
        }
    }

    impl Fields for super::csi::ControllerExpandVolumeRequest {
        fn fields(&self) -> String {
            format!(
                "id={} capacity={:?} capability={:?} secrets={}",
                self.volume_id,
                self.capacity_range,
                self.volume_capability,
                self.secrets.len()
            )
        }
    }

    impl Fields for super::csi::DeleteVolumeRequest {
        fn fields(&self) -> String {
            format!("id={} secrets={}", self.volume_id, self.secrets.len())
        }
    }
}

/// One stack through every row: the claims made, bound, grown, deleted; what it did, per row.
/// `ours`: the calls are ours, held to one CreateVolume and at most one DeleteVolume per claim
/// (upstream's are what they are, and only compared).
async fn run(world: &World<Relayed>, plugin: Plugin, shapes: &[Shape], ours: bool) -> Vec<Row> {
    for (i, (_, extra, _)) in shapes.iter().cloned().enumerate() {
        let mut class = json!({"provisioner": plugin.in_tree_name()});
        support::cluster::merge(&mut class, extra);
        world.create_class(&class_name(i), class).await;
        world.create_claim(&format!("claim-{i}"), &class_name(i), "1Gi", json!({})).await;
    }
    let mut written = Vec::new();
    for (i, (_, _, grown)) in shapes.iter().cloned().enumerate() {
        let claim = format!("claim-{i}");
        let (_, pv) = world.bound(&claim, LIMIT).await;
        // kube-controller-manager's binder marks the PV migrated; the PV is read after it did.
        let name = pv.metadata.name.clone().unwrap();
        let pv = eventually(LIMIT, || async {
            let pv = world.volumes().get_opt(&name).await.ok()??;
            pv.metadata
                .annotations
                .as_ref()?
                .contains_key("pv.kubernetes.io/migrated-to")
                .then_some(pv)
        })
        .await
        .unwrap_or_else(|| panic!("PV {name} never marked migrated"));
        if grown {
            let patch = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
            world
                .claims()
                .patch(&claim, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .unwrap();
            let done = eventually(LIMIT, || async {
                let pv = world.volumes().get_opt(&name).await.ok()??;
                (pv.spec?.capacity?.get("storage")?.0 == "2Gi").then_some(())
            })
            .await;
            assert!(done.is_some(), "claim {claim} not grown");
        }
        written.push((claim, pv));
    }
    for (claim, _) in &written {
        world.claims().delete(claim, &Default::default()).await.unwrap();
    }
    let relay = world.relay();
    let settled = eventually(LIMIT, || async {
        let retained = shapes.iter().filter(|(_, c, _)| c["reclaimPolicy"] == "Retain").count();
        (world.hostpath().state_volumes().len() == retained).then_some(())
    })
    .await;
    assert!(settled.is_some(), "volumes left: {:?}", world.hostpath().state_volumes());
    let creates = relay.requests::<csi::CreateVolumeRequest>("CreateVolume");
    let expands = relay.requests::<csi::ControllerExpandVolumeRequest>("ControllerExpandVolume");
    let deletes = relay.requests::<csi::DeleteVolumeRequest>("DeleteVolume");
    let mut rows = Vec::new();
    for (claim, pv) in &written {
        let name = pv.metadata.name.clone().unwrap();
        let id = match csi_pv_controller::migration::volume_handle(pv) {
            Some(Ok(id)) => id,
            other => panic!("PV {name} of {plugin:?} has no volume ID: {other:?}"),
        };
        // Events are written after the object they report on: wait for the last one.
        let reported = || async {
            let events = world.events(claim).await;
            events.iter().any(|(_, reason, _)| reason == "ProvisioningSucceeded").then_some(events)
        };
        let events = eventually(Duration::from_secs(30), reported).await;
        let mut events: Vec<String> = events
            .unwrap_or_default()
            .into_iter()
            .map(|(kind, reason, _)| format!("{kind} {reason}"))
            .collect();
        events.sort();
        events.dedup();
        let of = |d: &csi::DeleteVolumeRequest| d.volume_id == id;
        rows.push(Row {
            pv: normalized_pv(pv, &id),
            create: normalized(creates.iter().find(|c| c.name == name), &name, &id),
            expand: normalized(expands.iter().find(|e| e.volume_id == id), &name, &id),
            delete: normalized(deletes.iter().find(|d| of(d)), &name, &id),
            events,
        });
        let calls = (
            creates.iter().filter(|c| c.name == name).count(),
            deletes.iter().filter(|d| of(d)).count(),
        );
        assert!(
            !ours || (calls.0 == 1 && calls.1 <= 1),
            "{claim}: CreateVolume and DeleteVolume sent {calls:?} times"
        );
    }
    rows
}

/// Both stacks through `shapes` of `plugin`, hostpathplugin registered as its CSI driver;
/// `setup` runs on each plane first (e.g. the Secrets a class names).
async fn side_by_side<F, Fut>(
    plugin: Plugin,
    flags: &[&str],
    shapes: Vec<Shape>,
    setup: F,
) -> Vec<Row>
where
    F: Fn(kube::Client) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ours_args = ["--extra-create-metadata"];
    let mut upstream_world =
        Beside::start_as(NAMESPACE, plugin.csi_driver(), flags, &ours_args).await;
    assert_eq!(upstream_world.sidecar.terminate(Duration::from_secs(20)).await, Some(0));
    setup(upstream_world.client.clone()).await;
    let socket = upstream_world.dir.path().join("relay.sock");
    let dir = upstream_world.dir.path();
    let go = Upstream::start(&upstream_world.plane.admin_kubeconfig, &socket, dir, "go", &[]);
    let theirs = run(&upstream_world, plugin, &shapes, false).await;
    drop(go);
    let ours_world = Beside::start_as(NAMESPACE, plugin.csi_driver(), flags, &ours_args).await;
    setup(ours_world.client.clone()).await;
    let ours = run(&ours_world, plugin, &shapes, true).await;

    let mut table = BTreeMap::new();
    let mut differing = Vec::new();
    for (((row, _, _), theirs), ours) in shapes.iter().zip(&theirs).zip(&ours) {
        let equal = theirs == ours;
        table.insert(*row, if equal { "equal" } else { "differs" });
        if !equal {
            differing.push(format!("{row}:\n  upstream: {theirs:#?}\n  ours:     {ours:#?}"));
        }
    }
    println!("side by side, {plugin:?} rows: {table:#?}");
    assert_eq!((theirs.len(), ours.len()), (shapes.len(), shapes.len()));
    assert!(differing.is_empty(), "{}", differing.join("\n"));
    ours
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cinder_classes_and_volumes_as_csi_provisioner_and_csi_resizer_leave_them() {
    let rows = side_by_side(Plugin::Cinder, &[], cinder_shapes(), |_| async {}).await;
    assert!(rows[0].expand.is_string() && rows[0].delete.is_string(), "grown and deleted");
    assert!(rows[1].delete.is_null(), "Retain: never deleted");
}

/// Portworx: its auth secret named in the class becomes every CSI secret, so the provisioner
/// reads it and CreateVolume carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn portworx_classes_and_volumes_as_csi_provisioner_and_csi_resizer_leave_them() {
    let shapes = vec![
        (
            "a parameter, Delete, grown",
            json!({"parameters": {"repl": "2"}, "allowVolumeExpansion": true}),
            true,
        ),
        (
            "the auth secret",
            json!({"parameters": {
            "openstorage.io/auth-secret-name": "px-auth",
            "openstorage.io/auth-secret-namespace": NAMESPACE}}),
            false,
        ),
    ];
    let rows = side_by_side(Plugin::Portworx, &[], shapes, |client| async move {
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "metadata": {"name": "px-auth"}, "stringData": {"token": "not-a-real-token"}}))
        .unwrap();
        let api = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client, NAMESPACE);
        api.create(&Default::default(), &secret).await.unwrap();
    })
    .await;
    let carried = |row: &Row| row.create.as_str().is_some_and(|c| c.contains(" secrets=1 "));
    assert!(!carried(&rows[0]) && carried(&rows[1]), "the auth secret reaches CreateVolume");
}

/// AWS EBS, the default `gp2` class of every EKS cluster: hostpathplugin stands in with its
/// topology off (its node key names no zone, so no region could be worked out for the in-tree
/// PV), its IDs taken as EBS IDs as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ebs_classes_and_volumes_as_csi_provisioner_and_csi_resizer_leave_them() {
    let shapes = vec![
        (
            "gp2 as EKS ships it, grown",
            json!({"parameters": {"type": "gp2", "fsType": "ext4"}, "allowVolumeExpansion": true}),
            true,
        ),
        (
            "iopsPerGB and encryption",
            json!({"parameters": {"type": "io1", "iopsPerGB": "10", "encrypted": "true"}}),
            false,
        ),
        (
            "a zone parameter, Retain",
            json!({"parameters": {"zone": "us-east-1a"}, "reclaimPolicy": "Retain"}),
            false,
        ),
    ];
    let flags = ["--enable-topology=false"];
    let rows = side_by_side(Plugin::AwsEbs, &flags, shapes, |_| async {}).await;
    let create = rows[1].create.as_str().unwrap_or_default();
    assert!(create.contains("\"allowautoiopspergbincrease\", \"true\""), "{create}");
}
