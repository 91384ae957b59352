//! What the processes of a run cost, read from /proc: resident memory (now and at its peak) and
//! CPU time, summed per role; and the competing load of the `busy` throttle.

use std::path::Path;
use std::process::{Child, Command};

use crate::support::control_plane::spawn;

/// Resident memory and CPU time of one process or of a group of them.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub rss_bytes: u64,
    /// The kernel's high-water mark (VmHWM). For a group it is the sum of the members' peaks,
    /// which bounds the group's peak from above.
    pub peak_rss_bytes: u64,
    pub cpu_seconds: f64,
}

impl Usage {
    fn plus(self, other: Usage) -> Usage {
        Usage {
            rss_bytes: self.rss_bytes + other.rss_bytes,
            peak_rss_bytes: self.peak_rss_bytes + other.peak_rss_bytes,
            cpu_seconds: self.cpu_seconds + other.cpu_seconds,
        }
    }
}

/// `/proc/<pid>`'s figures; None once the process is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // SAFETY: sysconf reads a constant of the running system.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    parse_usage(&status, &stat, hz)
}

fn parse_usage(status: &str, stat: &str, hz: f64) -> Option<Usage> {
    let kib = |key: &str| -> Option<u64> {
        status.lines().find_map(|l| l.strip_prefix(key))?.split_whitespace().next()?.parse().ok()
    };
    // Fields after the command name, which sits in parentheses and may contain spaces.
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after ')'.
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(Usage {
        rss_bytes: kib("VmRSS:")? * 1024,
        peak_rss_bytes: kib("VmHWM:")? * 1024,
        cpu_seconds: ticks / hz.max(1.0),
    })
}

/// The processes of a run by role: the figures are per role, so that a stack of two sidecars
/// and a stack of one compare.
#[derive(Debug, Default)]
pub struct Roles(pub Vec<(&'static str, Vec<u32>)>);

impl Roles {
    pub fn add(&mut self, role: &'static str, pid: u32) {
        match self.0.iter_mut().find(|(r, _)| *r == role) {
            Some((_, pids)) => pids.push(pid),
            None => self.0.push((role, vec![pid])),
        }
    }

    /// Each role's summed usage now, in the order the roles were added.
    pub fn sample(&self) -> Vec<(&'static str, Usage)> {
        self.0
            .iter()
            .map(|(role, pids)| {
                let sum = pids.iter().filter_map(|&p| usage(p)).fold(Usage::default(), Usage::plus);
                (*role, sum)
            })
            .collect()
    }
}

/// CPU seconds each role spent between two samples.
pub fn cpu_between(
    before: &[(&'static str, Usage)],
    after: &[(&'static str, Usage)],
) -> Vec<(&'static str, f64)> {
    after
        .iter()
        .filter_map(|(role, to)| {
            let from = before.iter().find(|(r, _)| r == role)?.1;
            Some((*role, (to.cpu_seconds - from.cpu_seconds).max(0.0)))
        })
        .collect()
}

/// `cores` processes that each keep a core busy (a shell's empty loop), for as long as this
/// lives: a control-plane node that is doing something else too.
pub struct Load {
    spinners: Vec<Child>,
}

impl Load {
    pub fn start(cores: usize, dir: &Path) -> Result<Load, String> {
        let mut spinners = Vec::new();
        for i in 0..cores {
            let mut command = Command::new("sh");
            command.args(["-c", "while :; do :; done"]);
            spinners.push(spawn(command, &dir.join(format!("load-{i}.log")))?);
        }
        Ok(Load { spinners })
    }

    pub fn pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.spinners.iter().map(Child::id)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for s in &mut self.spinners {
            let _ = s.kill();
            let _ = s.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
    const STAT: &str = "42 (a (b) c) S 1 2 3 4 5 6 7 8 9 10 300 100 0 0";

    #[test]
    fn proc_files_give_memory_peak_and_cpu() {
        let u = parse_usage(STATUS, STAT, 100.0);
        assert_eq!(
            u,
            Some(Usage { rss_bytes: 1024 * 1024, peak_rss_bytes: 2048 * 1024, cpu_seconds: 4.0 })
        );
        assert_eq!(parse_usage("VmRSS:\t1 kB\n", STAT, 100.0), None, "no peak line");
        assert_eq!(parse_usage(STATUS, "42 (x) S 1", 100.0), None, "short stat");
    }

    #[test]
    fn cpu_between_is_per_role_and_never_negative() {
        let at = |cpu: f64| Usage { cpu_seconds: cpu, ..Usage::default() };
        let before = [("etcd", at(1.0)), ("sidecars", at(5.0))];
        let after = [("etcd", at(3.5)), ("sidecars", at(4.0)), ("new", at(9.0))];
        assert_eq!(cpu_between(&before, &after), [("etcd", 2.5), ("sidecars", 0.0)]);
    }

    #[test]
    fn this_process_has_a_usage_and_roles_sum_their_pids() {
        let me = std::process::id();
        let one = usage(me).map(|u| u.rss_bytes).unwrap_or(0);
        assert!(one > 0);
        let mut roles = Roles::default();
        roles.add("bench", me);
        roles.add("bench", me);
        let sample = roles.sample();
        assert_eq!(sample.len(), 1);
        assert!(sample[0].1.rss_bytes >= 2 * one - 2 * 1024 * 1024, "{sample:?}");
    }
}
