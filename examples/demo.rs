//! `make demo`: a real kube-apiserver on etcd, a CSI driver on a unix socket and csi-pv-controller
//! beside it, narrated, left running until Ctrl-C.
//!
//! The driver is our fake (tests/support/fake_driver.rs): csi-driver-host-path cannot be built on
//! these machines (see README, "Peers"). The demo applies a StorageClass and a claim and narrates
//! the lifecycle: Pending → volume created → Bound → request raised → expanded → claim deleted →
//! volume gone. With DEMO_EXIT=1 it exits 0 after that (CI); otherwise it stays up until Ctrl-C.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use support::control_plane::control_plane;
use support::fake_driver::{DriverConfig, FakeDriver};
use support::sidecar::Sidecar;

#[tokio::main]
async fn main() {
    println!("==> starting etcd and kube-apiserver (built by `make peers`)");
    let plane = tokio::task::spawn_blocking(control_plane)
        .await
        .expect("control plane");
    println!("    kube-apiserver ready at {}", plane.server);

    let work = plane.dir.join("demo");
    std::fs::create_dir_all(&work).expect("demo folder");
    let socket = work.join("csi.sock");
    let driver = FakeDriver::start(&socket, DriverConfig::default())
        .await
        .expect("fake driver");
    println!(
        "==> CSI driver {:?} serving on {}",
        driver.config().name,
        socket.display()
    );

    println!("==> starting csi-pv-controller");
    let mut sidecar = Sidecar::start(
        &work,
        &[
            format!("--csi-address={}", driver.endpoint()),
            format!("--kubeconfig={}", plane.admin_kubeconfig.display()),
            // No kube-controller-manager runs here: the sidecar is the binder of its claims.
            "--binder=driver".to_string(),
        ],
    );
    if !sidecar.wait_ready(Duration::from_secs(60)).await {
        eprintln!(
            "csi-pv-controller did not become ready; its log:\n{}",
            sidecar.log_text()
        );
        std::process::exit(1);
    }
    for line in sidecar
        .log_text()
        .lines()
        .filter(|l| l.contains("discovered") || l.contains("ready"))
    {
        println!("    sidecar: {line}");
    }
    println!(
        "==> csi-pv-controller is ready: http://127.0.0.1:{}/readyz answers 200",
        sidecar.http_port
    );
    let client = plane.client().await;
    if let Err(step) = lifecycle(&client, &driver).await {
        eprintln!("demo failed: {step}\nsidecar log:\n{}", sidecar.log_text());
        std::process::exit(1);
    }
    if std::env::var("DEMO_EXIT").is_ok_and(|v| v == "1") {
        println!("==> DEMO_EXIT=1: stopping");
        let code = sidecar.terminate(Duration::from_secs(20)).await;
        println!("    csi-pv-controller exited with {code:?}");
        drop(driver);
        let _ = std::fs::remove_dir_all(&plane.dir);
        std::process::exit(if code == Some(0) { 0 } else { 1 });
    }
    println!();
    println!("The cluster stays up. Try:");
    println!(
        "    kubectl --kubeconfig={} get storageclasses,pv,pvc -A",
        plane.admin_kubeconfig.display()
    );
    println!("    tail -f {}", sidecar.log.display());
    println!("Ctrl-C tears it all down.");
    let _ = tokio::signal::ctrl_c().await;
    println!("\n==> stopping");
    let _ = sidecar.terminate(Duration::from_secs(15)).await;
    drop(driver);
    let _ = std::fs::remove_dir_all(&plane.dir);
}

const LIMIT: Duration = Duration::from_secs(60);

/// Polls `check` every 100 ms until it gives Some, or fails with `what` after LIMIT.
async fn until<T, F, Fut>(what: &str, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if start.elapsed() > LIMIT {
            return Err(format!("{what} did not happen within {LIMIT:?}"));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn phase(c: &PersistentVolumeClaim) -> String {
    c.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "(none)".into())
}

fn capacity(c: &PersistentVolumeClaim) -> String {
    c.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref()?.get("storage").map(|q| q.0.clone()))
        .unwrap_or_default()
}

/// The narrated lifecycle of one claim.
async fn lifecycle(client: &kube::Client, driver: &FakeDriver) -> Result<(), String> {
    let fail = |what: &str| {
        let what = what.to_string();
        move |e: kube::Error| format!("{what}: {e}")
    };
    let pp = PostParams::default();
    let namespace: Namespace =
        serde_json::from_value(json!({"metadata": {"name": "demo"}})).map_err(|e| e.to_string())?;
    Api::<Namespace>::all(client.clone())
        .create(&pp, &namespace)
        .await
        .map_err(fail("create namespace demo"))?;
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": "demo-fast"},
        "provisioner": driver.config().name,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": true,
    }))
    .map_err(|e| e.to_string())?;
    Api::<StorageClass>::all(client.clone())
        .create(&pp, &class)
        .await
        .map_err(fail("create StorageClass"))?;
    println!(
        "==> applied StorageClass demo-fast (provisioner {}, expandable)",
        driver.config().name
    );

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "demo");
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {
            "storageClassName": "demo-fast",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }))
    .map_err(|e| e.to_string())?;
    let started = Instant::now();
    claims
        .create(&pp, &claim)
        .await
        .map_err(fail("create claim"))?;
    println!("==> created claim demo/data asking for 1Gi");
    let mut seen = String::new();
    let mut volume_seen = false;
    let bound = loop {
        if started.elapsed() > LIMIT {
            return Err(format!("claim demo/data not Bound within {LIMIT:?}"));
        }
        if let Ok(Some(c)) = claims.get_opt("data").await {
            let p = phase(&c);
            if p != seen {
                println!("    claim phase: {p}");
                seen = p.clone();
            }
            if !volume_seen && let Some(v) = driver.volumes().first() {
                println!(
                    "    driver: CreateVolume made volume {} ({} bytes)",
                    v.id, v.capacity_bytes
                );
                volume_seen = true;
            }
            if p == "Bound" {
                break c;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let pv_name = bound
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .unwrap_or_default();
    println!(
        "==> Bound to PersistentVolume {pv_name} after {:?}",
        started.elapsed()
    );

    claims
        .patch(
            "data",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"resources": {"requests": {"storage": "2Gi"}}}})),
        )
        .await
        .map_err(fail("raise the request"))?;
    println!("==> raised the request to 2Gi");
    let started = Instant::now();
    until("claim capacity 2Gi", || async {
        let c = claims.get_opt("data").await.ok()??;
        (capacity(&c) == "2Gi").then_some(())
    })
    .await?;
    let size = driver
        .volumes()
        .first()
        .map(|v| v.capacity_bytes)
        .unwrap_or_default();
    println!(
        "==> expanded: claim capacity 2Gi, driver volume {size} bytes, after {:?}",
        started.elapsed()
    );

    claims
        .delete("data", &DeleteParams::default())
        .await
        .map_err(fail("delete the claim"))?;
    println!("==> deleted claim demo/data (reclaim policy Delete)");
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let started = Instant::now();
    until("PV and driver volume gone", || async {
        let pv_gone = pvs.get_opt(&pv_name).await.ok()?.is_none();
        (pv_gone && driver.volumes().is_empty()).then_some(())
    })
    .await?;
    println!(
        "==> PersistentVolume {pv_name} and the driver's volume are gone, after {:?}",
        started.elapsed()
    );
    Ok(())
}
