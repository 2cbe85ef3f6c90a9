//! How the embedded keyspace reads its commands' arguments, as Redis 7
//! reads them: integers as `string2ll` (util.c) parses them, `SET`'s
//! options as `parseExtendedStringArgumentsOrReply` (t_string.c) does, and
//! the `NX | XX | GT | LT` of `PEXPIRE` and `PEXPIREAT` as
//! `parseExtendedExpireArgumentsOrReply` (expire.c) does. Nothing here
//! allocates unless it answers an error.

pub(super) const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
pub(super) const SYNTAX: &str = "ERR syntax error";

/// Redis reads no integer of 21 bytes or more (`LONG_STR_SIZE`).
const LONG_STR_SIZE: usize = 21;

/// An argument as an integer, or Redis's error for it.
pub(super) fn integer(arg: &[u8]) -> Result<i64, String> {
    string2ll(arg).ok_or_else(|| NOT_INTEGER.to_owned())
}

/// `arg` as Redis's `string2ll` reads it: an optional `-`, then decimal
/// digits of which the first is not 0 (unless `arg` is `0` itself), within
/// `i64`, in fewer than 21 bytes. So no `+`, no space, no leading zero and
/// no `-0`, where Rust's `parse` takes `+5` and `05`.
pub(super) fn string2ll(arg: &[u8]) -> Option<i64> {
    if arg.is_empty() || arg.len() >= LONG_STR_SIZE {
        return None;
    }
    if arg == b"0" {
        return Some(0);
    }
    let (negative, digits) = match arg {
        [b'-', rest @ ..] => (true, rest),
        _ => (false, arg),
    };
    let (first, rest) = digits.split_first()?;
    if !(b'1'..=b'9').contains(first) {
        return None;
    }
    let mut value = u64::from(first - b'0');
    for digit in rest {
        if !digit.is_ascii_digit() {
            return None;
        }
        value = value
            .checked_mul(10)?
            .checked_add(u64::from(digit - b'0'))?;
    }
    if negative {
        0i64.checked_sub_unsigned(value)
    } else {
        i64::try_from(value).ok()
    }
}

/// How a `SET` expiry is given: relative or absolute, in seconds or
/// milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expiry {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl Expiry {
    fn named(option: &[u8]) -> Option<Expiry> {
        [
            ("ex", Expiry::Ex),
            ("px", Expiry::Px),
            ("exat", Expiry::ExAt),
            ("pxat", Expiry::PxAt),
        ]
        .into_iter()
        .find_map(|(name, expiry)| {
            option
                .eq_ignore_ascii_case(name.as_bytes())
                .then_some(expiry)
        })
    }

    /// The expiry `arg` gives (ms since the epoch) at `now_ms`, or Redis's
    /// error for it (`getExpireMillisecondsOrReply`).
    pub(super) fn at(self, arg: &[u8], now_ms: u64) -> Result<u64, String> {
        let n = integer(arg)?;
        let invalid = || "ERR invalid expire time in 'set' command".to_owned();
        let seconds = matches!(self, Expiry::Ex | Expiry::ExAt);
        if n <= 0 || (seconds && n > i64::MAX / 1000) {
            return Err(invalid());
        }
        let ms = if seconds { n * 1000 } else { n };
        let at = match self {
            Expiry::Ex | Expiry::Px => {
                ms.checked_add(i64::try_from(now_ms).map_err(|_| invalid())?)
            }
            Expiry::ExAt | Expiry::PxAt => Some(ms),
        };
        at.and_then(|at| u64::try_from(at).ok()).ok_or_else(invalid)
    }
}

/// `SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms |
/// KEEPTTL]`'s options.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct SetOptions<'a> {
    pub nx: bool,
    pub xx: bool,
    /// Answer the value the key held (nil when none) instead of `OK`.
    pub get: bool,
    pub keep_ttl: bool,
    /// The expiry and its argument, not read yet: as on Redis, an option
    /// after a bad number is a syntax error before the number's error.
    pub expiry: Option<(Expiry, &'a [u8])>,
}

