//! `make demo`: a real kube-apiserver on etcd, a CSI driver on a unix socket and csi-pv-controller
//! beside it, narrated, left running until Ctrl-C.
//!
//! The driver is our fake (tests/support/fake_driver.rs): csi-driver-host-path cannot be built on
//! these machines (see README, "Peers"). Provisioning, binding and expansion arrive with their
//! issues; until then the demo shows the sidecar discovering the driver and becoming ready.

#[path = "../tests/support/mod.rs"]
mod support;

use std::time::Duration;

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
