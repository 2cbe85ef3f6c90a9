//! The system allocator, counting live bytes and allocations, so the bench
//! can weigh what a held lock costs the client and how much a call allocates.
//! The counters are two atomics every thread writes; a workload that does
//! not read them and runs on several threads turns them off ([`counting`]),
//! or the counting itself, not the library, bounds its throughput.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};

pub struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(true);
static LIVE: AtomicI64 = AtomicI64::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counters are
// only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() && COUNTING.load(Relaxed) {
            LIVE.fetch_add(layout.size() as i64, Relaxed);
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() && COUNTING.load(Relaxed) {
            LIVE.fetch_add(layout.size() as i64, Relaxed);
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        if COUNTING.load(Relaxed) {
            LIVE.fetch_sub(layout.size() as i64, Relaxed);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() && COUNTING.load(Relaxed) {
            LIVE.fetch_add(new_size as i64 - layout.size() as i64, Relaxed);
            ALLOCATIONS.fetch_add(1, Relaxed);
        }
        p
    }
}

/// Bytes allocated and not yet freed, in the whole process.
pub fn live_bytes() -> i64 {
    LIVE.load(Relaxed)
}

/// Allocations (and reallocations) made so far, in the whole process.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Relaxed)
}

/// Turns the counting on or off (on at start). What is allocated while it is
/// off and freed after is not counted either way, so turn it off only around
/// a workload whose allocations end with it.
pub fn counting(on: bool) {
    COUNTING.store(on, Relaxed);
}