impl<'a> SetOptions<'a> {
    /// The options after `SET key value`, or `ERR syntax error`. As on
    /// Redis: NX with XX, an expiry with `KEEPTTL` or with an expiry of
    /// another form, and an expiry without its argument are refused; an
    /// option given twice is taken (the last expiry counts).
    pub(super) fn parse(options: &[&'a [u8]]) -> Result<Self, String> {
        let mut parsed = SetOptions::default();
        let mut i = 0;
        // Bounded: each round moves `i` on by one or two.
        while let Some(option) = options.get(i) {
            let is = |name: &str| option.eq_ignore_ascii_case(name.as_bytes());
            if is("nx") && !parsed.xx {
                parsed.nx = true;
            } else if is("xx") && !parsed.nx {
                parsed.xx = true;
            } else if is("get") {
                parsed.get = true;
            } else if is("keepttl") && parsed.expiry.is_none() {
                parsed.keep_ttl = true;
            } else {
                let form = Expiry::named(option).filter(|form| {
                    !parsed.keep_ttl && parsed.expiry.is_none_or(|(given, _)| given == *form)
                });
                match (form, options.get(i + 1)) {
                    (Some(form), Some(arg)) => {
                        parsed.expiry = Some((form, arg));
                        i += 1;
                    }
                    _ => return Err(SYNTAX.into()),
                }
            }
            i += 1;
        }
        Ok(parsed)
    }
}

/// `PEXPIRE` and `PEXPIREAT`'s conditions: set the expiry only when the
/// key has none (NX), has one (XX), or the new one is later (GT) or
/// earlier (LT) than it (no expiry counts as infinite).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ExpireIf {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl ExpireIf {
    /// The options after `PEXPIRE key ms`, or Redis's error for them.
    pub(super) fn parse(options: &[&[u8]]) -> Result<Self, String> {
        let mut parsed = ExpireIf::default();
        for option in options {
            let is = |name: &[u8]| option.eq_ignore_ascii_case(name);
            let flag = if is(b"nx") {
                &mut parsed.nx
            } else if is(b"xx") {
                &mut parsed.xx
            } else if is(b"gt") {
                &mut parsed.gt
            } else if is(b"lt") {
                &mut parsed.lt
            } else {
                let name = String::from_utf8_lossy(option);
                return Err(format!("ERR Unsupported option {name}"));
            };
            *flag = true;
        }
        if parsed.nx && (parsed.xx || parsed.gt || parsed.lt) {
            return Err(
                "ERR NX and XX, GT or LT options at the same time are not compatible".into(),
            );
        }
        if parsed.gt && parsed.lt {
            return Err("ERR GT and LT options at the same time are not compatible".into());
        }
        Ok(parsed)
    }

    /// Whether an expiry at `at` (ms) replaces `current` (`None`: none).
    pub(super) fn allows(&self, current: Option<i64>, at: i64) -> bool {
        !((self.nx && current.is_some())
            || (self.xx && current.is_none())
            || (self.gt && current.is_none_or(|c| at <= c))
            || (self.lt && current.is_some_and(|c| at >= c)))
    }
}

#[cfg(test)]
mod tests {
    use super::{string2ll, ExpireIf, Expiry, SetOptions, SYNTAX};

