//! `make demo`: a real kube-apiserver on etcd, kube-controller-manager with its storage
//! controllers, csi-driver-host-path's hostpathplugin on a unix socket and csi-pv-controller
//! beside it, narrated, left running until Ctrl-C: the cluster as users run it.
//!
//! The demo applies a StorageClass and a claim and narrates the lifecycle, showing the volume in
//! the driver's state at each step: Pending → volume created → Bound → request raised →
//! expanded (the node's part pending: no kubelet runs here) → claim deleted → volume gone.
//! `DEMO_DRIVER=fake` runs our fake driver instead, and kube-controller-manager without its
//! binder (the sidecar then binds, `--binder=driver`). With DEMO_EXIT=1 it exits 0 after the lifecycle (CI);
//! otherwise it stays up until Ctrl-C.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use support::control_plane::fresh_plane;
use support::fake_driver::{DriverConfig, FakeDriver};
use support::hostpath::{Hostpath, HostpathConfig};
use support::kcm::{KCM_STORAGE_CONTROLLERS, Kcm};
use support::sidecar::Sidecar;

/// The driver the demo runs, and how to show what it holds.
enum Driver {
    Hostpath(Box<Hostpath>),
    Fake(FakeDriver),
}

impl Driver {
    fn name(&self) -> String {
        match self {
            Driver::Hostpath(h) => h.config.driver_name.clone(),
            Driver::Fake(f) => f.config().name.clone(),
        }
    }

    fn endpoint(&self) -> String {
        match self {
            Driver::Hostpath(h) => h.endpoint(),
            Driver::Fake(f) => f.endpoint(),
        }
    }

    /// (id, bytes, where) of every volume the driver holds.
    fn volumes(&self) -> Vec<(String, i64, String)> {
        match self {
            Driver::Hostpath(h) => {
                h.state_volumes().into_iter().map(|v| (v.id, v.size, v.path)).collect()
            }
            Driver::Fake(f) => f
                .volumes()
                .into_iter()
                .map(|v| (v.id, v.capacity_bytes, "in memory".to_string()))
                .collect(),
        }
    }

    /// One line per volume, as the driver's state has it.
    fn show(&self) {
        let volumes = self.volumes();
        let place = match self {
            Driver::Hostpath(h) => format!("{}/state.json", h.state_dir.display()),
            Driver::Fake(_) => "the fake driver's memory".to_string(),
        };
        if volumes.is_empty() {
            println!("    driver state ({place}): no volume");
        }
        for (id, bytes, path) in volumes {
            println!("    driver state ({place}): volume {id}, {bytes} bytes, at {path}");
        }
    }
}

