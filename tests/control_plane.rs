//! The test control plane itself: a real kube-apiserver on etcd, enforcing RBAC, without the
//! protection admission plugin.

mod support;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{Api, PostParams};
use support::control_plane::{control_plane, create_namespace};

#[tokio::test]
async fn apiserver_is_real_and_ready() {
    let plane = control_plane();
    let client = plane.client().await;
    let version = client.apiserver_version().await.unwrap();
    // The release the peers were built from (peers/k8s, or the range's peers/k8s-<minor>).
    let built = std::process::Command::new(support::peers::peer("kube-apiserver"))
        .arg("--version")
        .output()
        .unwrap();
    let built = String::from_utf8_lossy(&built.stdout).trim().to_string();
    assert_eq!(built, format!("Kubernetes {}", version.git_version), "{version:?}");
    let minor: u32 = version.minor.parse().unwrap_or(0);
    assert!(version.major == "1" && minor >= 35, "older than the oldest supported: {version:?}");

    create_namespace(&client, "cp-smoke").await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client, "cp-smoke");
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "smoke"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    let created = claims.create(&PostParams::default(), &claim).await.unwrap();
    // StorageObjectInUseProtection is off: nothing would ever remove its finalizer here.
    assert!(created.metadata.finalizers.unwrap_or_default().is_empty());
    assert_eq!(created.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
}

#[tokio::test]
async fn a_token_without_rules_is_forbidden() {
    let plane = control_plane();
    let token = plane.service_account_token("cp-rbac", "nobody").await;
    let kubeconfig = plane.token_kubeconfig("nobody", &token);
    let client = support::control_plane::client_from_kubeconfig(&kubeconfig).await;
    let claims: Api<PersistentVolumeClaim> = Api::all(client);
    match claims.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => assert!(s.is_forbidden(), "{s:?}"),
        other => panic!("listing claims without RBAC rules must be forbidden, got {other:?}"),
    }
}

#[tokio::test]
async fn stores_follow_the_api() {
    use csi_pv_controller::cluster::Stores;
    use k8s_openapi::api::storage::v1::StorageClass;
    use kube::ResourceExt;
    use kube::runtime::reflector::ObjectRef;

    let plane = control_plane();
    let client = plane.client().await;
    create_namespace(&client, "cp-stores").await;
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let on_change: csi_pv_controller::cluster::stores::OnChange = {
        let heard = heard.clone();
        std::sync::Arc::new(move |change| {
            if let csi_pv_controller::cluster::stores::Change::Claim(c) = change {
                heard.lock().unwrap().push(c.name_any());
            }
        })
    };
    let (stores, watch) = Stores::watch(&client, on_change);
    let watching = tokio::spawn(watch);
    tokio::time::timeout(std::time::Duration::from_secs(30), stores.synced())
        .await
        .expect("stores did not sync")
        .unwrap();

    let class: StorageClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "stores-test"}, "provisioner": "fake.csi.test"
    }))
    .unwrap();
    Api::<StorageClass>::all(client.clone()).create(&PostParams::default(), &class).await.unwrap();
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "watched"},
        "spec": {"storageClassName": "stores-test", "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client, "cp-stores")
        .create(&PostParams::default(), &claim)
        .await
        .unwrap();

    let claim_ref = ObjectRef::<PersistentVolumeClaim>::new("watched").within("cp-stores");
    let mut seen = None;
    for _ in 0..100 {
        if let (Some(c), Some(_)) =
            (stores.claims.get(&claim_ref), stores.classes.get(&ObjectRef::new("stores-test")))
        {
            seen = Some(c);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let seen = seen.expect("the claim and class never reached the stores");
    assert!(seen.managed_fields().is_empty(), "managedFields are stripped to save memory");
    assert!(
        heard.lock().unwrap().iter().any(|n| n == "watched"),
        "the change callback hears of the new claim"
    );
    watching.abort();
}
