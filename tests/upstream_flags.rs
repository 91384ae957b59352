//! Every flag and feature gate of the sidecars we replace, read from the real binaries' `--help`
//! (csi-provisioner and csi-resizer as peers/ pins them), given to ours with upstream's default:
//! each is taken (ours, an alias, or taken with no effect) or refused with a reason, never
//! "unknown"; where a flag of ours has the same name its default is upstream's, or the row below
//! says why not. A flag or gate the next release adds, or a default it changes, fails here.

mod support;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use csi_pv_controller::config::{FlagError, from_args};

/// One flag as `--help` prints it: its name, type and text, which ends `(default value)`.
#[derive(Debug, Clone)]
struct Flag {
    name: String,
    /// pflag's type word (`string`, `duration`, a backquoted word of the text); None: a bool.
    kind: Option<String>,
    default: Option<String>,
    text: String,
}

/// The flags in `binary --help`, and the feature gates its `--feature-gates` text lists with
/// their defaults.
fn help(binary: &str) -> (Vec<Flag>, BTreeMap<String, bool>) {
    let out = Command::new(support::peers::peer(binary))
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{binary} --help: {e}"));
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    let mut flags: Vec<Flag> = Vec::new();
    let mut gates = BTreeMap::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        // pflag (csi-provisioner): `      --name type   text`, `  -v, --v Level   text`; Go's
        // flag package (csi-resizer): `  -name type`, its text on the next lines after a tab.
        let indent = line.len() - trimmed.len();
        let flag = (indent <= 6 && !line.starts_with('\t'))
            .then(|| {
                trimmed
                    .split_once(", --")
                    .map(|(_, long)| long)
                    .or_else(|| trimmed.strip_prefix("--"))
                    .or_else(|| trimmed.strip_prefix('-'))
            })
            .flatten();
        if let Some(rest) = flag {
            let (head, description) = rest.split_once("  ").unwrap_or((rest, ""));
            let mut words = head.split_whitespace();
            let name = words.next().unwrap_or_default().to_string();
            let kind = words.next().map(str::to_string).filter(|k| !k.starts_with("boolFunc"));
            flags.push(Flag { name, kind, default: None, text: description.trim().to_string() });
        } else if let Some(last) = flags.last_mut() {
            last.text.push(' ');
            last.text.push_str(trimmed);
            // A gate line: `Name=true|false (BETA - default=true)`.
            if let Some((gate, rest)) = trimmed.split_once("=true|false")
                && let Some(default) = rest.split("default=").nth(1)
            {
                gates.insert(gate.to_string(), default.starts_with("true"));
            }
        }
    }
    for flag in &mut flags {
        flag.default = flag
            .text
            .rsplit_once("(default ")
            .map(|(_, d)| d.trim_end_matches(')').trim_matches('"').to_string());
    }
    assert!(flags.len() > 20, "{binary} --help was not read:\n{text}");
    (flags, gates)
}

/// A value to pass: upstream's default, else one of its type (the help text cannot tell some
/// types: a backquoted word stands in for them).
fn value(flag: &Flag) -> String {
    match flag.name.as_str() {
        "enable-pprof" => return "false".into(),
        "feature-gates" => return String::new(),
        "v" => return "2".into(),
        "kubeconfig" => return format!("{}/Cargo.toml", env!("CARGO_MANIFEST_DIR")),
        _ => {}
    }
    if let Some(default) = &flag.default {
        return match default.as_str() {
            "map[]" | "[]" => String::new(),
            d => d.to_string(),
        };
    }
    match flag.kind.as_deref() {
        None => "false".into(),
        Some("duration") => "1s".into(),
        Some("int" | "uint" | "float" | "float32" | "Level") => "1".into(),
        Some(":8080") => ":8080".into(),
        Some("mapStringBool") => String::new(),
        Some(_) => "x".into(),
    }
}

/// Go's duration text (`1m0s`, `10s`, `1h0m0s`) as a Duration.
fn go_duration(text: &str) -> Option<Duration> {
    let (mut total, mut number) = (0f64, String::new());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match (c, chars.peek()) {
            ('m', Some('s')) => {
                chars.next();
                0.001
            }
            ('h', _) => 3600.0,
            ('m', _) => 60.0,
            ('s', _) => 1.0,
            _ => return None,
        };
        total += number.parse::<f64>().ok()? * unit;
        number.clear();
    }
    number.is_empty().then(|| Duration::from_secs_f64(total))
}

/// Whether two defaults say the same: equal text, equal durations, or equal numbers.
fn same_default(ours: &str, theirs: &str) -> bool {
    if ours == theirs {
        return true;
    }
    if let (Ok(a), Some(b)) = (humantime::parse_duration(ours), go_duration(theirs)) {
        return a == b;
    }
    matches!((ours.parse::<f64>(), theirs.parse::<f64>()), (Ok(a), Ok(b)) if a == b)
}

/// Flags whose defaults differ from upstream's on purpose, with why.
const OWN_DEFAULTS: &[(&str, &str)] = &[
    ("kube-api-qps", "one client carries three components' traffic: no client-side limit"),
    ("resize-timeout", "unset: --timeout, whose default is the same 10 s"),
    ("modify-timeout", "unset: --timeout, whose default is the same 10 s"),
];

