//! `format`: structured output. `"json"` asks for any JSON object, an object is a JSON schema;
//! both constrain decoding with a grammar. Until the engine's grammar sampler is available in
//! this build, a request with a format is refused with a 400 rather than silently answered
//! unconstrained.

use engine::sample::Sampler;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::scheduler::Loaded;

/// The request's format, if it asks for one (`null`, `""` and `{}`-less absence mean none).
pub fn requested(format: Option<&Value>) -> ApiResult<Option<Value>> {
    match format {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(Value::String(s.clone()))),
        Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
        Some(other) => Err(ApiError::bad_request(format!(
            "invalid format {other}: expected \"json\" or a JSON schema object"
        ))),
    }
}

/// Constrains `sampler` to `format`.
pub fn constrain(_sampler: Sampler, _loaded: &Loaded, _format: &Value) -> ApiResult<Sampler> {
    Err(ApiError::bad_request(
        "structured output (format) is not available in this build of ollamars yet: the grammar sampler has not landed",
    ))
}
