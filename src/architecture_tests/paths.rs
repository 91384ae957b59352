//! Paths as the compiler resolves them, near enough for the guard: `self::` and `super::`
//! against the module the path stands in (a file's, or an inline `mod name {` block's),
//! `csi_pv_controller::` (the binary's name for the library) as `crate::`, and names that a
//! `pub use` re-exports followed to what they name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{code_of, expand, find_word};

/// The module of a file under `src`: `provision/claim.rs` is `crate::provision::claim`, a
/// `mod.rs` its folder's, `lib.rs` and `main.rs` the crate's.
pub(super) fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap_or(file);
    let mut segments: Vec<String> =
        relative.iter().map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string()).collect();
    if matches!(segments.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        segments.pop();
    }
    std::iter::once("crate".to_string()).chain(segments).collect::<Vec<_>>().join("::")
}

/// The inline modules of a file's code (`mod tests {`): the line each opens on, and its name.
pub(super) fn inline_modules(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let Some(at) = find_word(line, "mod") else { continue };
        let rest = line[at + 3..].trim_start();
        let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if !name.is_empty() && rest[name.len()..].trim_start().starts_with('{') {
            found.push((n + 1, name));
        }
    }
    found
}

/// The module a path on `line` stands in: the file's, or the inline module open there last.
pub(super) fn module_at(file_module: &str, inline: &[(usize, String)], line: usize) -> String {
    match inline.iter().rev().find(|(opens, _)| *opens <= line) {
        Some((_, name)) => format!("{file_module}::{name}"),
        None => file_module.to_string(),
    }
}

/// `path`, named in `module`, made absolute (`crate::…`); a path of another crate as it is.
/// A first segment that is a child module of `module` (a file or folder under `src`) is
/// relative to it, as `use client::X;` in `csi/mod.rs` is.
pub(super) fn resolve(path: &str, module: &str) -> String {
    resolve_in(path, module, &super::src())
}

pub(super) fn resolve_in(path: &str, module: &str, src: &Path) -> String {
    if let Some(rest) = path.strip_prefix("csi_pv_controller::") {
        return format!("crate::{rest}");
    }
    let first = path.split("::").next().unwrap_or_default();
    let folder: PathBuf = module.split("::").skip(1).collect();
    let child = !matches!(first, "crate" | "self" | "super")
        && (src.join(&folder).join(format!("{first}.rs")).is_file()
            || src.join(&folder).join(first).is_dir());
    if child && path.contains("::") {
        return format!("{module}::{path}");
    }
    let mut base: Vec<&str> = module.split("::").collect();
    let mut segments = path.split("::").peekable();
    match segments.peek() {
        Some(&"self") => {
            segments.next();
        }
        Some(&"super") => {
            while segments.peek() == Some(&"super") {
                segments.next();
                if base.len() > 1 {
                    base.pop();
                }
            }
        }
        _ => return path.to_string(),
    }
    base.into_iter().chain(segments).collect::<Vec<_>>().join("::")
}

/// Every `pub use` in the product code of `files` (test code left out): the path it makes, to
/// the path it names. A glob re-export maps `module::*` to `target::*`.
pub(super) fn reexports(src: &Path, files: &[PathBuf]) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let code = code_of(&text);
        let code = code.split("#[cfg(test)]").next().unwrap_or_default();
        let module = module_of(src, file);
        let mut rest = code;
        while let Some(at) = find_word(rest, "use") {
            let before = rest[..at].trim_end();
            let after = &rest[at + 3..];
            let Some(end) = after.find(';') else { break };
            if before.ends_with("pub") || before.ends_with(')') && before.contains("pub(") {
                let words: Vec<&str> = after[..end].split_whitespace().collect();
                let tree = words.join(" ").replace(" as ", "::__as__::").replace(' ', "");
                for item in expand(&tree) {
                    let (path, alias) = match item.split_once("::__as__::") {
                        Some((path, alias)) => (path.to_string(), alias.to_string()),
                        None => {
                            let last = item.rsplit("::").next().unwrap_or_default();
                            (item.clone(), last.to_string())
                        }
                    };
                    found.insert(format!("{module}::{alias}"), resolve(&path, &module));
                }
            }
            rest = &after[end..];
        }
    }
    found
}

/// `path` with re-exported names followed to what they name (a few hops; a glob re-export
/// gives the name as it would be under its target).
pub(super) fn followed(path: &str, reexports: &BTreeMap<String, String>) -> Vec<String> {
    let mut out = vec![path.to_string()];
    let mut current = path.to_string();
    for _ in 0..4 {
        let exact = reexports
            .iter()
            .find(|(alias, _)| !alias.ends_with("::*") && super::under(&current, alias));
        let next = match exact {
            Some((alias, target)) => format!("{target}{}", &current[alias.len()..]),
            None => {
                let glob = reexports.iter().find(|(alias, _)| {
                    alias
                        .strip_suffix("::*")
                        .is_some_and(|m| current.starts_with(&format!("{m}::")))
                });
                let Some((alias, target)) = glob else { break };
                let module = &alias[..alias.len() - 3];
                let target = &target[..target.len().saturating_sub(3)];
                format!("{target}{}", &current[module.len()..])
            }
        };
        if next == current {
            break;
        }
        out.push(next.clone());
        current = next;
    }
    out
}

#[test]
fn paths_resolve_as_the_compiler_would() {
    assert_eq!(
        module_of(Path::new("src"), Path::new("src/provision/claim.rs")),
        "crate::provision::claim"
    );
    assert_eq!(module_of(Path::new("src"), Path::new("src/model/mod.rs")), "crate::model");
    assert_eq!(
        resolve("super::super::controller::X", "crate::provision::claim"),
        "crate::controller::X"
    );
    assert_eq!(resolve("super::plan", "crate::provision::claim"), "crate::provision::plan");
    assert_eq!(resolve("self::x", "crate::model"), "crate::model::x");
    assert_eq!(resolve("csi_pv_controller::csi::v1", "crate::cli"), "crate::csi::v1");
    assert_eq!(resolve("tokio::spawn", "crate::model"), "tokio::spawn");
    let code = "fn a() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n";
    let inline = inline_modules(code);
    assert_eq!(inline, [(3, "tests".to_string())]);
    assert_eq!(module_at("crate::model", &inline, 4), "crate::model::tests");
    assert_eq!(module_at("crate::model", &inline, 1), "crate::model");
    let map = BTreeMap::from([
        ("crate::csi::CsiClient".to_string(), "crate::csi::client::CsiClient".to_string()),
        ("crate::model::*".to_string(), "crate::cluster::*".to_string()),
    ]);
    assert_eq!(
        followed("crate::csi::CsiClient::new", &map),
        ["crate::csi::CsiClient::new", "crate::csi::client::CsiClient::new"]
    );
    assert_eq!(followed("crate::model::stores::X", &map)[1], "crate::cluster::stores::X");
}
