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
    assert_eq!(
        (version.major.as_str(), version.minor.as_str()),
        ("1", "36"),
        "{version:?}"
    );

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
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
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
