//! The rollout strategy as written in the ClusterManagementAddOn, parsed and validated
//! up front (Go durations, percentages).

use super::*;

/// A count or a percentage of clusters (`maxFailures`, `maxConcurrency`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    Count(i32),
    Percent(f64),
}

impl Default for Threshold {
    /// Go's zero `IntOrString`: what an unset field means.
    fn default() -> Threshold {
        Threshold::Count(0)
    }
}

impl Threshold {
    /// Upstream's `calculateRolloutSize`: the portion of `total`, or `default` when that is not
    /// in `1..=total`.
    pub fn of(self, total: usize, default: usize) -> usize {
        let length = match self {
            Threshold::Count(n) => i64::from(n),
            // Saturating float-to-int; NaN is 0, both then fall back like Go's overflow does.
            Threshold::Percent(p) => (p / 100.0 * total as f64).ceil() as i64,
        };
        match usize::try_from(length) {
            Ok(length) if length > 0 && length <= total => length,
            _ => default,
        }
    }
}

/// A mandatory decision group: by name if it has one, else by index (as upstream).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GroupSelector {
    Name(String),
    Index(i32),
}

impl From<&MandatoryDecisionGroup> for GroupSelector {
    fn from(g: &MandatoryDecisionGroup) -> GroupSelector {
        if g.group_name.is_empty() {
            GroupSelector::Index(g.group_index)
        } else {
            GroupSelector::Name(g.group_name.clone())
        }
    }
}

/// The timing and failure tolerance of the progressive types.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Limits {
    /// Soak time after success.
    pub min_success_time: Duration,
    /// `None`: wait forever.
    pub progress_deadline: Option<Duration>,
    pub max_failures: Threshold,
}

/// A parsed, validated strategy.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// Everything at once (minSuccessTime and maxFailures are ignored, as upstream).
    All { progress_deadline: Option<Duration> },
    /// Cluster by cluster, `max_concurrency` at a time, after the mandatory groups.
    Progressive {
        limits: Limits,
        mandatory: Vec<GroupSelector>,
        max_concurrency: Threshold,
    },
    /// Group by group, after the mandatory groups.
    ProgressivePerGroup {
        limits: Limits,
        mandatory: Vec<GroupSelector>,
    },
}

/// The field names errors report, per rollout type.
pub(super) struct Fields {
    pub(super) min_success_time: &'static str,
    pub(super) progress_deadline: &'static str,
    pub(super) max_failures: &'static str,
}

pub(super) const ALL_DEADLINE_FIELD: &str = "rolloutStrategy.all.progressDeadline";
pub(super) const PROGRESSIVE_FIELDS: Fields = Fields {
    min_success_time: "rolloutStrategy.progressive.minSuccessTime",
    progress_deadline: "rolloutStrategy.progressive.progressDeadline",
    max_failures: "rolloutStrategy.progressive.maxFailures",
};
pub(super) const PER_GROUP_FIELDS: Fields = Fields {
    min_success_time: "rolloutStrategy.progressivePerGroup.minSuccessTime",
    progress_deadline: "rolloutStrategy.progressivePerGroup.progressDeadline",
    max_failures: "rolloutStrategy.progressivePerGroup.maxFailures",
};
pub(super) const MAX_CONCURRENCY_FIELD: &str = "rolloutStrategy.progressive.maxConcurrency";
pub(super) const CLUSTERS_PER_GROUP_FIELD: &str =
    "placement.spec.decisionStrategy.groupStrategy.clustersPerDecisionGroup";

impl Strategy {
    pub fn parse(s: &RolloutStrategy) -> Result<Strategy, RolloutError> {
        match s.type_.as_str() {
            "All" => {
                let config = s.all.as_ref().map(|a| &a.rollout_config);
                let deadline = config.map_or("", |c| c.progress_deadline.as_str());
                Ok(Strategy::All {
                    progress_deadline: parse_timeout(deadline, ALL_DEADLINE_FIELD)?,
                })
            }
            "Progressive" => {
                let p = s.progressive.clone().unwrap_or_default();
                Ok(Strategy::Progressive {
                    limits: parse_limits(&p.rollout_config, &PROGRESSIVE_FIELDS)?,
                    mandatory: p.mandatory_decision_groups.iter().map(Into::into).collect(),
                    max_concurrency: parse_threshold(
                        p.max_concurrency.as_ref(),
                        MAX_CONCURRENCY_FIELD,
                    )?,
                })
            }
            "ProgressivePerGroup" => {
                let p = s.progressive_per_group.clone().unwrap_or_default();
                Ok(Strategy::ProgressivePerGroup {
                    limits: parse_limits(&p.rollout_config, &PER_GROUP_FIELDS)?,
                    mandatory: p.mandatory_decision_groups.iter().map(Into::into).collect(),
                })
            }
            other => Err(RolloutError::UnknownType(other.to_owned())),
        }
    }

