//! The election mode's records: terms won by `lead`, the ticks their
//! leaders write (fenced writes, `RPUSH` of the term's token on a list per
//! election key), how each term ended, and the lists as Redis kept them.
//!
//! - `T proc task key token client at`: a term began (the leader's first
//!   statement): worker, task, election key, the term's token
//!   (`Term::token`), the client that campaigned (0 the global one, 1 the
//!   second), and when.
//! - `K proc task key token how sent acked result`: a tick, a fenced write
//!   of `token` by the term's future itself (`how` = `body`) or by a task
//!   it handed the ticking to (`handed`), sent at `sent` and answered at
//!   `acked`; `result` is `ok` (written), `fenced` (refused with
//!   `LockError::Fenced`: a newer token wrote the list) or `error` (any
//!   other error: the write may or may not have been made).
//! - `E proc task key token at end why`: the term ended at `at` (when
//!   `Term::ended` completed), with `end` (its `TermEnd`: `lost_expired`,
//!   `lost_taken`, `lost_other`, `returned`, `shut_down`, `cancelled`);
//!   `why` is why the leader's future returned, if it did: `resign` (a
//!   planned resignation: the task calls `lead` again), `refused` (a tick
//!   was refused: it stepped down), `stop` (the run ended), or `-`.
//! - `L key tokens`: the list of `key` as Redis kept it at the end of the
//!   run, its tokens in order, comma-separated (`-`: empty).

use std::fmt;

/// How many election keys a run campaigns on (`e0`, `e1`, `e2`).
pub const KEYS: u64 = 3;

/// The resource a key's ticks are written to (a list, fenced under the
/// same name): `{<prefix><key>}:ticks`, in one hash slot with its fence key
/// (`{<prefix><key>}:ticks:fence`).
pub fn resource(prefix: &str, key: &str) -> String {
    format!("{{{prefix}{key}}}:ticks")
}

/// A term began.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermStart {
    /// Worker index.
    pub proc: u32,
    /// Task index.
    pub task: u32,
    /// The election key (without prefix).
    pub key: String,
    /// The term's fencing token.
    pub token: u64,
    /// The client that campaigned (0 global, 1 second).
    pub client: u8,
    /// The leader's first statement (ns).
    pub at: u64,
}

/// What a tick's fenced write got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TickResult {
    /// Written.
    Ok,
    /// Refused: a newer token wrote the resource.
    Fenced,
    /// Another error (the write may or may not have been made).
    Error,
}

impl TickResult {
    /// The word in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            TickResult::Ok => "ok",
            TickResult::Fenced => "fenced",
            TickResult::Error => "error",
        }
    }

    fn parse(s: &str) -> Option<TickResult> {
        [TickResult::Ok, TickResult::Fenced, TickResult::Error]
            .into_iter()
            .find(|r| r.as_str() == s)
    }
}

/// One tick of a leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tick {
    /// Worker index.
    pub proc: u32,
    /// Task index.
    pub task: u32,
    /// The election key.
    pub key: String,
    /// The token written (the term's).
    pub token: u64,
    /// Whether a task the leader handed the ticking to wrote it (else the
    /// term's future itself).
    pub handed: bool,
    /// When the write was sent (ns).
    pub sent: u64,
    /// When its answer came (ns).
    pub acked: u64,
    /// What it got.
    pub result: TickResult,
}

/// How a term ended (`TermEnd`), as the history writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EndKind {
    /// `TermEnd::Lost(Expired)`.
    LostExpired,
    /// `TermEnd::Lost(Taken)`.
    LostTaken,
    /// `TermEnd::Lost(_)` for another reason.
    LostOther,
    /// `TermEnd::Returned`.
    Returned,
    /// `TermEnd::ShutDown`.
    ShutDown,
    /// `TermEnd::Cancelled`.
    Cancelled,
}

/// Every end, in the order of the summary.
pub const END_KINDS: [EndKind; 6] = [
    EndKind::Returned,
    EndKind::LostExpired,
    EndKind::LostTaken,
    EndKind::LostOther,
    EndKind::ShutDown,
    EndKind::Cancelled,
];

impl EndKind {
    /// The word in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            EndKind::LostExpired => "lost_expired",
            EndKind::LostTaken => "lost_taken",
            EndKind::LostOther => "lost_other",
            EndKind::Returned => "returned",
            EndKind::ShutDown => "shut_down",
            EndKind::Cancelled => "cancelled",
        }
    }

    fn parse(s: &str) -> Option<EndKind> {
        END_KINDS.into_iter().find(|e| e.as_str() == s)
    }

    /// Whether the term was lost.
    pub fn is_lost(self) -> bool {
        matches!(
            self,
            EndKind::LostExpired | EndKind::LostTaken | EndKind::LostOther
        )
    }
}

impl fmt::Display for EndKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a leader's future returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Why {
    /// It did not (the term was lost, or the process died).
    None,
    /// A planned resignation: the task calls `lead` again.
    Resign,
    /// A tick was refused: it stepped down.
    Refused,
    /// The run ended.
    Stop,
}

impl Why {
    /// The word in the history.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::None => "-",
            Why::Resign => "resign",
            Why::Refused => "refused",
            Why::Stop => "stop",
        }
    }

    fn parse(s: &str) -> Option<Why> {
        [Why::None, Why::Resign, Why::Refused, Why::Stop]
            .into_iter()
            .find(|w| w.as_str() == s)
    }
}

