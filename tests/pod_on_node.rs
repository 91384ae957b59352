//! A pod on a real node uses a volume we provisioned, as users run us: the sidecar with
//! default flags (`--binder=external`) beside kube-controller-manager's binder, hostpathplugin
//! as the node's and the controller's driver, and a kubelet, containerd and kube-scheduler
//! (tests/support/node). The pod writes into the volume, the claim grows while the pod runs
//! (our ControllerExpandVolume, then kubelet's NodeExpandVolume), and deleting the pod and the
//! claim leaves no volume in the driver.
//!
//! Also here: the plugin registrar the node uses in place of node-driver-registrar, checked
//! as kubelet talks to it.

mod support;

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};
use k8s_openapi::api::storage::v1::CSIDriver;
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams, PostParams};
use serde_json::json;

use support::cluster::{World, eventually};
use support::control_plane::fresh_plane;
use support::hostpath::Hostpath;
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use support::node::registrar::{self, Registrar, Verdict};
use support::node::{NODE_CONTROLLERS, NODE_NAME, Node, writer};

const LIMIT: Duration = Duration::from_secs(120);

/// The CSIDriver object kubelet reads for the driver: hostpathplugin publishes nothing in the
/// controller (no ControllerPublishVolume), so no attach step is asked for.
async fn create_csi_driver(world: &World<Hostpath>) {
    let driver: CSIDriver = serde_json::from_value(json!({
        "metadata": {"name": world.driver_name},
        "spec": {
            "attachRequired": false,
            "podInfoOnMount": true,
            "volumeLifecycleModes": ["Persistent"],
            "fsGroupPolicy": "File",
        },
    }))
    .unwrap();
    Api::<CSIDriver>::all(world.client.clone())
        .create(&PostParams::default(), &driver)
        .await
        .unwrap();
}

async fn pod_phase(pods: &Api<Pod>, name: &str) -> Option<String> {
    pods.get_opt(name).await.ok().flatten()?.status?.phase
}

/// Whether hostpathplugin's log shows `call` made to it (it logs every gRPC call it serves).
fn driver_served(driver: &Hostpath, call: &str) -> bool {
    std::fs::read_to_string(&driver.log).unwrap_or_default().contains(call)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_writes_grows_and_gives_back_a_volume_we_provisioned() {
    let pv = lifecycle("pod", "pod.csi.test", json!({})).await;
    assert!(pv.spec.and_then(|s| s.csi).is_some(), "a CSI PV");
}

/// CSI migration on the node: a claim of a `kubernetes.io/cinder` class, with hostpathplugin as
/// Cinder's CSI driver. We write the PV in-tree; kubelet mounts it through its own migration to
/// the CSI driver, and the same pod lifecycle holds (docs/compatibility.md, "CSI migration").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_uses_an_in_tree_volume_through_its_csi_driver() {
    let in_tree = json!({"provisioner": "kubernetes.io/cinder", "parameters": {"fsType": "ext4"}});
    let pv = lifecycle("migrated", "cinder.csi.openstack.org", in_tree).await;
    let spec = pv.spec.unwrap();
    assert!(spec.csi.is_none() && spec.cinder.is_some(), "an in-tree PV: {spec:?}");
}

