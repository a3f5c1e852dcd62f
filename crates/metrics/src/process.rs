//! What the process and the system say about themselves, for the standard process series
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`: the names every Prometheus
//! client library uses) and the space left for a store.
//!
//! Each reader returns `None` when the system does not say (no `/proc`): the series is then
//! left out of the scrape rather than reported as 0.

use std::path::Path;

/// User and system CPU time of the whole process (every thread), in seconds: fields 14 and 15
/// of `/proc/self/stat`, in clock ticks.
pub fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let ticks = cpu_ticks(&stat)?;
    Some(ticks as f64 / clock_ticks_per_second()? as f64)
}

/// `utime + stime` of a `/proc/PID/stat` line (the command in parentheses may hold spaces and
/// parentheses: fields are counted after the last `)`).
pub fn cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    // After the command: state (3), ppid (4) ... utime is field 14, the 12th here.
    let utime: u64 = f.nth(11)?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some(utime + stime)
}

fn clock_ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf only reads a system constant; it has no pointer argument.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (t > 0).then_some(t as u64)
}

/// Resident memory of the process in bytes: `VmRSS` of `/proc/self/status`.
pub fn resident_bytes() -> Option<u64> {
    vm_rss(&std::fs::read_to_string("/proc/self/status").ok()?)
}

/// The `VmRSS:   1234 kB` line of a `/proc/PID/status` text, in bytes.
pub fn vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let mut f = line["VmRSS:".len()..].split_whitespace();
    let kib: u64 = f.next()?.parse().ok()?;
    (f.next() == Some("kB")).then_some(kib * 1024)
}

/// Bytes available to unprivileged users on the filesystem holding `path` (`statvfs`'s
/// `f_bavail * f_frsize`, what `df` shows as available).
pub fn filesystem_avail_bytes(path: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: an all-zero statvfs is a valid value of this plain C struct.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid statvfs for the kernel to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields() {
        // A real line's shape, with a command holding ") (" to fool a naive split.
        let line = "4242 (we) (ir d) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 75 0 0 20 0 3 0 \
                    12345 1000000 500 18446744073709551615";
        assert_eq!(cpu_ticks(line), Some(325));
        assert_eq!(cpu_ticks("garbage"), None);
        assert_eq!(cpu_ticks("1 (x) S 1"), None);
        let status = "Name:\tweir\nVmPeak:\t  9000 kB\nVmRSS:\t    1536 kB\nThreads:\t3\n";
        assert_eq!(vm_rss(status), Some(1536 * 1024));
        assert_eq!(vm_rss("VmRSS: lots"), None);
        assert_eq!(vm_rss(""), None);
    }

    /// The live readers agree with what the process did: CPU time only grows, RSS covers a
    /// buffer we touched, and df's oracle (statvfs) gives some space for /.
    #[test]
    fn live_readers() {
        let before = cpu_seconds().unwrap();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_seconds().unwrap() >= before);
        let v = vec![1u8; 64 << 20];
        std::hint::black_box(&v);
        assert!(resident_bytes().unwrap() >= 64 << 20);
        assert!(filesystem_avail_bytes(Path::new("/")).is_some());
        assert_eq!(filesystem_avail_bytes(Path::new("/no/such/dir")), None);
    }
}
