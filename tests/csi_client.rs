//! Our CSI client against the fake driver over a real unix socket: discovery, every error class,
//! deadlines, nonsense answers and a driver restart.

mod support;

use std::time::Duration;

use csi_pv_controller::csi::{
    ControllerCapability, CsiClient, CsiError, ErrorClass, ExpansionMode, Operation, v1 as csi,
};
use support::fake_driver::{Call, DriverConfig, FakeDriver, Fault};
use tonic::Code;

async fn driver(config: DriverConfig) -> (tempfile::TempDir, FakeDriver, CsiClient) {
    let dir = tempfile::tempdir().unwrap();
    let driver = FakeDriver::start(&dir.path().join("csi.sock"), config).await.unwrap();
    let client = CsiClient::new(&driver.endpoint(), Duration::from_secs(2)).unwrap();
    (dir, driver, client)
}

/// Brings a stopped or crashed driver back and waits until the client reaches it again.
async fn restart_and_wait(driver: &FakeDriver, client: &CsiClient) {
    driver.restart().await.unwrap();
    client.wait_ready(Some(Duration::from_secs(10))).await.unwrap();
}

fn mount_capability() -> csi::VolumeCapability {
    use csi::volume_capability::{AccessMode, AccessType, MountVolume, access_mode::Mode};
    csi::VolumeCapability {
        access_type: Some(AccessType::Mount(MountVolume::default())),
        access_mode: Some(AccessMode { mode: Mode::SingleNodeWriter as i32 }),
    }
}

fn create(name: &str, bytes: i64) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest {
        name: name.into(),
        capacity_range: Some(csi::CapacityRange { required_bytes: bytes, limit_bytes: 0 }),
        volume_capabilities: vec![mount_capability()],
        secrets: [("password".to_string(), "hunter2".to_string())].into(),
        ..Default::default()
    }
}

fn expand(volume_id: &str, bytes: i64) -> csi::ControllerExpandVolumeRequest {
    csi::ControllerExpandVolumeRequest {
        volume_id: volume_id.into(),
        capacity_range: Some(csi::CapacityRange { required_bytes: bytes, limit_bytes: 0 }),
        volume_capability: Some(mount_capability()),
        ..Default::default()
    }
}

#[tokio::test]
async fn discovers_name_and_capabilities() {
    let (_dir, _driver, client) = driver(DriverConfig::default()).await;
    client.wait_ready(Some(Duration::from_secs(5))).await.unwrap();
    let info = client.discover().await.unwrap();
    assert_eq!(info.name, "fake.csi.test");
    assert_eq!(info.vendor_version, "0.1.0");
    assert!(info.plugin.controller_service);
    assert!(!info.plugin.accessibility_constraints);
    assert_eq!(info.plugin.expansion, Some(ExpansionMode::Online));
    assert!(info.controller.has(ControllerCapability::CreateDeleteVolume));
    assert!(info.controller.has(ControllerCapability::ExpandVolume));
    assert!(info.controller.has(ControllerCapability::CloneVolume));
    assert!(!info.controller.has(ControllerCapability::PublishUnpublishVolume));

    let (_dir, _driver, client) = driver(DriverConfig {
        topology: true,
        online_expansion: Some(false),
        controller_expansion: false,
        clone: false,
        ..DriverConfig::default()
    })
    .await;
    let info = client.discover().await.unwrap();
    assert!(info.plugin.accessibility_constraints);
    assert_eq!(info.plugin.expansion, Some(ExpansionMode::Offline));
    assert!(!info.controller.has(ControllerCapability::ExpandVolume));
    assert!(!info.controller.has(ControllerCapability::CloneVolume));
}

