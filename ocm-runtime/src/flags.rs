//! Parsers for flag values that every binary reads the same way, so that `--resync-period=90`
//! and `RESYNC_PERIOD=1m30s` mean the same thing to the scheduler, the hub and the agent.
//!
//! Use them as clap value parsers:
//!
//! ```
//! use std::time::Duration;
//! use clap::Parser;
//!
//! #[derive(Parser)]
//! struct Cli {
//!     /// How often to resync (`15s`, `1m`, `1500ms`; a bare number is seconds).
//!     #[arg(long, default_value = "10m", value_parser = ocm_runtime::flags::parse_duration)]
//!     resync_period: Duration,
//! }
//!
//! let cli = Cli::try_parse_from(["x", "--resync-period=90"]).unwrap();
//! assert_eq!(cli.resync_period, Duration::from_secs(90));
//! ```

use std::time::Duration;

use thiserror::Error;

/// Why a duration flag was refused. The message names the value as given, so that clap's
/// error says which flag and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DurationError {
    /// A number of seconds that is negative, infinite or NaN.
    #[error("{0:?} is not a duration")]
    NotADuration(String),
    /// A number of seconds too large for a [`Duration`].
    #[error("{0:?} is too long a duration")]
    TooLong(String),
    /// Neither a number nor a duration jiff reads (`15s`, `1h2m`, `PT15S`).
    #[error("{input:?} is not a duration (like 15s, 1m, 500ms): {reason}")]
    Syntax { input: String, reason: String },
    /// A duration below zero (`-1s`).
    #[error("{0:?} is negative")]
    Negative(String),
}

/// A duration flag: `15s`, `1m30s`, `500ms`, ISO 8601 (`PT15S`), or a bare number of seconds
/// (`90`, `0.5`), surrounding blanks ignored. Negative durations are refused: no flag of
/// ours means "before now".
///
/// The units are jiff's friendly format (`s`, `m`, `h`, `ms`, `us`, `ns`, also spelt out), a
/// superset of Go's `time.ParseDuration` for non-negative values, so the flags upstream's Go
/// components take (`--leader-election-lease-duration=137s`) read the same here.
pub fn parse_duration(s: &str) -> Result<Duration, DurationError> {
    let s = s.trim();
    let signed = match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs >= 0.0 => {
            return Duration::try_from_secs_f64(secs)
                .map_err(|_| DurationError::TooLong(s.to_owned()));
        }
        Ok(_) => return Err(DurationError::NotADuration(s.to_owned())),
        Err(_) => s
            .parse::<jiff::SignedDuration>()
            .map_err(|e| DurationError::Syntax {
                input: s.to_owned(),
                reason: e.to_string(),
            })?,
    };
    Duration::try_from(signed).map_err(|_| DurationError::Negative(s.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration(" 90 "), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("PT2S"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
    }

    /// The messages are what clap prints after the flag's name: they stay as they were when
    /// the parser returned plain strings.
    #[test]
    fn refusals_say_why() {
        let e = |s| parse_duration(s).map(|_| ()).map_err(|e| e.to_string());
        assert_eq!(e("-1s"), Err(r#""-1s" is negative"#.to_owned()));
        assert_eq!(e("-1"), Err(r#""-1" is not a duration"#.to_owned()));
        assert_eq!(e("NaN"), Err(r#""NaN" is not a duration"#.to_owned()));
        assert_eq!(e("inf"), Err(r#""inf" is not a duration"#.to_owned()));
        assert_eq!(
            e("1e30"),
            Err(r#""1e30" is too long a duration"#.to_owned())
        );
        let soon = e("soon").unwrap_err();
        assert!(
            soon.starts_with(r#""soon" is not a duration (like 15s, 1m, 500ms): "#),
            "{soon}"
        );
        assert!(matches!(
            parse_duration(""),
            Err(DurationError::Syntax { .. })
        ));
    }
}