/// A pod on the node writes into a volume of a class (`class` merged over the world's), the
/// claim grows while the pod runs, and the pod and the claim go, leaving no volume. The PV as
/// it was bound.
async fn lifecycle(name: &str, driver: &str, class: serde_json::Value) -> PersistentVolume {
    let plane = fresh_plane();
    let controllers = format!("{KCM_STORAGE_CONTROLLERS},{NODE_CONTROLLERS}");
    let _kcm = Kcm::start(plane, &controllers);
    let world = World::start_hostpath_as(plane, name, driver, NODE_NAME, &[], &[]).await;
    let node = Node::start(plane, &world.driver).await;
    create_csi_driver(&world).await;

    let mut fields = json!({"allowVolumeExpansion": true});
    support::cluster::merge(&mut fields, class);
    world.create_class("grow", fields).await;
    world.create_claim("data", "grow", "1Gi", json!({})).await;
    let (_, pv) = world.bound("data", LIMIT).await;
    let pv_name = pv.metadata.name.clone().unwrap();

    // The pod starts on the volume and writes into it.
    let pods: Api<Pod> = Api::namespaced(world.client.clone(), &world.namespace);
    pods.create(&PostParams::default(), &writer("data")).await.unwrap();
    let running = eventually(LIMIT, || async {
        (pod_phase(&pods, "writer").await.as_deref() == Some("Running")).then_some(())
    })
    .await;
    assert!(
        running.is_some(),
        "the pod is not Running: {:?}\n{}",
        pods.get_opt("writer").await.ok().flatten().and_then(|p| p.status),
        node.logs()
    );
    let said = eventually(LIMIT, || async {
        let logs = pods.logs("writer", &LogParams::default()).await.ok()?;
        logs.contains("wrote /data/hello").then_some(logs)
    })
    .await;
    assert!(said.is_some(), "the pod's log (read through kubelet) never said it wrote the file");
    let volume = world
        .driver
        .state_volumes()
        .into_iter()
        .find(|v| v.name == pv_name)
        .unwrap_or_else(|| panic!("{pv_name} is not in the driver's state"));
    let written = std::fs::read_to_string(std::path::Path::new(&volume.path).join("hello"));
    assert_eq!(
        written.ok().as_deref(),
        Some("written-by-a-pod\n"),
        "the file the pod wrote is not in the driver's volume {}",
        volume.path
    );
    assert!(driver_served(&world.driver, "NodePublishVolume"), "kubelet never published it");

    // The claim grows while the pod runs: ControllerExpandVolume (ours), then kubelet's
    // NodeExpandVolume, after which kubelet records the new size and no resize is pending.
    let grow = json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}});
    world.claims().patch("data", &PatchParams::default(), &Patch::Merge(&grow)).await.unwrap();
    let grown = world
        .claim_until("data", "grown to 2Gi by the controller and the node", LIMIT, |c| {
            let status = c.status.as_ref();
            let capacity = status
                .and_then(|s| s.capacity.as_ref())
                .and_then(|c| c.get("storage"))
                .map(|q| q.0.as_str());
            let settled = status.is_some_and(|s| {
                // Any condition but kube-controller-manager's `Unused` (1.37's pvc-protection).
                s.conditions.iter().flatten().all(|c| c.type_ == "Unused")
                    && s.allocated_resource_statuses.as_ref().is_none_or(|a| a.is_empty())
            });
            capacity == Some("2Gi") && settled
        })
        .await;
    assert!(driver_served(&world.driver, "NodeExpandVolume"), "kubelet never expanded on the node");
    let pv_now = world.volumes().get(&pv_name).await.unwrap();
    let pv_size = pv_now.spec.and_then(|s| s.capacity).and_then(|c| c.get("storage").cloned());
    assert_eq!(pv_size.map(|q| q.0), Some("2Gi".to_string()), "the PV's capacity");
    assert_eq!(
        world.driver.state_volumes().iter().find(|v| v.name == pv_name).map(|v| v.size),
        Some(2 << 30),
        "the driver's size of the volume"
    );
    assert_eq!(pod_phase(&pods, "writer").await.as_deref(), Some("Running"), "{grown:?}");

    // The pod goes (kubelet unpublishes), then the claim; the driver holds no volume after.
    pods.delete("writer", &DeleteParams::default()).await.unwrap();
    let gone =
        eventually(LIMIT, || async { pods.get_opt("writer").await.ok()?.is_none().then_some(()) });
    assert!(gone.await.is_some(), "the pod was never removed:\n{}", node.logs());
    assert!(driver_served(&world.driver, "NodeUnpublishVolume"), "kubelet never unpublished");
    world.claims().delete("data", &DeleteParams::default()).await.unwrap();
    assert!(world.volume_gone(&pv_name, LIMIT).await, "the PV was never deleted");
    let left =
        eventually(LIMIT, || async { world.driver.volume_ids().await.is_empty().then_some(()) });
    assert!(left.await.is_some(), "the driver still holds {:?}", world.driver.volume_ids().await);
    drop(node);
    assert!(
        !std::path::Path::new(support::node::KUBELET_ROOT).exists(),
        "the node left kubelet's root behind"
    );
    pv
}

/// The registrar answers GetInfo as kubelet expects of a CSI plugin, and reports kubelet's
/// verdict, a refusal with its reason included.
#[tokio::test]
async fn the_registrar_answers_as_kubelet_expects() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("reg.sock");
    let endpoint = dir.path().join("csi.sock");
    let log = dir.path().join("registrar.log");
    let registrar = Registrar::start(&socket, "hostpath.csi.k8s.io", &endpoint, &log).unwrap();
    let mut client = registrar_client(&socket).await;
    let info = client.get_info(registrar::proto::InfoRequest {}).await.unwrap().into_inner();
    assert_eq!(info.r#type, "CSIPlugin");
    assert_eq!(info.name, "hostpath.csi.k8s.io");
    assert_eq!(info.endpoint, endpoint.display().to_string());
    assert_eq!(info.supported_versions, vec!["1.0.0".to_string()]);
    assert_eq!(registrar.verdict(), None);
    let refused = registrar::proto::RegistrationStatus {
        plugin_registered: false,
        error: "version not supported".into(),
    };
    client.notify_registration_status(refused).await.unwrap();
    assert_eq!(registrar.verdict(), Some(Verdict::Refused("version not supported".into())));
    let accepted =
        registrar::proto::RegistrationStatus { plugin_registered: true, error: String::new() };
    client.notify_registration_status(accepted).await.unwrap();
    assert_eq!(registrar.verdict(), Some(Verdict::Registered));
    drop(registrar);
    assert!(!socket.exists(), "the registrar's socket outlived it");
}

/// A client for a registrar's socket, dialled as kubelet dials it.
async fn registrar_client(
    socket: &std::path::Path,
) -> registrar::proto::registration_client::RegistrationClient<tonic::transport::Channel> {
    let path = socket.to_path_buf();
    let channel = tonic::transport::Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await
        .unwrap();
    registrar::proto::registration_client::RegistrationClient::new(channel)
}
