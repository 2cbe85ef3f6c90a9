//! The options that cannot all go together: `key` and `keys` (one key or a
//! set of them), and the kind options `mode`, `permits`, `fair = true` and
//! `hold_at_least`. Each pair that the runtime has no lock for is refused
//! with a message that says why and what to drop.

/// An option that constrains the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `key = ...`: one key.
    Key,
    /// `keys = [...]`: a set of keys, taken all at once.
    Keys,
    /// `mode = "read"`: a reader of a read-write lock.
    ModeRead,
    /// `mode = "write"`: a writer, the same lock as no `mode`.
    ModeWrite,
    /// `permits = ...`: a counted lock.
    Permits,
    /// `fair = true`: a fair lock.
    Fair,
    /// `hold_at_least = ...`: the lock outlives the body.
    HoldAtLeast,
}

impl Kind {
    /// The option as the messages write it.
    fn written(self) -> &'static str {
        match self {
            Kind::Key => "`key`",
            Kind::Keys => "`keys`",
            Kind::ModeRead | Kind::ModeWrite => "`mode`",
            Kind::Permits => "`permits`",
            Kind::Fair => "`fair = true`",
            Kind::HoldAtLeast => "`hold_at_least`",
        }
    }

    /// What a kind option gives on its own.
    fn alone(self) -> &'static str {
        match self {
            Kind::ModeRead | Kind::ModeWrite => {
                "`mode` alone takes the key as a reader or a writer"
            }
            Kind::Permits => "`permits` alone lets at most that many holders in at once",
            _ => "`fair = true` alone takes an exclusive lock in arrival order",
        }
    }

    /// The error for `self` written after `earlier`, if the two cannot go
    /// together.
    pub(crate) fn conflict(self, earlier: Kind) -> Option<String> {
        use Kind::{Fair, HoldAtLeast, Key, Keys, ModeRead, ModeWrite, Permits};
        let pair = |a: Kind, b: Kind| (self, earlier) == (a, b) || (self, earlier) == (b, a);
        if pair(Key, Keys) {
            return Some(format!(
                "{} cannot be combined with {}: a call takes one key (`key = \"order:<id>\"`) \
                 or a set of keys taken together (`keys = [\"account:<from>\", \
                 \"account:<to>\"]`), not both; drop `key`, or move its template into the \
                 `keys` list",
                self.written(),
                earlier.written()
            ));
        }
        if pair(Keys, Permits) || pair(Keys, Fair) {
            return Some(self.with_keys(earlier));
        }
        if self == HoldAtLeast || earlier == HoldAtLeast {
            return self.with_hold(earlier);
        }
        let why = if pair(Permits, ModeRead) || pair(Permits, ModeWrite) {
            "a key is a read-write lock or a counted lock, not both"
        } else if pair(Fair, ModeRead) || pair(Fair, ModeWrite) {
            "there is no fair read-write lock yet"
        } else if pair(Fair, Permits) {
            "there is no fair counted lock yet"
        } else {
            return None;
        };
        Some(format!(
            "{} cannot be combined with {}: {why}; drop one of them ({}, {})",
            self.written(),
            earlier.written(),
            earlier.alone(),
            self.alone(),
        ))
    }

    /// The error for `permits` or `fair = true` with `keys`, one of them
    /// `self`.
    fn with_keys(self, earlier: Kind) -> String {
        let other = if self == Kind::Keys { earlier } else { self };
        let why = if other == Kind::Permits {
            "a count of holders over a set of keys has no sound meaning; drop `permits` to \
             take every key as an exclusive lock (or every key as a reader, with \
             `mode = \"read\"`), or count the holders of one key with `key = \"...\"`"
        } else {
            "an arrival order over a set of keys has no sound meaning (a call that waits \
             for several keys stands in no single line); drop `fair = true` to take the \
             keys all at once, or take one key in arrival order with `key = \"...\"`"
        };
        format!(
            "{} cannot be combined with {}: {why}",
            self.written(),
            earlier.written()
        )
    }

    /// The error for `hold_at_least` with `permits`, `fair = true`,
    /// `mode = "read"` or `keys`, one of them `self`, if `earlier` is one of
    /// those.
    fn with_hold(self, earlier: Kind) -> Option<String> {
        let other = if self == Kind::HoldAtLeast {
            earlier
        } else {
            self
        };
        let other = match other {
            Kind::Permits | Kind::Fair | Kind::Keys => other.written(),
            Kind::ModeRead => "`mode = \"read\"`",
            _ => return None,
        };
        let (this, earlier) = if self == Kind::HoldAtLeast {
            ("`hold_at_least`", other)
        } else {
            (other, "`hold_at_least`")
        };
        Some(format!(
            "{this} cannot be combined with {earlier}: `hold_at_least` is supported only for \
             a plain or write lock on one key (`key = \"...\"`, with no `mode` or with \
             `mode = \"write\"`, no `permits`, no `fair = true`); drop {other}, or drop \
             `hold_at_least`"
        ))
    }
}
