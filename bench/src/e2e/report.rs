//! Reading ginkgo's JSON reports, the progress line per finished spec, and the side-by-side
//! table of the results folder.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::runs::{DriverFile, Run, Skips, StackKind};

/// One spec that ran (specs skipped by the regexes or at run time are left out).
#[derive(Debug, Clone)]
pub struct SpecResult {
    pub name: String,
    pub run: Run,
    /// ginkgo's state: passed, failed, panicked, timedout, interrupted, aborted.
    pub state: String,
    pub seconds: f64,
    /// The first line of the failure's message, for a failed spec.
    pub failure: String,
}

impl SpecResult {
    pub fn passed(&self) -> bool {
        self.state == "passed"
    }
}

pub struct RunResult {
    pub stack: StackKind,
    pub file: DriverFile,
    pub specs: Vec<SpecResult>,
    /// What makes the run's result untrustworthy whatever its specs say: a report missing or
    /// unreadable, ginkgo ending other than with success.
    pub problems: Vec<String>,
}

/// The file a run's ginkgo exit status is written to, beside its reports.
pub const EXIT_FILE: &str = "ginkgo-exit";

/// The specs that ran in one ginkgo report; a report missing, unreadable or holding no suite is
/// an error, never "nothing ran".
pub fn read(path: &Path, run: Run) -> Result<Vec<SpecResult>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("report {}: {e}", path.display()))?;
    let suites: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("report {} does not parse: {e}", path.display()))?;
    if suites.as_array().is_none_or(|a| a.is_empty()) {
        return Err(format!("report {} holds no suite", path.display()));
    }
    let mut specs = Vec::new();
    for suite in suites.as_array().into_iter().flatten() {
        for spec in suite["SpecReports"].as_array().into_iter().flatten() {
            let state = spec["State"].as_str().unwrap_or_default();
            if spec["LeafNodeType"] != "It" || state == "skipped" || state == "pending" {
                continue;
            }
            let mut parts: Vec<String> = spec["ContainerHierarchyTexts"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(str::to_string))
                .collect();
            parts.push(spec["LeafNodeText"].as_str().unwrap_or_default().to_string());
            let failure = spec["Failure"]["Message"].as_str().unwrap_or_default();
            specs.push(SpecResult {
                name: parts.join(" "),
                run,
                state: state.to_string(),
                // ginkgo writes durations in nanoseconds.
                seconds: spec["RunTime"].as_f64().unwrap_or_default() / 1e9,
                failure: failure.lines().next().unwrap_or_default().chars().take(300).collect(),
            });
        }
    }
    Ok(specs)
}

/// Every run whose folder is in `out`, by stack and definition, with its problems.
pub fn on_disk(out: &Path) -> Vec<RunResult> {
    let mut results = Vec::new();
    for file in [DriverFile::Upstream, DriverFile::Ours] {
        for stack in StackKind::ALL {
            let dir = crate::runs::folder(out, stack, file);
            if !dir.is_dir() {
                continue;
            }
            let mut specs = Vec::new();
            let mut problems = Vec::new();
            for run in [Run::Parallel, Run::Features, Run::Serial] {
                let run_dir = dir.join(run.label());
                if !run_dir.is_dir() {
                    continue;
                }
                match read(&run_dir.join("logs/report.json"), run) {
                    Ok(found) => specs.extend(found),
                    Err(e) => problems.push(e),
                }
                let exit = std::fs::read_to_string(run_dir.join(EXIT_FILE));
                match exit.as_deref().map(str::trim) {
                    Ok("0") => {}
                    Ok(code) => {
                        problems.push(format!("{}: ginkgo exited with {code}", run_dir.display()))
                    }
                    Err(e) => {
                        problems.push(format!("{}: no ginkgo exit status: {e}", run_dir.display()))
                    }
                }
            }
            results.push(RunResult { stack, file, specs, problems });
        }
    }
    results
}

