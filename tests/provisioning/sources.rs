//! Clones and populators: what a claim's data source asks of the driver, and the clone's
//! source held until the copy is made.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clones_and_populators() {
    let world = World::start("prov-clone", DriverConfig::default(), &[]).await;
    world.create_class("std", json!({})).await;
    world.create_claim("origin", "std", "1Gi", json!({})).await;
    let (_, origin_pv) = world.bound("origin", BIND_LIMIT).await;
    world.create_clone("copy", "std", "2Gi", "origin").await;
    world.bound("copy", BIND_LIMIT).await;
    let request = create_calls(&world)
        .into_iter()
        .find(|r| r.volume_content_source.is_some())
        .expect("a CreateVolume with a content source");
    match request.volume_content_source.unwrap().r#type {
        Some(csi::volume_content_source::Type::Volume(v)) => {
            assert_eq!(v.volume_id, origin_pv.spec.unwrap().csi.unwrap().volume_handle);
        }
        other => panic!("expected a volume source, got {other:?}"),
    }

    // A smaller clone than its source is refused with a reason.
    world.create_clone("small-copy", "std", "512Mi", "origin").await;
    world
        .event(
            "small-copy",
            "ProvisioningFailed",
            "requests less than the source's 1Gi",
            BIND_LIMIT,
        )
        .await;

    // Any other data source is a populator's; one of a kind the cluster does not serve can
    // be filled by nobody, and says so (tests/data_sources.rs has the served kind).
    world
        .create_claim(
            "populated",
            "std",
            "1Gi",
            json!({"spec": {"dataSourceRef": {"apiGroup": "example.com", "kind": "Dataset", "name": "d"}}}),
        )
        .await;
    world
        .event(
            "populated",
            "ProvisioningFailed",
            "the cluster does not serve kind Dataset.example.com",
            BIND_LIMIT,
        )
        .await;
    assert_eq!(create_calls(&world).len(), 2);
}

/// The source of a clone cannot go while a CreateVolume may be copying it: the
/// cloning-protection finalizer goes on after the clone's intent and before CreateVolume, holds
/// a deleted source while the driver works (across a kill -9 of the sidecar), and comes off once
/// the copy is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clone_holds_its_source_until_the_copy_is_made() {
    const PROTECTION: &str = "provisioner.storage.kubernetes.io/cloning-protection";
    let mut world =
        World::start("prov-clone-hold", DriverConfig::default(), &["--timeout=60s"]).await;
    world.create_class("std", json!({})).await;
    world.create_claim("origin", "std", "1Gi", json!({})).await;
    let (_, origin_pv) = world.bound("origin", BIND_LIMIT).await;
    let origin_handle = origin_pv.csi_handle().expect("a CSI PV").to_string();
    assert!(
        !finalizers(&world.claim("origin").await.unwrap()).contains(&PROTECTION.to_string()),
        "no protection before any clone"
    );

    world.driver.inject("CreateVolume", Fault::Hang);
    world.create_clone("copy", "std", "1Gi", "origin").await;
    let copying = eventually(BIND_LIMIT, || async {
        create_calls(&world).iter().any(|r| r.volume_content_source.is_some()).then_some(())
    })
    .await;
    assert!(copying.is_some(), "the clone's CreateVolume never came");
    let origin = world.claim("origin").await.unwrap();
    assert!(
        finalizers(&origin).contains(&PROTECTION.to_string()),
        "the source is protected before CreateVolume: {:?}",
        finalizers(&origin)
    );

    // The user deletes the source while the driver is still copying it: it stays.
    world.claims().delete("origin", &DeleteParams::default()).await.unwrap();
    // kill -9 meanwhile: the finalizer, not the process's memory, holds the source; the
    // restarted sidecar's retry of the copy hangs in the driver as well.
    world.driver.inject("CreateVolume", Fault::Hang);
    let copies = create_calls(&world).len();
    world.kill_and_restart();
    // The restarted sidecar's retry of the copy reaches the driver (and hangs there): it has
    // decided on the source by then.
    let retried = eventually(Duration::from_secs(60), || async {
        (create_calls(&world).len() > copies).then_some(())
    })
    .await;
    assert!(retried.is_some(), "no retry of the copy:\n{}", world.sidecar.log_text());
    let held = world.claim("origin").await;
    assert!(
        held.as_ref().is_some_and(|c| c.metadata.deletion_timestamp.is_some()),
        "the source is held while its copy is in flight: {held:?}\n{}",
        world.sidecar.log_text()
    );

    // The driver finishes: the copy is recorded and bound, and the source goes.
    world.driver.clear_faults("CreateVolume");
    world.driver.release();
    world.bound("copy", BIND_LIMIT).await;
    let gone =
        eventually(BIND_LIMIT, || async { world.claim("origin").await.is_none().then_some(()) })
            .await;
    assert!(
        gone.is_some(),
        "the source went once no clone was in flight; finalizers: {:?}\n{}",
        world.claim("origin").await.map(|c| finalizers(&c)),
        world.sidecar.log_text()
    );
    let copied = create_calls(&world)
        .into_iter()
        .filter_map(|r| r.volume_content_source?.r#type)
        .collect::<Vec<_>>();
    assert!(
        copied.iter().all(|t| *t
            == csi::volume_content_source::Type::Volume(
                csi::volume_content_source::VolumeSource { volume_id: origin_handle.clone() }
            )),
        "{copied:?}"
    );
}
