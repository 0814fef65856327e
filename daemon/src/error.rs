//! Errors as the API reports them: a status code and a message, written as Ollama's
//! `{"error": "..."}` or OpenAI's `{"error": {"message", "type", "param", "code"}}`.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// An error answered to a client.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error; absolute server paths in the message are redacted (`security::redact_paths`).
    pub fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError {
            status,
            message: crate::security::redact_paths(&message).into_owned(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, message)
    }

    /// A request whose model was unloaded before it ended (the server shutting down): not the
    /// client's fault, and worth a retry.
    pub fn unloaded() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the model was unloaded before the request ended (the server may be shutting down); try again",
        )
    }

    /// A request that came, or waited, while the server shuts down.
    pub fn shutting_down() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down; try again once it is back",
        )
    }

    /// Ollama's queue-full error (two spaces, verbatim).
    pub fn busy() -> ApiError {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server busy, please try again.  maximum pending requests exceeded",
        )
    }

    /// The same error in OpenAI's shape.
    pub fn openai(self) -> Response {
        let ty = match self.status {
            StatusCode::BAD_REQUEST => "invalid_request_error",
            StatusCode::NOT_FOUND => "not_found_error",
            _ => "api_error",
        };
        let body = json!({"error": {"message": self.message, "type": ty, "param": null, "code": null}});
        logged((self.status, axum::Json(body)).into_response(), &self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let resp = (self.status, axum::Json(json!({ "error": self.message }))).into_response();
        logged(resp, &self.message)
    }
}

/// An error response's message, for the request's log line (`server::trace`).
#[derive(Clone, Debug)]
pub struct ErrorMessage(pub String);

/// `resp` carrying its error message to the log.
pub fn logged(mut resp: Response, message: &str) -> Response {
    resp.extensions_mut().insert(ErrorMessage(message.to_string()));
    resp
}

/// A registry error as an API error: bad names and requests are 400, missing models 404.
impl From<registry::Error> for ApiError {
    fn from(e: registry::Error) -> Self {
        let status = if e.is_bad_request() {
            StatusCode::BAD_REQUEST
        } else if e.is_not_found() {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        ApiError::new(status, e.to_string())
    }
}
