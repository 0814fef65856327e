//! Prompt formats by model file: the GGUF's chat template and special tokens, read from its
//! header (no weights loaded), compiled with a Modelfile's and a request's template, and cached.
//!
//! Requests check what a model's format supports (tools, thinking, insert) before anything is
//! queued or loaded, so a refused request never loads a model or evicts another; they render
//! their prompts with the same format.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use engine::gguf::GgufFile;
use engine::template::{ChatFormat, ModelTemplates};

use crate::error::{ApiError, ApiResult};
use crate::util::lock;

/// Entries kept per cache before it starts over (a daemon serves a handful of models; requests
/// with their own `template` add one each).
const MAX_ENTRIES: usize = 64;

/// A compiled format's key: the weights file, the Modelfile TEMPLATE, the request's `template`.
type Key = (PathBuf, Option<String>, Option<String>);

#[derive(Default)]
pub struct Formats {
    files: Mutex<HashMap<PathBuf, ModelTemplates>>,
    compiled: Mutex<HashMap<Key, Arc<ChatFormat>>>,
}

fn insert<K: std::hash::Hash + Eq, V>(map: &Mutex<HashMap<K, V>>, k: K, v: V) {
    let mut map = lock(map);
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map.insert(k, v);
}

impl Formats {
    /// The format for the weights at `path` with a Modelfile TEMPLATE and a request's
    /// `template` (empty: none), by [`ChatFormat::select`]'s precedence.
    pub async fn get(
        &self,
        path: &Path,
        modelfile_template: Option<&str>,
        request_template: Option<&str>,
    ) -> ApiResult<Arc<ChatFormat>> {
        let key: Key = (
            path.to_path_buf(),
            modelfile_template.map(str::to_string),
            request_template.filter(|t| !t.is_empty()).map(str::to_string),
        );
        if let Some(f) = lock(&self.compiled).get(&key) {
            return Ok(f.clone());
        }
        let known = lock(&self.files).get(path).cloned();
        let k = key.clone();
        let (file, format) = tokio::task::spawn_blocking(move || -> Result<_, engine::Error> {
            let file = match known {
                Some(t) => t,
                None => ModelTemplates::from_gguf(&GgufFile::open(&k.0)?.header().metadata, None)?,
            };
            let with_modelfile = ModelTemplates {
                modelfile_template: k.1.clone(),
                ..file.clone()
            };
            let format = ChatFormat::select(&with_modelfile, k.2.as_deref())?;
            Ok((file, Arc::new(format)))
        })
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(e.without_path().to_string()))?;
        insert(&self.files, path.to_path_buf(), file);
        insert(&self.compiled, key, format.clone());
        Ok(format)
    }
}
