//! `allowed_hosts` and `allowed_origins` as the configuration gives them,
//! checked (what [`crate::browser`] then accepts).

use super::ConfigError;

/// `allowed_hosts`, validated: `name` or `name:port`, no scheme or path.
///
/// # Errors
///
/// One line naming `allowed_hosts` and the bad entry.
pub fn check_hosts(entries: &[String]) -> Result<Vec<String>, ConfigError> {
    entries
        .iter()
        .map(|e| {
            let lower = e.trim().to_ascii_lowercase();
            let (name, port) = split_host(&lower);
            let bad_port = port.is_some_and(|p| p.parse::<u16>().is_err());
            if name.is_empty()
                || bad_port
                || lower.contains(['/', '@', ' ', '*'])
                || !lower.is_ascii()
            {
                return Err(ConfigError(format!(
                    "invalid allowed_hosts entry '{e}': use a host name or address, optionally with :PORT (e.g. \"agents.internal\" or \"agents.internal:443\")"
                )));
            }
            Ok(lower)
        })
        .collect()
}

/// `allowed_origins`, validated: `http(s)://host[:port]`, no path.
///
/// # Errors
///
/// One line naming `allowed_origins` and the bad entry.
pub fn check_origins(entries: &[String]) -> Result<Vec<String>, ConfigError> {
    entries
        .iter()
        .map(|e| {
            let lower = e.trim().trim_end_matches('/').to_ascii_lowercase();
            let rest = lower
                .strip_prefix("http://")
                .or_else(|| lower.strip_prefix("https://"));
            match rest {
                Some(h) if !h.is_empty() && !h.contains(['/', '@', ' ', '*']) => Ok(lower),
                _ => Err(ConfigError(format!(
                    "invalid allowed_origins entry '{e}': use scheme://host[:port], e.g. \"https://tools.internal\""
                ))),
            }
        })
        .collect()
}

/// `name` and `port` of `host[:port]` (`[v6]:port` included).
pub(crate) fn split_host(host: &str) -> (&str, Option<&str>) {
    if host.starts_with('[') {
        return match host.find(']') {
            Some(end) => {
                let rest = &host[end + 1..];
                (&host[..=end], rest.strip_prefix(':'))
            }
            None => (host, None),
        };
    }
    match host.rsplit_once(':') {
        Some((n, p)) => (n, Some(p)),
        None => (host, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_entries_are_checked() {
        assert!(check_hosts(&["http://x".into()]).is_err());
        assert!(check_hosts(&["x:99999".into()]).is_err());
        assert!(check_origins(&["tools.internal".into()]).is_err());
        assert!(check_origins(&["https://tools.internal/".into()]).is_ok());
    }
}
