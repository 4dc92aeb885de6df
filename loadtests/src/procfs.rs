//! What Linux's `/proc` says about a process: resident memory, CPU time, the open-file limit.
//! Every reader returns `None` where `/proc` is absent or unreadable, so a report simply
//! leaves the figure out.

use serde::Serialize;

/// Memory of a process, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// `VmRSS`: resident now.
    pub rss_kib: u64,
    /// `VmHWM`: the most it has been resident.
    pub hwm_kib: u64,
}

/// `VmRSS` and `VmHWM` of `pid` (`"self"` for this process).
pub fn memory(pid: &str) -> Option<Memory> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    Some(Memory { rss_kib: status_kib(&text, "VmRSS:")?, hwm_kib: status_kib(&text, "VmHWM:")? })
}

fn status_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(key))?.split_whitespace().next()?.parse().ok()
}

/// User plus system CPU time of `pid` in milliseconds. Clock ticks are taken as 1/100 s: the
/// value of `USER_HZ` on every Linux platform this runs on (reading it needs `sysconf`).
pub fn cpu_ms(pid: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ms(&text)
}

fn parse_cpu_ms(stat: &str) -> Option<u64> {
    // The command name (field 2) may hold spaces and parentheses: fields are counted after
    // its closing parenthesis, where field 3 (state) is the first.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 10)
}

/// The soft limit on open files of this process.
pub fn open_file_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    parse_open_file_limit(&text)
}

/// Raises this process's open-file limit, soft and hard, to at least `want` (at most the
/// kernel's `fs.nr_open`); children started afterwards (the proxy) inherit it. Raising the
/// hard limit needs root (or `CAP_SYS_RESOURCE`); without it the soft limit goes up to the
/// hard one. Returns the soft limit now, `None` where the limit cannot be read.
pub fn raise_open_file_limit(want: u64) -> Option<u64> {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).ok()?;
    if soft >= want {
        return Some(soft);
    }
    let ceiling =
        std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|t| t.trim().parse::<u64>().ok()).unwrap_or(hard);
    let target = want.min(ceiling.max(hard));
    if setrlimit(Resource::RLIMIT_NOFILE, target, target.max(hard)).is_err() {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    }
    getrlimit(Resource::RLIMIT_NOFILE).ok().map(|(soft, _)| soft)
}

fn parse_open_file_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_formats() {
        let stat = "1234 (my (odd) proc) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 4 0 1000 1000000 500";
        assert_eq!(parse_cpu_ms(stat), Some(3250));
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax open files            20000                20000                files     \n";
        assert_eq!(parse_open_file_limit(limits), Some(20000));
        let status = "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(status_kib(status, "VmHWM:"), Some(2048));
    }

    #[test]
    fn reads_this_process() {
        let m = memory("self").expect("/proc/self/status");
        assert!(m.rss_kib > 0 && m.hwm_kib >= m.rss_kib);
        assert!(cpu_ms("self").is_some());
        assert!(open_file_limit().is_some_and(|n| n > 0));
        let now = open_file_limit().unwrap();
        assert_eq!(raise_open_file_limit(now), Some(now), "asking for what is there changes nothing");
    }
}
