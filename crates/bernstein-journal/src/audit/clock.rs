//! Record timestamps and the UTC day that names a record's segment.
//!
//! The reference takes one clock reading per append and derives both the record's `timestamp`
//! (`%Y-%m-%dT%H:%M:%S.%fZ`, UTC, six fractional digits) and the daily segment name
//! (`<YYYY-MM-DD>.jsonl`) from it, so a record can never be filed under a day its own timestamp
//! disagrees with. The civil-date conversion is done here, without a date crate.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::{Error, Result};

const MICROS_PER_SECOND: i64 = 1_000_000;
const SECONDS_PER_DAY: i64 = 86_400;

/// Earliest representable instant: 1970-01-01T00:00:00Z.
const MIN_MICROS: i64 = 0;
/// Latest representable instant: 9999-12-31T23:59:59.999999Z (Python's `datetime.max`).
const MAX_MICROS: i64 = 253_402_300_799_999_999;

/// One UTC clock reading with microsecond resolution, within 1970..=9999.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    unix_micros: i64,
}

impl Timestamp {
    /// The current time. A clock before 1970 reads as the epoch.
    pub fn now() -> Timestamp {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(MAX_MICROS));
        Timestamp {
            unix_micros: micros.clamp(MIN_MICROS, MAX_MICROS),
        }
    }

    /// The instant `micros` microseconds after 1970-01-01T00:00:00Z.
    pub fn from_unix_micros(micros: i64) -> Result<Timestamp> {
        if (MIN_MICROS..=MAX_MICROS).contains(&micros) {
            Ok(Timestamp {
                unix_micros: micros,
            })
        } else {
            Err(Error::Encode(format!(
                "timestamp {micros} µs since the epoch is outside 1970-01-01..=9999-12-31"
            )))
        }
    }

    /// Parses the record form `YYYY-MM-DDTHH:MM:SS.ffffffZ` exactly (the inverse of
    /// [`Timestamp::to_record_string`]).
    pub fn parse(text: &str) -> Option<Timestamp> {
        let b = text.as_bytes();
        if b.len() != 27
            || b[4] != b'-'
            || b[7] != b'-'
            || b[10] != b'T'
            || b[13] != b':'
            || b[16] != b':'
            || b[19] != b'.'
            || b[26] != b'Z'
        {
            return None;
        }
        let num = |range: std::ops::Range<usize>| -> Option<i64> {
            let digits = &b[range];
            digits.iter().all(u8::is_ascii_digit).then(|| {
                digits
                    .iter()
                    .fold(0i64, |acc, d| acc * 10 + i64::from(d - b'0'))
            })
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second, micros) =
            (num(11..13)?, num(14..16)?, num(17..19)?, num(20..26)?);
        if !(1..=12).contains(&month)
            || day < 1
            || day > days_in_month(year, month)
            || hour > 23
            || minute > 59
            || second > 59
        {
            return None;
        }
        let seconds = days_from_civil(year, month, day) * SECONDS_PER_DAY
            + hour * 3600
            + minute * 60
            + second;
        Timestamp::from_unix_micros(seconds * MICROS_PER_SECOND + micros).ok()
    }

    /// Microseconds since 1970-01-01T00:00:00Z.
    pub fn unix_micros(&self) -> i64 {
        self.unix_micros
    }

    /// The record's `timestamp` field: `%Y-%m-%dT%H:%M:%S.%fZ`.
    pub fn to_record_string(&self) -> String {
        let (year, month, day) = self.civil_date();
        let second_of_day = self
            .unix_micros
            .div_euclid(MICROS_PER_SECOND)
            .rem_euclid(SECONDS_PER_DAY);
        let micros = self.unix_micros.rem_euclid(MICROS_PER_SECOND);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
            second_of_day / 3600,
            second_of_day / 60 % 60,
            second_of_day % 60
        )
    }

    /// The UTC day, `YYYY-MM-DD`.
    pub fn day(&self) -> String {
        let (year, month, day) = self.civil_date();
        format!("{year:04}-{month:02}-{day:02}")
    }

    /// The name of the daily segment a record stamped with this time goes to.
    pub fn segment_name(&self) -> String {
        format!("{}.jsonl", self.day())
    }

    fn civil_date(&self) -> (i64, i64, i64) {
        civil_from_days(
            self.unix_micros
                .div_euclid(MICROS_PER_SECOND * SECONDS_PER_DAY),
        )
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_record_string())
    }
}

/// Whether `year` is a Gregorian leap year.
pub(crate) fn is_leap_year(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Number of days in `month` (1..=12) of `year`.
pub(crate) fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if is_leap_year(year) => 29,
        2 => 28,
        _ => 0,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (inverse of
/// [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(micros: i64, expect: &str) {
        let ts = Timestamp::from_unix_micros(micros).unwrap();
        assert_eq!(ts.to_record_string(), expect);
        assert_eq!(ts.day(), &expect[..10]);
        assert_eq!(Timestamp::parse(expect), Some(ts));
    }

    #[test]
    fn known_instants_format_like_python_strftime() {
        check(0, "1970-01-01T00:00:00.000000Z");
        // Values checked with CPython: datetime.fromtimestamp(s, UTC).strftime(...).
        check(1_782_943_141_000_000, "2026-07-01T21:59:01.000000Z");
        check(1_783_123_141_000_001, "2026-07-03T23:59:01.000001Z");
        check(951_782_400_123_456, "2000-02-29T00:00:00.123456Z");
        check(4_107_542_399_999_999, "2100-02-28T23:59:59.999999Z");
        check(MAX_MICROS, "9999-12-31T23:59:59.999999Z");
    }

    #[test]
    fn out_of_range_and_malformed_inputs_are_refused() {
        assert!(Timestamp::from_unix_micros(-1).is_err());
        assert!(Timestamp::from_unix_micros(MAX_MICROS + 1).is_err());
        for bad in [
            "",
            "2026-02-29T00:00:00.000000Z",
            "2026-13-01T00:00:00.000000Z",
            "2026-01-01T24:00:00.000000Z",
            "2026-01-01T00:00:00.000000",
            "2026-01-01 00:00:00.000000Z",
            "2026-01-01T00:00:00.00000xZ",
        ] {
            assert_eq!(Timestamp::parse(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn civil_conversion_round_trips(days in 0i64..2_932_896) {
            let (y, m, d) = civil_from_days(days);
            prop_assert!((1..=12).contains(&m));
            prop_assert!(d >= 1 && d <= days_in_month(y, m));
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }

        #[test]
        fn record_strings_round_trip(micros in MIN_MICROS..=MAX_MICROS) {
            let ts = Timestamp::from_unix_micros(micros).unwrap();
            prop_assert_eq!(Timestamp::parse(&ts.to_record_string()), Some(ts));
        }
    }
}
