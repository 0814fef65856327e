//! Model names, digests, the content-addressed blob store and manifests, the Modelfile, create,
//! pull and push. Knows nothing of inference: it moves and verifies bytes and names.
//!
//! The daemon's model-management endpoints map onto this crate:
//!
//! | endpoint | call |
//! |---|---|
//! | `GET /api/tags` | [`Store::list`] |
//! | `POST /api/show` | [`show::show`] |
//! | `POST /api/copy` | [`Store::copy`] |
//! | `DELETE /api/delete` | [`Store::delete`] |
//! | `HEAD /api/blobs/:digest` | [`Digest::parse_api`], [`Store::has_blob`] |
//! | `POST /api/blobs/:digest` | [`Store::write_blob_stream`] |
//! | `POST /api/create` | [`create::create`] (the CLI builds the request with [`CreateRequest::from_modelfile`]) |
//! | `POST /api/pull` | [`Client::pull`] |
//! | `POST /api/push` | [`Client::push`] |
//!
//! Long operations are `async` and report [`Progress`] through a callback; the daemon keeps one
//! [`Client`] (it shares downloads between concurrent pulls) and one [`Store`]. Loading a model
//! for inference starts from [`show::Model::load`] (blob paths of the weights, adapters and
//! projectors, template, system prompt, parameters, messages). Startup cleanup is
//! [`Store::cleanup`].

pub mod create;
pub mod digest;
pub mod error;
mod fsutil;
mod ggufmeta;
mod gojson;
pub mod manifest;
pub mod modelfile;
pub mod name;
pub mod progress;
pub mod remote;
pub mod show;
pub mod store;

pub use create::{create, create_from_modelfile, CreateOptions, CreateRequest, Message};
pub use digest::Digest;
pub use error::{Error, Result};
pub use ggufmeta::human_number;
pub use manifest::{Layer, Manifest, ModelConfig};
pub use modelfile::Modelfile;
pub use name::Name;
pub use progress::{Progress, ProgressFn};
pub use remote::{Client, PullOptions, PushOptions};
pub use show::{capabilities, show, Capability, Details, Model, ShowInfo};
pub use store::Store;
