//! One loop drives every pass: a pass's step is decided only in that pass's own
//! `decide`, which only the loop (`Controller::drive`, src/controller/drive.rs) calls. A
//! hand-made loop elsewhere in the executor, deciding and acting by itself, fails here.

use super::{code_of, rust_files, src};

/// A call that decides a claim pass's step, and the functions it may stand in.
const DECISIONS: &[(&str, &[&str])] = &[
    // The pure decisions, each behind one lookup of its inputs.
    ("claim::decide(", &["decide_claim"]),
    ("modify::decide(", &["decide_modify"]),
    // The PV pass's: in its `decide`.
    ("volume::decide(", &["decide"]),
    // Those lookups, and the resize's decision: only in a pass's `decide`.
    ("decide_claim(", &["decide"]),
    ("decide_modify(", &["decide"]),
    (".decide((", &["decide"]),
    // A pass's `decide`: only in the loop.
    ("pass.decide(", &["drive"]),
];

/// The name of the function `at` (a byte offset into `code`) stands in.
fn enclosing_fn(code: &str, at: usize) -> &str {
    let before = &code[..at];
    let start = before.rfind("fn ").map_or(0, |i| i + 3);
    let rest = &before[start..];
    let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
    &rest[..end]
}

/// Calls of a pass's decision made where no pass's `decide` (or the loop) stands: `file` and
/// its code (comments and strings blanked).
fn stray_decisions(file: &str, code: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (call, allowed) in DECISIONS {
        for (at, _) in code.match_indices(call) {
            // A definition, or a longer name ending in the same letters, is no call.
            let before = &code[..at];
            let prefix_char = before.chars().next_back();
            let defines = before.trim_end().ends_with("fn");
            let longer = !call.starts_with('.')
                && prefix_char.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                && !call.contains("::");
            // The binder's claim decision (`binder::claim::decide`) is its own step, not a pass's.
            let binders = before.ends_with("binder::") && *call == "claim::decide(";
            if defines || longer || binders {
                continue;
            }
            let within = enclosing_fn(code, at);
            if !allowed.contains(&within) {
                let line = before.lines().count().max(1);
                found.push(format!("{file}:{line}: {call} in fn {within}"));
            }
        }
    }
    found
}

#[test]
fn one_loop_drives_every_pass() {
    let mut files = Vec::new();
    rust_files(&src().join("controller"), &mut files);
    let tests = src().join("controller/tests");
    files.retain(|f| !f.starts_with(&tests));
    assert!(files.len() > 15, "too few executor files read: {}", files.len());
    let mut found = Vec::new();
    let mut calls = 0;
    for file in &files {
        let code = code_of(&std::fs::read_to_string(file).unwrap_or_default());
        calls += DECISIONS.iter().map(|(call, _)| code.matches(call).count()).sum::<usize>();
        found.extend(stray_decisions(&file.display().to_string(), &code));
    }
    assert!(calls >= 6, "the pass decisions were not found: {calls} calls");
    assert!(found.is_empty(), "a claim pass decided outside the loop:\n{}", found.join("\n"));
}

#[test]
fn a_hand_made_loop_is_caught() {
    let planted = code_of(
        "impl Controller {\n    async fn sync_thing(&self) {\n        loop {\n            let step = self.decide_modify((&claim, copy), &pv);\n            let r = resizer.decide((&claim, copy), &pv, &m, t, &n);\n        }\n    }\n}\n",
    );
    let found = stray_decisions("planted.rs", &planted);
    assert_eq!(
        found,
        [
            "planted.rs:4: decide_modify( in fn sync_thing",
            "planted.rs:5: .decide(( in fn sync_thing"
        ]
    );
    let clean = code_of(
        "impl ClaimPass for P {\n    fn decide(&mut self) -> G { self.c.decide_modify((c, k), p) }\n}\nfn decide_modify(&self) { modify::decide(a) }\n// decide_claim( in a comment\n",
    );
    assert_eq!(stray_decisions("clean.rs", &clean), [] as [String; 0]);
}
