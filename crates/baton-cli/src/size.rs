//! Sizes on the command line and in messages: `4096`, `64KiB`, `256MiB`,
//! `1GiB` in, `512.0 KiB` out. Units are binary (1 KiB = 1024 bytes); `K`,
//! `M` and `G` mean the same as `KiB`, `MiB` and `GiB`.

/// Parses a byte count: digits, then an optional unit `B`, `K`/`KiB`,
/// `M`/`MiB`, `G`/`GiB` (either case, a space allowed before it).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || {
        format!("'{s}' is not a size: write a number of bytes, optionally with a unit, e.g. 4096, 64KiB, 256MiB or 1GiB")
    };
    if num.is_empty() {
        return Err(bad());
    }
    let value: u64 = num.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        _ => return Err(bad()),
    };
    value
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// A byte count in the largest unit (B, KiB, MiB, GiB, TiB) that keeps it
/// at 1 or more: `512 B`, `500.0 KiB`, `3.2 GiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("1 GiB"), Ok(1 << 30));
        assert_eq!(parse_size("0"), Ok(0));
        for bad in [
            "",
            "lots",
            "MiB",
            "-1",
            "1.5MiB",
            "1TB",
            "99999999999999999999GiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sizes_print_in_a_unit_that_fits() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(512 << 10), "512.0 KiB");
        assert_eq!(human_size(3 << 20), "3.0 MiB");
        assert_eq!(human_size(5 << 30), "5.0 GiB");
        assert_eq!(human_size(2 << 40), "2.0 TiB");
    }
}
