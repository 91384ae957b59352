use super::*;
use serde_json::json;

/// Claim `n/c` of class `fast`, with the managed fields a journal entry leaves out.
fn claim(uid: &str) -> PersistentVolumeClaim {
    crate::fixtures::pvc("c")
        .namespace("n")
        .uid(uid)
        .class("fast")
        .with(json!({"metadata": {"managedFields": [{"manager": "kubectl"}]}}))
        .build()
}

fn uids(dir: &Path) -> Vec<String> {
    let mut uids: Vec<String> =
        intents_in(dir).unwrap().iter().filter_map(|c| c.metadata.uid.clone()).collect();
    uids.sort();
    uids
}

fn log_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(logfile::LOG)).unwrap()
}

#[tokio::test]
async fn intents_outlive_the_process_until_removed() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    journal.record(&claim("u1")).await.unwrap();
    journal.record(&claim("u2")).await.unwrap();
    journal.remove("u1").await.unwrap();
    drop(journal);
    // A rewrite a crash cut short, and a foreign file: neither is an intent.
    std::fs::write(dir.path().join("intents.log.tmp"), b"{").unwrap();
    std::fs::write(dir.path().join("README"), b"x").unwrap();
    let reopened = Journal::open(dir.path()).unwrap();
    assert!(!reopened.contains("u1"));
    assert!(reopened.contains("u2"));
    assert_eq!(reopened.len(), 1);
    let kept = &reopened.all()[0];
    assert_eq!(kept.metadata.name.as_deref(), Some("c"));
    assert!(kept.metadata.managed_fields.is_none(), "kept small");
    assert!(!dir.path().join("intents.log.tmp").exists());
    // Opening rewrote the log with the open intent alone.
    assert_eq!(log_text(dir.path()).lines().count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_records_shares_one_sync() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(Journal::open(dir.path()).unwrap());
    // A write under way while all 64 add their lines: they go out together in the next one.
    let under_way = journal.log.lock().await;
    let records: Vec<_> = (0..64)
        .map(|i| {
            let journal = journal.clone();
            tokio::spawn(async move { journal.record(&claim(&format!("u{i}"))).await })
        })
        .collect();
    while journal.pending().changes.len() < 64 {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(journal.is_empty(), "no intent counts before its line is synced");
    assert_eq!(uids(dir.path()).len(), 0, "nothing written yet");
    drop(under_way);
    for done in futures::future::join_all(records).await {
        done.unwrap().unwrap();
    }
    assert_eq!(journal.syncs.load(Ordering::Relaxed), 1, "one sync for the 64 records");
    assert_eq!(journal.len(), 64);
    // Each one in the file for the next run.
    assert_eq!(uids(dir.path()).len(), 64);
    // One alone still syncs.
    journal.record(&claim("last")).await.unwrap();
    assert_eq!(journal.syncs.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_removal_is_written_without_a_sync_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    journal.record(&claim("u1")).await.unwrap();
    journal.remove("u1").await.unwrap();
    assert_eq!(journal.syncs.load(Ordering::Relaxed), 1);
    assert!(uids(dir.path()).is_empty(), "the removal is in the file");
    // Removing what is not open writes nothing.
    journal.remove("u1").await.unwrap();
    assert_eq!(log_text(dir.path()).lines().count(), 2);
}

#[tokio::test]
async fn a_last_line_cut_short_is_no_intent() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    journal.record(&claim("u1")).await.unwrap();
    drop(journal);
    let mut file = File::options().append(true).open(dir.path().join(logfile::LOG)).unwrap();
    file.write_all(br#"{"put":{"metadata":{"uid":"u2""#).unwrap();
    drop(file);
    let reopened = Journal::open(dir.path()).unwrap();
    assert_eq!(uids(dir.path()), ["u1"]);
    assert!(reopened.contains("u1") && !reopened.contains("u2"));
    // Nothing kept aside, and the next line starts on a line of its own.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "the log and its lock");
    reopened.record(&claim("u3")).await.unwrap();
    assert_eq!(uids(dir.path()), ["u1", "u3"]);
}

#[tokio::test]
async fn unreadable_lines_are_kept_aside_for_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let good = |uid| String::from_utf8(logfile::put_line(&claim(uid)).unwrap()).unwrap();
    let text = format!("{}not json\n{{\"put\":{{}}}}\n{}", good("u1"), good("u2"));
    std::fs::write(dir.path().join(logfile::LOG), &text).unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    assert!(journal.contains("u1") && journal.contains("u2"));
    let aside: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("unreadable"))
        .collect();
    assert_eq!(aside.len(), 1);
    assert_eq!(std::fs::read_to_string(&aside[0]).unwrap(), text, "the log as found");
    assert_eq!(log_text(dir.path()).lines().count(), 2, "the log keeps what it could read");
}

