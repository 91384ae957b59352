//! The architecture, checked: decision modules take k8s-openapi objects and return outcomes;
//! they never reach the API, the driver, the runtime, the executor or the process's
//! configuration, and never read a clock. Nothing outside `controller/` uses the executor's
//! insides. A test rather than a convention, so that a shortcut fails `make test` instead of
//! review.
//!
//! Paths are matched by segments, after `use` trees are expanded: `use kube::{Api, Client}` is
//! `kube::Api` and `kube::Client`, while `my_tokio` or a comment naming `tokio` is nothing.

mod layers;
mod passes;
mod paths;

use std::path::{Path, PathBuf};

/// The decision modules: folders and files under src/.
const DECISIONS: [&str; 9] = [
    "binder",
    "explain",
    "inventory/mod.rs",
    "provision",
    "expand",
    "modify",
    "model",
    "resync",
    "capacity/mod.rs",
];

/// What a decision module must not name, as path prefixes: the API client, watches, the
/// runtime, gRPC, the driver's client, and the executor's and the process's own modules.
const FORBIDDEN: &[&str] = &[
    "kube::Api",
    "kube::api::Api",
    "kube::Client",
    "kube::runtime",
    "tokio",
    "tonic",
    "crate::controller",
    "crate::config",
    "crate::cluster",
    "crate::runtime",
    "crate::csi::client",
    "crate::csi::driver",
    "crate::metrics",
];

/// Clocks a decision must be handed, never read (test files may read them to build inputs).
const CLOCKS: &[&str] = &["Instant::now", "SystemTime::now", "Timestamp::now"];

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

/// The code of a file: comments and string literals blanked, lines kept.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let (mut in_string, mut in_line_comment, mut block_depth) = (false, false, 0usize);
    while let Some(c) = chars.next() {
        let next = chars.peek().copied();
        if c == '\n' {
            in_line_comment = false;
            out.push('\n');
        } else if in_line_comment {
        } else if block_depth > 0 {
            if c == '*' && next == Some('/') {
                chars.next();
                block_depth -= 1;
            } else if c == '/' && next == Some('*') {
                chars.next();
                block_depth += 1;
            }
        } else if in_string {
            if c == '\\' {
                chars.next();
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '/' && next == Some('/') {
            in_line_comment = true;
        } else if c == '/' && next == Some('*') {
            chars.next();
            block_depth = 1;
        } else if c == '"' {
            in_string = true;
            out.push(' ');
        } else if c == '\'' && (next == Some('\\') || chars.clone().nth(1) == Some('\'')) {
            // A char literal ('x', '\n', '"'), not a lifetime: skipped whole.
            let escaped = next == Some('\\');
            chars.next();
            if escaped {
                chars.next();
            }
            while chars.next().is_some_and(|c| c != '\'') {}
            out.push(' ');
        } else if c == 'r'
            && next == Some('#')
            && !out.ends_with(|p: char| p.is_alphanumeric() || p == '_')
        {
            // A raw string r#"…"#: skipped up to its closing quote and hashes.
            let mut hashes = 0;
            while chars.peek() == Some(&'#') {
                chars.next();
                hashes += 1;
            }
            let close = format!("\"{}", "#".repeat(hashes));
            let mut seen = String::new();
            for c in chars.by_ref() {
                seen.push(c);
                if seen.len() > 1 && seen.ends_with(&close) {
                    break;
                }
            }
            out.push(' ');
        } else {
            out.push(c);
        }
    }
    out
}

/// `use` trees expanded into whole paths: `a::{b, c::{d, e}}` gives `a::b`, `a::c::d`, `a::c::e`;
/// an alias (`x as y`) is the path `x`.
fn expand_use(tree: &str) -> Vec<String> {
    let words: Vec<&str> = tree.split_whitespace().collect();
    let tree = words.join(" ").replace(" as ", "@").replace(' ', "");
    expand(&tree)
}

fn expand(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        let path = tree.split('@').next().unwrap_or_default();
        return vec![path.strip_suffix("::self").unwrap_or(path).to_string()];
    };
    let prefix = &tree[..open];
    let inner = tree[open + 1..].strip_suffix('}').unwrap_or(&tree[open + 1..]);
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand(&format!("{prefix}{p}")))
        .collect()
}

