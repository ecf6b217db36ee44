//! What a benchmark result is recorded with: the machine (CPU count and model, kernel,
//! memory), the date, and the process's peak resident memory. Linux facts come from
//! `/proc`; elsewhere they are reported as unknown.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// The machine a benchmark ran on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MachineInfo {
    /// Logical CPUs this process may use.
    pub cpus: usize,
    /// CPU model name from `/proc/cpuinfo` ("unknown" if unavailable).
    pub model: String,
    /// Kernel release from `/proc/version` ("unknown" if unavailable).
    pub kernel: String,
    /// Total RAM from `/proc/meminfo`, in bytes (0 if unavailable).
    pub mem_total_bytes: u64,
}

impl MachineInfo {
    /// Collects the facts of the machine this process runs on.
    pub fn detect() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| cpu_model(&s))
            .unwrap_or_else(|| "unknown".to_string());
        let kernel = std::fs::read_to_string("/proc/version")
            .ok()
            .and_then(|s| kernel_release(&s))
            .unwrap_or_else(|| "unknown".to_string());
        let mem_total_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|s| kib_field(&s, "MemTotal:"))
            .unwrap_or(0);
        MachineInfo { cpus, model, kernel, mem_total_bytes }
    }
}

fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_string())
        })
        .filter(|m| !m.is_empty())
}

/// The release in `Linux version 6.1.0-18-amd64 (...) ...`.
fn kernel_release(version: &str) -> Option<String> {
    version.strip_prefix("Linux version ")?.split_whitespace().next().map(str::to_string)
}

/// The value in bytes of a `Name:   1234 kB` line of `/proc/self/status` or `/proc/meminfo`.
fn kib_field(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(name))?;
    let mut parts = line[name.len()..].split_whitespace();
    let n: u64 = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => Some(n * 1024),
        Some(_) => None,
    }
}

/// Resets the kernel's record of this process's peak resident set (`VmHWM`) to its
/// current resident set, by writing `5` to `/proc/self/clear_refs` (Linux >= 4.0).
/// Returns whether the reset worked; where it does not, [`peak_rss_bytes`] reports the
/// peak since the process started.
pub fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", b"5").is_ok()
}

/// This process's peak resident set (`VmHWM` of `/proc/self/status`) in bytes, since
/// start or the last [`reset_peak_rss`]; 0 where unknown.
pub fn peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| kib_field(&s, "VmHWM:"))
        .unwrap_or(0)
}

/// Today's date in UTC as `YYYY-MM-DD`.
pub fn today_utc() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The proleptic Gregorian date of a day number counted from 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32; // [1, 31]
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32; // [1, 12]
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_147), (2025, 2, 28));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        let t = today_utc();
        assert_eq!(t.len(), 10, "{t}");
        assert!(t.as_str() >= "2025-01-01", "{t}");
    }

    #[test]
    fn proc_parsing() {
        assert_eq!(
            kernel_release("Linux version 6.1.0-18-amd64 (debian-kernel@lists.debian.org) #1"),
            Some("6.1.0-18-amd64".to_string())
        );
        let cpuinfo = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n";
        assert_eq!(cpu_model(cpuinfo), Some("AMD EPYC 7B13".to_string()));
        let status = "Name:\tx\nVmPeak:\t  100 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(kib_field(status, "VmHWM:"), Some(2048 * 1024));
        assert_eq!(kib_field(status, "VmSwap:"), None);
    }

    #[test]
    fn peak_rss_is_reported_on_linux() {
        if cfg!(target_os = "linux") {
            reset_peak_rss();
            assert!(peak_rss_bytes() > 0);
        }
    }
}
