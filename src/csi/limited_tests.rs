use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;

/// A backend that refuses creates past `knee` calls in flight (while `refusing`), answers each
/// after `latency`, and counts the most calls it held at once.
struct Backend {
    knee: usize,
    refusing: std::sync::atomic::AtomicBool,
    latency: Duration,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    refused: AtomicUsize,
    /// The order calls reached it in.
    order: Mutex<Vec<String>>,
}

impl Backend {
    fn new(knee: usize, latency: Duration) -> Backend {
        Backend {
            knee,
            refusing: true.into(),
            latency,
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            order: Mutex::default(),
        }
    }

    fn take_peak(&self) -> usize {
        self.peak.swap(0, Ordering::SeqCst)
    }

    fn call<T: Send + 'static>(&self, name: &str, ok: T) -> Answer<'_, T> {
        self.order.lock().unwrap().push(name.to_string());
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        Box::pin(async move {
            let over = now > self.knee && self.refusing.load(Ordering::SeqCst);
            if !over {
                tokio::time::sleep(self.latency).await;
            }
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            if over {
                self.refused.fetch_add(1, Ordering::SeqCst);
                let status = tonic::Status::resource_exhausted("too many calls");
                return Err(CsiError::from_status("CreateVolume", &status));
            }
            Ok(ok)
        })
    }
}

impl Driver for Arc<Backend> {
    fn create_volume(
        &self,
        request: csi::CreateVolumeRequest,
        _: About,
    ) -> Answer<'_, csi::Volume> {
        self.call(&request.name, csi::Volume::default())
    }
    fn delete_volume(&self, request: csi::DeleteVolumeRequest, _: About) -> Answer<'_, ()> {
        self.call(&request.volume_id, ())
    }
    fn controller_expand_volume(
        &self,
        request: csi::ControllerExpandVolumeRequest,
        _: About,
    ) -> Answer<'_, csi::ControllerExpandVolumeResponse> {
        self.call(&request.volume_id, Default::default())
    }
    fn controller_modify_volume(
        &self,
        request: csi::ControllerModifyVolumeRequest,
    ) -> Answer<'_, ()> {
        self.call(&request.volume_id, ())
    }
    fn probe(&self) -> Answer<'_, bool> {
        Box::pin(async { Ok(true) })
    }
}

/// The calls of a test driver that only its creates are about: each succeeds at once, and
/// Probe says `$ready`.
macro_rules! other_calls_succeed {
    ($ready:expr) => {
        fn delete_volume(&self, _: csi::DeleteVolumeRequest, _: About) -> Answer<'_, ()> {
            Box::pin(async { Ok(()) })
        }
        fn controller_expand_volume(
            &self,
            _: csi::ControllerExpandVolumeRequest,
            _: About,
        ) -> Answer<'_, csi::ControllerExpandVolumeResponse> {
            Box::pin(async { Ok(Default::default()) })
        }
        fn controller_modify_volume(
            &self,
            _: csi::ControllerModifyVolumeRequest,
        ) -> Answer<'_, ()> {
            Box::pin(async { Ok(()) })
        }
        fn probe(&self) -> Answer<'_, bool> {
            Box::pin(async { Ok($ready) })
        }
    };
}

fn create(name: &str) -> csi::CreateVolumeRequest {
    csi::CreateVolumeRequest { name: name.to_string(), ..Default::default() }
}

