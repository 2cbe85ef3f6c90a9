//! The machine-wide monotonic clock (`CLOCK_MONOTONIC`), shared by every
//! process on the machine, so that records from several processes compare.

/// Nanoseconds on `CLOCK_MONOTONIC`.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Milliseconds to nanoseconds.
pub const fn ms(ms: u64) -> u64 {
    ms * 1_000_000
}
