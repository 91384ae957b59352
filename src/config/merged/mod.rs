//! The args of csi-provisioner's and csi-resizer's containers, given to us one list after the
//! other. Two flags mean something per sidecar and would lose one sidecar's value to the other:
//! `--timeout` (the limit of that sidecar's own CSI calls) and `--http-endpoint` /
//! `--metrics-address` (each sidecar's port). Every address is served; a timeout keeps its role
//! when the list it came from is marked with `--args-of=csi-provisioner` or
//! `--args-of=csi-resizer`. Any other flag given twice with different values is said at start,
//! so that no value is lost silently.

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
    pub warnings: Vec<String>,
}

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
    let mut timeouts = RoleTimeouts::default();
    // Every value of every flag, in order, with the role it was given under.
    let mut seen: BTreeMap<String, Vec<(Option<Role>, String)>> = BTreeMap::new();
    let mut args = argv.into_iter();
    if let Some(program) = args.next() {
        out.push(program);
    }
    while let Some(arg) = args.next() {
        // A subcommand, a value, or `--`: the rest is theirs.
        let Some(text) = arg.to_str().and_then(flag_text).filter(|t| !t.is_empty()) else {
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
        if name == "timeout"
            && let Some(role) = role
            && let Ok(limit) = humantime::parse_duration(&value)
        {
            match role {
                Role::Provisioner => timeouts.provision = Some(limit),
                Role::Resizer => timeouts.resize = Some(limit),
            }
        }
        seen.entry(name).or_default().push((role, value));
    }
    address_conflicts(&seen)?;
    Ok(Merged { argv: out, timeouts, warnings: differing(&seen) })
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
            "http-endpoint" | "metrics-address" => continue,
            "timeout" if all_marked => continue,
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