    #[test]
    fn integers_read_as_string2ll_reads_them() {
        let read = [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-7", Some(-7)),
            ("10", Some(10)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
        ];
        let refused = [
            "",
            "-",
            "+5",
            "05",
            "00",
            "-0",
            "-05",
            " 5",
            "5 ",
            "1e3",
            "0x10",
            "5.0",
            "9223372036854775808",
            "-9223372036854775809",
            "99999999999999999999",
            // 21 bytes: refused by length before its digits are read.
            "000000000000000000001",
            "١",
        ];
        for (text, value) in read {
            assert_eq!(string2ll(text.as_bytes()), value, "{text:?}");
        }
        for text in refused {
            assert_eq!(string2ll(text.as_bytes()), None, "{text:?}");
        }
    }

    #[test]
    fn set_options_read_as_redis_7_reads_them() {
        type Read = (bool, bool, bool, bool, Option<(Expiry, &'static [u8])>);
        fn parse(line: &'static str) -> Result<Read, String> {
            let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            SetOptions::parse(&args).map(|o| (o.nx, o.xx, o.get, o.keep_ttl, o.expiry))
        }
        let px = |arg: &'static str| Some((Expiry::Px, arg.as_bytes()));
        assert_eq!(parse("nx GET"), Ok((true, false, true, false, None)));
        assert_eq!(
            parse("PX 5 px 7"),
            Ok((false, false, false, false, px("7")))
        );
        assert_eq!(
            parse("KEEPTTL keepttl xx"),
            Ok((false, true, false, true, None))
        );
        // The number is read later: a bad one is no syntax error here.
        assert_eq!(parse("PX x"), Ok((false, false, false, false, px("x"))));
        for line in [
            "NX XX",
            "PX",
            "PX 5 EX 5",
            "PX 5 PXAT 5",
            "KEEPTTL PX 5",
            "PX 5 KEEPTTL",
            "FOO",
        ] {
            assert_eq!(parse(line), Err(SYNTAX.into()), "{line}");
        }
    }

    #[test]
    fn set_expiries_and_their_errors_are_redis_7s() {
        let now = 1_000_000;
        assert_eq!(Expiry::Px.at(b"10", now), Ok(1_000_010));
        assert_eq!(Expiry::Ex.at(b"10", now), Ok(1_010_000));
        assert_eq!(Expiry::PxAt.at(b"10", now), Ok(10));
        assert_eq!(Expiry::ExAt.at(b"10", now), Ok(10_000));
        let invalid = Err("ERR invalid expire time in 'set' command".to_owned());
        assert_eq!(Expiry::Px.at(b"0", now), invalid);
        assert_eq!(Expiry::PxAt.at(b"-1", now), invalid);
        assert_eq!(Expiry::Px.at(b"9223372036854775807", now), invalid);
        assert_eq!(Expiry::Ex.at(b"9223372036854776", now), invalid);
        assert_eq!(Expiry::Px.at(b"010", now), Err(super::NOT_INTEGER.into()));
    }

    #[test]
    fn expire_conditions_read_and_apply_as_redis_7s() {
        let parse = |line: &str| {
            let args: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
            ExpireIf::parse(&args)
        };
        assert_eq!(parse("FOO").unwrap_err(), "ERR Unsupported option FOO");
        assert!(parse("NX XX")
            .unwrap_err()
            .starts_with("ERR NX and XX, GT or LT"));
        assert!(parse("nx gt")
            .unwrap_err()
            .starts_with("ERR NX and XX, GT or LT"));
        assert!(parse("GT LT").unwrap_err().starts_with("ERR GT and LT"));
        let (nx, xx, gt, lt) = (parse("NX"), parse("xx"), parse("GT gt"), parse("LT"));
        let (nx, xx, gt, lt) = (nx.unwrap(), xx.unwrap(), gt.unwrap(), lt.unwrap());
        assert!(nx.allows(None, 5) && !nx.allows(Some(9), 5));
        assert!(!xx.allows(None, 5) && xx.allows(Some(9), 5));
        assert!(!gt.allows(None, 5) && !gt.allows(Some(5), 5) && gt.allows(Some(4), 5));
        assert!(lt.allows(None, 5) && !lt.allows(Some(5), 5) && lt.allows(Some(6), 5));
        assert!(parse("XX GT").unwrap().allows(Some(4), 5));
    }
}
