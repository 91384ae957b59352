//! The provisioning intent kept on local disk instead of a claim finalizer (`--intent-journal`).
//!
//! Beside kube-controller-manager's binder we write nothing else to a claim, so a finalizer
//! costs two claim writes per volume (on, off). A log in a directory that outlives the process
//! (an emptyDir outlives a container restart, and so a kill -9) keeps the same promise for no
//! API write: before CreateVolume the claim is appended to the log and synced; once the volume
//! is recorded in a PV its removal is appended. An intent whose claim is gone when we start (or
//! at a resync) is the volume that claim may have left in the driver: it is found with
//! CreateVolume (idempotent by name) and deleted, or recorded when the class retains it.
//!
//! The changes of a burst share their syncs, as a database commits a group: whoever writes
//! takes every change added while the previous write ran, and one sync makes them all durable.

mod logfile;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tracing::{error, warn};

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The I/O error is part of the message rather than a `source`, so that a cause chain
    /// printed whole says it once.
    #[error("intent journal {path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    #[error("intent journal: the claim has no UID")]
    NoUid,
    #[error("intent journal {path}: another process holds it (and did not exit while we waited)")]
    Held { path: PathBuf },
    #[error("intent journal {path}: the write of this change failed: {reason}")]
    NotWritten { path: PathBuf, reason: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |cause| JournalError::Io { path: path.to_path_buf(), cause }
}

/// Once the dead lines (ended intents) pass this many bytes and outweigh the live ones, the log
/// is rewritten.
const REWRITE_AFTER: u64 = 1 << 20;

/// The intents on disk, and a copy in memory for the decisions.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    /// Claim UID → the claim as it was when its intent was recorded; durable ones only.
    entries: Mutex<HashMap<String, Arc<PersistentVolumeClaim>>>,
    /// The changes the next write takes.
    pending: Mutex<Pending>,
    /// The file; held while a write runs.
    log: tokio::sync::Mutex<Log>,
    /// Syncs of the log, for the tests.
    syncs: AtomicU64,
    /// The directory's lock, held for as long as this process lives.
    _held: File,
}

#[derive(Debug, Default)]
struct Pending {
    changes: Vec<Change>,
    /// What their callers wait on: the outcome of the write that takes them.
    batch: Arc<Batch>,
}

#[derive(Debug)]
enum Change {
    Put { uid: String, line: Arc<[u8]> },
    Del { uid: String },
}

#[derive(Debug, Default)]
struct Batch {
    outcome: OnceLock<Result<(), String>>,
}

/// A taken batch's answer: whatever the write says, or, should the writer be dropped before it
/// says anything, a failure, so that no one waits on it for ever.
struct Answer(Arc<Batch>);

impl Drop for Answer {
    fn drop(&mut self) {
        let _ = self.0.outcome.set(Err("the write was cancelled".to_string()));
    }
}

#[derive(Debug)]
struct Log {
    file: Arc<File>,
    /// Claim UID → its put line, for every intent open in the file: the rewrite's content.
    live: HashMap<String, Arc<[u8]>>,
    live_bytes: u64,
    file_bytes: u64,
    /// A write failed, so the file's tail is unknown: rewritten before the next append.
    damaged: bool,
    rewrite_after: u64,
}

impl Journal {
    /// Opens (creating) the directory, holds it, and reads the intents a previous run left, in
    /// the log or in the files of the file-per-intent layout; then writes them as a fresh log.
    /// Lines or files that cannot be read are logged and kept for the operator, never dropped:
    /// each may be a volume to find.
    pub fn open(dir: &Path) -> Result<Journal, JournalError> {
        Self::open_waiting(dir, std::time::Duration::ZERO)
    }

