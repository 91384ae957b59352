//! The module graph flows one way: a file names only modules of its own layer or below. The
//! layers, bottom first, and where each module stands; a file takes the most specific entry
//! its path is under, so that a folder's pure `mod.rs` can sit below its I/O files.

use std::path::{Path, PathBuf};

use super::{code_of, is_test_file, paths, paths_of, planted, rust_files, src, under};

/// Bottom first. `objects`: what decisions read; `machinery`: the queue, the fence, logs,
/// crash points, metrics; `driver`: the CSI wire types, errors and client; `decisions`: pure
/// rules; `adapters`: the API, the journal, the Lease; `executor`: the controller and its
/// siblings that act; `process`: the binary's wiring.
const LAYERS: &[(&str, &[&str])] = &[
    ("objects", &["model", "migration"]),
    ("machinery", &["runtime", "metrics"]),
    ("driver", &["csi"]),
    (
        "decisions",
        &[
            "binder",
            "provision",
            "expand",
            "modify",
            "resync",
            "explain",
            "fuzz",
            "inventory/mod.rs",
            "inventory/paging.rs",
            "capacity/mod.rs",
        ],
    ),
    ("adapters", &["cluster", "journal", "leader"]),
    ("executor", &["controller", "config", "health", "capacity", "inventory"]),
    ("process", &["cli", "main.rs", "lib.rs"]),
];

/// The layer (index into LAYERS) of a path relative to src/ (`provision/claim.rs`), by its
/// most specific entry; None for what no entry names (the tests' fixtures, this guard).
fn layer_of(relative: &str) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (rank, (_, entries)) in LAYERS.iter().enumerate() {
        for entry in *entries {
            let hit = if entry.ends_with(".rs") {
                relative == *entry
            } else {
                relative == format!("{entry}.rs") || relative.starts_with(&format!("{entry}/"))
            };
            if hit && best.is_none_or(|(length, _)| entry.len() > length) {
                best = Some((entry.len(), rank));
            }
        }
    }
    best.map(|(_, rank)| rank)
}

/// The layer of an absolute path (`crate::inventory::reconciler::X`): the file it lives in,
/// as far as the tree shows (a name defined in `mod.rs` takes the folder's `mod.rs`).
fn layer_of_path(path: &str, src: &Path) -> Option<usize> {
    let segments: Vec<&str> = path.strip_prefix("crate::")?.split("::").collect();
    let top = segments.first()?;
    if src.join(format!("{top}.rs")).is_file() {
        return layer_of(&format!("{top}.rs"));
    }
    let mut folder = PathBuf::from(top);
    for segment in &segments[1..] {
        if src.join(&folder).join(format!("{segment}.rs")).is_file() {
            return layer_of(&folder.join(format!("{segment}.rs")).to_string_lossy());
        }
        if !src.join(&folder).join(segment).is_dir() {
            break;
        }
        folder = folder.join(segment);
    }
    layer_of(&folder.join("mod.rs").to_string_lossy())
}

/// Every `file:line: path` of product code (test code left out) that names a module of a
/// higher layer than its own. `files`: each with its path relative to `src`.
fn upward(files: &[(PathBuf, String)], src: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for (file, relative) in files {
        let Some(own) = layer_of(relative) else { continue };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let product = text.split("#[cfg(test)]").next().unwrap_or_default();
        let module = paths::module_of(Path::new(""), Path::new(relative));
        let inline = paths::inline_modules(&code_of(product));
        for (line, path) in paths_of(product) {
            let resolved = paths::resolve(&path, &paths::module_at(&module, &inline, line));
            if !under(&resolved, "crate") {
                continue;
            }
            match layer_of_path(&resolved, src) {
                Some(theirs) if theirs > own => found.push(format!(
                    "{relative}:{line}: {path} ({} names {})",
                    LAYERS[own].0, LAYERS[theirs].0
                )),
                _ => {}
            }
        }
    }
    // A `use` line's paths are read as a tree and again as code.
    found.sort();
    found.dedup();
    found
}

fn product_files() -> Vec<(PathBuf, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let relative = f.strip_prefix(src()).ok()?.to_string_lossy().to_string();
            let test = is_test_file(&relative);
            // The tests' fixtures and this guard are test code too.
            let guard = relative.starts_with("architecture_tests") || relative == "fixtures.rs";
            (!test && !guard).then_some((f, relative))
        })
        .collect()
}

#[test]
fn no_arrow_runs_back_up() {
    let files = product_files();
    assert!(files.len() > 100, "too few files read: {}", files.len());
    let placed = files.iter().filter(|(_, r)| layer_of(r).is_some()).count();
    assert_eq!(placed, files.len(), "a file no layer names");
    let found = upward(&files, &src());
    assert!(found.is_empty(), "arrows that run back up:\n{}", found.join("\n"));
}

#[test]
fn an_arrow_up_is_caught_in_its_three_forms() {
    let text = "use crate::config::Config;\nuse super::super::cluster::stores::Stores;\nfn f() { crate::inventory::reconciler::run(); crate::inventory::decide(); }\n#[cfg(test)]\nmod tests { use crate::controller::Controller; }\n";
    let (_dir, files) = planted(&[("planted.rs", text)]);
    // As a decision module: the executor, an adapter, and an executor file of a folder whose
    // `mod.rs` is a decision are above it; that `mod.rs` is not.
    let found = upward(&[(files[0].clone(), "provision/planted.rs".to_string())], &src());
    let mut named: Vec<&str> =
        found.iter().filter_map(|f| f.split(": ").nth(1)?.split(" (").next()).collect();
    named.sort_unstable();
    named.dedup();
    assert_eq!(
        named,
        [
            "crate::config::Config",
            "crate::inventory::reconciler::run",
            "super::super::cluster::stores::Stores"
        ],
        "{found:?}"
    );
    assert_eq!(layer_of("inventory/mod.rs"), layer_of("provision/claim.rs"));
    assert!(layer_of("inventory/reconciler.rs") > layer_of("cluster/stores.rs"));
    assert_eq!(layer_of("fixtures.rs"), None);
}