/// A term ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermEnded {
    /// Worker index.
    pub proc: u32,
    /// Task index.
    pub task: u32,
    /// The election key.
    pub key: String,
    /// The term's token.
    pub token: u64,
    /// When `Term::ended` completed (ns).
    pub at: u64,
    /// How it ended.
    pub end: EndKind,
    /// Why its future returned, if it did.
    pub why: Why,
}

/// A key's list of ticks as Redis kept it at the end of the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickList {
    /// The election key.
    pub key: String,
    /// The tokens, in the list's order.
    pub tokens: Vec<u64>,
}

impl TermStart {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        format!(
            "T\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.proc, self.task, self.key, self.token, self.client, self.at
        )
    }
}

impl Tick {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        let how = if self.handed { "handed" } else { "body" };
        format!(
            "K\t{}\t{}\t{}\t{}\t{how}\t{}\t{}\t{}\n",
            self.proc,
            self.task,
            self.key,
            self.token,
            self.sent,
            self.acked,
            self.result.as_str()
        )
    }
}

impl TermEnded {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        format!(
            "E\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
            self.proc,
            self.task,
            self.key,
            self.token,
            self.at,
            self.end,
            self.why.as_str()
        )
    }
}

impl TickList {
    /// The history line (with a newline).
    pub fn line(&self) -> String {
        let tokens: Vec<String> = self.tokens.iter().map(u64::to_string).collect();
        let tokens = if tokens.is_empty() {
            "-".to_owned()
        } else {
            tokens.join(",")
        };
        format!("L\t{}\t{tokens}\n", self.key)
    }
}

/// The election records of a history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Records {
    /// The terms, as they began.
    pub terms: Vec<TermStart>,
    /// The ticks.
    pub ticks: Vec<Tick>,
    /// The terms' ends.
    pub ends: Vec<TermEnded>,
    /// The lists at the end of the run.
    pub lists: Vec<TickList>,
}

impl Records {
    /// Whether the history has none (a run of another mode).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty() && self.ticks.is_empty() && self.lists.is_empty()
    }

    /// Every record as history lines.
    pub fn to_text(&self) -> String {
        let terms = self.terms.iter().map(TermStart::line);
        terms
            .chain(self.ticks.iter().map(Tick::line))
            .chain(self.ends.iter().map(TermEnded::line))
            .chain(self.lists.iter().map(TickList::line))
            .collect()
    }

    /// Adds the record of the line split into `f`, if it is one of these
    /// (`None`: not an election line, or one that does not parse).
    pub fn parse(&mut self, f: &[&str]) -> Option<()> {
        let n = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
        match (f[0], f.len()) {
            ("T", 7) => self.terms.push(TermStart {
                proc: n(1)? as u32,
                task: n(2)? as u32,
                key: f[3].to_owned(),
                token: n(4)?,
                client: n(5)? as u8,
                at: n(6)?,
            }),
            ("K", 9) => self.ticks.push(Tick {
                proc: n(1)? as u32,
                task: n(2)? as u32,
                key: f[3].to_owned(),
                token: n(4)?,
                handed: match f[5] {
                    "handed" => true,
                    "body" => false,
                    _ => return None,
                },
                sent: n(6)?,
                acked: n(7)?,
                result: TickResult::parse(f[8])?,
            }),
            ("E", 8) => self.ends.push(TermEnded {
                proc: n(1)? as u32,
                task: n(2)? as u32,
                key: f[3].to_owned(),
                token: n(4)?,
                at: n(5)?,
                end: EndKind::parse(f[6])?,
                why: Why::parse(f[7])?,
            }),
            ("L", 3) => self.lists.push(TickList {
                key: f[1].to_owned(),
                tokens: match f[2] {
                    "-" => Vec::new(),
                    list => list
                        .split(',')
                        .map(|t| t.parse().ok())
                        .collect::<Option<_>>()?,
                },
            }),
            _ => return None,
        }
        Some(())
    }

    /// The earliest time in these records (0: none).
    pub fn origin(&self) -> Option<u64> {
        let terms = self.terms.iter().map(|t| t.at);
        terms.chain(self.ticks.iter().map(|t| t.sent)).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_back() {
        let records = Records {
            terms: vec![TermStart {
                proc: 1,
                task: 2,
                key: "e0".into(),
                token: 77,
                client: 1,
                at: 5,
            }],
            ticks: vec![Tick {
                proc: 1,
                task: 2,
                key: "e0".into(),
                token: 77,
                handed: true,
                sent: 6,
                acked: 7,
                result: TickResult::Fenced,
            }],
            ends: vec![TermEnded {
                proc: 1,
                task: 2,
                key: "e0".into(),
                token: 77,
                at: 9,
                end: EndKind::LostExpired,
                why: Why::None,
            }],
            lists: vec![
                TickList {
                    key: "e0".into(),
                    tokens: vec![3, 77, 77],
                },
                TickList {
                    key: "e1".into(),
                    tokens: Vec::new(),
                },
            ],
        };
        let mut back = Records::default();
        for line in records.to_text().lines() {
            let f: Vec<&str> = line.split('\t').collect();
            back.parse(&f).expect(line);
        }
        assert_eq!(back, records);
        assert_eq!(resource("lock:single:", "e0"), "{lock:single:e0}:ticks");
    }
}
