//! The shipped mode on a control plane a test owns (to restart its apiserver or compact its
//! etcd): kube-controller-manager's storage controllers, hostpathplugin with its node
//! registered, the sidecar with deploy/'s flags, and an Immediate class `class` of the driver.

use std::time::Duration;

use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use serde_json::json;

use super::cluster::INTENT_JOURNAL;
use super::control_plane::{ControlPlane, client_from_kubeconfig, create_namespace};
use super::hostpath::{Hostpath, HostpathConfig};
use super::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use super::sidecar::Sidecar;

pub struct OwnedBeside {
    pub client: kube::Client,
    pub hostpath: Hostpath,
    pub sidecar: Sidecar,
    pub kcm: Kcm,
    pub dir: tempfile::TempDir,
}

impl OwnedBeside {
    /// Everything in namespace `namespace`, the driver named `<namespace>.csi.test`.
    pub async fn start(plane: &ControlPlane, namespace: &str, class: &str) -> OwnedBeside {
        let kcm = Kcm::start(plane, KCM_STORAGE_CONTROLLERS);
        let dir = tempfile::tempdir().unwrap();
        let driver = format!("{namespace}.csi.test");
        let config = HostpathConfig {
            node_id: format!("node-{namespace}"),
            ..HostpathConfig::named(&driver)
        };
        let hostpath = Hostpath::start(dir.path(), config).await;
        let client = client_from_kubeconfig(&plane.admin_kubeconfig).await;
        create_namespace(&client, namespace).await;
        hostpath.register_node(&client).await.unwrap_or_else(|e| panic!("{e}"));
        let args = [
            format!("--kubeconfig={}", plane.admin_kubeconfig.display()),
            format!("--csi-address={}", hostpath.endpoint()),
            // The journal in this test's folder, as `World` places it.
            INTENT_JOURNAL.replace("{dir}", &dir.path().display().to_string()),
        ];
        let mut sidecar = Sidecar::start(dir.path(), &args);
        assert!(sidecar.wait_ready(Duration::from_secs(60)).await, "{}", sidecar.log_text());
        let class: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": class}, "provisioner": driver,
            "reclaimPolicy": "Delete", "volumeBindingMode": "Immediate",
        }))
        .unwrap();
        Api::<StorageClass>::all(client.clone())
            .create(&PostParams::default(), &class)
            .await
            .unwrap();
        OwnedBeside { client, hostpath, sidecar, kcm, dir }
    }
}