/// Keeps `callers` creates going at once for `rounds` each.
async fn storm(driver: &Arc<Limited<Arc<Backend>>>, callers: usize, rounds: usize) {
    let mut tasks = Vec::new();
    for c in 0..callers {
        let driver = driver.clone();
        tasks.push(tokio::spawn(async move {
            for r in 0..rounds {
                let _ = driver.create_volume(create(&format!("pvc-{c}-{r}")), About::Csi).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn calls_in_flight_fall_on_refusals_and_recover_after_them() {
    let backend = Arc::new(Backend::new(6, Duration::from_millis(50)));
    let gate = Gate::new(Settings::new(40, Duration::from_secs(10)));
    let driver = Arc::new(Limited::new(backend.clone(), gate.clone()));
    assert_eq!(gate.creates_allowed(), 40, "before any call: the ceiling");

    // Refusals come at once; the limit falls from the ceiling to about the knee.
    storm(&driver, 40, 5).await;
    assert!(backend.refused.load(Ordering::SeqCst) > 0);
    backend.take_peak();
    storm(&driver, 40, 30).await;
    let settled = backend.take_peak();
    let limit = gate.budgets()[0].1;
    assert!(settled <= 10, "in flight while refusing: peak {settled}");
    assert!((4.0..=9.0).contains(&limit), "limit {limit}");
    assert_eq!(gate.creates_allowed(), 40, "idle, a cut budget holds nothing back");

    backend.refusing.store(false, Ordering::SeqCst);
    storm(&driver, 40, 60).await;
    let limit = gate.budgets()[0].1;
    assert_eq!(limit, 40.0, "back to the ceiling once the refusals stop");
    assert_eq!(gate.creates_allowed(), 40);
    assert_eq!(backend.take_peak(), 40);
}

#[tokio::test(start_paused = true)]
async fn refusals_stay_few_once_the_limit_has_found_the_knee() {
    let backend = Arc::new(Backend::new(8, Duration::from_millis(50)));
    let gate = Gate::new(Settings::new(50, Duration::from_secs(10)));
    let driver = Arc::new(Limited::new(backend.clone(), gate.clone()));
    storm(&driver, 50, 4).await;
    let before = backend.refused.load(Ordering::SeqCst);
    storm(&driver, 50, 40).await;
    let refused = backend.refused.load(Ordering::SeqCst) - before;
    // 2,000 calls: at most one refused in fifty.
    assert!(refused <= 40, "{refused} refused of 2000");
}

#[tokio::test(start_paused = true)]
async fn existing_volume_work_goes_ahead_of_waiting_creates() {
    let backend = Arc::new(Backend::new(100, Duration::from_millis(10)));
    let gate = Gate::new(Settings::new(1, Duration::from_secs(60)));
    let driver = Arc::new(Limited::new(backend.clone(), gate.clone()));
    let mut tasks = Vec::new();
    for name in ["create-1", "create-2", "create-3"] {
        let driver = driver.clone();
        tasks.push(tokio::spawn(async move {
            driver.create_volume(create(name), About::Csi).await.map(|_| ())
        }));
        tokio::task::yield_now().await;
    }
    {
        let driver = driver.clone();
        tasks.push(tokio::spawn(async move {
            let request =
                csi::DeleteVolumeRequest { volume_id: "delete-1".into(), ..Default::default() };
            driver.delete_volume(request, About::Csi).await
        }));
    }
    tokio::task::yield_now().await;
    assert_eq!(gate.waiting(), 3);
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let order = backend.order.lock().unwrap().clone();
    assert_eq!(order, ["create-1", "delete-1", "create-2", "create-3"]);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_gives_up_leaves_the_line() {
    let backend = Arc::new(Backend::new(100, Duration::from_secs(10)));
    let gate = Gate::new(Settings::new(1, Duration::from_secs(60)));
    let driver = Arc::new(Limited::new(backend.clone(), gate.clone()));
    let busy = {
        let driver = driver.clone();
        tokio::spawn(
            async move { driver.create_volume(create("long"), About::Csi).await.map(|_| ()) },
        )
    };
    tokio::task::yield_now().await;
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        driver.create_volume(create("impatient"), About::Csi),
    )
    .await;
    assert!(gave_up.is_err());
    assert_eq!(gate.waiting(), 0);
    busy.await.unwrap().unwrap();
    let each = |limit| vec![("CreateVolume".to_string(), limit, 0), (DRIVER.to_string(), limit, 0)];
    assert_eq!(gate.budgets(), each(1.0));
}

#[test]
fn a_create_needs_its_class_and_its_topology_segment_too() {
    let segment = |pairs: &[(&str, &str)]| csi::Topology {
        segments: pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    };
    let with =
        |preferred: Vec<csi::Topology>, requisite: Vec<csi::Topology>| csi::CreateVolumeRequest {
            accessibility_requirements: Some(csi::TopologyRequirement { requisite, preferred }),
            ..Default::default()
        };
    let cases = [
        ("no topology", create("x"), vec!["driver", "CreateVolume"]),
        (
            "the first preferred segment",
            with(
                vec![segment(&[("zone", "a"), ("rack", "1")]), segment(&[("zone", "b")])],
                vec![segment(&[("zone", "c")])],
            ),
            vec!["driver", "CreateVolume", "rack=1,zone=a"],
        ),
        (
            "else the first requisite",
            with(vec![], vec![segment(&[("zone", "c")])]),
            vec!["driver", "CreateVolume", "zone=c"],
        ),
        (
            "an empty segment is none",
            with(vec![segment(&[])], vec![]),
            vec!["driver", "CreateVolume"],
        ),
    ];
    let with_class = create_budgets(&with(vec![], vec![segment(&[("zone", "c")])]), Some("fast"));
    assert_eq!(with_class, ["driver", "CreateVolume", "storageclass/fast", "zone=c"]);
    assert_eq!(create_budgets(&create("x"), Some("")), ["driver", "CreateVolume"]);
    for (name, request, want) in cases {
        assert_eq!(create_budgets(&request, None), want, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_late_namespace_gets_its_turn_at_the_driver() {
    let backend = Arc::new(Backend::new(100, Duration::from_millis(10)));
    let gate = Gate::new(Settings::new(1, Duration::from_secs(60)));
    let driver = Arc::new(Limited::new(backend.clone(), gate.clone()));
    let mut tasks = Vec::new();
    let call = |share: &str, name: String| {
        let driver = driver.clone();
        let share = share.to_string();
        tokio::spawn(in_share(share, None, async move {
            driver.create_volume(create(&name), About::Csi).await.map(|_| ())
        }))
    };
    for n in 0..6 {
        tasks.push(call("tenant-a", format!("a-{n}")));
        tokio::task::yield_now().await;
    }
    tasks.push(call("tenant-b", "b-0".into()));
    tokio::task::yield_now().await;
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let order = backend.order.lock().unwrap().clone();
    // The first of a's went at once; b's goes next, ahead of a's five that wait.
    let b_at = order.iter().position(|n| n == "b-0").unwrap();
    assert_eq!(b_at, 1, "{order:?}");
}

#[tokio::test(start_paused = true)]
async fn after_a_refusal_nothing_is_sent_until_the_pause_is_over() {
    // A backend that refuses every call; 8 callers try for 2 s.
    let backend = Arc::new(Backend::new(0, Duration::from_millis(200)));
    let gate = Gate::new(Settings::new(8, Duration::from_secs(60)));
    let driver = Arc::new(Limited::new(backend.clone(), gate.clone()));
    let until = tokio::time::Instant::now() + Duration::from_secs(2);
    let mut tasks = Vec::new();
    for c in 0..8 {
        let driver = driver.clone();
        tasks.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < until {
                let _ = driver.create_volume(create(&format!("pvc-{c}")), About::Csi).await;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // The first 8 at once, then one limit's worth after each pause (0.1, 0.2, 0.4, 0.8 s):
    // a refusal comes back at once, and without the pause its room would go to the next
    // doomed call at once, thousands in 2 s.
    let refused = backend.refused.load(Ordering::SeqCst);
    assert!(refused <= 24, "{refused} refused in 2 s");
    assert!(gate.budgets()[0].1 <= 2.0, "{:?}", gate.budgets());
}

#[tokio::test(start_paused = true)]
async fn a_driver_that_cannot_be_reached_is_no_overload() {
    struct Down;
    impl Driver for Down {
        fn create_volume(&self, _: csi::CreateVolumeRequest, _: About) -> Answer<'_, csi::Volume> {
            Box::pin(async {
                Err(CsiError::Transport {
                    method: "CreateVolume",
                    code: tonic::Code::Unavailable,
                    message: "connection refused".into(),
                })
            })
        }
        other_calls_succeed!(false);
    }
    let gate = Gate::new(Settings::new(4, Duration::from_secs(60)));
    let driver = Limited::new(Down, gate.clone());
    let started = tokio::time::Instant::now();
    for _ in 0..5 {
        assert!(driver.create_volume(create("x"), About::Csi).await.is_err());
    }
    // No cut, no pause: the executor's own wait for the driver applies, not ours on top.
    assert_eq!(started.elapsed(), Duration::ZERO);
    let each = |limit| vec![("CreateVolume".to_string(), limit, 0), (DRIVER.to_string(), limit, 0)];
    assert_eq!(gate.budgets(), each(4.0));
}

/// A backend that takes `per_second` creates a second (a token bucket holding one second's
/// worth) and answers each after `latency`.
struct Bucket {
    per_second: f64,
    latency: Duration,
    state: Mutex<(f64, Instant)>,
    made: AtomicUsize,
    refused: AtomicUsize,
}

impl Driver for Arc<Bucket> {
    fn create_volume(&self, _: csi::CreateVolumeRequest, _: About) -> Answer<'_, csi::Volume> {
        Box::pin(async move {
            let granted = {
                let mut state = self.state.lock().unwrap();
                let now = Instant::now();
                let refill = now.duration_since(state.1).as_secs_f64() * self.per_second;
                state.0 = (state.0 + refill).min(self.per_second);
                state.1 = now;
                let granted = state.0 >= 1.0;
                if granted {
                    state.0 -= 1.0;
                }
                granted
            };
            if !granted {
                self.refused.fetch_add(1, Ordering::SeqCst);
                let status = tonic::Status::resource_exhausted("rate exceeded");
                return Err(CsiError::from_status("CreateVolume", &status));
            }
            tokio::time::sleep(self.latency).await;
            self.made.fetch_add(1, Ordering::SeqCst);
            Ok(csi::Volume::default())
        })
    }
    other_calls_succeed!(true);
}

/// Five creates a second, each answered in 200 ms, so about one call in flight is right: with
/// 30 callers always waiting, the paced limit finds that rate, and once it has, the creates
/// come near it with about one refusal per hundred volumes.
#[tokio::test(start_paused = true)]
async fn a_rate_limited_backend_is_paced_to_its_rate() {
    let backend = Arc::new(Bucket {
        per_second: 5.0,
        latency: Duration::from_millis(200),
        state: Mutex::new((5.0, Instant::now())),
        made: AtomicUsize::new(0),
        refused: AtomicUsize::new(0),
    });
    let gate = Gate::new(Settings::new(30, Duration::from_secs(10)));
    let driver = Arc::new(Limited::new(backend.clone(), gate.clone()));
    let run = |n: usize| {
        let (driver, backend) = (driver.clone(), backend.clone());
        async move {
            let mut tasks = Vec::new();
            for c in 0..30 {
                let driver = driver.clone();
                let backend = backend.clone();
                tasks.push(tokio::spawn(async move {
                    while backend.made.load(Ordering::SeqCst) < n {
                        let _ = driver.create_volume(create(&format!("pvc-{c}")), About::Csi).await;
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    run(100).await;
    let (made, refused, started) = (
        backend.made.load(Ordering::SeqCst),
        backend.refused.load(Ordering::SeqCst),
        Instant::now(),
    );
    run(made + 1_000).await;
    let made = backend.made.load(Ordering::SeqCst) - made;
    let refused = backend.refused.load(Ordering::SeqCst) - refused;
    let share = made as f64 / (5.0 * started.elapsed().as_secs_f64());
    println!("{made} made, {refused} refused, {share:.3} of the rate");
    assert!(share > 0.9, "{made} made in {:?}: {share:.3} of the rate", started.elapsed());
    assert!(refused * 100 <= made * 2, "{refused} refused for {made} made");

    // The refusals were CreateVolume's: the driver's budget, and deletions, are not held back.
    let budgets = gate.budgets();
    assert!(budgets[0].0 == "CreateVolume" && budgets[0].1 < 2.0, "{budgets:?}");
    assert_eq!(budgets[1], (DRIVER.to_string(), 30.0, 0));
    let started = Instant::now();
    let deletes = (0..20).map(|i| {
        driver.delete_volume(
            csi::DeleteVolumeRequest { volume_id: format!("v{i}"), ..Default::default() },
            About::Csi,
        )
    });
    futures::future::join_all(deletes).await;
    assert_eq!(started.elapsed(), Duration::ZERO, "deletions paced: {:?}", gate.budgets());
}

fn in_zone_a(name: &str) -> csi::CreateVolumeRequest {
    let zone = csi::Topology { segments: [("zone".to_string(), "a".to_string())].into() };
    let requisite = vec![zone];
    let accessibility_requirements =
        Some(csi::TopologyRequirement { requisite, preferred: vec![] });
    csi::CreateVolumeRequest { accessibility_requirements, ..create(name) }
}

#[tokio::test(start_paused = true)]
async fn the_creates_allowed_follow_the_tightest_create_budget_not_a_deletions() {
    let backend = Arc::new(Backend::new(6, Duration::from_millis(50)));
    let gate = Gate::new(Settings::new(40, Duration::from_secs(10)));
    let driver = Arc::new(Limited::new(backend.clone(), gate.clone()));
    let calls = |delete: bool| {
        let driver = driver.clone();
        async move {
            let mut tasks = Vec::new();
            for n in 0..40 {
                let driver = driver.clone();
                tasks.push(tokio::spawn(async move {
                    if delete {
                        let request = csi::DeleteVolumeRequest {
                            volume_id: format!("v{n}"),
                            ..Default::default()
                        };
                        let _ = driver.delete_volume(request, About::Csi).await;
                    } else {
                        let _ =
                            driver.create_volume(in_zone_a(&format!("pvc-{n}")), About::Csi).await;
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
        }
    };
    calls(true).await;
    let limit_of = |name: &str| gate.budgets().into_iter().find(|b| b.0 == name).map(|b| b.1);
    assert!(limit_of("DeleteVolume").is_some_and(|l| l < 40.0), "{:?}", gate.budgets());
    assert_eq!(gate.creates_allowed(), 40, "a deletion's cut holds no create back");
    calls(false).await;
    let zone = limit_of("zone=a").expect("the segment's budget");
    assert!(zone < 40.0, "{:?}", gate.budgets());
    assert_eq!(limit_of("CreateVolume"), Some(40.0), "the segment's refusal is the segment's");
    assert_eq!(gate.creates_allowed(), 40, "idle, the segment holds nothing back");
    // A create in the segment under way: its cut is what creates wait for.
    let one = {
        let driver = driver.clone();
        tokio::spawn(async move { driver.create_volume(in_zone_a("pvc-late"), About::Csi).await })
    };
    while backend.in_flight.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(gate.creates_allowed(), zone.ceil() as usize, "{:?}", gate.budgets());
    one.await.unwrap().unwrap();
    assert_eq!(gate.creates_allowed(), 40);
}
