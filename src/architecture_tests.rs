//! The architecture, checked: decision modules take k8s-openapi objects and return outcomes;
//! they never reach the API, the driver, the runtime or the process's configuration. A test
//! rather than a convention, so that a shortcut fails `make test` instead of review.

use std::path::{Path, PathBuf};

/// The decision modules: folders and files under src/.
const DECISIONS: [&str; 13] = [
    "binder",
    "explain",
    "inventory/mod.rs",
    "provision",
    "expand",
    "modify",
    "model",
    "resync",
    "resync.rs",
    "capacity/mod.rs",
    "freshness.rs",
    "names.rs",
    "reason.rs",
];

/// What a decision module must not name: the API client, watches, the runtime, gRPC, and the
/// executor's and the process's own modules.
const FORBIDDEN: [&str; 12] = [
    "kube::Api",
    "kube::api::Api",
    "kube::Client",
    "kube::runtime",
    "tokio",
    "tonic",
    "crate::controller",
    "crate::config",
    "crate::cluster",
    "crate::csi::client",
    "crate::metrics",
    "std::time::Instant::now",
];

fn rust_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_file() {
        out.push(path.to_path_buf());
        return;
    }
    for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
        let p = entry.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// Every `file:line: what` where `matches` finds something in a line's code (comments may
/// name what a module does not do).
fn code_lines(files: &[PathBuf], matches: impl Fn(&str) -> Option<&'static str>) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if let Some(what) = matches(code) {
                found.push(format!("{}:{}: {what}", file.display(), n + 1));
            }
        }
    }
    found
}

#[test]
fn decision_modules_name_no_client_runtime_or_configuration() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    for module in DECISIONS {
        let path = src.join(module);
        assert!(path.exists(), "decision module {module} moved: update this list");
        rust_files(&path, &mut files);
    }
    assert!(files.len() > 30, "too few decision files read: {}", files.len());
    let found =
        code_lines(&files, |code| FORBIDDEN.iter().find(|name| code.contains(*name)).copied());
    assert!(found.is_empty(), "decision modules reaching out:\n{}", found.join("\n"));
}

/// The executor's clock is tokio's, so that tests with paused time can move it: a backoff, a
/// resize's wait, a slow retry all expire when the test says so.
#[test]
fn the_executor_reads_the_time_from_tokio() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src.join("controller"), &mut files);
    rust_files(&src.join("queue.rs"), &mut files);
    assert!(files.len() > 15, "too few executor files read: {}", files.len());
    let found = code_lines(&files, |code| {
        let std_time = code.contains("std::time::Instant")
            || (code.contains("std::time::{") && code.contains("Instant"));
        std_time.then_some("std::time::Instant")
    });
    assert!(found.is_empty(), "std::time::Instant in the executor:\n{}", found.join("\n"));
}

#[test]
fn the_guard_sees_what_it_forbids() {
    let line = "use kube::Client; // a client";
    assert!(FORBIDDEN.iter().any(|f| line.split("//").next().unwrap().contains(f)));
}
