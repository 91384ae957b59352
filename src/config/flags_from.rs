//! `explain` and `reconcile` with `--flags-from`: the running controller's own flags, read from
//! its pod's container args or from a file, so that a one-shot command judges claims by the
//! settings the controller runs with and nobody retypes them. Pure: the caller reads the pod or
//! the file, this picks the args and builds the command line to parse again.

use std::ffi::OsString;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;

/// Where the flags come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlagsSource {
    /// `pod/<namespace>/<name>[/<container>]`: the container's args.
    Pod { namespace: String, name: String, container: Option<String> },
    /// Any other value: a file of args (a JSON list, or one arg per line).
    File(PathBuf),
}

impl std::str::FromStr for FlagsSource {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let Some(rest) = text.strip_prefix("pod/") else {
            return match text.is_empty() {
                true => Err("expected pod/<namespace>/<name>[/<container>] or a file".into()),
                false => Ok(FlagsSource::File(PathBuf::from(text))),
            };
        };
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            [namespace, name] | [namespace, name, _]
                if !namespace.is_empty() && !name.is_empty() =>
            {
                let container = parts.get(2).filter(|c| !c.is_empty()).map(|c| c.to_string());
                Ok(FlagsSource::Pod {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                    container,
                })
            }
            _ => Err(format!("{text:?}: expected pod/<namespace>/<name>[/<container>]")),
        }
    }
}

impl std::fmt::Display for FlagsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FlagsSource::Pod { namespace, name, container: Some(c) } => {
                write!(f, "pod {namespace}/{name}, container {c}")
            }
            FlagsSource::Pod { namespace, name, container: None } => {
                write!(f, "pod {namespace}/{name}")
            }
            FlagsSource::File(path) => write!(f, "file {}", path.display()),
        }
    }
}

impl FlagsSource {
    /// Flags that hold only where the controller runs: its in-pod credentials. The command's
    /// own (or the environment's) are used instead.
    pub fn left_out(&self) -> &'static [&'static str] {
        match self {
            FlagsSource::Pod { .. } => &["kubeconfig", "master"],
            FlagsSource::File(_) => &[],
        }
    }
}

/// The args in a file: a JSON list of strings (as `kubectl get pod -o jsonpath` prints a
/// container's args), or one arg per line, where a YAML list item's `- ` and its quotes are
/// taken off (a manifest's `args:` pasted as it is); blank lines and `#` comments are skipped.
pub fn file_args(text: &str) -> Vec<String> {
    if let Ok(list) = serde_json::from_str::<Vec<String>>(text) {
        return list;
    }
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && *l != "args:")
        .map(|l| {
            let item = l.strip_prefix("- ").map_or(l, str::trim);
            let unquoted = ['"', '\'']
                .iter()
                .find_map(|q| item.strip_prefix(*q).and_then(|i| i.strip_suffix(*q)));
            unquoted.unwrap_or(item).to_string()
        })
        .collect()
}

/// The args of the pod's controller container: the one named `container`, or else the only one
/// whose image is csi-pv-controller's.
pub fn container_args(pod: &Pod, container: Option<&str>) -> Result<Vec<String>, String> {
    let containers = pod.spec.as_ref().map(|s| s.containers.as_slice()).unwrap_or_default();
    let names = || containers.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ");
    let chosen: Vec<_> = match container {
        Some(wanted) => containers.iter().filter(|c| c.name == wanted).collect(),
        None => containers
            .iter()
            .filter(|c| c.image.as_deref().is_some_and(|i| i.contains("csi-pv-controller")))
            .collect(),
    };
    match chosen.as_slice() {
        [one] => Ok(one.args.clone().unwrap_or_default()),
        [] => Err(match container {
            Some(wanted) => format!("the pod has no container {wanted} (it has {})", names()),
            None => format!(
                "no container of the pod runs a csi-pv-controller image; name one as pod/<namespace>/<name>/<container> (it has {})",
                names()
            ),
        }),
        _ => Err(format!(
            "more than one container runs a csi-pv-controller image; name one as pod/<namespace>/<name>/<container> (it has {})",
            names()
        )),
    }
}

/// The command line to parse again: the program, the flags the user typed before the
/// subcommand, the read flags but those the user typed and those `left_out`, then the
/// subcommand as typed. The user's flags therefore win, and none is repeated. `takes_value`
/// says whether a flag without `=` takes the next argument (as `from_args` knows it).
pub fn rebuild(
    typed: Vec<OsString>,
    read: Vec<String>,
    left_out: &[&str],
    takes_value: impl Fn(&str) -> bool,
) -> Vec<OsString> {
    let mut typed = crate::config::args::go_style(typed).into_iter();
    let mut out: Vec<OsString> = typed.next().into_iter().collect();
    let mut given = Vec::new();
    let mut subcommand = Vec::new();
    while let Some(arg) = typed.next() {
        let Some(name) = flag_name(&arg) else {
            subcommand.push(arg);
            subcommand.extend(typed.by_ref());
            break;
        };
        let separate = !arg.to_string_lossy().contains('=') && takes_value(&name);
        out.push(arg);
        if separate && let Some(value) = typed.next() {
            out.push(value);
        }
        given.push(name);
    }
    // go_style leaves its first argument alone, as a program name.
    let read = std::iter::once(OsString::new()).chain(read.into_iter().map(OsString::from));
    let mut read = crate::config::args::go_style(read).into_iter().skip(1);
    while let Some(arg) = read.next() {
        let Some(name) = flag_name(&arg) else {
            continue; // a stray value, or the controller's own subcommand: not ours to run
        };
        let separate = !arg.to_string_lossy().contains('=') && takes_value(&name);
        let value = if separate { read.next() } else { None };
        if given.contains(&name) || left_out.contains(&name.as_str()) {
            continue;
        }
        out.push(arg);
        out.extend(value);
    }
    out.extend(subcommand);
    out
}

/// The name of a flag argument (`--name[=value]`, or a letter's `-v=5`), None for anything
/// else (a value, a negative number, a subcommand, `--`), as the merged-args pass reads them.
fn flag_name(arg: &OsString) -> Option<String> {
    let text = super::merged::flag_text(arg.to_str()?)?;
    let (name, _) = crate::config::args::name_and_value(&text);
    (!name.is_empty()).then_some(name)
}

#[cfg(test)]
mod tests;
