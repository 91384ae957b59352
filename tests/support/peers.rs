//! Where the real peers built by `make peers` (peers/build.sh) are. A missing peer fails the test
//! that needs it, with the command that builds it; it is never skipped.

#![allow(dead_code)]

use std::path::PathBuf;

/// The folder of peer binaries: $PEERS_BIN, else $PEERS_CACHE/bin, else the cache's default.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("PEERS_BIN") {
        return PathBuf::from(dir);
    }
    if let Some(cache) = std::env::var_os("PEERS_CACHE") {
        return PathBuf::from(cache).join("bin");
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join("csi-pv-controller/peers/bin")
}

/// The path of peer `name`; panics with instructions if it has not been built.
pub fn peer(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "peer {name} not found at {}: run `make peers` first (or set PEERS_BIN)",
        path.display()
    );
    path
}
