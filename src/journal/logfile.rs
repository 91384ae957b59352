//! The journal's file, `intents.log`: one line of JSON per change, `{"put": <claim>}` when an
//! intent is recorded and `{"del": "<claim uid>"}` when it is over. Lines are appended in
//! batches; a batch that records an intent is synced before any of its callers goes on. The
//! file is rewritten with only the open intents at each start and when its dead lines outweigh
//! the live ones.

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde::{Deserialize, Serialize};
use tracing::{error, info, warn};

use super::{JournalError, io};

pub(super) const LOG: &str = "intents.log";
const REWRITE: &str = "intents.log.tmp";
pub(super) const LOCK: &str = "intents.lock";

#[derive(Serialize)]
#[serde(rename_all = "lowercase")]
enum LineOut<'a> {
    Put(&'a PersistentVolumeClaim),
    Del(&'a str),
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum LineIn {
    Put(Box<PersistentVolumeClaim>),
    Del(String),
}

/// The line that records an intent, newline included. JSON escapes every newline in a string,
/// so a line is always one record.
pub(super) fn put_line(claim: &PersistentVolumeClaim) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = serde_json::to_vec(&LineOut::Put(claim))?;
    line.push(b'\n');
    Ok(line)
}

/// The line that ends an intent, newline included.
pub(super) fn del_line(uid: &str) -> Vec<u8> {
    let mut line = serde_json::to_vec(&LineOut::Del(uid)).unwrap_or_default();
    line.push(b'\n');
    line
}

/// What a directory holds.
#[derive(Debug, Default)]
pub(super) struct Contents {
    /// Claim UID → the claim as recorded, for every intent still open.
    pub entries: HashMap<String, Arc<PersistentVolumeClaim>>,
    /// Lines of the log that could not be read (a last line cut short by a crash not counted).
    pub unreadable: usize,
    /// Readable files of the layout with a file per intent (`<uid>.json`), read into `entries`.
    pub per_intent_files: Vec<PathBuf>,
}

/// Reads the open intents: first any intent files of the file-per-intent layout
/// (`<uid>.json`), then the log, whose removals may end them. Changes nothing on disk.
pub(super) fn read(dir: &Path) -> Result<Contents, JournalError> {
    let mut contents = Contents::default();
    let listing = match std::fs::read_dir(dir) {
        Ok(listing) => listing,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(contents),
        Err(e) => return Err(io(dir)(e)),
    };
    for entry in listing {
        let path = entry.map_err(io(dir))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let claim = std::fs::read(&path).map_err(|e| e.to_string()).and_then(|b| {
            serde_json::from_slice::<PersistentVolumeClaim>(&b).map_err(|e| e.to_string())
        });
        match claim.map(|c| (c.metadata.uid.clone(), c)) {
            Ok((Some(uid), claim)) => {
                contents.entries.insert(uid, Arc::new(claim));
                contents.per_intent_files.push(path);
            }
            Ok((None, _)) => {
                error!(path = %path.display(), "intent journal entry without a claim UID; left in place");
            }
            Err(e) => {
                error!(path = %path.display(), error = %e, "unreadable intent journal entry; left in place, inspect it");
            }
        }
    }
    let path = dir.join(LOG);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(contents),
        Err(e) => return Err(io(&path)(e)),
    };
    let mut lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
    // After the last newline: empty, or a line a crash cut short. Its record never returned, so
    // no CreateVolume followed it.
    if lines.pop().is_some_and(|tail| !tail.is_empty()) {
        warn!(path = %path.display(), "the intent journal's last line was cut short (a write a crash interrupted); not an intent");
    }
    for (number, line) in lines.into_iter().enumerate() {
        match serde_json::from_slice::<LineIn>(line) {
            Ok(LineIn::Put(claim)) => match claim.metadata.uid.clone() {
                Some(uid) => {
                    contents.entries.insert(uid, Arc::new(*claim));
                }
                None => {
                    contents.unreadable += 1;
                    error!(path = %path.display(), line = number + 1, "intent journal line without a claim UID");
                }
            },
            Ok(LineIn::Del(uid)) => {
                contents.entries.remove(&uid);
            }
            Err(e) => {
                contents.unreadable += 1;
                error!(path = %path.display(), line = number + 1, error = %e, "unreadable intent journal line");
            }
        }
    }
    Ok(contents)
}

