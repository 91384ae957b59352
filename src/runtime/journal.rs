//! The provisioning intent kept in local files instead of a claim finalizer (`--intent-journal`).
//!
//! Beside kube-controller-manager's binder we write nothing else to a claim, so a finalizer
//! costs two claim writes per volume (on, off). A file per claim in a directory that outlives
//! the process (an emptyDir outlives a container restart, and so a kill -9) keeps the same
//! promise for no API write: before CreateVolume the claim is written to `<uid>.json` and
//! synced; once the volume is recorded in a PV the file goes. A file whose claim is gone when
//! we start (or at a resync) is the volume that claim may have left in the driver: it is found
//! with CreateVolume (idempotent by name) and deleted, or recorded when the class retains it.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use tracing::{error, warn};

#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("intent journal {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("intent journal: the claim has no UID")]
    NoUid,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> JournalError + '_ {
    move |source| JournalError::Io { path: path.to_path_buf(), source }
}

/// The intents on disk, and a copy in memory for the decisions.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    /// Claim UID → the claim as it was when its intent was recorded.
    entries: Mutex<HashMap<String, Arc<PersistentVolumeClaim>>>,
    folder: FolderSync,
}

/// The directory's syncs, shared: one sync makes every rename done before it began durable, so
/// the records of a burst that renamed their entries meanwhile wait for the same one instead of
/// each syncing the directory again (one sync for many, as a database commits a group).
#[derive(Debug, Default)]
struct FolderSync {
    /// Renames done so far, each a ticket.
    renamed: AtomicU64,
    /// The tickets a finished sync covers; held while a sync runs.
    synced: tokio::sync::Mutex<u64>,
    /// Syncs made, for the tests.
    syncs: AtomicU64,
}

impl Journal {
    /// Opens (creating) the directory and reads the intents a previous run left. An entry that
    /// cannot be read is left in place and logged, never deleted: it may be a volume to find.
    pub fn open(dir: &Path) -> Result<Journal, JournalError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let mut entries = HashMap::new();
        for entry in std::fs::read_dir(dir).map_err(io(dir))? {
            let path = entry.map_err(io(dir))?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("json") => {}
                // A write that a crash interrupted before its rename: no CreateVolume followed.
                Some("tmp") => {
                    let _ = std::fs::remove_file(&path);
                    continue;
                }
                _ => continue,
            }
            let claim = std::fs::read(&path).map_err(|e| e.to_string()).and_then(|b| {
                serde_json::from_slice::<PersistentVolumeClaim>(&b).map_err(|e| e.to_string())
            });
            match claim {
                Ok(claim) => match claim.metadata.uid.clone() {
                    Some(uid) => {
                        entries.insert(uid, Arc::new(claim));
                    }
                    None => {
                        error!(path = %path.display(), "intent journal entry without a claim UID; left in place");
                    }
                },
                Err(e) => {
                    error!(path = %path.display(), error = %e, "unreadable intent journal entry; left in place, inspect it");
                }
            }
        }
        Ok(Journal {
            dir: dir.to_path_buf(),
            entries: Mutex::new(entries),
            folder: FolderSync::default(),
        })
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<PersistentVolumeClaim>>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
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

    fn path(&self, uid: &str) -> PathBuf {
        self.dir.join(format!("{uid}.json"))
    }

    /// Makes the intent durable: written, synced, renamed into place, the directory synced.
    pub async fn record(&self, claim: &PersistentVolumeClaim) -> Result<(), JournalError> {
        let uid = claim.metadata.uid.clone().ok_or(JournalError::NoUid)?;
        if self.contains(&uid) {
            return Ok(());
        }
        let mut kept = claim.clone();
        kept.metadata.managed_fields = None;
        let kept = Arc::new(kept);
        let (path, copy) = (self.path(&uid), kept.clone());
        tokio::task::spawn_blocking(move || write_synced(&path, &copy))
            .await
            .map_err(|e| io(&self.dir)(std::io::Error::other(e)))??;
        // The rename itself must survive a crash too.
        self.sync_folder().await?;
        self.entries().insert(uid, kept);
        Ok(())
    }

    /// Returns once a directory sync that began after this caller's rename has finished.
    async fn sync_folder(&self) -> Result<(), JournalError> {
        let ticket = self.folder.renamed.fetch_add(1, Ordering::SeqCst) + 1;
        let mut synced = self.folder.synced.lock().await;
        if *synced >= ticket {
            return Ok(());
        }
        // Every rename with a ticket up to here happened before this sync begins.
        let covered = self.folder.renamed.load(Ordering::SeqCst);
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || std::fs::File::open(&dir).and_then(|d| d.sync_all()))
            .await
            .map_err(|e| io(&self.dir)(std::io::Error::other(e)))?
            .map_err(io(&self.dir))?;
        self.folder.syncs.fetch_add(1, Ordering::Relaxed);
        *synced = covered;
        Ok(())
    }

    /// The intent is carried out or undone. A removal lost to a crash only makes the next run check again.
    pub async fn remove(&self, uid: &str) -> Result<(), JournalError> {
        if self.entries().remove(uid).is_none() {
            return Ok(());
        }
        let path = self.path(uid);
        match tokio::fs::remove_file(&path).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => {
                warn!(path = %path.display(), error = %e, "cannot remove a finished intent");
                Err(io(&path)(e))
            }
        }
    }
}

