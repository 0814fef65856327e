//! Human-readable numbers, sizes, times and durations, and the borderless tables, all formatted
//! exactly as Ollama's CLI formats them (`format/`, `api.Metrics.Summary`, tablewriter with
//! no border and a 4-space gap) so that output reads and parses the same.

use std::fmt::Write;

use time::OffsetDateTime;
use unicode_width::UnicodeWidthStr;

use crate::client::api::Metrics;

/// Decimal sizes: `512 B`, `1.5 KB`, `2.0 GB`, `2 GB`, `42 GB` (Ollama's `HumanBytes`: one
/// decimal below 10 unless the value is whole, none from 10 up).
pub fn human_bytes(b: i64) -> String {
    const UNITS: [(i64, &str); 4] = [
        (1_000_000_000_000, "TB"),
        (1_000_000_000, "GB"),
        (1_000_000, "MB"),
        (1_000, "KB"),
    ];
    let Some(&(div, unit)) = UNITS.iter().find(|(div, _)| b >= *div) else {
        return format!("{b} B");
    };
    let value = b as f64 / div as f64;
    if value >= 10.0 || value == value.trunc() {
        format!("{} {unit}", value as i64)
    } else {
        format!("{value:.1} {unit}")
    }
}

/// Parameter counts: `268.10M`, `8B`, `1.5B`, `30K` (Ollama's `HumanNumber`), as the registry
/// writes them into a model's config.
pub use registry::human_number;

/// An approximate duration: `Less than a second`, `1 second`, `About a minute`, `19 hours`,
/// `3 weeks` (Ollama's `humanDuration`).
fn human_duration(seconds: f64) -> String {
    let s = seconds as i64;
    if s < 1 {
        return "Less than a second".into();
    }
    if s == 1 {
        return "1 second".into();
    }
    if s < 60 {
        return format!("{s} seconds");
    }
    let minutes = s / 60;
    if minutes == 1 {
        return "About a minute".into();
    }
    if minutes < 60 {
        return format!("{minutes} minutes");
    }
    let hours = (seconds / 3600.0).round() as i64;
    match hours {
        1 => "About an hour".into(),
        h if h < 48 => format!("{h} hours"),
        h if h < 24 * 7 * 2 => format!("{} days", h / 24),
        h if h < 24 * 30 * 2 => format!("{} weeks", h / 24 / 7),
        h if h < 24 * 365 * 2 => format!("{} months", h / 24 / 30),
        _ => format!("{} years", (seconds / 3600.0) as i64 / 24 / 365),
    }
}

/// A time relative to `now`: `2 minutes ago`, `4 minutes from now`, `Forever` (more than 20 years
/// ahead, how the API says "never expires"), or `zero` for an absent time (Ollama's `HumanTime`).
pub fn human_time(t: Option<OffsetDateTime>, now: OffsetDateTime, zero: &str) -> String {
    let Some(t) = t else { return zero.to_string() };
    let delta = (now - t).as_seconds_f64();
    if delta / 3600.0 / 24.0 / 365.0 < -20.0 {
        "Forever".into()
    } else if delta < 0.0 {
        format!("{} from now", human_duration(-delta))
    } else {
        format!("{} ago", human_duration(delta))
    }
}

/// Parses an API timestamp (RFC 3339, Go's nanosecond fractions included). Go's zero time
/// (`0001-01-01T00:00:00Z`), an empty string or garbage count as absent.
pub fn parse_time(s: &str) -> Option<OffsetDateTime> {
    let t = OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    (t.year() > 1).then_some(t)
}

/// A duration in nanoseconds as Go's `time.Duration.String` writes it: `1.234567891s`,
/// `523.4ms`, `45.1µs`, `2m3.5s`, `1h0m0s`, `0s`.
pub fn go_duration(ns: i64) -> String {
    if ns == 0 {
        return "0s".into();
    }
    let neg = ns < 0;
    let u = ns.unsigned_abs();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if u < 1_000_000_000 {
        // Below a second: the largest unit that keeps the integer part non-zero.
        let (div, unit) = if u < 1_000 {
            (1, "ns")
        } else if u < 1_000_000 {
            (1_000, "µs")
        } else {
            (1_000_000, "ms")
        };
        out.push_str(&fraction(u, div));
        out.push_str(unit);
        return out;
    }
    let hours = u / 3_600_000_000_000;
    let rem = u % 3_600_000_000_000;
    let minutes = rem / 60_000_000_000;
    let secs = rem % 60_000_000_000;
    if hours > 0 {
        let _ = write!(out, "{hours}h");
    }
    if hours > 0 || minutes > 0 {
        let _ = write!(out, "{minutes}m");
    }
    out.push_str(&fraction(secs, 1_000_000_000));
    out.push('s');
    out
}