/// Every path a file names, with its line: each `use` tree expanded, and each `a::b` in code.
fn paths_of(text: &str) -> Vec<(usize, String)> {
    let code = code_of(text);
    let mut found = Vec::new();
    let mut rest = code.as_str();
    let mut offset = 0;
    // `use` statements, possibly over several lines.
    while let Some(at) = find_word(rest, "use") {
        let after = &rest[at + 3..];
        let Some(end) = after.find(';') else { break };
        let line = code[..offset + at].matches('\n').count() + 1;
        for path in expand_use(&after[..end]) {
            found.push((line, path));
        }
        offset += at + 3 + end;
        rest = &code[offset..];
    }
    // Paths in code: runs of identifiers joined by `::`.
    for (n, line) in code.lines().enumerate() {
        let mut current = String::new();
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if c.is_alphanumeric() || c == '_' {
                current.push(c);
            } else if c == ':' && chars.peek() == Some(&':') {
                chars.next();
                current.push_str("::");
            } else {
                if current.contains("::") {
                    found.push((n + 1, current.trim_matches(':').to_string()));
                }
                current.clear();
            }
        }
        if current.contains("::") {
            found.push((n + 1, current.trim_matches(':').to_string()));
        }
    }
    found
}

/// The position of `word` standing alone (not part of a longer identifier).
fn find_word(text: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(is_ident) && after.is_some_and(char::is_whitespace)
    })
}

/// Whether `path` is `prefix` or goes on below it, segment by segment.
fn under(path: &str, prefix: &str) -> bool {
    path == prefix || path.starts_with(&format!("{prefix}::"))
}

/// Whether `path` ends with the segments of `tail` (`std::time::Instant::now` ends with
/// `Instant::now`).
fn ends_with(path: &str, tail: &str) -> bool {
    path == tail || path.ends_with(&format!("::{tail}"))
}

/// Every `file:line: path` in `files` that names one of `forbidden` (and, outside test files,
/// reads one of `CLOCKS`).
fn violations(files: &[PathBuf], forbidden: &[&str], clocks: bool) -> Vec<String> {
    let placed: Vec<(PathBuf, String)> =
        files.iter().map(|f| (f.clone(), paths::module_of(&src(), f))).collect();
    violations_in(&placed, forbidden, clocks)
}

/// As `violations`, for files each standing as the module given. A path counts as it resolves
/// (`super::`, `self::`), and as what a re-export it goes through names; a glob import counts as
/// every path below it.
fn violations_in(files: &[(PathBuf, String)], forbidden: &[&str], clocks: bool) -> Vec<String> {
    let mut everything = Vec::new();
    rust_files(&src(), &mut everything);
    let reexports = paths::reexports(&src(), &everything);
    let mut found = Vec::new();
    for (file, module) in files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let name = file.display().to_string();
        let test_file = is_test_file(&name);
        let inline = paths::inline_modules(&code_of(&text));
        for (line, path) in paths_of(&text) {
            let resolved = paths::resolve(&path, &paths::module_at(module, &inline, line));
            let names = |p: &str| forbidden.iter().any(|f| under(p, f));
            let glob = resolved.strip_suffix("::*").is_some_and(|parent| {
                forbidden.iter().any(|f| under(f, parent) || under(parent, f))
            });
            let named = glob || paths::followed(&resolved, &reexports).iter().any(|p| names(p));
            let clock = clocks && !test_file && CLOCKS.iter().any(|c| ends_with(&path, c));
            if named || clock {
                found.push(format!("{name}:{line}: {path}"));
            }
        }
    }
    // A `use` line's paths are read as a tree and again as code.
    found.dedup();
    found
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Whether a file is test code: in a `tests` folder, or a `…tests.rs` file.
fn is_test_file(path: &str) -> bool {
    path.contains("/tests/") || path.ends_with("tests.rs")
}

/// Planted files, each `(name, text)`, in a directory that goes when the first value drops.
fn planted(files: &[(&str, &str)]) -> (tempfile::TempDir, Vec<PathBuf>) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("no temporary directory: {e}"));
    let paths = files
        .iter()
        .map(|(name, text)| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("cannot plant {name}: {e}"));
            path
        })
        .collect();
    (dir, paths)
}

#[test]
fn decision_modules_name_no_client_runtime_executor_configuration_or_clock() {
    let mut files = Vec::new();
    for module in DECISIONS {
        let path = src().join(module);
        assert!(path.exists(), "decision module {module} moved: update this list");
        rust_files(&path, &mut files);
    }
    assert!(files.len() > 30, "too few decision files read: {}", files.len());
    let found = violations(&files, FORBIDDEN, true);
    assert!(found.is_empty(), "decision modules reaching out:\n{}", found.join("\n"));
}

/// The executor is used through `Controller`, built by `main.rs` and its start-up steps
/// (`cli/startup.rs`) alone: no other module names `crate::controller` (the subcommands'
/// `csi_pv_controller::controller`).
#[test]
fn nothing_outside_the_executor_reaches_into_it() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let inside = src().join("controller");
    let wiring = [src().join("main.rs"), src().join("cli/startup.rs")];
    files.retain(|f| !f.starts_with(&inside) && !wiring.contains(f));
    assert!(files.len() > 100, "too few files read: {}", files.len());
    let found = violations(&files, &["crate::controller", "csi_pv_controller::controller"], false);
    assert!(found.is_empty(), "modules reaching into the executor:\n{}", found.join("\n"));
}

