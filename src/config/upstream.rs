//! The Go sidecars' flags that have no flag of ours, met before clap sees the arguments: those
//! that tune only Go's runtime or klog's buffers are taken and have no effect (said once at
//! start); `--metrics-address` is `--http-endpoint`; the rest are refused with why and what to
//! use instead, so that a manifest written for csi-provisioner or csi-resizer fails with a
//! message a storage engineer can act on, not with clap's guess at a similar flag.

use std::ffi::OsString;

/// What becomes of one upstream flag.
enum Upstream {
    /// Taken; it has no effect here. The text says why.
    Ignored(&'static str),
    /// Taken when false (its default upstream); refused when true, with why.
    OnlyOff(&'static str),
    /// Refused: why, and what to use instead.
    Refused(&'static str),
    /// Another name for one of our flags.
    Alias(&'static str),
}

/// Whether a flag is a boolean (its value only after `=`) or takes a value.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bool,
    Value,
}

const FLAGS: &[(&str, Kind, Upstream)] = &[
    (
        "automaxprocs",
        Kind::Bool,
        Upstream::Ignored(
            "a Go runtime setting; the worker pools follow --worker-threads and --workers",
        ),
    ),
    ("log-flush-frequency", Kind::Value, Upstream::Ignored("every log line is written at once")),
    ("log-json-info-buffer-size", Kind::Value, Upstream::Ignored("log lines are not buffered")),
    ("log-text-info-buffer-size", Kind::Value, Upstream::Ignored("log lines are not buffered")),
    (
        "cloning-protection-threads",
        Kind::Value,
        Upstream::Ignored(
            "the clone source's protection is taken off by the claim's own pass, on --worker-threads",
        ),
    ),
    (
        "log-json-split-stream",
        Kind::Bool,
        Upstream::OnlyOff("every log line goes to stderr; collect stderr whole"),
    ),
    (
        "log-text-split-stream",
        Kind::Bool,
        Upstream::OnlyOff("every log line goes to stderr; collect stderr whole"),
    ),
    (
        "enable-pprof",
        Kind::Bool,
        Upstream::OnlyOff(
            "there is no Go profiler here; -v=5 traces every pass, and /metrics has the process's CPU and memory",
        ),
    ),
    ("metrics-address", Kind::Value, Upstream::Alias("http-endpoint")),
    (
        "master",
        Kind::Value,
        Upstream::Refused(
            "the API server is found through --kubeconfig, KUBECONFIG or the pod's service account; write its address in a kubeconfig",
        ),
    ),
    (
        "vmodule",
        Kind::Value,
        Upstream::Refused(
            "there is no per-file verbosity; set RUST_LOG, e.g. RUST_LOG=info,csi_pv_controller::controller=debug",
        ),
    ),
    (
        "leader-election-labels",
        Kind::Value,
        Upstream::Refused("the Lease carries no extra labels; leave the flag out"),
    ),
    (
        "node-deployment",
        Kind::Bool,
        Upstream::OnlyOff(
            "distributed provisioning (one provisioner per node) is not supported; run csi-pv-controller once, in the driver's controller pod",
        ),
    ),
    (
        "node-deployment-immediate-binding",
        Kind::Bool,
        Upstream::Refused(
            "distributed provisioning (one provisioner per node) is not supported; leave the flag out",
        ),
    ),
    (
        "node-deployment-base-delay",
        Kind::Value,
        Upstream::Refused(
            "distributed provisioning (one provisioner per node) is not supported; leave the flag out",
        ),
    ),
    (
        "node-deployment-max-delay",
        Kind::Value,
        Upstream::Refused(
            "distributed provisioning (one provisioner per node) is not supported; leave the flag out",
        ),
    ),
];

/// What the upstream flags in `argv` (already in two-dash form, `args::go_style`) amount to:
/// the arguments for clap, and one note per flag taken with no effect.
#[derive(Debug, PartialEq, Eq)]
pub struct Translated {
    pub argv: Vec<OsString>,
    pub ignored: Vec<String>,
}

/// Translates `argv`, or says why one of its flags is refused.
pub fn translate(argv: Vec<OsString>) -> Result<Translated, String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut ignored = Vec::new();
    let mut args = argv.into_iter();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str().and_then(|t| t.strip_prefix("--")) else {
            out.push(arg);
            continue;
        };
        if text.is_empty() {
            // `--`: what follows is not a flag.
            out.push(arg);
            out.extend(args.by_ref());
            break;
        }
        let (name, inline) = crate::config::args::name_and_value(text);
        let Some((_, kind, meaning)) = FLAGS.iter().find(|(n, _, _)| *n == name) else {
            out.push(arg);
            continue;
        };
        let value = match (inline, kind) {
            (Some(v), _) => v,
            (None, Kind::Bool) => "true".to_string(),
            (None, Kind::Value) => match args.next().and_then(|v| v.into_string().ok()) {
                Some(v) => v,
                None => return Err(format!("--{name} needs a value")),
            },
        };
        match meaning {
            Upstream::Ignored(why) => {
                ignored.push(format!("--{name}={value} has no effect: {why}"));
            }
            Upstream::OnlyOff(why) => match crate::config::args::go_bool(&value) {
                Ok(false) => ignored.push(format!("--{name}=false is how csi-pv-controller runs")),
                Ok(true) => return Err(format!("--{name}=true is not supported: {why}")),
                Err(e) => return Err(format!("--{name}: {e}")),
            },
            Upstream::Refused(why) => return Err(format!("--{name} is not supported: {why}")),
            Upstream::Alias(ours) => out.push(OsString::from(format!("--{ours}={value}"))),
        }
    }
    Ok(Translated { argv: out, ignored })
}

/// Whether the upstream flag `name` takes a value (None: not one of these).
pub fn takes_value(name: &str) -> Option<bool> {
    FLAGS.iter().find(|(n, _, _)| *n == name).map(|(_, kind, _)| *kind == Kind::Value)
}

/// Our words for a flag clap does not know: no guess at a similar flag, which misleads more
/// often than it helps with the Go sidecars' flag names.
pub fn unknown_flag(error: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let flag = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(flag)) => flag.clone(),
        _ => return None,
    };
    // A flag of the process given after a subcommand: say where it goes.
    let name = flag.trim_start_matches('-').split('=').next().unwrap_or_default();
    if process_flag(name) {
        return Some(format!(
            "{flag} is a flag of csi-pv-controller itself, not of its subcommand: give it before the subcommand's name (csi-pv-controller {flag} explain …)"
        ));
    }
    Some(format!(
        "unknown flag {flag}: it is neither one of ours nor one of csi-provisioner's or csi-resizer's; `csi-pv-controller --help` lists the flags by role"
    ))
}