/// Parses a Go duration (`5m`, `1h30m`, `1.5s`, `-1m`, `0`), as Go's `time.ParseDuration`, into
/// nanoseconds.
pub fn parse_go_duration(s: &str) -> Result<i64, String> {
    let bad = || format!("invalid duration {s:?} (examples: 30s, 5m, 1h30m, 0, -1)");
    let (neg, mut rest) = match s.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(bad());
    }
    let mut total: f64 = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(num_len);
        if num.is_empty() || num == "." {
            return Err(bad());
        }
        let value: f64 = num.parse().map_err(|_| bad())?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let scale = match unit {
            "ns" => 1.0,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = tail;
    }
    if total > i64::MAX as f64 {
        return Err(bad());
    }
    let ns = total as i64;
    Ok(if neg { -ns } else { ns })
}

/// `v / div` with the fractional digits Go prints: all significant ones, no trailing zeros.
fn fraction(v: u64, div: u64) -> String {
    let int = v / div;
    let frac = v % div;
    if frac == 0 {
        return int.to_string();
    }
    let digits = div.ilog10() as usize;
    let f = format!("{frac:0digits$}");
    format!("{int}.{}", f.trim_end_matches('0'))
}

/// A rendering of the stats block `--verbose` and `/set verbose` print after an answer, line for
/// line as Ollama's `Metrics.Summary` (absent figures are skipped).
pub fn summary(m: &Metrics) -> String {
    let mut s = String::new();
    let rate = |count: i64, ns: i64| count as f64 / (ns as f64 / 1e9);
    if m.total_duration > 0 {
        let _ = writeln!(s, "total duration:       {}", go_duration(m.total_duration));
    }
    if m.load_duration > 0 {
        let _ = writeln!(s, "load duration:        {}", go_duration(m.load_duration));
    }
    if m.prompt_eval_count > 0 {
        let _ = writeln!(s, "prompt eval count:    {} token(s)", m.prompt_eval_count);
    }
    if m.prompt_eval_duration > 0 {
        let _ = writeln!(s, "prompt eval duration: {}", go_duration(m.prompt_eval_duration));
        let _ = writeln!(
            s,
            "prompt eval rate:     {:.2} tokens/s",
            rate(m.prompt_eval_count, m.prompt_eval_duration)
        );
    }
    if m.eval_count > 0 {
        let _ = writeln!(s, "eval count:           {} token(s)", m.eval_count);
    }
    if m.eval_duration > 0 {
        let _ = writeln!(s, "eval duration:        {}", go_duration(m.eval_duration));
        let _ = writeln!(
            s,
            "eval rate:            {:.2} tokens/s",
            rate(m.eval_count, m.eval_duration)
        );
    }
    s
}

