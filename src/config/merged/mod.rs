//! The args of csi-provisioner's and csi-resizer's containers, given to us one list after the
//! other. Some flags mean something per sidecar and would lose one sidecar's value to the other:
//! `--timeout` (the limit of that sidecar's own CSI calls), `--http-endpoint` /
//! `--metrics-address` (each sidecar's port, serving its series), and `--kube-api-qps` /
//! `--kube-api-burst` (each sidecar's own API client). Every address is served; a timeout and
//! an address keep their role when the list they came from is marked with
//! `--args-of=csi-provisioner` or `--args-of=csi-resizer`; the two marked lists' API limits add
//! up, for the one client that does both sidecars' work. Repeated `--feature-gates` lists merge,
//! the last value of a gate winning, as each Go sidecar merges its own. Any other flag given
//! twice with different values is said at start, so that no value is lost silently.

use std::collections::BTreeMap;
use std::ffi::OsString;

pub use crate::csi::RoleTimeouts;

/// The flag that marks whose args follow.
pub const MARKER: &str = "args-of";

/// Which sidecar's calls a value applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Provisioner,
    Resizer,
}

impl Role {
    fn parse(text: &str) -> Result<Role, String> {
        match text {
            "csi-provisioner" | "provisioner" => Ok(Role::Provisioner),
            "csi-resizer" | "resizer" => Ok(Role::Resizer),
            other => Err(format!(
                "--{MARKER}={other:?}: the args that follow are csi-provisioner's or csi-resizer's"
            )),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Role::Provisioner => "csi-provisioner",
            Role::Resizer => "csi-resizer",
        }
    }
}

/// `argv` without the markers, the roles' timeouts, and one warning per flag whose repeated
/// values differ.
#[derive(Debug, PartialEq, Eq)]
pub struct Merged {
    pub argv: Vec<OsString>,
    pub timeouts: RoleTimeouts,
    /// Each address value given, with the role of its marked list (None: unmarked).
    pub endpoints: Vec<(Option<Role>, String)>,
    pub warnings: Vec<String>,
    /// What was merged rather than overridden (said at start).
    pub notes: Vec<String>,
}

/// The flags whose values from the two marked lists add up.
const SUMMED: [&str; 2] = ["kube-api-qps", "kube-api-burst"];
/// The flag whose repeated lists merge.
const GATES: &str = "feature-gates";

/// Why merged args are refused: `exit` is the status upstream exits with for the same args.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    pub exit: u8,
}

/// Reads `argv` (two-dash form, `args::go_style`); `takes_value` says whether a flag's value
/// may be the next argument (clap's view of our flags and the upstream ones).
pub fn merge(argv: Vec<OsString>, takes_value: impl Fn(&str) -> bool) -> Result<Merged, Refusal> {
    let refuse = |message: String| Refusal { message, exit: 2 };
    let mut out = Vec::with_capacity(argv.len());
    let mut role: Option<Role> = None;
    let mut marked = false;
    // Every value of every flag, in order, with the role it was given under.
    let mut seen: BTreeMap<String, Vec<(Option<Role>, String)>> = BTreeMap::new();
    let mut args = argv.into_iter();
    if let Some(program) = args.next() {
        out.push(program);
    }
    // Where the flags end: a merged value goes there, after every value it merges.
    let mut flags_end = None;
    while let Some(arg) = args.next() {
        // A subcommand, a value, or `--`: the rest is theirs.
        let Some(text) = arg.to_str().and_then(flag_text).filter(|t| !t.is_empty()) else {
            flags_end = Some(out.len());
            out.push(arg);
            out.extend(args.by_ref());
            break;
        };
        let (name, inline) = crate::config::args::name_and_value(&text);
        if name == MARKER {
            let value = match inline {
                Some(v) => v,
                None => args.next().and_then(|v| v.into_string().ok()).unwrap_or_default(),
            };
            role = Some(Role::parse(&value).map_err(refuse)?);
            marked = true;
            continue;
        }
        out.push(arg);
        let value = match inline {
            Some(v) => v,
            None if takes_value(&name) => match args.next() {
                Some(next) => {
                    let v = next.to_string_lossy().into_owned();
                    out.push(next);
                    v
                }
                None => String::new(), // clap says what is missing
            },
            None => "true".to_string(),
        };
        seen.entry(name).or_default().push((role, value));
    }
    address_conflicts(&seen)?;
    let timeouts = role_timeouts(&seen, marked);
    let endpoints = ["http-endpoint", "metrics-address"]
        .iter()
        .flat_map(|name| seen.get(*name).into_iter().flatten())
        .cloned()
        .collect();
    let (merged, notes) = merged_values(&seen);
    let at = flags_end.unwrap_or(out.len());
    out.splice(at..at, merged.into_iter().map(OsString::from));
    Ok(Merged { argv: out, timeouts, endpoints, warnings: differing(&seen), notes })
}

