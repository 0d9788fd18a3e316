//! UTC calendar fields of a time, for capture timestamps and file paths
//! (days-from-civil's inverse, Howard Hinnant's algorithm).

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utc {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub millis: u32,
    /// Whole seconds since the epoch.
    pub epoch_seconds: u64,
}

impl Utc {
    pub fn of(time: SystemTime) -> Utc {
        let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        let secs = since.as_secs() as i64;
        let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let year = yoe + era * 400 + i64::from(month <= 2);
        Utc {
            year,
            month,
            day,
            hour: (rest / 3600) as u32,
            minute: (rest % 3600 / 60) as u32,
            second: (rest % 60) as u32,
            millis: since.subsec_millis(),
            epoch_seconds: since.as_secs(),
        }
    }

    /// `2026-11-24T10:15:30Z`, as SageMaker's `inferenceTime` and CloudEvents' `time`.
    pub fn rfc3339(&self) -> String {
        format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }

    /// `2026/11/24/10`: the hour's directory, as Data Capture lays files out.
    pub fn hour_path(&self) -> String {
        format!("{:04}/{:02}/{:02}/{:02}", self.year, self.month, self.day, self.hour)
    }

    /// `20261124T101530`, for file names.
    pub fn compact(&self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}",
            self.year, self.month, self.day, self.hour, self.minute, self.second
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn calendar_fields_of_known_instants() {
        let at = |secs| Utc::of(UNIX_EPOCH + Duration::from_millis(secs));
        assert_eq!(at(0).rfc3339(), "1970-01-01T00:00:00Z");
        // 2024-02-29T23:59:59.123Z, a leap day.
        let leap = at(1_709_251_199_123);
        assert_eq!(leap.rfc3339(), "2024-02-29T23:59:59Z");
        assert_eq!(leap.millis, 123);
        assert_eq!(at(1_795_515_330_000).hour_path(), "2026/11/24/10");
        assert_eq!(at(1_795_515_330_000).compact(), "20261124T101530");
    }
}