/// Counts specs from ginkgo's verbose output as they finish.
#[derive(Default)]
pub struct Progress {
    total: Option<u64>,
    passed: u64,
    failed: u64,
    skipped: u64,
}

impl Progress {
    /// What to print for `line`, if it reports something.
    pub fn see(&mut self, line: &str) -> Option<String> {
        if let Some(rest) = line.strip_prefix("Will run ") {
            self.total = rest.split_whitespace().next().and_then(|n| n.parse().ok());
            return Some(line.to_string());
        }
        let line = line.trim_start();
        if line.starts_with("S [SKIPPED]") {
            self.skipped += 1;
        } else if line.starts_with("• [FAILED]")
            || line.starts_with("• [PANICKED]")
            || line.starts_with("• [TIMEDOUT]")
            || line.starts_with("• [INTERRUPTED]")
        {
            self.failed += 1;
        } else if line.starts_with("• [") {
            self.passed += 1;
        } else {
            return None;
        }
        Some(self.summary())
    }

    pub fn summary(&self) -> String {
        let done = self.passed + self.failed + self.skipped;
        let total = self.total.map_or("?".to_string(), |t| t.to_string());
        format!(
            "spec {done} of {total}: {} passed, {} failed, {} skipped at run time",
            self.passed, self.failed, self.skipped
        )
    }
}

/// The file of a results folder that names what ran: the commit and our image's digest.
pub const PROVENANCE: &str = "provenance.md";

/// (passed, failed) over every run.
pub fn totals(results: &[RunResult]) -> (usize, usize) {
    let all = results.iter().flat_map(|r| &r.specs);
    let passed = all.clone().filter(|s| s.passed()).count();
    (passed, all.count() - passed)
}