/// The executor's clock is tokio's, so that tests with paused time can move it: a backoff, a
/// resize's wait, a slow retry all expire when the test says so.
#[test]
fn the_executor_reads_the_time_from_tokio() {
    let mut files = Vec::new();
    rust_files(&src().join("controller"), &mut files);
    rust_files(&src().join("runtime/queue.rs"), &mut files);
    assert!(files.len() > 15, "too few executor files read: {}", files.len());
    let found = violations(&files, &["std::time::Instant"], false);
    assert!(found.is_empty(), "std::time::Instant in the executor:\n{}", found.join("\n"));
}

/// The guard on planted files: what it must catch, and what it must let pass.
#[test]
fn the_guard_catches_a_planted_violation_and_nothing_else() {
    let bad = "use kube::{Api, Client};\nuse crate::{\n    model::ClaimExt,\n    controller::Controller,\n};\nfn f() { tokio::spawn(async {}); let t = std::time::Instant::now(); }\n";
    let good = "// kube::Client is named in a comment only\nuse crate::model::ClaimExt;\nfn f(my_tokio: u8) -> &'static str { let _ = my_tokio; \"tonic::Status\" }\n/* crate::controller */\n";
    let (_dir, files) = planted(&[("bad.rs", bad), ("good.rs", good)]);
    let caught = violations(&files[..1], FORBIDDEN, true);
    let passed = violations(&files[1..], FORBIDDEN, true);
    let paths: Vec<&str> = caught.iter().filter_map(|v| v.rsplit(": ").next()).collect();
    for want in [
        "kube::Api",
        "kube::Client",
        "crate::controller::Controller",
        "tokio::spawn",
        "std::time::Instant::now",
    ] {
        assert!(paths.contains(&want), "{want} not caught: {caught:?}");
    }
    let nested = caught.iter().find(|v| v.ends_with("crate::controller::Controller"));
    assert!(nested.is_some_and(|v| v.contains("bad.rs:2:")), "a use over lines: {caught:?}");
    assert!(passed.is_empty(), "a clean file flagged: {passed:?}");
}

/// The three ways round a path check: a name re-exported from a forbidden module, a glob
/// import that brings one in, and a `super::` path out of the decision module.
#[test]
fn the_guard_sees_through_reexports_globs_and_super_paths() {
    let bad = "use crate::csi::CsiClient;\nuse crate::csi::*;\nuse tokio::*;\nuse super::super::controller::Controller;\n";
    let good = "use super::plan::Plan;\nuse crate::csi::Failure;\nuse crate::model::*;\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    let (_dir, files) = planted(&[("bad.rs", bad), ("good.rs", good)]);
    let module = "crate::provision::planted".to_string();
    let caught = violations_in(&[(files[0].clone(), module.clone())], FORBIDDEN, true);
    let passed = violations_in(&[(files[1].clone(), module)], FORBIDDEN, true);
    let mut lines: Vec<&str> = caught.iter().filter_map(|v| v.split(':').nth(1)).collect();
    lines.sort_unstable();
    lines.dedup();
    assert_eq!(lines, ["1", "2", "3", "4"], "{caught:?}");
    assert!(passed.is_empty(), "a clean file flagged: {passed:?}");
}

#[test]
fn use_trees_expand_into_whole_paths() {
    assert_eq!(expand_use("a::{b, c::{d, e}, f as g}"), ["a::b", "a::c::d", "a::c::e", "a::f"]);
    assert_eq!(expand_use("crate::csi::v1 as csi"), ["crate::csi::v1"]);
    assert_eq!(expand_use("super::{self, x}"), ["super", "super::x"]);
    let code =
        code_of("let q = '\"'; let s = \"tokio::spawn\"; let r = r#\"a \" kube::Client\"#; x::y");
    assert_eq!(paths_of(&code).into_iter().map(|(_, p)| p).collect::<Vec<_>>(), ["x::y"]);
}

/// docs/layout.md names only files that exist, and every loose file at the root of src/.
#[test]
fn the_layout_document_names_what_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/layout.md")).unwrap_or_default();
    let named: Vec<&str> =
        doc.split('`').skip(1).step_by(2).filter(|t| t.starts_with("src/")).collect();
    assert!(named.len() > 20, "docs/layout.md was not read: {named:?}");
    let missing: Vec<&&str> = named.iter().filter(|p| !root.join(p).exists()).collect();
    assert!(missing.is_empty(), "docs/layout.md names what does not exist: {missing:?}");
    let loose: Vec<String> = std::fs::read_dir(src())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| format!("src/{}", e.file_name().to_string_lossy()))
        .collect();
    assert!(loose.len() <= 5, "more than lib.rs, main.rs and three loose files: {loose:?}");
    for file in &loose {
        assert!(named.contains(&file.as_str()), "{file} is not named in docs/layout.md");
    }
}