    /// [`Strategy::parse`] with ocm's add-on manager defaulting: a Progressive strategy without
    /// `maxConcurrency` (unset, `0` or `""`) takes the placement's `clustersPerDecisionGroup`.
    pub fn parse_for_placement(
        s: &RolloutStrategy,
        clusters_per_decision_group: Option<&IntOrString>,
    ) -> Result<Strategy, RolloutError> {
        let unset = s.type_ == "Progressive"
            && s.progressive
                .as_ref()
                .and_then(|p| p.max_concurrency.as_ref())
                .is_none_or(|m| match m {
                    IntOrString::Int(n) => *n == 0,
                    IntOrString::String(v) => v.is_empty(),
                });
        if !unset {
            return Strategy::parse(s);
        }
        // Replaced before parsing, as ocm's graph does: `""` is no error then.
        let mut s = s.clone();
        if let Some(p) = s.progressive.as_mut() {
            p.max_concurrency = None;
        }
        let mut strategy = Strategy::parse(&s)?;
        if let Strategy::Progressive {
            max_concurrency, ..
        } = &mut strategy
        {
            *max_concurrency =
                parse_threshold(clusters_per_decision_group, CLUSTERS_PER_GROUP_FIELD)?;
        }
        Ok(strategy)
    }
}

/// Why a rollout strategy is unusable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RolloutError {
    #[error("rolloutStrategy.type {0:?} is not one of All, Progressive, ProgressivePerGroup")]
    UnknownType(String),
    #[error("{field} {value:?} is not a valid duration: {reason}")]
    InvalidDuration {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("{field} {value:?} is not a count or a percentage: {reason}")]
    InvalidThreshold {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

pub(super) fn parse_limits(c: &RolloutConfig, fields: &Fields) -> Result<Limits, RolloutError> {
    let min_success_time = if c.min_success_time.is_empty() {
        Duration::ZERO
    } else {
        go_duration(&c.min_success_time)
            .map_err(|reason| RolloutError::InvalidDuration {
                field: fields.min_success_time,
                value: c.min_success_time.clone(),
                reason,
            })?
            .try_into()
            .unwrap_or(Duration::ZERO)
    };
    Ok(Limits {
        min_success_time,
        progress_deadline: parse_timeout(&c.progress_deadline, fields.progress_deadline)?,
        max_failures: parse_threshold(c.max_failures.as_ref(), fields.max_failures)?,
    })
}

/// Upstream's `parseTimeout`: `None` / `""` wait forever, else the regex gate, then a Go
/// duration.
pub(super) fn parse_timeout(
    value: &str,
    field: &'static str,
) -> Result<Option<Duration>, RolloutError> {
    if value == "None" || value.is_empty() {
        return Ok(None);
    }
    let err = |reason| RolloutError::InvalidDuration {
        field,
        value: value.to_owned(),
        reason,
    };
    if !timeout_pattern_matches(value) {
        return Err(err("want None or a duration such as 90s, 10m or 2h"));
    }
    let d = go_duration(value).map_err(err)?;
    // The regex makes it non-negative; exactly Go's max means "None" there too.
    let d = Duration::try_from(d).map_err(|_| err("negative"))?;
    Ok((d != GO_MAX_DURATION).then_some(d))
}

/// Go's `regexp.MatchString("^(([0-9])+[h|m|s])|None$", s)`: digits then one of `h|ms` at the
/// start, or `None` at the end.
pub(super) fn timeout_pattern_matches(s: &str) -> bool {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    let unit = s.as_bytes().get(digits);
    (digits > 0 && matches!(unit, Some(b'h' | b'm' | b's' | b'|'))) || s.ends_with("None")
}

/// Go's `time.ParseDuration`, in signed nanoseconds; `Err` carries upstream's message.
pub(super) fn go_duration(orig: &str) -> Result<SignedDuration, &'static str> {
    let mut s = orig.as_bytes();
    let mut neg = false;
    if let Some((&c, rest)) = s.split_first()
        && (c == b'-' || c == b'+')
    {
        neg = c == b'-';
        s = rest;
    }
    if s == b"0" {
        return Ok(SignedDuration::ZERO);
    }
    if s.is_empty() {
        return Err(INVALID_DURATION);
    }
    let mut total: u64 = 0;
    while !s.is_empty() {
        let (v, rest) = duration_term(s)?;
        s = rest;
        total += v;
        if total > DURATION_LIMIT {
            return Err(INVALID_DURATION);
        }
    }
    let nanos = if neg {
        // -(1 << 63) is exactly i64::MIN.
        0i64.wrapping_sub_unsigned(total)
    } else {
        i64::try_from(total).map_err(|_| INVALID_DURATION)?
    };
    Ok(SignedDuration::from_nanos(nanos))
}