/// The entry written beside its place, synced, and renamed into place.
fn write_synced(path: &Path, claim: &PersistentVolumeClaim) -> Result<(), JournalError> {
    let bytes = serde_json::to_vec(claim).map_err(|e| io(path)(std::io::Error::other(e)))?;
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(&bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

#[cfg(test)]
mod tests {
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

    #[tokio::test]
    async fn intents_outlive_the_process_until_removed() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        journal.record(&claim("u1")).await.unwrap();
        journal.record(&claim("u2")).await.unwrap();
        journal.remove("u1").await.unwrap();
        // A write a crash cut short, and a foreign file: neither is an intent.
        std::fs::write(dir.path().join("u3.tmp"), b"{").unwrap();
        std::fs::write(dir.path().join("README"), b"x").unwrap();
        let reopened = Journal::open(dir.path()).unwrap();
        assert!(!reopened.contains("u1"));
        assert!(reopened.contains("u2"));
        assert_eq!(reopened.len(), 1);
        let kept = &reopened.all()[0];
        assert_eq!(kept.metadata.name.as_deref(), Some("c"));
        assert!(kept.metadata.managed_fields.is_none(), "kept small");
        assert!(!dir.path().join("u3.tmp").exists());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_burst_of_records_shares_the_directory_syncs() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Arc::new(Journal::open(dir.path()).unwrap());
        // A sync under way while all 64 rename their entries: they wait for the next one.
        let under_way = journal.folder.synced.lock().await;
        let records: Vec<_> = (0..64)
            .map(|i| {
                let journal = journal.clone();
                tokio::spawn(async move { journal.record(&claim(&format!("u{i}"))).await })
            })
            .collect();
        while journal.folder.renamed.load(Ordering::SeqCst) < 64 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert!(journal.is_empty(), "no intent counts before its rename is durable");
        drop(under_way);
        for done in futures::future::join_all(records).await {
            done.unwrap().unwrap();
        }
        let syncs = journal.folder.syncs.load(Ordering::Relaxed);
        assert_eq!(syncs, 1, "one directory sync for the 64 records");
        // Each one durable: every entry is in place for the next run.
        let reopened = Journal::open(dir.path()).unwrap();
        assert_eq!(reopened.len(), 64);
        // One alone still syncs.
        journal.record(&claim("last")).await.unwrap();
        assert_eq!(journal.folder.syncs.load(Ordering::Relaxed), syncs + 1);
    }

    #[tokio::test]
    async fn an_unreadable_entry_stays_for_the_operator() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("u9.json"), b"not json").unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        assert!(journal.is_empty());
        assert!(dir.path().join("u9.json").exists());
    }

    #[tokio::test]
    async fn a_claim_without_uid_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path()).unwrap();
        let mut c = claim("x");
        c.metadata.uid = None;
        assert!(matches!(journal.record(&c).await, Err(JournalError::NoUid)));
    }
}