/// Each sidecar's deadlines, as each reads its own flags: a `--timeout` in its list (or before
/// any marker) is its calls' deadline; csi-resizer v2.3's `--resize-timeout` and
/// `--modify-timeout` apply where no `--timeout` was given for it, as csi-resizer lets an
/// explicit `--timeout` override both. Where lists are marked, a sidecar whose list sets none
/// gets its own default, not the other sidecar's `--timeout`. A value that does not parse is
/// left to clap to refuse.
fn role_timeouts(
    seen: &BTreeMap<String, Vec<(Option<Role>, String)>>,
    marked: bool,
) -> RoleTimeouts {
    let last = |name: &str, applies: &dyn Fn(Option<Role>) -> bool| {
        let values = seen.get(name).map(Vec::as_slice).unwrap_or_default();
        let (_, text) = values.iter().rfind(|(r, _)| applies(*r))?;
        humantime::parse_duration(text).ok()
    };
    let fallback = marked.then_some(crate::csi::deadlines::SIDECAR_DEFAULT);
    let resizer_timeout = last("timeout", &|r| r != Some(Role::Provisioner));
    let any = |_: Option<Role>| true;
    RoleTimeouts {
        provision: last("timeout", &|r| r != Some(Role::Resizer)).or(fallback),
        expand: resizer_timeout.or_else(|| last("resize-timeout", &any)).or(fallback),
        modify: resizer_timeout.or_else(|| last("modify-timeout", &any)).or(fallback),
    }
}

/// The flags that stand for several given values, placed after them so that they apply, and
/// what each says at start: the `--feature-gates` lists joined; each summed flag's two roles'
/// values added (the last of each marked list; a negative one, no limit, wins).
fn merged_values(
    seen: &BTreeMap<String, Vec<(Option<Role>, String)>>,
) -> (Vec<String>, Vec<String>) {
    let (mut flags, mut notes) = (Vec::new(), Vec::new());
    if let Some(lists) = seen.get(GATES).filter(|v| v.len() > 1) {
        let gates: Vec<&str> =
            lists.iter().map(|(_, v)| v.trim()).filter(|v| !v.is_empty()).collect();
        let joined = gates.join(",");
        notes.push(format!("--{GATES} is given {} times: merged into {joined}", lists.len()));
        flags.push(format!("--{GATES}={joined}"));
    }
    for name in SUMMED {
        let last = |role: Role| {
            let values = seen.get(name).map(Vec::as_slice).unwrap_or_default();
            values.iter().rfind(|(r, _)| *r == Some(role)).map(|(_, v)| v.clone())
        };
        let (Some(provisioner), Some(resizer)) = (last(Role::Provisioner), last(Role::Resizer))
        else {
            continue;
        };
        let (Ok(a), Ok(b)) = (provisioner.parse::<f64>(), resizer.parse::<f64>()) else {
            continue; // clap says which value is not a number
        };
        let sum = if a < 0.0 || b < 0.0 { -1.0 } else { a + b };
        notes.push(format!(
            "--{name}: csi-provisioner's {provisioner} and csi-resizer's {resizer} add up to {sum} for the one API client that does the work of both"
        ));
        flags.push(format!("--{name}={sum}"));
    }
    (flags, notes)
}

/// `name[=value]` of a flag: `--name`, or a short one (`-v=5`, whose long name is `v` too);
/// None for a value, a negative number or a subcommand.
pub(super) fn flag_text(arg: &str) -> Option<String> {
    if let Some(long) = arg.strip_prefix("--") {
        return Some(long.to_string());
    }
    let short = arg.strip_prefix('-')?;
    short.starts_with(|c: char| c.is_ascii_alphabetic()).then(|| short.to_string())
}

/// Upstream exits 1 when one sidecar is given both `--metrics-address` and `--http-endpoint`;
/// so do we, per marked list (or for the whole list, unmarked).
fn address_conflicts(seen: &BTreeMap<String, Vec<(Option<Role>, String)>>) -> Result<(), Refusal> {
    let roles = |name: &str| -> Vec<Option<Role>> {
        seen.get(name).map(|v| v.iter().map(|(r, _)| *r).collect()).unwrap_or_default()
    };
    let http = roles("http-endpoint");
    for role in roles("metrics-address") {
        if http.contains(&role) {
            let whose = role.map(|r| format!(" in {}'s args", r.name())).unwrap_or_default();
            return Err(Refusal {
                message: format!(
                    "only one of --metrics-address and --http-endpoint can be set{whose}, as upstream"
                ),
                exit: 1,
            });
        }
    }
    Ok(())
}

/// One warning per flag given more than once with different values, except those whose every
/// value is kept: the addresses, and timeouts each given in a marked list.
fn differing(seen: &BTreeMap<String, Vec<(Option<Role>, String)>>) -> Vec<String> {
    let mut warnings = Vec::new();
    for (name, values) in seen {
        let all_marked = values.iter().all(|(role, _)| role.is_some());
        match name.as_str() {
            "http-endpoint" | "metrics-address" | GATES => continue,
            "timeout" if all_marked => continue,
            n if SUMMED.contains(&n) && all_marked => continue,
            _ => {}
        }
        let mut distinct: Vec<&str> = values.iter().map(|(_, v)| v.as_str()).collect();
        distinct.sort_unstable();
        distinct.dedup();
        if distinct.len() < 2 {
            continue;
        }
        let last = values.last().map(|(_, v)| v.as_str()).unwrap_or_default();
        let shown: Vec<String> = values
            .iter()
            .map(|(role, v)| match role {
                Some(role) => format!("{v} ({})", role.name()),
                None => v.clone(),
            })
            .collect();
        let applies = match name.as_str() {
            "timeout" => format!(
                "{last} applies to every call but those of a marked list; put --{MARKER}=csi-provisioner and --{MARKER}=csi-resizer before each sidecar's args to keep each"
            ),
            _ => format!("the last, {last}, applies"),
        };
        warnings.push(format!(
            "--{name} is given {} times: {}; {applies}",
            values.len(),
            shown.join(", ")
        ));
    }
    warnings
}

#[cfg(test)]
mod tests;
