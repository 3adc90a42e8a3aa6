//! Writing to the apiserver the same way in every controller: what its error answers mean,
//! and writes that apply only to the object they were computed from.
//!
//! **Predicates.** They go by the HTTP status code, which every answer carries, as our writers
//! always have; kube's `Status::is_*` go by the `reason` first, which a proxy's or a webhook's
//! answer need not set. A 409 is either a failed precondition or concurrent update
//! ([`is_conflict`]) or a create whose name is taken ([`is_already_exists`]), never both.
//!
//! **Preconditions.** A controller computes a write from the objects as its cache saw them.
//! If someone else (a newer leader, a user) wrote the object since, the write must fail
//! instead of overwriting theirs: a patch carries the `resourceVersion` it was computed from
//! ([`preconditioned`]), a delete the `uid` (not an object re-created under the same name) and
//! optionally the `resourceVersion` ([`delete_params`]). The apiserver answers 409
//! ([`is_conflict`]) when they no longer match; the write is then not retried with the same
//! body, the controller plans again from the object as it is now.

use kube::api::{DeleteParams, Preconditions};
use serde_json::{Value, json};

pub use crate::app::unreachable as is_unreachable;
pub use crate::leader::is_not_leader;

/// The `reason` of a 409 answering a create whose name is taken.
const ALREADY_EXISTS: &str = "AlreadyExists";

fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// 404: the object (or its namespace, or its resource) is not there.
pub fn is_not_found(e: &kube::Error) -> bool {
    code(e) == Some(404)
}

/// 409 `AlreadyExists`: a create found the name taken (our cache was behind, or another
/// replica created it first).
pub fn is_already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == ALREADY_EXISTS)
}

/// Any other 409: a precondition ([`preconditioned`], [`delete_params`]) failed, or the
/// object changed while the apiserver applied the write. Someone else wrote it: plan again
/// from the object as it is now, do not resend the same body.
pub fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason != ALREADY_EXISTS)
}

/// 401: the apiserver does not (or no longer) accept our credentials; a rotated client
/// certificate or token may be waiting to be read.
pub fn is_unauthorized(e: &kube::Error) -> bool {
    code(e) == Some(401)
}

/// A `resourceVersion` precondition in a merge patch body: `{"metadata": {"resourceVersion":
/// rv}, ...body}`. The apiserver applies the patch only to that version of the object (409
/// otherwise, [`is_conflict`]). `None` (the version is not known) leaves the body as it is:
/// the patch then applies to whatever version is current.
///
/// The body's own `metadata` (labels, annotations) is kept; a body that is not a JSON object
/// is returned unchanged.
pub fn preconditioned(mut body: Value, resource_version: Option<&str>) -> Value {
    if let (Some(rv), Some(o)) = (resource_version, body.as_object_mut()) {
        let meta = o.entry("metadata").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert("resourceVersion".into(), json!(rv));
        }
    }
    body
}

/// Delete parameters that delete only the object of `uid` (not one re-created under the
/// same name since) and, when given, only at `resource_version` (not one changed since).
/// Neither given: an unconditional delete.
pub fn delete_params(uid: Option<&str>, resource_version: Option<&str>) -> DeleteParams {
    let preconditions = (uid.is_some() || resource_version.is_some()).then(|| Preconditions {
        uid: uid.map(str::to_owned),
        resource_version: resource_version.map(str::to_owned),
    });
    DeleteParams {
        preconditions,
        ..DeleteParams::default()
    }
}

/// `Ok(None)` for a 404: for a write or a read whose object being gone leaves nothing to do
/// (a delete of what is deleted, a status patch of a removed object).
pub fn ignore_not_found<T>(result: Result<T, kube::Error>) -> Result<Option<T>, kube::Error> {
    match result {
        Ok(t) => Ok(Some(t)),
        Err(e) if is_not_found(&e) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("test", reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn each_answer_is_one_thing() {
        let not_found = api_error(404, "NotFound");
        let exists = api_error(409, "AlreadyExists");
        let conflict = api_error(409, "Conflict");
        let unauthorized = api_error(401, "Unauthorized");
        let all = [&not_found, &exists, &conflict, &unauthorized];
        let preds: [fn(&kube::Error) -> bool; 4] = [
            is_not_found,
            is_already_exists,
            is_conflict,
            is_unauthorized,
        ];
        for (i, e) in all.iter().enumerate() {
            for (j, p) in preds.iter().enumerate() {
                assert_eq!(p(e), i == j, "error {i}, predicate {j}");
            }
        }
        // By the code: a 404 without the apiserver's reason (a proxy's) is still not found;
        // a 409 without one is a conflict.
        assert!(is_not_found(&api_error(404, "")));
        assert!(is_conflict(&api_error(409, "")));
        assert!(!is_not_found(&kube::Error::LinesCodecMaxLineLengthExceeded));
    }

    #[test]
    fn the_hub_being_away_is_not_a_refusal() {
        assert!(is_unreachable(&api_error(503, "ServiceUnavailable")));
        assert!(is_unreachable(&api_error(429, "TooManyRequests")));
        assert!(!is_unreachable(&api_error(409, "Conflict")));
        assert!(!is_unreachable(&api_error(404, "NotFound")));
        let refused = kube::Error::Service(Box::new(crate::leader::NotLeader {
            method: "PATCH".into(),
            path: "/x".into(),
        }));
        assert!(is_not_leader(&refused));
        assert!(!is_unreachable(&refused));
    }

    #[test]
    fn a_precondition_goes_into_the_patch_body() {
        let body = preconditioned(json!({"status": {"decisions": []}}), Some("42"));
        assert_eq!(
            body,
            json!({"metadata": {"resourceVersion": "42"}, "status": {"decisions": []}})
        );
        let labels = preconditioned(json!({"metadata": {"labels": {"a": "b"}}}), Some("7"));
        assert_eq!(
            labels,
            json!({"metadata": {"labels": {"a": "b"}, "resourceVersion": "7"}})
        );
        assert_eq!(
            preconditioned(json!({"status": {}}), None),
            json!({"status": {}})
        );
        assert_eq!(preconditioned(json!([1]), Some("7")), json!([1]));
    }

    #[test]
    fn delete_preconditions() {
        assert!(delete_params(None, None).preconditions.is_none());
        let uid = delete_params(Some("u"), None)
            .preconditions
            .unwrap_or_default();
        assert_eq!(
            (uid.uid.as_deref(), uid.resource_version.as_deref()),
            (Some("u"), None)
        );
        let both = delete_params(Some("u"), Some("3"))
            .preconditions
            .unwrap_or_default();
        assert_eq!(
            (both.uid.as_deref(), both.resource_version.as_deref()),
            (Some("u"), Some("3"))
        );
    }

    #[test]
    fn a_gone_object_is_nothing_to_do() {
        assert_eq!(
            ignore_not_found(Err::<(), _>(api_error(404, "NotFound"))).ok(),
            Some(None)
        );
        assert_eq!(
            ignore_not_found(Ok::<_, kube::Error>(1)).ok(),
            Some(Some(1))
        );
        assert!(ignore_not_found(Err::<(), _>(api_error(409, "Conflict"))).is_err());
    }
}