    /// As `open`, waiting up to `wait` for a holder of the lock to exit (a predecessor killed
    /// a moment ago): blocks the calling thread meanwhile.
    pub fn open_waiting(dir: &Path, wait: std::time::Duration) -> Result<Journal, JournalError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let held = logfile::hold(dir, wait)?;
        let contents = logfile::read(dir)?;
        if contents.unreadable > 0 {
            logfile::keep_aside(dir, contents.unreadable)?;
        }
        logfile::remove_interrupted(dir)?;
        let mut live = HashMap::new();
        for (uid, claim) in &contents.entries {
            let line = logfile::put_line(claim).map_err(|e| io(dir)(std::io::Error::other(e)))?;
            live.insert(uid.clone(), Arc::<[u8]>::from(line));
        }
        let (file, bytes) =
            logfile::rewrite(dir, live.values().map(|l| &**l)).map_err(|f| f.error)?;
        // Their intents are in the synced log now.
        for path in &contents.per_intent_files {
            if let Err(e) = std::fs::remove_file(path) {
                warn!(path = %path.display(), error = %e, "cannot remove an intent file taken into the log");
            }
        }
        Ok(Journal {
            dir: dir.to_path_buf(),
            entries: Mutex::new(contents.entries),
            pending: Mutex::new(Pending::default()),
            log: tokio::sync::Mutex::new(Log {
                file: Arc::new(file),
                live,
                live_bytes: bytes,
                file_bytes: bytes,
                damaged: false,
                rewrite_after: REWRITE_AFTER,
            }),
            syncs: AtomicU64::new(0),
            _held: held,
        })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<PersistentVolumeClaim>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.entries().contains_key(uid)
    }

    /// How many intents are open.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every open intent: the claim as recorded.
    pub fn all(&self) -> Vec<Arc<PersistentVolumeClaim>> {
        self.entries().values().cloned().collect()
    }

    /// Makes the intent durable: returns once a sync that covers its line has finished.
    pub async fn record(&self, claim: &PersistentVolumeClaim) -> Result<(), JournalError> {
        let uid = claim.metadata.uid.clone().ok_or(JournalError::NoUid)?;
        if self.contains(&uid) {
            return Ok(());
        }
        let mut kept = claim.clone();
        kept.metadata.managed_fields = None;
        let line = logfile::put_line(&kept).map_err(|e| io(&self.dir)(std::io::Error::other(e)))?;
        let batch = self.add(Change::Put { uid: uid.clone(), line: line.into() });
        self.commit(&batch).await?;
        self.entries().insert(uid, Arc::new(kept));
        Ok(())
    }

    /// The intent is carried out or undone. Its line is written, but synced only with the next
    /// intent's: a removal lost to a crash only makes the next run check again.
    pub async fn remove(&self, uid: &str) -> Result<(), JournalError> {
        if self.entries().remove(uid).is_none() {
            return Ok(());
        }
        let batch = self.add(Change::Del { uid: uid.to_string() });
        self.commit(&batch).await
    }

    fn add(&self, change: Change) -> Arc<Batch> {
        let mut pending = self.pending();
        pending.changes.push(change);
        pending.batch.clone()
    }

    /// Returns the outcome of the write that took `batch`, making that write when none has.
    async fn commit(&self, batch: &Arc<Batch>) -> Result<(), JournalError> {
        let mut log = self.log.lock().await;
        if batch.outcome.get().is_none() {
            // Not taken while we waited for the file, so it is still the pending one: write it,
            // with every change added since.
            let taken = std::mem::take(&mut *self.pending());
            let answer = Answer(taken.batch);
            let outcome = self.write(&mut log, taken.changes).await;
            let _ = answer.0.outcome.set(outcome);
        }
        match batch.outcome.get() {
            Some(Ok(())) => Ok(()),
            Some(Err(reason)) => Err(self.not_written(reason)),
            None => Err(self.not_written("the batch was not written")),
        }
    }

    fn not_written(&self, reason: &str) -> JournalError {
        JournalError::NotWritten { path: self.dir.join(logfile::LOG), reason: reason.to_string() }
    }

    /// Appends the changes, synced when any records an intent, and keeps the file's account.
    async fn write(&self, log: &mut Log, changes: Vec<Change>) -> Result<(), String> {
        let written = match self.append(log, &changes).await {
            Ok(written) => written,
            Err(e) => {
                error!(path = %self.dir.join(logfile::LOG).display(), error = %e, "cannot write the intent journal; it is rewritten before the next change");
                // The ended intents stay out of the rewrite; the failed records are not in it.
                for change in changes {
                    if let Change::Del { uid } = change {
                        log.forget(&uid);
                    }
                }
                return Err(e.to_string());
            }
        };
        log.file_bytes += written;
        for change in changes {
            match change {
                Change::Put { uid, line } => {
                    log.live_bytes += line.len() as u64;
                    if let Some(old) = log.live.insert(uid, line) {
                        log.live_bytes -= old.len() as u64;
                    }
                }
                Change::Del { uid } => log.forget(&uid),
            }
        }
        let dead = log.file_bytes - log.live_bytes;
        if dead > log.rewrite_after && dead > log.live_bytes {
            // Everything written is already durable; a failed rewrite is tried again later.
            if let Err(e) = self.rewrite(log).await {
                warn!(error = %e, "cannot rewrite the intent journal without its ended intents");
            }
        }
        Ok(())
    }

    /// Writes the changes' lines at the log's end; returns how many bytes that was.
    async fn append(&self, log: &mut Log, changes: &[Change]) -> Result<u64, JournalError> {
        if log.damaged {
            self.rewrite(log).await?;
        }
        let mut bytes = Vec::new();
        let mut sync = false;
        for change in changes {
            match change {
                Change::Put { line, .. } => {
                    bytes.extend_from_slice(line);
                    sync = true;
                }
                Change::Del { uid } => bytes.extend_from_slice(&logfile::del_line(uid)),
            }
        }
        let file = log.file.clone();
        let written = bytes.len() as u64;
        // Until the write is known to have finished: a writer dropped while its write runs
        // leaves the file's tail unknown too.
        log.damaged = true;
        tokio::task::spawn_blocking(move || {
            (&*file).write_all(&bytes)?;
            if sync {
                file.sync_data()?;
            }
            Ok::<_, std::io::Error>(())
        })
        .await
        .map_err(std::io::Error::other)
        .and_then(|r| r)
        .map_err(io(&self.dir))?;
        log.damaged = false;
        if sync {
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(written)
    }

    /// The log made anew from the intents open in it.
    async fn rewrite(&self, log: &mut Log) -> Result<(), JournalError> {
        let (dir, lines) = (self.dir.clone(), log.live.values().cloned().collect::<Vec<_>>());
        let rewritten =
            tokio::task::spawn_blocking(move || logfile::rewrite(&dir, lines.iter().map(|l| &**l)))
                .await
                .map_err(|e| io(&self.dir)(std::io::Error::other(e)))?;
        match rewritten {
            Ok((file, bytes)) => {
                log.file = Arc::new(file);
                (log.file_bytes, log.live_bytes, log.damaged) = (bytes, bytes, false);
                Ok(())
            }
            Err(failed) => {
                // Renamed into place before the failure: appends go to the new file, which is
                // rewritten again before the next one.
                if let Some(file) = failed.file {
                    log.file = Arc::new(file);
                    log.damaged = true;
                }
                Err(failed.error)
            }
        }
    }
}

impl Log {
    fn forget(&mut self, uid: &str) {
        if let Some(line) = self.live.remove(uid) {
            self.live_bytes -= line.len() as u64;
        }
    }
}

/// The intents open in a journal, read without taking it: for a command that runs beside the
/// controller (`reconcile`). A line being written at that instant is not yet an intent.
pub fn intents_in(dir: &Path) -> Result<Vec<Arc<PersistentVolumeClaim>>, JournalError> {
    Ok(logfile::read(dir)?.entries.into_values().collect())
}
