//! Go's flag syntax, as the sidecars we replace take it: `-name=value` and `-name value` mean
//! the same as `--name=value`. csi-driver-host-path's own manifests pass `-csi-address=...`
//! to csi-resizer; a container swap must not need its args rewritten.

use std::ffi::OsString;

/// `argv` with every single-dash long flag (`-csi-address=x`) written with two dashes. Single
/// letters stay (`-v=5` is our short `-v`), as do negative numbers (`--kube-api-qps -1`) and
/// everything after `--`.
pub fn go_style<I>(argv: I) -> Vec<OsString>
where
    I: IntoIterator<Item = OsString>,
{
    let mut rest = false;
    argv.into_iter()
        .enumerate()
        .map(|(i, arg)| {
            if i == 0 || rest {
                return arg;
            }
            let Some(text) = arg.to_str() else {
                return arg;
            };
            if text == "--" {
                rest = true;
                return arg;
            }
            match single_dash_long(text) {
                true => OsString::from(format!("-{text}")),
                false => arg,
            }
        })
        .collect()
}

/// A boolean as Go's strconv.ParseBool reads it, which is how the sidecars read `--flag=value`
/// and feature gates: 1, t, T, TRUE, true, True; 0, f, F, FALSE, false, False.
pub fn go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        other => Err(format!("{other:?} is not a boolean (true or false, as Go writes them)")),
    }
}

/// `name=value` as (name, Some(value)), a bare `name` as (name, None): a flag's text after its
/// dashes.
pub fn name_and_value(text: &str) -> (String, Option<String>) {
    match text.split_once('=') {
        Some((name, value)) => (name.to_string(), Some(value.to_string())),
        None => (text.to_string(), None),
    }
}

fn single_dash_long(arg: &str) -> bool {
    let Some(flag) = arg.strip_prefix('-') else {
        return false;
    };
    if flag.starts_with('-') {
        return false;
    }
    let name = flag.split_once('=').map_or(flag, |(name, _)| name);
    name.len() >= 2 && name.starts_with(|c: char| c.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn convert(args: &[&str]) -> Vec<String> {
        go_style(std::iter::once("bin").chain(args.iter().copied()).map(OsString::from))
            .into_iter()
            .skip(1)
            .map(|a| a.into_string().unwrap())
            .collect()
    }

    #[test]
    fn booleans_as_go_reads_them() {
        for yes in ["1", "t", "T", "TRUE", "true", "True"] {
            assert_eq!(go_bool(yes), Ok(true), "{yes}");
        }
        for no in ["0", "f", "F", "FALSE", "false", "False"] {
            assert_eq!(go_bool(no), Ok(false), "{no}");
        }
        for neither in ["yes", "tRUE", "", "2"] {
            assert!(go_bool(neither).is_err(), "{neither}");
        }
    }

    #[test]
    fn single_dash_long_flags_get_two() {
        let table: [(&[&str], &[&str]); 7] = [
            (&["-csi-address=/csi/csi.sock"], &["--csi-address=/csi/csi.sock"]),
            (&["-timeout", "30s"], &["--timeout", "30s"]),
            (&["-v=5", "-v", "2"], &["-v=5", "-v", "2"]),
            (&["--kube-api-qps", "-1"], &["--kube-api-qps", "-1"]),
            (&["--volume-name-uuid-length", "-10"], &["--volume-name-uuid-length", "-10"]),
            (&["--leader-election"], &["--leader-election"]),
            (&["explain", "--", "-ns/claim"], &["explain", "--", "-ns/claim"]),
        ];
        for (given, expected) in table {
            assert_eq!(convert(given), expected, "{given:?}");
        }
    }
}