/// Whether `name` is a flag of the process (not of a subcommand).
fn process_flag(name: &str) -> bool {
    use clap::CommandFactory;
    super::Config::command().get_arguments().any(|a| a.get_long() == Some(name))
        || FLAGS.iter().any(|(n, _, _)| *n == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<(Vec<String>, usize), String> {
        let argv = args.iter().map(OsString::from).collect();
        let t = translate(argv)?;
        let argv = t.argv.into_iter().map(|a| a.into_string().unwrap_or_default()).collect();
        Ok((argv, t.ignored.len()))
    }

    #[test]
    fn upstream_flags_are_taken_aliased_or_refused_with_a_reason() {
        let taken: [(&[&str], &[&str], usize); 7] = [
            (&["--timeout=5s"], &["--timeout=5s"], 0),
            (&["--automaxprocs"], &[], 1),
            (&["--log-flush-frequency", "5s", "--v=2"], &["--v=2"], 1),
            (&["--enable-pprof=False"], &[], 1),
            (&["--node-deployment=false"], &[], 1),
            (&["--metrics-address", ":8080"], &["--http-endpoint=:8080"], 0),
            (&["explain", "--", "--master"], &["explain", "--", "--master"], 0),
        ];
        for (given, want, notes) in taken {
            assert_eq!(run(given), Ok((want.iter().map(|s| s.to_string()).collect(), notes)));
        }
        let refused: [(&[&str], &str); 6] = [
            (&["--master=https://api"], "kubeconfig"),
            (&["--vmodule=foo=5"], "RUST_LOG"),
            (&["--enable-pprof"], "no Go profiler"),
            (&["--node-deployment=true"], "distributed provisioning"),
            (&["--log-text-split-stream=yes"], "--log-text-split-stream"),
            (&["--cloning-protection-threads"], "needs a value"),
        ];
        for (given, why) in refused {
            let e = run(given).unwrap_err();
            assert!(e.contains(why), "{given:?}: {e}");
        }
    }
}