const INVALID_DURATION: &str = "invalid duration";
/// Go's bound on a duration's magnitude in nanoseconds.
const DURATION_LIMIT: u64 = 1 << 63;

/// One `<number><unit>` term of a Go duration at the start of `s`: its nanoseconds and the
/// rest of `s`.
fn duration_term(s: &[u8]) -> Result<(u64, &[u8]), &'static str> {
    if !s.first().is_some_and(|&c| c == b'.' || c.is_ascii_digit()) {
        return Err(INVALID_DURATION);
    }
    let (mut v, int_len) = leading_int(s)?;
    let mut s = &s[int_len..];
    let (mut f, mut scale, mut post) = (0u64, 1f64, false);
    if s.first() == Some(&b'.') {
        let frac_len;
        (f, scale, frac_len) = leading_fraction(&s[1..]);
        post = frac_len > 0;
        s = &s[1 + frac_len..];
    }
    if int_len == 0 && !post {
        return Err(INVALID_DURATION);
    }
    let (unit, unit_len) = unit_nanos(s)?;
    s = &s[unit_len..];
    if v > DURATION_LIMIT / unit {
        return Err(INVALID_DURATION);
    }
    v *= unit;
    if f > 0 {
        // Float as Go does: nanosecond-accurate for fractions of hours.
        v += (f as f64 * (unit as f64 / scale)) as u64;
        if v > DURATION_LIMIT {
            return Err(INVALID_DURATION);
        }
    }
    Ok((v, s))
}

/// The integer part of a term and its length; overflow is an error.
fn leading_int(s: &[u8]) -> Result<(u64, usize), &'static str> {
    let len = s.iter().take_while(|c| c.is_ascii_digit()).count();
    let mut v: u64 = 0;
    for &c in &s[..len] {
        if v > DURATION_LIMIT / 10 {
            return Err(INVALID_DURATION);
        }
        v = v * 10 + u64::from(c - b'0');
        if v > DURATION_LIMIT {
            return Err(INVALID_DURATION);
        }
    }
    Ok((v, len))
}

/// The digits after a term's `.`: (value, its scale, their length); overflow only stops
/// accumulating precision.
fn leading_fraction(s: &[u8]) -> (u64, f64, usize) {
    let len = s.iter().take_while(|c| c.is_ascii_digit()).count();
    let (mut f, mut scale) = (0u64, 1f64);
    for &c in &s[..len] {
        if f > (DURATION_LIMIT - 1) / 10 {
            break;
        }
        let y = f * 10 + u64::from(c - b'0');
        if y > DURATION_LIMIT {
            break;
        }
        f = y;
        scale *= 10.0;
    }
    (f, scale, len)
}

/// A term's unit at the start of `s`: nanoseconds per unit, and its length.
fn unit_nanos(s: &[u8]) -> Result<(u64, usize), &'static str> {
    let len = s
        .iter()
        .take_while(|&&c| !(c == b'.' || c.is_ascii_digit()))
        .count();
    if len == 0 {
        return Err("missing unit in duration");
    }
    let unit = match &s[..len] {
        b"ns" => 1,
        // us, µs (U+00B5) and μs (U+03BC).
        b"us" | b"\xc2\xb5s" | b"\xce\xbcs" => 1_000,
        b"ms" => 1_000_000,
        b"s" => 1_000_000_000,
        b"m" => 60_000_000_000,
        b"h" => 3_600_000_000_000,
        _ => return Err("unknown unit in duration"),
    };
    Ok((unit, len))
}

/// Upstream's `parseRolloutSize`: an int, or a string `<float>%`.
pub(super) fn parse_threshold(
    value: Option<&IntOrString>,
    field: &'static str,
) -> Result<Threshold, RolloutError> {
    let s = match value {
        None => return Ok(Threshold::default()),
        Some(IntOrString::Int(n)) => return Ok(Threshold::Count(*n)),
        Some(IntOrString::String(s)) => s,
    };
    let err = |reason| RolloutError::InvalidThreshold {
        field,
        value: s.clone(),
        reason,
    };
    let number = s
        .strip_suffix('%')
        .ok_or_else(|| err("string is not a percentage"))?;
    go_float(number)
        .map(Threshold::Percent)
        .ok_or_else(|| err("not a number before %"))
}

/// Go's `strconv.ParseFloat(s, 64)` for decimal syntax: out-of-range values and a signed `nan`
/// are errors there, unlike in Rust.
pub(super) fn go_float(s: &str) -> Option<f64> {
    let f = s.parse::<f64>().ok()?;
    let lower = s.to_ascii_lowercase();
    let unsigned = lower.trim_start_matches(['+', '-']);
    let range_error = f.is_infinite() && !unsigned.starts_with("inf");
    let signed_nan = f.is_nan() && unsigned.len() != lower.len();
    (!range_error && !signed_nan).then_some(f)
}
