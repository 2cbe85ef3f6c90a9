//! Duration strings such as `"250ms"`, `"30s"`, `"5m"`, `"1h"` or `"1m30s"`,
//! converted to milliseconds at compile time.

/// The units a duration may use, largest first, with their length in
/// milliseconds. `ms` comes before `m` so that it is matched first.
const UNITS: [(&str, u64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];

/// Why a duration string was rejected.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DurationError {
    /// Not a sequence of `<number><unit>` parts.
    Malformed,
    /// A unit appears twice or after a smaller one, as in `"30s1m"`.
    UnitOrder,
    /// The total does not fit in a `u64` of milliseconds.
    Overflow,
}

impl DurationError {
    /// The message for the compile error, naming the rejected text and saying
    /// how to write it instead.
    pub(crate) fn message(&self, option: &str, text: &str) -> String {
        match self {
            DurationError::Malformed => format!(
                "invalid duration `{text}` for `{option}`: expected a whole number followed by \
                 `ms`, `s`, `m` or `h`, such as \"250ms\", \"30s\", \"5m\", \"1h\" or \"1m30s\""
            ),
            DurationError::UnitOrder => format!(
                "invalid duration `{text}` for `{option}`: give each unit at most once, largest \
                 first, as in \"1h30m\" or \"1m30s\""
            ),
            DurationError::Overflow => {
                format!("duration `{text}` for `{option}` is too large to count in milliseconds")
            }
        }
    }
}

/// Parses `text` into milliseconds.
///
/// The text is one or more parts, each a run of ASCII digits followed by a
/// unit (`h`, `m`, `s`, `ms`); units go from largest to smallest, each at most
/// once. No signs, fractions or spaces. Zero is accepted here; whether it is
/// allowed depends on the option.
pub(crate) fn parse_millis(text: &str) -> Result<u64, DurationError> {
    let mut rest = text;
    let mut total: u64 = 0;
    // Index in UNITS of the last unit seen: the next one must come after it.
    let mut last_unit: Option<usize> = None;
    if rest.is_empty() {
        return Err(DurationError::Malformed);
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(DurationError::Malformed);
        }
        let (number, after) = rest.split_at(digits);
        let (unit_index, unit_ms, unit_len) = UNITS
            .iter()
            .enumerate()
            .rev() // `ms` before `m`
            .find(|(_, (name, _))| after.starts_with(name))
            .map(|(i, (name, ms))| (i, *ms, name.len()))
            .ok_or(DurationError::Malformed)?;
        if last_unit.is_some_and(|last| unit_index <= last) {
            return Err(DurationError::UnitOrder);
        }
        last_unit = Some(unit_index);
        let number: u64 = number.parse().map_err(|_| DurationError::Overflow)?;
        total = number
            .checked_mul(unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or(DurationError::Overflow)?;
        rest = &after[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::{parse_millis, DurationError};

    #[test]
    fn single_units() {
        assert_eq!(parse_millis("250ms"), Ok(250));
        assert_eq!(parse_millis("30s"), Ok(30_000));
        assert_eq!(parse_millis("5m"), Ok(300_000));
        assert_eq!(parse_millis("1h"), Ok(3_600_000));
        assert_eq!(parse_millis("0s"), Ok(0));
        assert_eq!(parse_millis("0ms"), Ok(0));
    }

    #[test]
    fn compound() {
        assert_eq!(parse_millis("1m30s"), Ok(90_000));
        assert_eq!(parse_millis("1h1m1s1ms"), Ok(3_661_001));
        assert_eq!(parse_millis("2s500ms"), Ok(2_500));
    }

    #[test]
    fn malformed() {
        for text in [
            "", "30", "s", "30x", "30 s", " 30s", "30s ", "-1s", "1.5s", "30S", "30sec", "1m30",
            "ms", "3 0s",
        ] {
            assert_eq!(
                parse_millis(text),
                Err(DurationError::Malformed),
                "{text:?}"
            );
        }
    }

    #[test]
    fn unit_order() {
        assert_eq!(parse_millis("30s1m"), Err(DurationError::UnitOrder));
        assert_eq!(parse_millis("1s1s"), Err(DurationError::UnitOrder));
        assert_eq!(parse_millis("5ms1s"), Err(DurationError::UnitOrder));
    }

    #[test]
    fn overflow() {
        assert_eq!(parse_millis("18446744073709551615ms"), Ok(u64::MAX));
        assert_eq!(
            parse_millis("18446744073709551616ms"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_millis("18446744073709551615s"),
            Err(DurationError::Overflow)
        );
        assert_eq!(
            parse_millis("18446744073709551615ms1h"),
            Err(DurationError::UnitOrder)
        );
        assert_eq!(
            parse_millis("5124095576030h26m"),
            Err(DurationError::Overflow),
            "the sum overflows although each part fits"
        );
    }
}
