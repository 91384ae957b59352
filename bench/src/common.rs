//! What both benchmark binaries share: the machine's description for a report's setup, and
//! many API requests run with a bounded number in flight.

use futures::{StreamExt, TryStreamExt, stream};

/// Cores, CPU model and memory, from /proc.
pub fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem_gib = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(0.0, |kib| kib / (1024.0 * 1024.0));
    format!("{cores} cores ({model}), {mem_gib:.0} GiB")
}

/// Runs `f` over `items` with `in_flight` at once; the first error stops it.
pub async fn each<T, F, Fut>(items: Vec<T>, in_flight: usize, f: F) -> Result<(), String>
where
    F: Fn(T) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    stream::iter(items.into_iter().map(f))
        .buffer_unordered(in_flight)
        .try_collect::<Vec<()>>()
        .await
        .map(|_| ())
}