/// Flags refused with a reason and what to do instead (docs/flags.md): no Go client to point at
/// a master URL, no per-file verbosity, no labels on the Lease, and distributed provisioning.
const REFUSED: &[&str] = &[
    "master",
    "vmodule",
    "leader-election-labels",
    "node-deployment-immediate-binding",
    "node-deployment-base-delay",
    "node-deployment-max-delay",
];

fn check(binary: &str) -> (usize, usize) {
    use clap::CommandFactory;
    let (flags, gates) = help(binary);
    let ours = csi_pv_controller::config::Config::command();
    let mut compared = 0;
    let mut problems = Vec::new();
    for flag in flags.iter().filter(|f| !["help", "version"].contains(&f.name.as_str())) {
        let arg = format!("--{}={}", flag.name, value(flag));
        let read = from_args(["csi-pv-controller".into(), arg.clone().into()]);
        match read {
            Ok(read) => {
                if let Err(e) = read.config.validate() {
                    problems.push(format!("{arg}: taken, then refused by validation: {e:?}"));
                }
            }
            Err(FlagError::Refused(why)) if REFUSED.contains(&flag.name.as_str()) => {
                assert!(!why.contains("unknown flag"), "{arg}: {why}");
            }
            Err(FlagError::Refused(why)) => problems.push(format!("{arg}: refused: {why}")),
            Err(FlagError::Clap(e)) => problems.push(format!("{arg}: {e}")),
            Err(FlagError::Conflict { message, .. }) => problems.push(format!("{arg}: {message}")),
        }
        let Some(own) = ours.get_arguments().find(|a| a.get_long() == Some(flag.name.as_str()))
        else {
            continue;
        };
        let defaults: Vec<String> =
            own.get_default_values().iter().map(|d| d.to_string_lossy().into_owned()).collect();
        // A Go bool prints no default when it is false.
        let unset = if flag.kind.is_none() { "false" } else { "" };
        let theirs = flag.default.clone().unwrap_or_else(|| unset.to_string());
        let same = match defaults.as_slice() {
            [] => flag.default.is_none() || theirs == "false" || theirs.is_empty(),
            [d] => same_default(d, &theirs),
            _ => false,
        };
        compared += 1;
        if !same && !OWN_DEFAULTS.iter().any(|(n, _)| *n == flag.name) {
            problems
                .push(format!("--{}: our default {defaults:?}, {binary}'s {theirs:?}", flag.name));
        }
    }
    // Every gate the binary lists is taken at its default; ours match where we act on them.
    for (gate, on) in &gates {
        let arg = format!("--feature-gates={gate}={on}");
        match from_args(["csi-pv-controller".into(), arg.clone().into()]) {
            Ok(read) => {
                let g = &read.config.feature_gates;
                let ours = match gate.as_str() {
                    "AnnotateFsResize" => Some(g.annotate_fs_resize),
                    "Topology" => Some(!g.topology_off),
                    "VolumeAttributesClass" => Some(!g.attributes_classes_off),
                    _ => None,
                };
                if ours.is_some_and(|o| o != *on) {
                    problems.push(format!("{arg}: ours reads it as {ours:?}"));
                }
            }
            Err(FlagError::Refused(why)) if gate == "CrossNamespaceVolumeDataSource" && *on => {
                assert!(why.contains("not implemented"), "{why}");
            }
            Err(e) => problems.push(format!("{arg}: {e:?}")),
        }
    }
    let defaults = csi_pv_controller::config::Config::command()
        .try_get_matches_from(["csi-pv-controller"])
        .is_ok();
    assert!(defaults, "ours starts with no flags");
    let read = from_args(["csi-pv-controller".into()]).unwrap_or_else(|e| panic!("{e:?}"));
    for (gate, field) in [
        ("AnnotateFsResize", read.config.feature_gates.annotate_fs_resize),
        ("Topology", !read.config.feature_gates.topology_off),
        ("VolumeAttributesClass", !read.config.feature_gates.attributes_classes_off),
    ] {
        if let Some(on) = gates.get(gate)
            && *on != field
        {
            problems.push(format!("gate {gate}: {binary}'s default {on}, ours {field}"));
        }
    }
    assert!(problems.is_empty(), "{binary}:\n{}", problems.join("\n"));
    (compared, gates.len())
}

#[test]
fn every_csi_provisioner_flag_and_gate_is_taken_with_its_meaning() {
    let (compared, gates) = check("csi-provisioner");
    assert!(compared > 25 && gates > 20, "{compared} flags, {gates} gates compared");
}

#[test]
fn every_csi_resizer_flag_and_gate_is_taken_with_its_meaning() {
    let (compared, gates) = check("csi-resizer");
    assert!(compared > 15 && gates > 3, "{compared} flags, {gates} gates compared");
}

#[test]
fn go_durations_read_as_go_writes_them() {
    for (text, secs) in [("10s", 10.0), ("1m0s", 60.0), ("1h0m0s", 3600.0), ("1.5s", 1.5)] {
        assert_eq!(go_duration(text), Some(Duration::from_secs_f64(secs)), "{text}");
    }
    assert_eq!(go_duration("500ms"), Some(Duration::from_millis(500)));
    assert_eq!(go_duration("soon"), None);
    assert!(same_default("5m", "5m0s") && same_default("1", "1.0") && !same_default("2s", "1s"));
}
