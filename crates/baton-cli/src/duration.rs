//! Durations on the command line: `250ms`, `5s`, `1.5s`, `2m`, `1h`.

use std::time::Duration;

/// Parses a duration: a non-negative number followed by `ms`, `s`, `m` or
/// `h` (decimals allowed: `1.5s`), or anything humantime accepts (`1m30s`,
/// `1d`, `2h 15m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match parse_simple(s) {
        Ok(d) => Ok(d),
        Err(e) => humantime::parse_duration(s.trim()).map_err(|_| e),
    }
}

fn parse_simple(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.starts_with('-') {
        return Err(format!("'{s}' is negative: a duration must be 0 or more"));
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("'{s}' has no unit: write e.g. 250ms, 5s, 2m or 1h"))?;
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!(
            "'{s}' is not a duration: write a non-negative number and a unit, e.g. 250ms, 5s, 2m or 1h"
        ));
    }
    let value: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a duration: bad number '{num}'"))?;
    let secs_per_unit = match unit {
        "ms" => 0.001,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "'{s}' has an unknown unit '{unit}': use ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(value * secs_per_unit).map_err(|_| format!("'{s}' is out of range"))
}

/// Like [`parse_duration`], but zero is refused: a timeout or a TTL of zero
/// would end what it limits before it starts.
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("'{s}' is zero: this limit must be more than 0"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86400)));
        assert_eq!(parse_duration("2h 15m"), Ok(Duration::from_secs(8100)));
    }

    #[test]
    fn positive_durations_refuse_zero() {
        assert!(parse_positive_duration("0s").is_err());
        assert!(parse_positive_duration("0ms").is_err());
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
    }

    #[test]
    fn rejects_negative_garbage_and_missing_units() {
        for bad in [
            "-5s",
            "5",
            "abc",
            "5x",
            "",
            "s",
            "1..2s",
            "1e400h",
            "5 parsecs",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
