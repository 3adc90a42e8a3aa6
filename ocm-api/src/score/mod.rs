//! Mapping raw values to scores in [-100, 100].
//!
//! Two upstream formulas, kept apart on purpose: they agree mathematically but not in the last
//! float bit, and each contract pins values that depend on its own rounding (sdk-go's score
//! normaliser maps 40 of [0, 100] to -20; the resource prioritizer's form gives -19).
//! - [`Normaliser`]: sdk-go `ScoreNormalizer`, what score providers use (absolute bounds).
//! - [`min_max`]: the placement resource prioritizer's min-max form.
//! - [`fleet_relative`]: [`Normaliser`] with the fleet's own minimum and maximum as bounds.
//!
//! [`resource_usage`] is the resource-usage provider's formula on top of [`Normaliser`].

use thiserror::Error;

pub mod resource_usage;

use crate::wellknown::limits::{MAX_CLUSTER_SCORE, MIN_CLUSTER_SCORE};

#[derive(Debug, Clone, PartialEq, Error)]
pub enum BoundsError {
    #[error("score bounds must be finite numbers, got [{min}, {max}]")]
    NotFinite { min: f64, max: f64 },
    #[error("score bounds need min < max, got [{min}, {max}]")]
    Empty { min: f64, max: f64 },
}

/// sdk-go's `ScoreNormalizer`: `v <= min` gives -100, `v > max` gives 100, anything between
/// `int32(200·(v − min)/(max − min) − 100)` (truncated toward zero, as Go's conversion does).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normaliser {
    min: f64,
    max: f64,
}

impl Normaliser {
    pub fn new(min: f64, max: f64) -> Result<Self, BoundsError> {
        if !min.is_finite() || !max.is_finite() {
            return Err(BoundsError::NotFinite { min, max });
        }
        if min >= max {
            return Err(BoundsError::Empty { min, max });
        }
        Ok(Self { min, max })
    }

    pub fn min(&self) -> f64 {
        self.min
    }

    pub fn max(&self) -> f64 {
        self.max
    }

    pub fn normalise(&self, v: f64) -> i32 {
        if v.is_nan() || v <= self.min {
            return MIN_CLUSTER_SCORE as i32;
        }
        if v > self.max {
            return MAX_CLUSTER_SCORE as i32;
        }
        // Inside the bounds the result is within [-100, 100]; `as` truncates toward zero.
        (200.0 * (v - self.min) / (self.max - self.min) - 100.0) as i32
    }
}

/// The resource prioritizer's min-max form: `int64(((v - min)/(max - min) - 0.5) * 2 * 100)`.
/// Callers handle `min == max` (the prioritizer gives every cluster 100 then).
pub fn min_max(v: f64, min: f64, max: f64) -> i64 {
    // `as` truncates toward zero and saturates, like Go's int64() on finite values.
    (((v - min) / (max - min) - 0.5) * 2.0 * 100.0) as i64
}

/// Scores relative to the fleet: the smallest value gets -100, the largest 100, the others
/// [`Normaliser`] over that range; when all values are equal every one gets 100 (as the
/// resource prioritizer does: nobody is worse than the others). `None` stays `None`.
pub fn fleet_relative(values: &[Option<f64>]) -> Vec<Option<i32>> {
    let (lo, hi) = values
        .iter()
        .flatten()
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| {
            (lo.min(v), hi.max(v))
        });
    let normaliser = Normaliser::new(lo, hi).ok();
    values
        .iter()
        .map(|v| {
            let v = v.filter(|v| v.is_finite())?;
            Some(match normaliser {
                Some(n) if v >= n.max => MAX_CLUSTER_SCORE as i32,
                Some(n) => n.normalise(v),
                None => MAX_CLUSTER_SCORE as i32,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sdk_go_normaliser_values() {
        // The values upstream's calculate_test.go pins for the agent's bounds.
        let cpu = Normaliser::new(0.0, 100.0).expect("bounds");
        let gpu = Normaliser::new(0.0, 20.0).expect("bounds");
        assert_eq!(cpu.normalise(0.0), -100);
        assert_eq!(cpu.normalise(40.0), -20);
        assert_eq!(gpu.normalise(2.0), -80);
        assert_eq!(gpu.normalise(1.0), -90);
        assert_eq!(cpu.normalise(-5.0), -100);
        assert_eq!(cpu.normalise(100.0), 100);
        assert_eq!(cpu.normalise(1e300), 100);
        assert_eq!(cpu.normalise(f64::NAN), -100);
        // Truncation toward zero on both sides of 0.
        assert_eq!(cpu.normalise(49.99), -0);
        assert_eq!(cpu.normalise(50.6), 1);
        assert_eq!(cpu.normalise(0.6), -98);
    }

    #[test]
    fn the_two_forms_differ_in_the_last_bit() {
        assert_eq!(min_max(40.0, 0.0, 100.0), -19);
        assert_eq!(
            Normaliser::new(0.0, 100.0).expect("bounds").normalise(40.0),
            -20
        );
    }

    #[test]
    fn bounds_are_checked() {
        assert!(matches!(
            Normaliser::new(5.0, 5.0),
            Err(BoundsError::Empty { .. })
        ));
        assert!(matches!(
            Normaliser::new(0.0, f64::INFINITY),
            Err(BoundsError::NotFinite { .. })
        ));
    }

    #[test]
    fn fleet_relative_spans_the_range() {
        assert_eq!(
            fleet_relative(&[Some(10.0), None, Some(30.0), Some(20.0)]),
            vec![Some(-100), None, Some(100), Some(0)]
        );
        assert_eq!(
            fleet_relative(&[Some(7.0), Some(7.0)]),
            vec![Some(100), Some(100)]
        );
        assert_eq!(fleet_relative(&[None]), vec![None]);
        assert_eq!(
            fleet_relative(&[Some(f64::NAN), Some(1.0)]),
            vec![None, Some(100)]
        );
    }
}