#[tokio::test]
async fn requests_reach_the_driver_whole() {
    let (_dir, driver, client) = driver(DriverConfig::default()).await;
    let volume = client.create_volume(create("pvc-1", 1 << 30)).await.unwrap();
    assert_eq!(volume.capacity_bytes, 1 << 30);
    // Idempotent by name: the same request returns the same volume.
    let again = client.create_volume(create("pvc-1", 1 << 30)).await.unwrap();
    assert_eq!(again.volume_id, volume.volume_id);
    let Call::CreateVolume(sent) = &driver.calls_of("CreateVolume")[0] else { unreachable!() };
    assert_eq!(sent.name, "pvc-1");
    assert_eq!(sent.secrets.get("password").map(String::as_str), Some("hunter2"));
    assert!(!format!("{sent:?}").contains("hunter2"));

    let grown = client.controller_expand_volume(expand(&volume.volume_id, 2 << 30)).await.unwrap();
    assert_eq!(grown.capacity_bytes, 2 << 30);
    assert!(!grown.node_expansion_required);
    client
        .delete_volume(csi::DeleteVolumeRequest {
            volume_id: volume.volume_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(driver.volumes().is_empty());
}

#[tokio::test]
async fn every_error_class_is_reported() {
    let (_dir, driver, client) = driver(DriverConfig::default()).await;
    let volume = client.create_volume(create("pvc-base", 1 << 30)).await.unwrap();
    let cases = [
        ("CreateVolume", Code::InvalidArgument, Operation::Create, ErrorClass::Infeasible),
        ("CreateVolume", Code::ResourceExhausted, Operation::Create, ErrorClass::Final),
        ("CreateVolume", Code::Internal, Operation::Create, ErrorClass::Final),
        ("CreateVolume", Code::Unavailable, Operation::Create, ErrorClass::InProgress),
        ("CreateVolume", Code::Aborted, Operation::Create, ErrorClass::InProgress),
        ("CreateVolume", Code::DeadlineExceeded, Operation::Create, ErrorClass::InProgress),
        ("ControllerExpandVolume", Code::OutOfRange, Operation::Expand, ErrorClass::Infeasible),
        ("ControllerExpandVolume", Code::NotFound, Operation::Expand, ErrorClass::Infeasible),
        (
            "ControllerExpandVolume",
            Code::ResourceExhausted,
            Operation::Expand,
            ErrorClass::InProgress,
        ),
        ("ControllerExpandVolume", Code::FailedPrecondition, Operation::Expand, ErrorClass::Final),
        ("DeleteVolume", Code::Internal, Operation::Delete, ErrorClass::Final),
    ];
    for (method, code, operation, class) in cases {
        driver.fail(method, code, 1);
        let err = match method {
            "CreateVolume" => client.create_volume(create("pvc-x", 1 << 30)).await.map(|_| ()),
            "ControllerExpandVolume" => client
                .controller_expand_volume(expand(&volume.volume_id, 3 << 30))
                .await
                .map(|_| ()),
            _ => {
                client
                    .delete_volume(csi::DeleteVolumeRequest {
                        volume_id: "v".into(),
                        ..Default::default()
                    })
                    .await
            }
        }
        .unwrap_err();
        assert_eq!(err.code(), Some(code), "{method}: {err}");
        assert_eq!(err.class(operation), class, "{method} {code:?}");
    }
    // Real (not injected) driver errors classify the same way.
    let err = client.controller_expand_volume(expand("no-such-volume", 1)).await.unwrap_err();
    assert_eq!(err.class(Operation::Expand), ErrorClass::Infeasible);
    let err = client.create_volume(create("huge", 1 << 50)).await.unwrap_err();
    assert_eq!(
        (err.code(), err.class(Operation::Create)),
        (Some(Code::OutOfRange), ErrorClass::Final)
    );
}

#[tokio::test]
async fn a_deadline_reached_is_not_final() {
    let (_dir, driver, _) = driver(DriverConfig::default()).await;
    let client = CsiClient::new(&driver.endpoint(), Duration::from_millis(300)).unwrap();
    driver.inject("CreateVolume", Fault::Hang);
    let started = std::time::Instant::now();
    let err = client.create_volume(create("pvc-slow", 1 << 30)).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "took {:?}", started.elapsed());
    // As grpc-go says it (tonic's own word is Cancelled); the volume may still appear.
    assert_eq!(err.code(), Some(Code::DeadlineExceeded), "{err}");
    assert!(err.to_string().contains("context deadline exceeded"), "{err}");
    assert_eq!(err.class(Operation::Create), ErrorClass::InProgress);
    driver.release();

    // Latency below the deadline is just latency.
    driver.inject("CreateVolume", Fault::Delay(Duration::from_millis(100)));
    client.create_volume(create("pvc-slow", 1 << 30)).await.unwrap();
}

#[tokio::test]
async fn nonsense_answers_are_errors() {
    let (_dir, driver, client) = driver(DriverConfig::default()).await;
    driver.inject("CreateVolume", Fault::EmptyVolumeId);
    let err = client.create_volume(create("pvc-a", 1 << 30)).await.unwrap_err();
    assert!(matches!(err, CsiError::InvalidResponse { .. }), "{err}");
    assert_eq!(err.class(Operation::Create), ErrorClass::InProgress);
    driver.inject("CreateVolume", Fault::CapacityBytes(-5));
    let err = client.create_volume(create("pvc-a", 1 << 30)).await.unwrap_err();
    assert!(err.to_string().contains("negative capacity_bytes -5"), "{err}");
    // The volume exists all the same: a retry with the same name finds it.
    let v = client.create_volume(create("pvc-a", 1 << 30)).await.unwrap();
    assert_eq!(driver.volumes().len(), 1);
    driver.inject("ControllerExpandVolume", Fault::CapacityBytes(-1));
    let err = client.controller_expand_volume(expand(&v.volume_id, 2 << 30)).await.unwrap_err();
    assert!(matches!(err, CsiError::InvalidResponse { .. }), "{err}");
}

#[tokio::test]
async fn waits_for_a_driver_that_is_not_ready() {
    let (_dir, driver, client) = driver(DriverConfig::default()).await;
    driver.set_ready(false);
    let err = client.wait_ready(Some(Duration::from_millis(500))).await.unwrap_err();
    assert!(err.to_string().contains("not ready"), "{err}");
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.wait_ready(Some(Duration::from_secs(10))).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    driver.set_ready(true);
    waiter.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_missing_socket_is_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let client =
        CsiClient::new(dir.path().join("absent.sock").to_str().unwrap(), Duration::from_secs(1))
            .unwrap();
    let err = client.wait_ready(Some(Duration::from_millis(400))).await.unwrap_err();
    assert!(matches!(err, CsiError::NotReady { .. }));
    assert!(err.to_string().contains("socket does not exist"), "{err}");
}

#[tokio::test]
async fn survives_a_driver_restart() {
    let (_dir, driver, client) = driver(DriverConfig::default()).await;
    let before = client.create_volume(create("pvc-r", 1 << 30)).await.unwrap();

    // The driver dies: calls fail as "may still be in progress", never as final.
    driver.stop();
    let err = client.create_volume(create("pvc-r2", 1 << 30)).await.unwrap_err();
    assert_eq!(err.class(Operation::Create), ErrorClass::InProgress, "{err}");
    assert!(client.wait_ready(Some(Duration::from_millis(300))).await.is_err());

    // It comes back on the same socket: the same client works again, without a new process.
    restart_and_wait(&driver, &client).await;
    let after = client.create_volume(create("pvc-r", 1 << 30)).await.unwrap();
    assert_eq!(after.volume_id, before.volume_id);
    assert_eq!(client.discover().await.unwrap().name, "fake.csi.test");
}

#[tokio::test]
async fn a_crash_after_the_work_is_retried_into_the_same_volume() {
    let (_dir, driver, client) = driver(DriverConfig::default()).await;
    driver.inject("CreateVolume", Fault::CrashAfter);
    let err = client.create_volume(create("pvc-c", 1 << 30)).await.unwrap_err();
    assert_eq!(err.class(Operation::Create), ErrorClass::InProgress, "{err}");
    assert_eq!(driver.volumes().len(), 1, "the work was done before the crash");

    restart_and_wait(&driver, &client).await;
    let v = client.create_volume(create("pvc-c", 1 << 30)).await.unwrap();
    assert_eq!(driver.volumes().len(), 1, "retrying with the same name must not duplicate");
    assert_eq!(v.volume_id, driver.volumes()[0].id);

    driver.inject("DeleteVolume", Fault::CrashBefore);
    let delete = csi::DeleteVolumeRequest { volume_id: v.volume_id.clone(), ..Default::default() };
    let err = client.delete_volume(delete.clone()).await.unwrap_err();
    assert_eq!(err.class(Operation::Delete), ErrorClass::InProgress, "{err}");
    assert_eq!(driver.volumes().len(), 1, "nothing was done before the crash");
    restart_and_wait(&driver, &client).await;
    client.delete_volume(delete).await.unwrap();
    assert!(driver.volumes().is_empty());
}
