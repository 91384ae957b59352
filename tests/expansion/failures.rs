//! Failed and odd ControllerExpandVolume answers: an infeasible size waits for the user, other
//! errors are retried, a hung call times out, a zero capacity records the requested size.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infeasible_size_waits_for_the_user_and_lowering_recovers() {
    let config = DriverConfig { max_volume_size: 8 * GI, ..DriverConfig::default() };
    // A long slow-retry period: the infeasible size must not be retried within the test.
    let world = World::start("grow-infeasible", config, &["--retry-interval-max=10m"]).await;
    bound_claim(&world, "data", "1Gi").await;

    request_size(&world, "data", "100Gi").await.unwrap();
    let claim = world
        .claim_until("data", "ControllerResizeInfeasible", LIMIT, |c| {
            resize_status(c).as_deref() == Some("ControllerResizeInfeasible")
        })
        .await;
    assert_eq!(allocated(&claim).as_deref(), Some("100Gi"));
    let error = conditions(&claim)
        .into_iter()
        .find(|(t, _)| t == "ControllerResizeError")
        .map(|(_, m)| m)
        .unwrap_or_else(|| panic!("no ControllerResizeError: {:?}", conditions(&claim)));
    assert!(error.starts_with("failed to expand pvc with"), "{error}");
    assert!(error.contains("OutOfRange"), "{error}");
    world.event("data", "VolumeResizeFailed", "OutOfRange", LIMIT).await;
    // Two later passes over the claim (its slow retries): a loop would have asked again.
    let key = format!("claim={}/data", world.namespace);
    let before = world.sidecar.passes(&key);
    world.sidecar.passed_again(&key, before + 1, LIMIT).await;
    assert_eq!(expand_calls(&world).len(), 1, "an infeasible size is not retried in a loop");

    // The user lowers the request (still above the capacity): the new size is sent at once.
    request_size(&world, "data", "4Gi").await.unwrap();
    let claim = world
        .claim_until("data", "capacity 4Gi", LIMIT, |c| capacity(c).as_deref() == Some("4Gi"))
        .await;
    assert_eq!(allocated(&claim).as_deref(), Some("4Gi"), "allocatedResources comes down");
    assert_eq!(resize_status(&claim), None);
    assert!(condition_types(&claim).is_empty(), "{:?}", conditions(&claim));
    let sizes: Vec<i64> = expand_calls(&world).iter().map(asked).collect();
    assert_eq!(sizes, [100 * GI, 4 * GI]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_final_errors_record_nothing_and_are_retried() {
    let world = World::start("grow-retry", DriverConfig::default(), &[]).await;
    bound_claim(&world, "data", "1Gi").await;
    world.driver.fail("ControllerExpandVolume", Code::Unavailable, 1000);

    request_size(&world, "data", "2Gi").await.unwrap();
    let retried =
        eventually(LIMIT, || async { (expand_calls(&world).len() >= 3).then_some(()) }).await;
    assert!(retried.is_some(), "not retried:\n{}", world.sidecar.log_text());
    let claim = world.claim("data").await.unwrap();
    assert_eq!(resize_status(&claim).as_deref(), Some("ControllerResizeInProgress"));
    assert_eq!(allocated(&claim).as_deref(), Some("2Gi"));
    assert!(
        !condition_types(&claim).contains(&"ControllerResizeError".to_string()),
        "an uncertain failure is not recorded: {:?}",
        conditions(&claim)
    );
    world.event("data", "VolumeResizeFailed", "Unavailable", LIMIT).await;

    world.driver.clear_faults("ControllerExpandVolume");
    world
        .claim_until("data", "capacity 2Gi", LIMIT, |c| capacity(c).as_deref() == Some("2Gi"))
        .await;
    assert!(expand_calls(&world).iter().all(|c| asked(c) == 2 * GI));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_call_times_out_and_the_same_size_is_pursued() {
    let world = World::start("grow-hang", DriverConfig::default(), &["--timeout=1s"]).await;
    bound_claim(&world, "data", "1Gi").await;
    for _ in 0..100 {
        world.driver.inject("ControllerExpandVolume", Fault::Hang);
    }
    request_size(&world, "data", "4Gi").await.unwrap();
    world.event("data", "VolumeResizeFailed", "ControllerExpandVolume", LIMIT).await;
    let claim = world.claim("data").await.unwrap();
    assert_eq!(resize_status(&claim).as_deref(), Some("ControllerResizeInProgress"));
    assert!(!condition_types(&claim).contains(&"ControllerResizeError".to_string()));

    // The attempt's outcome is unknown, so a lower request must not replace it (KEP-1790).
    request_size(&world, "data", "3Gi").await.unwrap();
    world.driver.clear_faults("ControllerExpandVolume");
    world.driver.release();
    let claim = world
        .claim_until("data", "capacity 4Gi", LIMIT, |c| capacity(c).as_deref() == Some("4Gi"))
        .await;
    assert_eq!(allocated(&claim).as_deref(), Some("4Gi"));
    let sizes: Vec<i64> = expand_calls(&world).iter().map(asked).collect();
    assert!(sizes.len() >= 2, "{sizes:?}");
    assert!(sizes.iter().all(|s| *s == 4 * GI), "only the uncertain size is sent: {sizes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_capacity_answer_records_the_requested_size() {
    let world = World::start("grow-zero", DriverConfig::default(), &[]).await;
    let (_, pv) = bound_claim(&world, "data", "1Gi").await;
    world.driver.inject("ControllerExpandVolume", Fault::CapacityBytes(0));
    request_size(&world, "data", "3Gi").await.unwrap();
    world
        .claim_until("data", "capacity 3Gi", LIMIT, |c| capacity(c).as_deref() == Some("3Gi"))
        .await;
    let pv = volume(&world, &pv.metadata.name.clone().unwrap()).await;
    assert_eq!(pv_capacity(&pv).as_deref(), Some("3Gi"));
    assert_eq!(expand_calls(&world).len(), 1, "no retry loop on a 0 answer");

    // Smaller than asked is a final error, shown on the claim.
    world.driver.inject("ControllerExpandVolume", Fault::CapacityBytes(GI));
    world.driver.inject("ControllerExpandVolume", Fault::CapacityBytes(GI));
    request_size(&world, "data", "5Gi").await.unwrap();
    let claim = world
        .claim_until("data", "ControllerResizeError", LIMIT, |c| {
            condition_types(c).contains(&"ControllerResizeError".to_string())
        })
        .await;
    assert!(
        conditions(&claim).iter().any(|(_, m)| m.contains("smaller than requested")),
        "{:?}",
        conditions(&claim)
    );
    world
        .claim_until("data", "capacity 5Gi", LIMIT, |c| capacity(c).as_deref() == Some("5Gi"))
        .await;
}