#[tokio::main]
async fn main() {
    let fake = std::env::var("DEMO_DRIVER").is_ok_and(|d| d == "fake");
    println!("==> starting etcd and kube-apiserver (built by `make peers`)");
    let plane = tokio::task::spawn_blocking(fresh_plane).await.expect("control plane");
    println!("    kube-apiserver ready at {}", plane.server);
    // With the fake driver the sidecar binds, so kube-controller-manager runs only the
    // protection controllers (the plane keeps their admission plugin on, as real clusters do).
    let controllers = if fake {
        "persistentvolumeclaim-protection-controller,persistentvolume-protection-controller"
    } else {
        KCM_STORAGE_CONTROLLERS
    };
    println!("==> starting kube-controller-manager ({controllers})");
    let kcm = Kcm::start(plane, controllers);

    let work = plane.dir.join("demo");
    std::fs::create_dir_all(&work).expect("demo folder");
    let driver = if fake {
        Driver::Fake(
            FakeDriver::start(&work.join("csi.sock"), DriverConfig::default())
                .await
                .expect("fake driver"),
        )
    } else {
        Driver::Hostpath(Box::new(
            Hostpath::start(&work, HostpathConfig::named("hostpath.csi.k8s.io")).await,
        ))
    };
    println!("==> CSI driver {:?} serving on {}", driver.name(), driver.endpoint());
    let client = plane.client().await;
    if let Driver::Hostpath(h) = &driver {
        if let Err(e) = h.register_node(&client).await {
            eprintln!("cannot register the driver's node: {e}");
            std::process::exit(1);
        }
        println!(
            "    registered Node {} and its CSINode, as kubelet does for the driver",
            h.config.node_id
        );
    }

    println!("==> starting csi-pv-controller");
    let mut args = vec![
        format!("--csi-address={}", driver.endpoint()),
        format!("--kubeconfig={}", plane.admin_kubeconfig.display()),
    ];
    if fake {
        // No kube-controller-manager runs then: the sidecar binds its driver's claims.
        args.push("--binder=driver".to_string());
    }
    let mut sidecar = Sidecar::start(&work, &args);
    if !sidecar.wait_ready(Duration::from_secs(60)).await {
        eprintln!("csi-pv-controller did not become ready; its log:\n{}", sidecar.log_text());
        std::process::exit(1);
    }
    for line in
        sidecar.log_text().lines().filter(|l| l.contains("discovered") || l.contains("ready"))
    {
        println!("    sidecar: {line}");
    }
    println!(
        "==> csi-pv-controller is ready: http://127.0.0.1:{}/readyz answers 200",
        sidecar.http_port
    );
    if let Err(step) = lifecycle(&client, &driver).await {
        eprintln!("demo failed: {step}\nsidecar log:\n{}", sidecar.log_text());
        std::process::exit(1);
    }
    if std::env::var("DEMO_EXIT").is_ok_and(|v| v == "1") {
        println!("==> DEMO_EXIT=1: stopping");
        let code = sidecar.terminate(Duration::from_secs(20)).await;
        println!("    csi-pv-controller exited with {code:?}");
        drop(kcm);
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
    drop(kcm);
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
    c.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "(none)".into())
}

fn capacity(c: &PersistentVolumeClaim) -> String {
    c.status
        .as_ref()
        .and_then(|s| s.capacity.as_ref()?.get("storage").map(|q| q.0.clone()))
        .unwrap_or_default()
}

/// The narrated lifecycle of one claim.
async fn lifecycle(client: &kube::Client, driver: &Driver) -> Result<(), String> {
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
        "provisioner": driver.name(),
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "Immediate",
        "allowVolumeExpansion": true,
    }))
    .map_err(|e| e.to_string())?;
    Api::<StorageClass>::all(client.clone())
        .create(&pp, &class)
        .await
        .map_err(fail("create StorageClass"))?;
    println!("==> applied StorageClass demo-fast (provisioner {}, expandable)", driver.name());

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
    claims.create(&pp, &claim).await.map_err(fail("create claim"))?;
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
            if !volume_seen && !driver.volumes().is_empty() {
                println!("    driver: CreateVolume made a volume");
                driver.show();
                volume_seen = true;
            }
            if p == "Bound" {
                break c;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let pv_name = bound.spec.as_ref().and_then(|s| s.volume_name.clone()).unwrap_or_default();
    println!("==> Bound to PersistentVolume {pv_name} after {:?}", started.elapsed());

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
    let node_step = until("the volume grown to 2Gi", || async {
        let c = claims.get_opt("data").await.ok()??;
        let pending = c
            .status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "FileSystemResizePending");
        if capacity(&c) == "2Gi" {
            Some(false)
        } else if pending {
            Some(true)
        } else {
            None
        }
    })
    .await?;
    if node_step {
        println!(
            "==> expanded by ControllerExpandVolume after {:?}: PV capacity 2Gi; the claim says FileSystemResizePending (kubelet grows the filesystem when a pod mounts it; no kubelet runs here)",
            started.elapsed()
        );
    } else {
        println!("==> expanded: claim capacity 2Gi, after {:?}", started.elapsed());
    }
    driver.show();

    claims.delete("data", &DeleteParams::default()).await.map_err(fail("delete the claim"))?;
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
    driver.show();
    Ok(())
}
