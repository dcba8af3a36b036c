//! The ordering key of a group run or a job (`--order`, `BATON_ORDER`, a
//! job's `order`): which event a run answers, so that in modes supersede
//! and coalesce the newest event wins whatever order the runs arrive in.

use std::cmp::Ordering;
use std::fmt;

/// What a key counts in: keys of one group must be of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OrderKind {
    /// A whole number (an event id, a counter, a sequence number).
    Integer,
    /// An RFC 3339 time (an event's timestamp).
    Time,
}

impl OrderKind {
    /// The kind's name, as stored (`integer`, `time`).
    pub fn as_str(self) -> &'static str {
        match self {
            OrderKind::Integer => "integer",
            OrderKind::Time => "time",
        }
    }

    /// The kind named `s`.
    pub fn parse(s: &str) -> Option<OrderKind> {
        match s {
            "integer" => Some(OrderKind::Integer),
            "time" => Some(OrderKind::Time),
            _ => None,
        }
    }
}

/// An ordering key: an integer, or an RFC 3339 time (compared as the
/// instant it names, whatever its offset, to the microsecond). Keys of
/// different kinds are not comparable ([`Order::compare`] says so).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Order {
    kind: OrderKind,
    /// The integer, or the time in microseconds since the Unix epoch (UTC).
    value: i64,
    /// The key as given, for messages.
    text: String,
}

/// Why a string is not an ordering key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderError {
    /// The value refused.
    pub value: String,
}

impl fmt::Display for OrderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid order key '{}': expected an integer (e.g. 42) or an RFC 3339 time (e.g. 2026-11-28T14:05:00Z)",
            self.value
        )
    }
}

impl std::error::Error for OrderError {}

impl Order {
    /// Parses `s`: an optionally signed integer that fits in 64 bits, or an
    /// RFC 3339 time (`2026-11-28T14:05:00Z`, `2026-11-28T15:05:00.25+01:00`;
    /// a space or `t` for the `T`, `z` for the `Z`; digits beyond the
    /// microsecond are dropped, so keys that differ only there are equal).
    ///
    /// # Errors
    ///
    /// [`OrderError`] naming `s`.
    pub fn parse(s: &str) -> Result<Order, OrderError> {
        let t = s;
        let err = || OrderError {
            value: s.to_string(),
        };
        let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
        if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            let value = t.parse::<i64>().map_err(|_| err())?;
            return Ok(Order {
                kind: OrderKind::Integer,
                value,
                text: t.to_string(),
            });
        }
        let value = rfc3339_micros(t).ok_or_else(err)?;
        Ok(Order {
            kind: OrderKind::Time,
            value,
            text: t.to_string(),
        })
    }

    /// A key from what [`Order::kind`], [`Order::value`] and
    /// [`Order::text`] gave (as a store keeps it).
    pub fn from_parts(kind: OrderKind, value: i64, text: impl Into<String>) -> Order {
        Order {
            kind,
            value,
            text: text.into(),
        }
    }

    /// Its kind.
    pub fn kind(&self) -> OrderKind {
        self.kind
    }

    /// The integer, or the time in microseconds since the Unix epoch.
    pub fn value(&self) -> i64 {
        self.value
    }

    /// The key as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How `self` compares to `other`; `None` when their kinds differ.
    pub fn compare(&self, other: &Order) -> Option<Ordering> {
        (self.kind == other.kind).then(|| self.value.cmp(&other.value))
    }
}

impl fmt::Display for Order {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` in microseconds since the epoch.
fn rfc3339_micros(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 {
        return None;
    }
    let num = |from: usize, len: usize| -> Option<i64> {
        let part = b.get(from..from + len)?;
        part.iter().all(u8::is_ascii_digit).then_some(())?;
        std::str::from_utf8(part).ok()?.parse().ok()
    };
    let sep = |at: usize, ok: &[u8]| b.get(at).is_some_and(|c| ok.contains(c));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (year, month, day) = (num(0, 4)?, num(5, 2)?, num(8, 2)?);
    let (hour, minute, second) = (num(11, 2)?, num(14, 2)?, num(17, 2)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    // A leap second (:60) counts as the first second of the next minute.
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut at = 19;
    let mut micros: i64 = 0;
    if b.get(at) == Some(&b'.') {
        at += 1;
        let start = at;
        while b.get(at).is_some_and(u8::is_ascii_digit) {
            at += 1;
        }
        let frac = &s[start..at];
        if frac.is_empty() {
            return None;
        }
        // Digits beyond the microsecond are dropped.
        let kept: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
        micros = kept.parse().ok()?;
    }
    let offset_s = match b.get(at..)? {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (num(at + 1, 2)?, num(at + 4, 2)?);
            if h > 23 || m > 59 {
                return None;
            }
            let off = h * 3600 + m * 60;
            if *sign == b'-' {
                -off
            } else {
                off
            }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s;
    secs.checked_mul(1_000_000)?.checked_add(micros)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Order {
        match Order::parse(s) {
            Ok(o) => o,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn integers_and_times_parse_and_compare() {
        assert_eq!(ok("42").value(), 42);
        assert_eq!(ok("-7").value(), -7);
        assert_eq!(ok("1970-01-01T00:00:00Z").value(), 0);
        assert_eq!(ok("1970-01-01T00:00:01.5Z").value(), 1_500_000);
        assert_eq!(ok("2000-03-01T00:00:00Z").value() / 1_000_000, 951_868_800);
        // Any year RFC 3339 can write.
        assert!(
            ok("0000-01-01T00:00:00Z").value() < ok("9999-12-31T23:59:60.999999999-23:59").value()
        );
        // The same instant, written in two offsets.
        assert_eq!(
            ok("2026-11-28T15:05:00+01:00").compare(&ok("2026-11-28T14:05:00Z")),
            Some(Ordering::Equal)
        );
        assert_eq!(
            ok("2026-11-28T14:05:00.001Z").compare(&ok("2026-11-28T14:05:00Z")),
            Some(Ordering::Greater)
        );
        assert_eq!(ok("9").compare(&ok("10")), Some(Ordering::Less));
        assert_eq!(ok("9").compare(&ok("2026-11-28T14:05:00Z")), None);
    }

    #[test]
    fn anything_else_is_refused_naming_the_value() {
        for bad in [
            "",
            "abc",
            "1.5",
            "99999999999999999999",
            "2026-11-28",
            "2026-11-28T14:05:00",
            "2026-02-30T00:00:00Z",
            "2026-11-28T24:00:00Z",
            "2026-11-28T14:05:00.Z",
            "2026-11-28T14:05:00+0100",
            " 5",
            "5\n",
        ] {
            let e = Order::parse(bad).err().map(|e| e.to_string());
            assert!(
                e.as_deref()
                    .is_some_and(|m| m.contains(&format!("'{bad}'"))),
                "{bad}: {e:?}"
            );
        }
    }
}
