//! Why a request was not answered with a result, and the HTTP answer each gets.

use std::time::Duration;

use http::{StatusCode, header};
use ocm_runtime::http::{HttpResponse, respond};
use thiserror::Error;

use super::{JSON, RETRY_AFTER_SECONDS};

/// Why a request was not answered with a result. Each maps to one HTTP status.
#[derive(Debug, Error)]
pub enum DebugError {
    #[error("Unauthorized: no bearer token in the Authorization header")]
    NoToken,
    #[error("Unauthorized: the bearer token was not accepted")]
    InvalidToken,
    #[error("failed to authenticate the request: {0}")]
    TokenReview(#[source] ReviewError),
    #[error("user does not have permission to {verb} placements in namespace {namespace}{}", reason_suffix(.reason))]
    Forbidden {
        verb: &'static str,
        namespace: String,
        reason: String,
    },
    #[error("failed to check permissions: {0}")]
    AccessReview(#[source] ReviewError),
    #[error("path {0} not found")]
    UnknownPath(String),
    #[error("invalid debug path: namespace and name required")]
    InvalidPath,
    #[error("placement '{0}' not found")]
    NotFound(String),
    #[error("method {0} not allowed")]
    MethodNotAllowed(String),
    #[error("request body too large: {declared} bytes exceeds maximum of {limit} bytes")]
    DeclaredBodyTooLarge { declared: u64, limit: usize },
    #[error("request body too large: exceeds maximum of {0} bytes")]
    BodyTooLarge(usize),
    #[error(
        "too many debug requests in progress (at most {0}, --debug-max-concurrent-requests): retry later"
    )]
    Busy(usize),
    #[error(
        "too many debug requests in progress for this user (its share is {0}, --debug-max-requests-per-user): retry later"
    )]
    UserBusy(usize),
    #[error("too many authentication attempts in progress: retry later")]
    ReviewsBusy,
    #[error(
        "too many new tokens from this address (at most {0} a second, --debug-max-token-reviews-per-source): retry later"
    )]
    SourceBusy(u32),
    #[error("failed to read request body: {0}")]
    ReadBody(String),
    #[error("failed to unmarshal placement JSON: {0}")]
    BadJson(#[source] serde_json::Error),
    #[error("placement JSON has no metadata.namespace")]
    NoNamespace,
    /// The core could not read its inputs (a clusterset whose members cannot be computed).
    #[error("{0}")]
    Scheduling(String),
    #[error("scheduling failed: {0}")]
    Task(String),
    #[error("failed to encode the result: {0}")]
    Encode(#[source] serde_json::Error),
}

fn reason_suffix(reason: &str) -> String {
    if reason.is_empty() {
        String::new()
    } else {
        format!(": {reason}")
    }
}

/// A TokenReview or SubjectAccessReview that got no answer.
#[derive(Debug, Error)]
pub enum ReviewError {
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
}

impl DebugError {
    pub fn status(&self) -> StatusCode {
        match self {
            DebugError::NoToken | DebugError::InvalidToken => StatusCode::UNAUTHORIZED,
            DebugError::Forbidden { .. } => StatusCode::FORBIDDEN,
            DebugError::Busy(_)
            | DebugError::UserBusy(_)
            | DebugError::ReviewsBusy
            | DebugError::SourceBusy(_) => StatusCode::TOO_MANY_REQUESTS,
            DebugError::InvalidPath
            | DebugError::DeclaredBodyTooLarge { .. }
            | DebugError::BodyTooLarge(_)
            | DebugError::ReadBody(_)
            | DebugError::BadJson(_)
            | DebugError::NoNamespace => StatusCode::BAD_REQUEST,
            DebugError::UnknownPath(_) | DebugError::NotFound(_) => StatusCode::NOT_FOUND,
            DebugError::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            DebugError::TokenReview(_)
            | DebugError::AccessReview(_)
            | DebugError::Scheduling(_)
            | DebugError::Task(_)
            | DebugError::Encode(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// `{"error": "<message>"}` with `Content-Type: application/json`.
    pub fn response(&self) -> HttpResponse {
        let body = serde_json::json!({ "error": self.to_string() }).to_string();
        let mut r = respond(self.status(), JSON, body);
        if self.status() == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer"),
            );
        }
        if self.status() == StatusCode::TOO_MANY_REQUESTS {
            r.headers_mut().insert(
                header::RETRY_AFTER,
                http::HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        r
    }
}
