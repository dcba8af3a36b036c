//! A connection URL fit to be shown: its password hidden. Used wherever a
//! database URL reaches a message or a log (baton-pg's sessions, the job
//! store's setting), whether or not this build speaks PostgreSQL.

/// `url` with its password, if any, replaced by `***`: the one after the
/// user, and any `password=` option (`?password=...`, or a `key=value`
/// connection string given by mistake).
pub fn redact(url: &str) -> String {
    hide_password_options(&redact_userinfo(url))
}

fn redact_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(parts) => parts,
        None => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// Every `password=VALUE` (any case) with VALUE, up to `&` or white
/// space, replaced by `***`.
fn hide_password_options(s: &str) -> String {
    const KEY: &str = "password=";
    let lower = s.to_ascii_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut at = 0;
    while let Some(found) = lower[at..].find(KEY) {
        let value = at + found + KEY.len();
        out.push_str(&s[at..value]);
        out.push_str("***");
        at = s[value..]
            .find(|c: char| c == '&' || c.is_whitespace())
            .map_or(s.len(), |end| value + end);
    }
    out.push_str(&s[at..]);
    out
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact("postgres://h/db"), "postgres://h/db");
        assert_eq!(
            redact("postgres://u@h/db?sslmode=disable&password=secret&x=1"),
            "postgres://u@h/db?sslmode=disable&password=***&x=1"
        );
        assert_eq!(
            redact("host=h PASSWORD=secret dbname=d"),
            "host=h PASSWORD=*** dbname=d"
        );
    }
}
