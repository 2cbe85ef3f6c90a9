//! CPU time of a process (all its threads), from /proc, to tell where the
//! time of a call goes: the bench's process (the client) or redis-server.

use std::time::Duration;

/// The user + system CPU time that process `pid` has used so far; zero
/// where /proc cannot be read. Linux counts it in ticks of 10 ms
/// (`getconf CLK_TCK` is 100 here), so measure windows of seconds.
pub fn used(pid: u32) -> Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    // The command name, field 2, is in parentheses and may hold spaces.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return Duration::ZERO;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15; `rest` starts at field 3.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i)?.parse::<u64>().ok())
        .sum();
    Duration::from_millis(ticks * 10)
}

/// CPU time of this process and of the server over a window.
#[derive(Clone, Copy, Debug, Default)]
pub struct Split {
    pub client: Duration,
    pub server: Duration,
}

pub struct Meter {
    server_pid: u32,
    client: Duration,
    server: Duration,
}

impl Meter {
    pub fn start(server_pid: u32) -> Meter {
        Meter {
            server_pid,
            client: used(std::process::id()),
            server: used(server_pid),
        }
    }

    pub fn stop(&self) -> Split {
        Split {
            client: used(std::process::id()).saturating_sub(self.client),
            server: used(self.server_pid).saturating_sub(self.server),
        }
    }
}

/// Context switches (voluntary and not) of all this process's threads so
/// far: each is a thread that went to sleep or was preempted.
pub fn context_switches() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// `2 cores, <CPU model>`, from /proc/cpuinfo: the machine a chart was
/// drawn on.
pub fn machine() -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = info
        .lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim());
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("{cores} cores, {model}")
}
