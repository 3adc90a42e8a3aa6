//! Serde and schema helpers shared by the type modules: Go's `omitempty` predicates, the CRD
//! defaults that must also apply when objects are read from files (no apiserver to default
//! them), and validation patterns.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::null::null_as_fn;

/// Kubernetes qualified name, optionally prefixed by a DNS subdomain (label keys, taint keys).
pub const QUALIFIED_NAME_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$";

/// DNS-1123 label (namespace names).
pub const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

pub(crate) fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

pub(crate) fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

pub(crate) fn is_empty_label_selector(s: &LabelSelector) -> bool {
    s.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
}

pub(crate) fn default_weight() -> i32 {
    1
}

null_as_fn!(pub(crate) fn null_as_default_weight() -> i32 = default_weight);

pub(crate) fn default_max_skew() -> i32 {
    1
}

null_as_fn!(pub(crate) fn null_as_default_max_skew() -> i32 = default_max_skew);

pub(crate) fn default_lease_duration_seconds() -> i32 {
    60
}

null_as_fn!(
    pub(crate) fn null_as_default_lease_duration_seconds() -> i32
        = default_lease_duration_seconds
);