/// Writes `results-<definition>.md` for each driver definition that ran (its specs, the stacks
/// side by side, so that runs of one definition at a time do not overwrite another's) and
/// returns their text.
pub fn write(out: &Path, results: &[RunResult], skips: &Skips) -> String {
    let mut all = String::new();
    let provenance = std::fs::read_to_string(out.join(PROVENANCE)).unwrap_or_default();
    for file in [DriverFile::Upstream, DriverFile::Ours] {
        let runs: Vec<&RunResult> = results.iter().filter(|r| r.file == file).collect();
        if runs.is_empty() {
            continue;
        }
        let mut text = String::new();
        let _ = writeln!(
            text,
            "# Kubernetes storage e2e, {}: upstream's stack and ours\n",
            file.label()
        );
        let _ = writeln!(text, "{provenance}");
        for r in &runs {
            let passed = r.specs.iter().filter(|s| s.passed()).count();
            let _ = writeln!(
                text,
                "- {}: {} specs ran, {passed} passed, {} failed",
                r.stack.label(),
                r.specs.len(),
                r.specs.len() - passed
            );
        }
        let mut rows: BTreeMap<(String, &str), Vec<Option<&SpecResult>>> = BTreeMap::new();
        for (i, r) in runs.iter().enumerate() {
            for spec in &r.specs {
                let row = rows
                    .entry((spec.name.clone(), spec.run.label()))
                    .or_insert_with(|| vec![None; runs.len()]);
                row[i] = Some(spec);
            }
        }
        let heads: Vec<&str> = runs.iter().map(|r| r.stack.label()).collect();
        let _ = writeln!(
            text,
            "\n| spec | run | {} | {} |\n|---|---|{}",
            heads.join(" | "),
            heads.iter().map(|h| format!("{h} s")).collect::<Vec<_>>().join(" | "),
            "---|".repeat(heads.len() * 2)
        );
        for ((name, run), row) in &rows {
            let states: Vec<String> =
                row.iter().map(|s| s.map_or("not run".into(), |s| s.state.clone())).collect();
            let seconds: Vec<String> =
                row.iter().map(|s| s.map_or("".into(), |s| format!("{:.0}", s.seconds))).collect();
            let _ = writeln!(
                text,
                "| {} | {run} | {} | {} |",
                name.replace('|', "\\|"),
                states.join(" | "),
                seconds.join(" | ")
            );
        }
        let failures: Vec<(&str, &SpecResult)> = runs
            .iter()
            .flat_map(|r| r.specs.iter().filter(|s| !s.passed()).map(|s| (r.stack.label(), s)))
            .collect();
        if !failures.is_empty() {
            let _ = writeln!(text, "\nFailures:\n");
            for (stack, s) in failures {
                let _ = writeln!(text, "- {stack}: {} — {}", s.name, s.failure);
            }
        }
        let problems: Vec<String> = runs
            .iter()
            .flat_map(|r| r.problems.iter().map(|p| format!("- {}: {p}", r.stack.label())))
            .collect();
        if !problems.is_empty() {
            let _ =
                writeln!(text, "\nRuns whose result cannot be trusted:\n\n{}", problems.join("\n"));
        }
        let _ = writeln!(text, "\n## Skipped by name (tests/e2e/skips.txt)\n");
        for (regex, reason) in &skips.0 {
            let _ = writeln!(text, "- `{regex}`: {reason}");
        }
        let path = out.join(format!("results-{}.md", file.label()));
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        all.push_str(&text);
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report the gate can trust is one ginkgo wrote; anything else is an error, never "no
    /// spec ran".
    #[test]
    fn a_missing_unreadable_or_empty_report_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("report.json");
        assert!(read(&path, Run::Parallel).unwrap_err().contains("No such file"));
        std::fs::write(&path, "not json").unwrap();
        assert!(read(&path, Run::Parallel).unwrap_err().contains("does not parse"));
        std::fs::write(&path, "[]").unwrap();
        assert!(read(&path, Run::Parallel).unwrap_err().contains("holds no suite"));
        let report = serde_json::json!([{"SpecReports": [
            {"LeafNodeType": "It", "State": "passed", "ContainerHierarchyTexts": ["a"],
             "LeafNodeText": "b", "RunTime": 2e9},
            {"LeafNodeType": "It", "State": "failed", "ContainerHierarchyTexts": ["a"],
             "LeafNodeText": "c", "RunTime": 1e9, "Failure": {"Message": "why\nmore"}},
            {"LeafNodeType": "It", "State": "skipped", "LeafNodeText": "d"},
            {"LeafNodeType": "BeforeSuite", "State": "passed"},
        ]}]);
        std::fs::write(&path, report.to_string()).unwrap();
        let specs = read(&path, Run::Parallel).unwrap();
        assert_eq!(specs.len(), 2, "skipped specs and suite nodes are not specs that ran");
        assert_eq!(
            (specs[0].name.as_str(), specs[0].passed(), specs[0].seconds),
            ("a b", true, 2.0)
        );
        assert_eq!((specs[1].passed(), specs[1].failure.as_str()), (false, "why"));
    }

    /// A run folder without ginkgo's exit status, or with a failing one, is a problem of the run.
    #[test]
    fn a_run_without_a_successful_ginkgo_exit_is_a_problem() {
        let out = tempfile::tempdir().unwrap();
        let run =
            crate::runs::folder(out.path(), StackKind::Ours, DriverFile::Ours).join("parallel");
        std::fs::create_dir_all(run.join("logs")).unwrap();
        let report = r#"[{"SpecReports": [{"LeafNodeType": "It", "State": "passed", "LeafNodeText": "x"}]}]"#;
        std::fs::write(run.join("logs/report.json"), report).unwrap();
        let problems =
            |out: &Path| on_disk(out).into_iter().flat_map(|r| r.problems).collect::<Vec<_>>();
        assert!(problems(out.path())[0].contains("no ginkgo exit status"));
        std::fs::write(run.join(EXIT_FILE), "1\n").unwrap();
        assert!(problems(out.path())[0].contains("ginkgo exited with 1"));
        std::fs::write(run.join(EXIT_FILE), "0\n").unwrap();
        assert!(problems(out.path()).is_empty());
        assert_eq!(totals(&on_disk(out.path())), (1, 0));
    }
}