/// How often a held lock is tried again while its holder may be exiting.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Holds the directory for this process: a second controller on the same journal would undo
/// the first one's intents. The lock goes with the process, kill -9 included, but only once
/// that process has exited: one started at once after a kill -9 may find it held by the dying
/// one for a moment. So a held lock is tried again for up to `wait` (with a log line naming the
/// holder's PID, which the holder writes into the lock file), and refused only after: a holder
/// still alive then is a second controller.
pub(super) fn hold(dir: &Path, wait: std::time::Duration) -> Result<File, JournalError> {
    let path = dir.join(LOCK);
    let mut file =
        File::options().create(true).truncate(false).write(true).open(&path).map_err(io(&path))?;
    let started = std::time::Instant::now();
    let mut told = false;
    loop {
        match file.try_lock() {
            Ok(()) => break,
            Err(std::fs::TryLockError::WouldBlock) if started.elapsed() < wait => {
                if !told {
                    let holder = std::fs::read_to_string(&path).unwrap_or_default();
                    warn!(path = %path.display(), holder = holder.trim(), ?wait, "intent journal held by another process; waiting for it to exit");
                    told = true;
                }
                std::thread::sleep(LOCK_RETRY);
            }
            Err(std::fs::TryLockError::WouldBlock) => return Err(JournalError::Held { path }),
            Err(std::fs::TryLockError::Error(e)) => return Err(io(&path)(e)),
        }
    }
    if told {
        info!(path = %path.display(), waited = ?started.elapsed(), "intent journal taken over from the process that held it");
    }
    // Who holds it, for the next one's log line; the lock itself does not depend on it.
    let pid = std::process::id().to_string();
    let _ = file.set_len(0).and_then(|()| file.write_all(pid.as_bytes()));
    Ok(file)
}

/// A copy of the log as found, for the operator, when some of its lines cannot be read: the
/// rewrite keeps only what it could read, and an unreadable line may be a volume to find.
pub(super) fn keep_aside(dir: &Path, unreadable: usize) -> Result<(), JournalError> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = dir.join(format!("{LOG}.{secs}.unreadable"));
    std::fs::copy(dir.join(LOG), &aside).map_err(io(&aside))?;
    error!(copy = %aside.display(), lines = unreadable, "intent journal lines that cannot be read are kept in a copy of the log; inspect it");
    Ok(())
}

/// Leftovers of writes a crash interrupted before their rename: never an intent.
pub(super) fn remove_interrupted(dir: &Path) -> Result<(), JournalError> {
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        if path.extension().and_then(|e| e.to_str()) == Some("tmp") {
            let _ = std::fs::remove_file(&path);
        }
    }
    Ok(())
}

/// A rewrite that failed; `file` is the new log when the rename happened before the failure,
/// and appends must go there from then on.
#[derive(Debug)]
pub(super) struct RewriteFailed {
    pub file: Option<File>,
    pub error: JournalError,
}

/// The log made anew from `lines`: written beside it, synced, renamed over it, the directory
/// synced. Returns the new log, positioned at its end for the next append.
pub(super) fn rewrite<'a>(
    dir: &Path,
    lines: impl Iterator<Item = &'a [u8]>,
) -> Result<(File, u64), RewriteFailed> {
    let failed = |file, error| RewriteFailed { file, error };
    let tmp = dir.join(REWRITE);
    let mut file = File::create(&tmp).map_err(|e| failed(None, io(&tmp)(e)))?;
    let mut bytes = Vec::new();
    for line in lines {
        bytes.extend_from_slice(line);
    }
    file.write_all(&bytes).map_err(|e| failed(None, io(&tmp)(e)))?;
    file.sync_all().map_err(|e| failed(None, io(&tmp)(e)))?;
    let path = dir.join(LOG);
    std::fs::rename(&tmp, &path).map_err(|e| failed(None, io(&path)(e)))?;
    // The rename itself must survive a crash too.
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok((file, bytes.len() as u64)),
        Err(e) => Err(failed(Some(file), io(dir)(e))),
    }
}