/// Rows as left-aligned columns separated by four spaces, without borders or trailing blanks
/// (Ollama's tablewriter settings). A leading empty cell indents a row, as in `show`'s sections.
pub fn table(rows: &[Vec<String>]) -> String {
    let ncols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; ncols];
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.width());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("    ");
            }
            line.push_str(cell);
            if i + 1 < row.len() {
                line.extend(std::iter::repeat_n(' ', widths[i] - cell.width()));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn bytes_as_ollama() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(1000), "1 KB");
        assert_eq!(human_bytes(1500), "1.5 KB");
        assert_eq!(human_bytes(2_019_377_376), "2.0 GB");
        assert_eq!(human_bytes(2_000_000_000), "2 GB");
        assert_eq!(human_bytes(4_661_224_676), "4.7 GB");
        assert_eq!(human_bytes(42_000_000_000), "42 GB");
        assert_eq!(human_bytes(253_000_000), "253 MB");
        assert_eq!(human_bytes(9_600_000_000), "9.6 GB");
        assert_eq!(human_bytes(3_000_000_000_000), "3 TB");
    }

    #[test]
    fn numbers_as_ollama() {
        assert_eq!(human_number(268_098_176), "268.10M");
        assert_eq!(human_number(8_000_000_000), "8B");
        assert_eq!(human_number(1_500_000_000), "1.5B");
        assert_eq!(human_number(7_000_000), "7M");
        assert_eq!(human_number(30_400), "30K");
        assert_eq!(human_number(999), "999");
    }

    #[test]
    fn relative_times() {
        let now = datetime!(2025-06-01 12:00:00 UTC);
        let ago = |secs: i64| human_time(Some(now - time::Duration::seconds(secs)), now, "Never");
        let ahead = |secs: i64| human_time(Some(now + time::Duration::seconds(secs)), now, "Never");
        assert_eq!(ago(0), "Less than a second ago");
        assert_eq!(ago(1), "1 second ago");
        assert_eq!(ago(45), "45 seconds ago");
        assert_eq!(ago(90), "About a minute ago");
        assert_eq!(ago(120), "2 minutes ago");
        assert_eq!(ago(3600), "About an hour ago");
        assert_eq!(ago(19 * 3600), "19 hours ago");
        assert_eq!(ago(3 * 86400), "3 days ago");
        assert_eq!(ago(21 * 86400), "3 weeks ago");
        assert_eq!(ago(90 * 86400), "3 months ago");
        assert_eq!(ago(3 * 365 * 86400), "3 years ago");
        assert_eq!(ahead(4 * 60 + 30), "4 minutes from now");
        assert_eq!(
            human_time(parse_time("2318-01-01T00:00:00Z"), now, "Never"),
            "Forever"
        );
        assert_eq!(
            human_time(parse_time("0001-01-01T00:00:00Z"), now, "Never"),
            "Never"
        );
        assert_eq!(human_time(None, now, "Never"), "Never");
    }

    #[test]
    fn timestamps_parse_with_go_fractions_and_offsets() {
        let t = parse_time("2025-06-01T12:00:00.123456789Z").unwrap();
        assert_eq!(t.nanosecond(), 123_456_789);
        let t = parse_time("2025-06-01T14:00:00+02:00").unwrap();
        assert_eq!(t, datetime!(2025-06-01 12:00:00 UTC));
        assert!(parse_time("yesterday").is_none());
        assert!(parse_time("").is_none());
    }

    #[test]
    fn durations_as_go() {
        assert_eq!(go_duration(0), "0s");
        assert_eq!(go_duration(999), "999ns");
        assert_eq!(go_duration(45_100), "45.1µs");
        assert_eq!(go_duration(523_400_000), "523.4ms");
        assert_eq!(go_duration(12_000_000), "12ms");
        assert_eq!(go_duration(1_234_567_891), "1.234567891s");
        assert_eq!(go_duration(2_000_000_000), "2s");
        assert_eq!(go_duration(123_500_000_000), "2m3.5s");
        assert_eq!(go_duration(3_600_000_000_000), "1h0m0s");
        assert_eq!(go_duration(-1_500_000_000), "-1.5s");
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_go_duration("5m"), Ok(300_000_000_000));
        assert_eq!(parse_go_duration("1h30m"), Ok(5_400_000_000_000));
        assert_eq!(parse_go_duration("1.5s"), Ok(1_500_000_000));
        assert_eq!(parse_go_duration("250ms"), Ok(250_000_000));
        assert_eq!(parse_go_duration("10\u{b5}s"), Ok(10_000));
        assert_eq!(parse_go_duration("-1m"), Ok(-60_000_000_000));
        assert_eq!(parse_go_duration("0"), Ok(0));
        for bad in ["", "5", "m", "5x", "1.2.3s", "--1s", "3600"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn summary_block() {
        let m = Metrics {
            total_duration: 1_234_567_891,
            load_duration: 12_000_000,
            prompt_eval_count: 26,
            prompt_eval_duration: 200_000_000,
            eval_count: 100,
            eval_duration: 1_000_000_000,
        };
        assert_eq!(
            summary(&m),
            "total duration:       1.234567891s\n\
             load duration:        12ms\n\
             prompt eval count:    26 token(s)\n\
             prompt eval duration: 200ms\n\
             prompt eval rate:     130.00 tokens/s\n\
             eval count:           100 token(s)\n\
             eval duration:        1s\n\
             eval rate:            100.00 tokens/s\n"
        );
        assert_eq!(summary(&Metrics::default()), "");
    }

    #[test]
    fn tables_are_left_aligned_with_four_spaces() {
        let rows = vec![
            vec!["NAME".into(), "ID".into(), "SIZE".into(), "MODIFIED".into()],
            vec![
                "gemma3:latest".into(),
                "a2af6cc3eb7f".into(),
                "253 MB".into(),
                "2 minutes ago".into(),
            ],
            vec![
                "x:1".into(),
                "0123456789ab".into(),
                "2.0 GB".into(),
                "3 weeks ago".into(),
            ],
        ];
        assert_eq!(
            table(&rows),
            "NAME             ID              SIZE      MODIFIED\n\
             gemma3:latest    a2af6cc3eb7f    253 MB    2 minutes ago\n\
             x:1              0123456789ab    2.0 GB    3 weeks ago\n"
        );
        let indented = vec![vec![String::new(), "architecture".into(), "gemma3".into()]];
        assert_eq!(table(&indented), "    architecture    gemma3\n");
    }
}