#[tokio::test]
async fn the_file_per_intent_layout_is_taken_into_the_log() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("u7.json"), serde_json::to_vec(&claim("u7")).unwrap()).unwrap();
    std::fs::write(dir.path().join("u8.json"), b"not json").unwrap();
    std::fs::write(dir.path().join("u9.tmp"), b"{").unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    assert_eq!(journal.len(), 1);
    assert!(journal.contains("u7"));
    assert!(!dir.path().join("u7.json").exists(), "its intent is in the log");
    assert!(dir.path().join("u8.json").exists(), "left for the operator");
    assert!(!dir.path().join("u9.tmp").exists());
    journal.remove("u7").await.unwrap();
    drop(journal);
    assert!(Journal::open(dir.path()).unwrap().is_empty());
}

#[tokio::test]
async fn a_second_process_cannot_take_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    journal.record(&claim("u1")).await.unwrap();
    assert!(matches!(Journal::open(dir.path()), Err(JournalError::Held { .. })));
    // Reading beside it is allowed: `reconcile`.
    assert_eq!(uids(dir.path()), ["u1"]);
    drop(journal);
    assert!(Journal::open(dir.path()).unwrap().contains("u1"));
    assert!(intents_in(&dir.path().join("absent")).unwrap().is_empty());
}

#[test]
fn a_start_waits_for_a_holder_that_exits_and_refuses_one_that_stays() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    // A holder that lets go after 300 ms, as a process killed a moment ago exits.
    let holder = Journal::open(dir.path()).unwrap();
    let lock = std::fs::read_to_string(dir.path().join(logfile::LOCK)).unwrap();
    assert_eq!(lock, std::process::id().to_string(), "the holder names itself");
    let exiting = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drop(holder);
    });
    let started = Instant::now();
    let taken = Journal::open_waiting(dir.path(), Duration::from_secs(10));
    assert!(taken.is_ok(), "{:?}", taken.err());
    assert!(started.elapsed() >= Duration::from_millis(250), "{:?}", started.elapsed());
    exiting.join().unwrap();
    // A holder that stays: refused once the wait is over, not before.
    let started = Instant::now();
    let second = Journal::open_waiting(dir.path(), Duration::from_millis(400));
    assert!(matches!(second, Err(JournalError::Held { .. })), "{:?}", second.err());
    assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
}

#[tokio::test]
async fn the_log_is_rewritten_once_ended_intents_outweigh_open_ones() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let line = logfile::put_line(&claim("u0")).unwrap().len() as u64;
    journal.log.lock().await.rewrite_after = 10 * line;
    journal.record(&claim("open")).await.unwrap();
    for i in 0..20 {
        let uid = format!("u{i}");
        journal.record(&claim(&uid)).await.unwrap();
        journal.remove(&uid).await.unwrap();
    }
    let size = std::fs::metadata(dir.path().join(logfile::LOG)).unwrap().len();
    assert!(size < 12 * line, "rewritten: {size} bytes for lines of {line}");
    assert_eq!(uids(dir.path()), ["open"]);
}

#[tokio::test]
async fn a_failed_write_fails_its_records_and_the_log_is_mended_before_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    journal.record(&claim("u1")).await.unwrap();
    // A file that refuses writes, as a failing disk would.
    journal.log.lock().await.file = Arc::new(File::open(dir.path().join(logfile::LOG)).unwrap());
    let failed = journal.record(&claim("u2")).await;
    assert!(matches!(failed, Err(JournalError::NotWritten { .. })), "{failed:?}");
    assert!(!journal.contains("u2"));
    journal.remove("u1").await.unwrap();
    journal.record(&claim("u3")).await.unwrap();
    assert_eq!(uids(dir.path()), ["u3"]);
    drop(journal);
    assert_eq!(Journal::open(dir.path()).unwrap().all().len(), 1);
}

#[tokio::test]
async fn a_writer_dropped_mid_write_fails_its_batch_and_leaves_a_sound_log() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    journal.record(&claim("u1")).await.unwrap();
    // Its write runs on a blocking thread, which a loaded machine may let finish before the
    // first poll returns: such a write is undone and tried again.
    let mut dropped_mid_write = None;
    for attempt in 0..50 {
        let batch = journal.pending().batch.clone();
        let u2 = claim("u2");
        let mut dropped = Box::pin(journal.record(&u2));
        if futures::poll!(&mut dropped).is_pending() {
            drop(dropped);
            dropped_mid_write = Some(batch);
            break;
        }
        drop(dropped);
        journal.remove("u2").await.unwrap();
        assert!(attempt < 49, "every write finished before its first poll returned");
    }
    let batch = dropped_mid_write.expect("a write dropped mid-way");
    // Whoever waits on that batch is answered, and the next write mends the file first.
    assert!(matches!(batch.outcome.get(), Some(Err(_))), "{:?}", batch.outcome.get());
    assert!(!journal.contains("u2"));
    journal.record(&claim("u3")).await.unwrap();
    assert_eq!(uids(dir.path()), ["u1", "u3"]);
    drop(journal);
    let reopened = Journal::open(dir.path()).unwrap();
    assert!(reopened.contains("u1") && reopened.contains("u3") && !reopened.contains("u2"));
}

#[tokio::test]
async fn a_claim_without_uid_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::open(dir.path()).unwrap();
    let mut c = claim("x");
    c.metadata.uid = None;
    assert!(matches!(journal.record(&c).await, Err(JournalError::NoUid)));
}
