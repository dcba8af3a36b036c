//! The checks every duration setting passes: parsed, whole milliseconds
//! (durations are kept in milliseconds: a shorter one would silently become
//! 0, which means "none" for a timeout), within bounds that no clock
//! overflows.

use std::time::Duration;

use super::ConfigError;

/// The longest duration any setting takes (ten years): longer ones are
/// refused at start rather than overflow a clock later.
pub const MAX_SETTING_DURATION: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

pub(super) fn duration(
    field: &str,
    value: Option<&str>,
    default: Duration,
) -> Result<Duration, ConfigError> {
    match value {
        None => Ok(default),
        Some(v) => {
            let d = humantime::parse_duration(v.trim()).map_err(|e| {
                ConfigError(format!(
                    "invalid {field} '{v}': {e} (use e.g. 30s, 15m, 1h)"
                ))
            })?;
            in_range(field, v, d, Duration::ZERO)
        }
    }
}

/// `d` if it is at least `min`, whole milliseconds or more (every duration
/// is kept in milliseconds: a shorter one would silently become 0) and at
/// most [`MAX_SETTING_DURATION`].
pub(super) fn in_range(
    field: &str,
    text: &str,
    d: Duration,
    min: Duration,
) -> Result<Duration, ConfigError> {
    if d < min {
        return Err(ConfigError(format!(
            "invalid {field} '{text}': it must be at least {}",
            humantime::format_duration(min)
        )));
    }
    if !d.is_zero() && d < Duration::from_millis(1) {
        return Err(ConfigError(format!(
            "invalid {field} '{text}': it must be 0 or at least 1ms"
        )));
    }
    if d > MAX_SETTING_DURATION {
        return Err(ConfigError(format!(
            "invalid {field} '{text}': it must be at most {}",
            humantime::format_duration(MAX_SETTING_DURATION)
        )));
    }
    Ok(d)
}

/// The shortest `job_ttl`: a finished job must stay long enough for the
/// client that waits for it (the chat route, `baton job submit --wait`) to
/// read it.
pub const MIN_JOB_TTL: Duration = Duration::from_secs(1);

/// `d`, unless it is zero (which would mean "no timeout" for a timeout).
pub(super) fn nonzero(field: &str, d: Duration) -> Result<Duration, ConfigError> {
    if d.is_zero() {
        return Err(ConfigError(format!(
            "invalid {field} 0: it must be at least 1ms"
        )));
    }
    Ok(d)
}
