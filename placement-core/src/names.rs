//! Names derived from a Placement's. Its PlacementDecisions carry the Placement's name in the
//! label `cluster.open-cluster-management.io/placement`, and a label value has at most 63
//! characters while an object name may have 253. Upstream writes such decisions anyway: every
//! pass fails on the first create and nothing tells the Placement's owner. Here such a
//! Placement is not scheduled and its `PlacementSatisfied` condition says why. (Decision group
//! names, the other label value, are held to label syntax by the CRD.)

use super::status::{Code, Status};

/// The longest label value (Kubernetes' `validation.LabelValueMaxLength`).
pub(crate) const MAX_LABEL_VALUE: usize = 63;

/// Whether PlacementDecisions of a Placement named `name` can be written.
pub(crate) fn check(name: &str) -> Result<(), Status> {
    if name.len() <= MAX_LABEL_VALUE {
        return Ok(());
    }
    Err(Status::new(
        Code::Error,
        "",
        format!(
            "the Placement name has {} characters: its PlacementDecisions carry it in the label \
             cluster.open-cluster-management.io/placement, whose values have at most {MAX_LABEL_VALUE}; \
             rename the Placement",
            name.len()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_fit_a_label_value() {
        for (len, ok) in [(1, true), (63, true), (64, false), (253, false)] {
            let name = "p".repeat(len);
            let got = check(&name);
            assert_eq!(got.is_ok(), ok, "{len}");
            if let Err(st) = got {
                assert_eq!(st.code, Code::Error);
                assert!(
                    st.message.contains(&format!("has {len} characters")),
                    "{}",
                    st.message
                );
            }
        }
    }
}
