//! Setting a status condition the way apimachinery's `meta.SetStatusCondition` does:
//! `lastTransitionTime` moves only when the status flips.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// The longest `message` a status condition may carry (`metav1.Condition`'s schema:
/// `maxLength: 32768`). A longer one makes the apiserver refuse the whole status write.
pub const MAX_MESSAGE: usize = 32768;

/// `message` cut to what a condition's schema allows: see [`fit`].
pub fn fit_message(message: &str) -> std::borrow::Cow<'_, str> {
    fit(message, MAX_MESSAGE)
}

/// `text` cut to at most `max` bytes (so at most that many characters too), at a character
/// boundary, ending with `...(truncated)` when cut: for fields whose schema bounds their
/// length (a condition's message, an event's note), where a longer value would make the
/// apiserver refuse the whole write.
pub fn fit(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    const MARK: &str = "...(truncated)";
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = max.saturating_sub(MARK.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}{MARK}", &text[..end]))
}

/// Sets (adds or updates) the condition of `type_` in `conditions`. The message is cut to
/// what the schema allows ([`fit_message`]).
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: jiff::Timestamp,
) {
    let message = fit_message(message);
    let message = message.as_ref();
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

    #[test]
    fn a_message_longer_than_the_schema_allows_is_cut_at_a_character() {
        let t0 = jiff::Timestamp::from_second(1_000).unwrap();
        // (message length in characters, of which multi-byte) -> kept whole
        for (text, whole) in [
            ("a".repeat(MAX_MESSAGE), true),
            ("a".repeat(MAX_MESSAGE + 1), false),
            ("é".repeat(MAX_MESSAGE / 2), true),
            ("é".repeat(MAX_MESSAGE), false),
            (format!("{}é", "a".repeat(MAX_MESSAGE - 1)), false),
        ] {
            let mut cs = Vec::new();
            set(&mut cs, "Ready", "False", "Big", &text, t0);
            let m = &cs[0].message;
            assert!(m.len() <= MAX_MESSAGE, "{} bytes", m.len());
            assert_eq!(m == &text, whole, "{} bytes in", text.len());
            if !whole {
                assert!(m.ends_with("...(truncated)"));
                assert!(text.starts_with(m.trim_end_matches("...(truncated)")));
            }
        }
    }
}
