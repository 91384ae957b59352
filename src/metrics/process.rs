//! client_golang's process series, read from /proc when the metrics are scraped:
//! process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
//! process_virtual_memory_max_bytes, process_open_fds, process_max_fds,
//! process_start_time_seconds, process_network_receive_bytes_total and
//! process_network_transmit_bytes_total.

use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The kernel reports times in /proc in USER_HZ, 100 on every Linux ABI.
const USER_HZ: f64 = 100.0;

pub struct Process {
    cpu: Counter<f64, AtomicU64>,
    /// The CPU seconds already counted, so each scrape adds what passed since.
    counted: AtomicU64,
    resident: Gauge,
    virtual_bytes: Gauge,
    /// The address-space limit; -1 when unlimited, as client_golang reports it.
    virtual_max: Gauge,
    open_fds: Gauge,
    max_fds: Gauge,
    start: Gauge<f64, AtomicU64>,
    /// Bytes through the process's network namespace, every interface (/proc/self/net/dev),
    /// and what was counted of them already.
    received: Counter,
    transmitted: Counter,
    network_counted: [AtomicU64; 2],
}

impl Process {
    pub fn register(registry: &mut Registry) -> Process {
        let process = Process {
            cpu: Counter::default(),
            counted: AtomicU64::new(0f64.to_bits()),
            resident: Gauge::default(),
            virtual_bytes: Gauge::default(),
            virtual_max: Gauge::default(),
            open_fds: Gauge::default(),
            max_fds: Gauge::default(),
            start: Gauge::default(),
            received: Counter::default(),
            transmitted: Counter::default(),
            network_counted: [AtomicU64::new(0), AtomicU64::new(0)],
        };
        registry.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            process.cpu.clone(),
        );
        // The integer gauges, under client_golang's process collector names.
        let gauges = [
            ("process_resident_memory_bytes", "Resident memory size in bytes", &process.resident),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                &process.virtual_bytes,
            ),
            (
                "process_virtual_memory_max_bytes",
                "Maximum amount of virtual memory available in bytes",
                &process.virtual_max,
            ),
            ("process_open_fds", "Number of open file descriptors", &process.open_fds),
            ("process_max_fds", "Maximum number of open file descriptors", &process.max_fds),
        ];
        for (name, help, gauge) in gauges {
            registry.register(name, help, gauge.clone());
        }
        registry.register(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds",
            process.start.clone(),
        );
        registry.register(
            "process_network_receive_bytes",
            "Number of bytes received by the process over the network",
            process.received.clone(),
        );
        registry.register(
            "process_network_transmit_bytes",
            "Number of bytes sent by the process over the network",
            process.transmitted.clone(),
        );
        process
    }

    /// Reads /proc/self now; a file that cannot be read leaves its series as they were.
    pub fn refresh(&self) {
        if let Some(stat) = read("/proc/self/stat").as_deref().and_then(Stat::parse) {
            let cpu = (stat.utime + stat.stime) as f64 / USER_HZ;
            let before = f64::from_bits(self.counted.swap(cpu.to_bits(), Ordering::SeqCst));
            if cpu > before {
                self.cpu.inc_by(cpu - before);
            }
            self.virtual_bytes.set(clamp(stat.vsize));
            if let Some(boot) = read("/proc/stat").as_deref().and_then(boot_time) {
                self.start.set(boot + stat.starttime as f64 / USER_HZ);
            }
        }
        if let Some(kib) = read("/proc/self/status").as_deref().and_then(resident_kib) {
            self.resident.set(clamp(kib.saturating_mul(1024)));
        }
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(clamp(entries.count() as u64));
        }
        if let Some(limits) = read("/proc/self/limits") {
            if let Some(max) = max_open_files(&limits) {
                self.max_fds.set(clamp(max));
            }
            if let Some(max) = max_address_space(&limits) {
                self.virtual_max.set(max);
            }
        }
        if let Some(totals) = read("/proc/self/net/dev").as_deref().and_then(network_bytes) {
            for ((counter, counted), total) in
                [&self.received, &self.transmitted].iter().zip(&self.network_counted).zip(totals)
            {
                let before = counted.swap(total, Ordering::SeqCst);
                // Interfaces come and go: only growth is counted.
                if total > before {
                    counter.inc_by(total - before);
                }
            }
        }
    }
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn clamp(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[derive(Debug, PartialEq)]
struct Stat {
    utime: u64,
    stime: u64,
    starttime: u64,
    vsize: u64,
}

impl Stat {
    /// Fields 14, 15, 22 and 23 of /proc/self/stat, counted after the command name, which
    /// may itself hold spaces and parentheses.
    fn parse(text: &str) -> Option<Stat> {
        let after = &text[text.rfind(')')? + 1..];
        let fields: Vec<&str> = after.split_whitespace().collect();
        // `after` starts at field 3 (the state).
        let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
        Some(Stat {
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
            vsize: field(23)?,
        })
    }
}

/// The `nth` word after `label` on the first line that starts with it.
fn labelled<T: std::str::FromStr>(text: &str, label: &str, nth: usize) -> Option<T> {
    let line = text.lines().find_map(|l| l.strip_prefix(label))?;
    line.split_whitespace().nth(nth)?.parse().ok()
}

fn boot_time(stat: &str) -> Option<f64> {
    labelled(stat, "btime ", 0)
}

fn resident_kib(status: &str) -> Option<u64> {
    labelled(status, "VmRSS:", 0)
}

/// The soft limit: "Max open files  <soft>  <hard>  files".
fn max_open_files(limits: &str) -> Option<u64> {
    labelled(limits, "Max open files", 0)
}

/// The soft address-space limit in bytes, -1 for "unlimited".
fn max_address_space(limits: &str) -> Option<i64> {
    match labelled::<String>(limits, "Max address space", 0)?.as_str() {
        "unlimited" => Some(-1),
        bytes => bytes.parse::<u64>().ok().map(clamp),
    }
}

/// (received, transmitted) bytes over every interface: /proc/net/dev's two header lines, then
/// `name: rx_bytes rx_packets … (8 receive fields) tx_bytes …`.
fn network_bytes(dev: &str) -> Option<[u64; 2]> {
    let mut totals = [0u64; 2];
    for line in dev.lines().skip(2) {
        let (_, fields) = line.split_once(':')?;
        let fields: Vec<u64> = fields.split_whitespace().filter_map(|f| f.parse().ok()).collect();
        totals[0] = totals[0].saturating_add(*fields.first()?);
        totals[1] = totals[1].saturating_add(*fields.get(8)?);
    }
    Some(totals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat =
            "4242 (csi pv (x)) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 8 0 12345 987654 321 rest";
        assert_eq!(
            Stat::parse(stat),
            Some(Stat { utime: 250, stime: 50, starttime: 12345, vsize: 987654 })
        );
        assert_eq!(boot_time("cpu 1 2\nbtime 1700000000\n"), Some(1.7e9));
        assert_eq!(resident_kib("Name:\tx\nVmRSS:\t  2048 kB\n"), Some(2048));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            1048576              1048576              files\n";
        assert_eq!(max_open_files(limits), Some(1_048_576));
        let space = "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(max_address_space(space), Some(-1));
        assert_eq!(max_address_space("Max address space  4096  8192  bytes\n"), Some(4096));
        let dev = "Inter-|   Receive |  Transmit\n face |bytes packets\n    lo: 100 1 0 0 0 0 0 0 100 1 0 0 0 0 0 0\n  eth0: 2000 3 0 0 0 0 0 0 500 2 0 0 0 0 0 0\n";
        assert_eq!(network_bytes(dev), Some([2100, 600]));
    }

    #[test]
    fn this_process_is_read() {
        let mut registry = Registry::default();
        let process = Process::register(&mut registry);
        process.refresh();
        assert!(process.resident.get() > 0);
        assert!(process.open_fds.get() > 0);
        assert!(process.start.get() > 1.5e9);
        assert!(process.virtual_max.get() == -1 || process.virtual_max.get() > 0);
    }
}
