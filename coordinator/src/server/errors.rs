//! The one table from domain errors to what a client sees: a gRPC code and an HTTP
//! status, with the message. Store failures are logged here and reach the client as
//! "internal error" (or, for a shed write, "busy").

use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use e2fleet_proto::api::BadId;
use e2fleet_proto::convert::WireError;
use tonic::{Code, Status};
use tracing::{error, warn};

use crate::fleet::FleetError;
use crate::store::StoreError;

/// What a client is told about an error: the gRPC code, the HTTP status, the message.
pub fn classify(e: &FleetError) -> (Code, StatusCode, String) {
    match e {
        FleetError::Unauthenticated(m) => {
            (Code::Unauthenticated, StatusCode::UNAUTHORIZED, m.clone())
        }
        FleetError::PermissionDenied(m) => {
            (Code::PermissionDenied, StatusCode::FORBIDDEN, m.clone())
        }
        FleetError::NotFound(m) => (Code::NotFound, StatusCode::NOT_FOUND, m.clone()),
        FleetError::InvalidArgument(m) => {
            (Code::InvalidArgument, StatusCode::BAD_REQUEST, m.clone())
        }
        FleetError::FailedPrecondition(m) => {
            (Code::FailedPrecondition, StatusCode::CONFLICT, m.clone())
        }
        FleetError::TooMany(m) => (
            Code::ResourceExhausted,
            StatusCode::TOO_MANY_REQUESTS,
            m.clone(),
        ),
        FleetError::Store(StoreError::Busy) => {
            warn!("store busy: a request was refused (load shed)");
            (
                Code::Unavailable,
                StatusCode::SERVICE_UNAVAILABLE,
                "the coordinator is busy; retry with backoff".into(),
            )
        }
        FleetError::Store(e) => {
            error!(error = %e, "store failure");
            (
                Code::Internal,
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error".into(),
            )
        }
    }
}

/// A domain error as a gRPC status.
pub fn status_of(e: FleetError) -> Status {
    let (code, _, message) = classify(&e);
    Status::new(code, message)
}

/// A domain error as an HTTP JSON response `{"error": "kind: message"}` (the kind
/// spelled out, as an HTTP client has no gRPC code to read it from).
pub fn http_error(e: FleetError) -> Response {
    let (_, status, message) = classify(&e);
    let text = match e {
        FleetError::Store(_) => message,
        other => other.to_string(),
    };
    (status, Json(serde_json::json!({ "error": text }))).into_response()
}

impl From<WireError> for FleetError {
    fn from(e: WireError) -> FleetError {
        match e {
            WireError::Invalid(m) => FleetError::InvalidArgument(m),
            WireError::BadId(id) => id.into(),
        }
    }
}

/// An id from a request: a malformed one names nothing that exists.
impl From<BadId> for FleetError {
    fn from(e: BadId) -> FleetError {
        FleetError::NotFound(format!("{} {}", e.kind, e.value))
    }
}

/// The token of an `authorization: Bearer <token>` header value (gRPC metadata or HTTP).
pub fn bearer(header: Option<&str>) -> Option<&str> {
    header?.strip_prefix("Bearer ").map(str::trim)
}
