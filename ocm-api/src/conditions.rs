//! Setting a status condition the way apimachinery's `meta.SetStatusCondition` does:
//! `lastTransitionTime` moves only when the status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Sets (adds or updates) the condition of `type_` in `conditions`.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
) {
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status.to_owned();
                c.last_transition_time = Time(now);
            }
            c.reason = reason.to_owned();
            c.message = message.to_owned();
            // As meta.SetStatusCondition: the new condition's (unset) generation replaces it.
            c.observed_generation = None;
        }
        None => conditions.push(Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition_time: Time(now),
            observed_generation: None,
        }),
    }
}

/// The condition of `type_`, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_a_status_flip() {
        let t0 = jiff::Timestamp::from_second(1_000).unwrap();
        let t1 = jiff::Timestamp::from_second(2_000).unwrap();
        let mut cs = Vec::new();
        set(&mut cs, "Ready", "False", "Starting", "m0", t0);
        set(&mut cs, "Ready", "False", "Still", "m1", t1);
        assert_eq!(
            (cs[0].last_transition_time.0, cs[0].reason.as_str()),
            (t0, "Still")
        );
        set(&mut cs, "Ready", "True", "Done", "m2", t1);
        assert_eq!(cs[0].last_transition_time.0, t1);
        assert_eq!(cs.len(), 1);
        assert_eq!(find(&cs, "Ready").map(|c| c.message.as_str()), Some("m2"));
    }
}
