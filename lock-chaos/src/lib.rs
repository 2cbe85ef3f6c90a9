//! A randomized fault-and-history checker (Jepsen-style) for lock-runtime
//! on Redis: worker processes make random locked calls through TCP proxies
//! while a seeded schedule injects faults into the servers and proxies;
//! every body and call is recorded on the machine-wide monotonic clock, and
//! the history is checked against the rules in [`checker`].
#![warn(missing_docs)]

pub mod availability;
pub mod checker;
#[cfg(test)]
mod checker_tests;
pub mod clock;
pub mod election;
pub mod election_report;
pub mod election_rules;
pub mod election_run;
pub mod election_worker;
pub mod failover;
pub mod faults;
pub mod harness;
pub mod history;
pub mod index;
pub mod kinds;
pub mod multi;
pub mod plan;
pub mod process;
pub mod proxy;
pub mod record;
pub mod reentry;
pub mod report;
pub mod rng;
pub mod timeline;
pub mod topology;
pub mod worker;
