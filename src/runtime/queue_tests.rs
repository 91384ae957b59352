use super::*;

fn queue() -> WorkQueue<&'static str> {
    WorkQueue::new(Backoff { start: Duration::from_secs(1), max: Duration::from_secs(300) })
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let b = Backoff { start: Duration::from_secs(1), max: Duration::from_secs(300) };
    let delays: Vec<u64> =
        [1, 2, 3, 4, 9, 10, 64, 1000].iter().map(|n| b.delay(*n).as_secs()).collect();
    assert_eq!(delays, [1, 2, 4, 8, 256, 300, 300, 300]);
}

#[tokio::test]
async fn a_key_is_queued_once_and_held_by_one_worker() {
    let q = queue();
    q.add("a");
    q.add("a");
    q.add("b");
    assert_eq!(q.len(), 2);
    let first = q.next().await.unwrap();
    assert_eq!(first, "a");
    // Added while active: not handed out again until done.
    q.add("a");
    assert_eq!(q.next().await.unwrap(), "b");
    assert!(q.is_empty());
    q.done(&"a");
    assert_eq!(q.next().await.unwrap(), "a");
    q.done(&"a");
    q.done(&"b");
    assert!(q.is_empty());
}

#[tokio::test(start_paused = true)]
async fn retries_back_off_per_key_and_forget_resets() {
    let q = queue();
    assert_eq!(q.retry("a"), Duration::from_secs(1));
    assert_eq!(q.retry("a"), Duration::from_secs(2));
    assert_eq!(q.failures(&"a"), 2);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(q.next().await.unwrap(), "a");
    q.done(&"a");
    q.forget(&"a");
    assert_eq!(q.retry("a"), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn infeasible_retries_wait_the_longest_delay() {
    let q = queue();
    assert_eq!(q.retry_slowly("a"), Duration::from_secs(300));
    tokio::time::sleep(Duration::from_secs(299)).await;
    assert!(q.is_empty());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(q.next().await.unwrap(), "a");
}

#[tokio::test(start_paused = true)]
async fn conflicts_back_off_from_20ms_and_forget_resets() {
    let q = queue();
    let delays: Vec<u128> = (0..10).map(|_| q.retry_conflict("a").as_millis()).collect();
    assert_eq!(delays, [20, 40, 80, 160, 320, 640, 1280, 2560, 5000, 5000]);
    // Failures keep their own count.
    assert_eq!(q.failures(&"a"), 0);
    q.forget(&"a");
    assert_eq!(q.retry_conflict("a"), Duration::from_millis(20));
}

#[tokio::test]
async fn passes_are_counted_per_key_until_taken() {
    let q = queue();
    for _ in 0..3 {
        q.add("hot");
        assert_eq!(q.next().await.unwrap(), "hot");
        q.done(&"hot");
    }
    q.add("calm");
    assert_eq!(q.next().await.unwrap(), "calm");
    q.done(&"calm");
    let passes = q.take_passes();
    assert_eq!(passes.get("hot"), Some(&3));
    assert_eq!(passes.get("calm"), Some(&1));
    assert!(q.take_passes().is_empty());
}

#[tokio::test]
async fn keys_reach_workers_in_the_fair_order_and_a_new_ticket_moves_a_queued_key() {
    use crate::model::turn::{Lane, Ticket};
    let q = queue();
    q.place_by(Arc::new(|k: &&'static str| Ticket::new(Lane::Other, &k[..1])));
    for key in ["a1", "a2", "a3", "b1"] {
        q.add(key);
    }
    assert_eq!(q.place(&"a3"), Some((Ticket::new(Lane::Other, "a"), 2)));
    // a3's claim got bound meanwhile: its work is on an existing volume now.
    q.add_with("a3", Ticket::new(Lane::Existing, "a"));
    assert_eq!(q.len(), 4);
    let mut order = Vec::new();
    for _ in 0..4 {
        let key = q.next().await.unwrap();
        q.done(&key);
        order.push(key);
    }
    assert_eq!(order, ["a3", "a1", "b1", "a2"]);
    // A retry (no ticket given) keeps the ticket the key was last given.
    q.add("b2");
    q.add("a3");
    assert_eq!(q.next().await.unwrap(), "a3");
}

#[tokio::test(start_paused = true)]
async fn keys_waiting_long_are_found_longest_first_with_their_place() {
    use crate::runtime::fair::{Lane, Ticket};
    let q = queue();
    q.add_with("old", Ticket::new(Lane::Other, "a"));
    tokio::time::sleep(Duration::from_secs(20)).await;
    q.add_with("older-than-10s", Ticket::new(Lane::Other, "a"));
    q.add_with("b", Ticket::new(Lane::Other, "b"));
    tokio::time::sleep(Duration::from_secs(15)).await;
    q.add_with("new", Ticket::new(Lane::Other, "a"));
    let found = q.waiting_longer_than(Duration::from_secs(10), 10);
    let keys: Vec<(&str, usize)> = found.iter().map(|(k, _, n)| (*k, *n)).collect();
    assert_eq!(&keys[..1], [("old", 0)]);
    assert_eq!(keys.len(), 3);
    assert!(keys.contains(&("older-than-10s", 1)) && keys.contains(&("b", 0)));
    assert_eq!(q.waiting_longer_than(Duration::from_secs(10), 1).len(), 1);
}

#[tokio::test]
async fn close_wakes_waiting_workers() {
    let q = queue();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.next().await }
    });
    tokio::task::yield_now().await;
    q.close();
    assert_eq!(waiter.await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn the_reserve_keeps_workers_for_existing_volumes_from_a_burst_of_creates() {
    let q: WorkQueue<u32> =
        WorkQueue::new(Backoff { start: Duration::from_secs(1), max: Duration::from_secs(300) });
    q.reserve_for_existing(10, 1);
    for n in 0..20 {
        q.add_with(n, Ticket::new(Lane::Other, "a"));
    }
    let mut taken = Vec::new();
    for _ in 0..9 {
        taken.push(q.next().await.unwrap());
    }
    // Nine creates are worked on: the tenth worker waits, though eleven more are queued...
    let waiting = tokio::time::timeout(Duration::from_secs(5), q.next()).await;
    assert!(waiting.is_err(), "a tenth create was handed out");
    // ...and takes a deletion at once.
    q.add_with(100, Ticket::new(Lane::Existing, "b"));
    assert_eq!(q.next().await, Some(100));
    // A create done lets the next one through.
    let waiter = {
        let q = q.clone();
        tokio::spawn(async move { q.next().await })
    };
    tokio::task::yield_now().await;
    q.done(&taken[0]);
    assert_eq!(waiter.await.unwrap(), Some(9));
    // The deletion's worker counts for nothing against the creates.
    q.done(&100);
    assert!(tokio::time::timeout(Duration::from_secs(5), q.next()).await.is_err());
}

#[tokio::test(start_paused = true)]
async fn a_share_at_its_most_leaves_workers_for_another_namespace_and_existing_volumes() {
    let q: WorkQueue<u32> =
        WorkQueue::new(Backoff { start: Duration::from_secs(1), max: Duration::from_secs(300) });
    q.reserve_for_existing(10, 1);
    let most = Arc::new(std::sync::atomic::AtomicUsize::new(3));
    let limit = most.clone();
    q.limit_shares(Arc::new(move || limit.load(std::sync::atomic::Ordering::SeqCst)));
    for n in 0..20 {
        q.add_with(n, Ticket::new(Lane::Other, "a"));
    }
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(q.next().await.unwrap());
    }
    assert_eq!(taken, [0, 1, 2]);
    // Namespace a holds its three: its fourth create waits, with six workers free...
    let waiting = tokio::time::timeout(Duration::from_secs(5), q.next()).await;
    assert!(waiting.is_err(), "a fourth create of one namespace was handed out");
    // ...for another namespace's first claim, a pod's claim of a included, and a deletion.
    q.add_with(100, Ticket::new(Lane::Other, "b"));
    q.add_with(101, Ticket::new(Lane::Scheduled, "a"));
    q.add_with(102, Ticket::new(Lane::Existing, "a"));
    assert_eq!(q.next().await, Some(102));
    assert_eq!(q.next().await, Some(100));
    assert!(tokio::time::timeout(Duration::from_secs(5), q.next()).await.is_err());
    // One of a's done lets its next through, the claim a pod waits for first.
    q.done(&taken[0]);
    assert_eq!(q.next().await, Some(101));
    // A limit that grows lets more through at the next look.
    most.store(5, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(q.next().await, Some(3));
    assert_eq!(q.next().await, Some(4));
    assert!(tokio::time::timeout(Duration::from_secs(5), q.next()).await.is_err());
    assert_eq!(q.len(), 15);
}
