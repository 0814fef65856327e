//! Dates for templates: `strftime_now` (Jinja), `date_string` (llama.cpp passes one), and Ollama's
//! `currentDate`/`yesterdayDate`. Times are UTC: the engine has no time-zone database, and a
//! server's clock is UTC more often than not. Tests pin the instant.

use std::time::{SystemTime, UNIX_EPOCH};

/// A calendar instant (UTC), split into the fields `strftime` needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DateTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    /// 0 = Monday.
    pub weekday: u32,
    /// 1-based day of the year.
    pub yday: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

impl DateTime {
    pub fn from_system_time(t: SystemTime) -> DateTime {
        let secs = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64),
        };
        DateTime::from_unix(secs)
    }

    pub fn from_unix(secs: i64) -> DateTime {
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400) as u32;
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
        const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
        let yday = CUM[month as usize - 1] + day + u32::from(leap && month > 2);
        DateTime {
            year,
            month,
            day,
            hour: rem / 3600,
            minute: rem / 60 % 60,
            second: rem % 60,
            // 1970-01-01 was a Thursday (3 when Monday is 0).
            weekday: (days + 3).rem_euclid(7) as u32,
            yday,
        }
    }

    /// Python/C `strftime` for the specifiers chat templates use; unknown ones are kept verbatim.
    pub fn strftime(&self, fmt: &str) -> String {
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            // glibc's `%-d` (no padding) is common in templates too.
            let mut spec = chars.next();
            let unpadded = spec == Some('-');
            if unpadded {
                spec = chars.next();
            }
            let num = |n: u32, w: usize| {
                if unpadded {
                    n.to_string()
                } else {
                    format!("{n:0w$}")
                }
            };
            match spec {
                Some('d') => out.push_str(&num(self.day, 2)),
                Some('e') => out.push_str(&format!("{:>2}", self.day)),
                Some('m') => out.push_str(&num(self.month, 2)),
                Some('Y') => out.push_str(&self.year.to_string()),
                Some('y') => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                Some('B') => out.push_str(MONTHS[self.month as usize - 1]),
                Some('b') | Some('h') => out.push_str(&MONTHS[self.month as usize - 1][..3]),
                Some('A') => out.push_str(DAYS[self.weekday as usize]),
                Some('a') => out.push_str(&DAYS[self.weekday as usize][..3]),
                Some('H') => out.push_str(&num(self.hour, 2)),
                Some('I') => out.push_str(&num((self.hour + 11) % 12 + 1, 2)),
                Some('M') => out.push_str(&num(self.minute, 2)),
                Some('S') => out.push_str(&num(self.second, 2)),
                Some('p') => out.push_str(if self.hour < 12 { "AM" } else { "PM" }),
                Some('j') => out.push_str(&num(self.yday, 3)),
                Some('F') => out.push_str(&format!("{}-{:02}-{:02}", self.year, self.month, self.day)),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    if unpadded {
                        out.push('-');
                    }
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_and_formats() {
        let t = DateTime::from_unix(0);
        assert_eq!((t.year, t.month, t.day, t.weekday, t.yday), (1970, 1, 1, 3, 1));
        // 2024-07-26 14:05:09 UTC, a Friday.
        let t = DateTime::from_unix(1_722_002_709);
        assert_eq!(t.strftime("%d %b %Y"), "26 Jul 2024");
        assert_eq!(
            t.strftime("%A %-d %B %y %H:%M:%S %I%p %j %%"),
            "Friday 26 July 24 14:05:09 02PM 208 %"
        );
        assert_eq!(t.strftime("%F"), "2024-07-26");
        let leap = DateTime::from_unix(951_782_400); // 2000-02-29
        assert_eq!((leap.month, leap.day, leap.yday), (2, 29, 60));
        let before = DateTime::from_unix(-86_400);
        assert_eq!((before.year, before.month, before.day), (1969, 12, 31));
    }
}
