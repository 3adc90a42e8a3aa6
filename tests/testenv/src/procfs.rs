//! What the scale harnesses read of processes under measurement, from `/proc` (Linux).
//! A process that is gone reads as zero.

use std::sync::OnceLock;
use std::time::Duration;

/// Clock ticks per second (`getconf CLK_TCK`; 100 when it cannot be asked).
pub fn clk_tck() -> f64 {
    static TCK: OnceLock<f64> = OnceLock::new();
    *TCK.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// User + system CPU time of process `pid`.
pub fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the command name (which may hold spaces and parentheses): utime and stime are
    // fields 14 and 15, the 12th and 13th after it.
    let f: Vec<&str> = stat
        .rfind(')')
        .map_or("", |i| &stat[i + 1..])
        .split_whitespace()
        .collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    Duration::from_secs_f64((ticks(11) + ticks(12)) as f64 / clk_tck())
}

/// Busy CPU time of the whole machine since boot: `/proc/stat`'s `cpu` line without idle and
/// iowait (guest time is already in user).
pub fn machine_busy() -> Duration {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let busy: u64 = stat
        .lines()
        .find(|l| l.starts_with("cpu "))
        .map(|l| {
            l.split_whitespace()
                .skip(1)
                .take(8)
                .enumerate()
                .filter(|(i, _)| *i != 3 && *i != 4)
                .filter_map(|(_, v)| v.parse::<u64>().ok())
                .sum()
        })
        .unwrap_or(0);
    Duration::from_secs_f64(busy as f64 / clk_tck())
}

/// A `kB` line (`VmRSS`, `VmHWM`, `RssAnon`, ...) of a `/proc` file's text, in bytes.
pub fn field_bytes(text: &str, key: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// A `kB` line of `/proc/<pid>/status`, in bytes (0 when the process is gone).
pub fn status_bytes(pid: u32, key: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    field_bytes(&text, key).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        assert!(status_bytes(std::process::id(), "VmRSS") > 0);
        assert!(machine_busy() > Duration::ZERO);
        assert_eq!(field_bytes("VmHWM:\t  12 kB\n", "VmHWM"), Some(12 * 1024));
        assert_eq!(field_bytes("VmHWM:\t  12 kB\n", "VmRSS"), None);
        assert_eq!(status_bytes(u32::MAX, "VmRSS"), 0);
    }
}
