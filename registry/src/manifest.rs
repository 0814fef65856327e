//! Manifests (schemaVersion 2, Docker v2 or OCI) and the model config blob, as Ollama writes them.
//!
//! A manifest names a config blob and an ordered list of layers; each layer is a blob in the store
//! with a media type saying what it holds (GGUF weights, template text, params JSON...).
//! [`Manifest::parse`] is the single entry point for manifest bytes from disk or from a registry:
//! every digest in it went through [`Digest`]'s validation, so nothing in a parsed manifest can
//! name a path outside the blob store.

use serde::{Deserialize, Serialize};

use crate::digest::Digest;
use crate::error::{Error, Result};

/// Media types of manifests and layers.
pub mod media {
    pub const DOCKER_MANIFEST_V2: &str = "application/vnd.docker.distribution.manifest.v2+json";
    pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    pub const DOCKER_MANIFEST_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
    pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
    /// The config blob's media type in Ollama's manifests.
    pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";

    pub const MODEL: &str = "application/vnd.ollama.image.model";
    pub const ADAPTER: &str = "application/vnd.ollama.image.adapter";
    pub const PROJECTOR: &str = "application/vnd.ollama.image.projector";
    pub const TEMPLATE: &str = "application/vnd.ollama.image.template";
    /// The template's media type in old manifests.
    pub const PROMPT: &str = "application/vnd.ollama.image.prompt";
    pub const SYSTEM: &str = "application/vnd.ollama.image.system";
    pub const PARAMS: &str = "application/vnd.ollama.image.params";
    pub const MESSAGES: &str = "application/vnd.ollama.image.messages";
    pub const LICENSE: &str = "application/vnd.ollama.image.license";
    /// Deprecated (Ollama ignores it with a warning); kept when copying layers.
    pub const EMBED: &str = "application/vnd.ollama.image.embed";
}

/// Largest manifest we read, from disk or from a registry. Real ones are a few KiB.
pub const MAX_MANIFEST_BYTES: usize = 4 << 20;
/// Most layers we accept in one manifest.
const MAX_LAYERS: usize = 4096;
/// Largest blob size we accept in a manifest (1 PiB): a sanity bound on untrusted numbers.
pub const MAX_BLOB_SIZE: u64 = 1 << 50;

/// One blob of a manifest: the config or a layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Layer {
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub digest: Digest,
    pub size: u64,
    /// The model this layer was taken from (display name), set by `create` from another model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Tensor name for Ollama's per-tensor layers (unused by GGUF models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Layer {
    pub fn new(media_type: &str, digest: Digest, size: u64) -> Layer {
        Layer {
            media_type: media_type.to_string(),
            digest,
            size,
            from: None,
            name: None,
        }
    }
}

/// A schemaVersion 2 manifest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    #[serde(rename = "schemaVersion")]
    pub schema_version: u32,
    #[serde(rename = "mediaType", default)]
    pub media_type: String,
    pub config: Layer,
    #[serde(default)]
    pub layers: Vec<Layer>,
}

impl Manifest {
    /// A Docker v2 manifest as `create` writes it.
    pub fn new(config: Layer, layers: Vec<Layer>) -> Manifest {
        Manifest {
            schema_version: 2,
            media_type: media::DOCKER_MANIFEST_V2.to_string(),
            config,
            layers,
        }
    }

    /// Parses and validates manifest bytes (from disk or from a registry).
    pub fn parse(bytes: &[u8]) -> Result<Manifest> {
        if bytes.len() > MAX_MANIFEST_BYTES {
            return Err(Error::manifest(format!(
                "{} bytes is larger than the {MAX_MANIFEST_BYTES}-byte limit",
                bytes.len()
            )));
        }
        // Look at the media type first, so that an index gets a clear error rather than a
        // complaint about missing fields.
        #[derive(Deserialize)]
        struct Probe {
            #[serde(rename = "mediaType", default)]
            media_type: String,
            #[serde(rename = "schemaVersion", default)]
            schema_version: u32,
        }
        let probe: Probe = serde_json::from_slice(bytes)
            .map_err(|e| Error::manifest(format!("not a JSON manifest: {e}")))?;
        match probe.media_type.as_str() {
            media::DOCKER_MANIFEST_LIST | media::OCI_INDEX => {
                return Err(Error::manifest(format!(
                    "{} (a multi-platform index) is not a model manifest",
                    probe.media_type
                )))
            }
            "" | media::DOCKER_MANIFEST_V2 | media::OCI_MANIFEST => {}
            other => {
                return Err(Error::manifest(format!(
                    "unsupported manifest media type {other:?}"
                )))
            }
        }
        if probe.schema_version != 2 {
            return Err(Error::manifest(format!(
                "schemaVersion {} (only 2 is supported)",
                probe.schema_version
            )));
        }
        let m: Manifest = serde_json::from_slice(bytes).map_err(|e| Error::manifest(e.to_string()))?;
        if m.layers.len() > MAX_LAYERS {
            return Err(Error::manifest(format!(
                "{} layers (at most {MAX_LAYERS})",
                m.layers.len()
            )));
        }
        for l in m.all_blobs() {
            if l.size > MAX_BLOB_SIZE {
                return Err(Error::manifest(format!(
                    "blob {} claims {} bytes",
                    l.digest, l.size
                )));
            }
        }
        Ok(m)
    }

    /// The manifest as Ollama's `WriteManifest` encodes it.
    pub fn to_bytes(&self) -> Vec<u8> {
        crate::gojson::to_vec(self)
    }

    /// Layers, then the config (the order Ollama pulls and pushes them in).
    pub fn all_blobs(&self) -> impl Iterator<Item = &Layer> {
        self.layers.iter().chain(std::iter::once(&self.config))
    }

    /// Every digest the manifest references, without duplicates, in [`Manifest::all_blobs`] order.
    pub fn digests(&self) -> Vec<Digest> {
        let mut out: Vec<Digest> = Vec::new();
        for l in self.all_blobs() {
            if !out.contains(&l.digest) {
                out.push(l.digest);
            }
        }
        out
    }

    /// Total size: layers plus config (what `/api/tags` reports).
    pub fn total_size(&self) -> u64 {
        self.all_blobs().map(|l| l.size).sum()
    }

    pub fn layers_of<'a>(&'a self, media_type: &'a str) -> impl Iterator<Item = &'a Layer> {
        self.layers.iter().filter(move |l| l.media_type == media_type)
    }

    /// The content type a registry should be told when the manifest is pushed.
    pub fn content_type(&self) -> &str {
        if self.media_type.is_empty() {
            media::DOCKER_MANIFEST_V2
        } else {
            &self.media_type
        }
    }
}

/// The config blob (Ollama's `ConfigV2`): what `/api/tags` and `/api/show` report as details.
/// Field order and omissions follow Ollama, so equal configs have equal digests.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    #[serde(default)]
    pub model_format: String,
    #[serde(default)]
    pub model_family: String,
    #[serde(default)]
    pub model_families: Option<Vec<String>>,
    /// Parameter count as a human number (`268.10M`, `8.0B`): shown as the parameter size.
    #[serde(default)]
    pub model_type: String,
    /// Quantization, e.g. `Q4_K_M`: shown as the quantization level.
    #[serde(default)]
    pub file_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub renderer: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub parser: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub requires: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_host: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub remote_model: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub context_length: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub embedding_length: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub base_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft: Option<serde_json::Value>,
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl ModelConfig {
    /// Reads a config blob leniently: a registry may serve any JSON object (or an OCI image
    /// config) there; missing or mistyped fields read as empty.
    pub fn parse_lenient(bytes: &[u8]) -> ModelConfig {
        serde_json::from_slice(bytes).unwrap_or_default()
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        crate::gojson::to_vec(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(b: &[u8]) -> Digest {
        Digest::of_bytes(b)
    }

    #[test]
    fn round_trips_like_ollama() {
        let mut model = Layer::new(media::MODEL, d(b"m"), 10);
        model.from = Some("llama3.2:latest".into());
        let m = Manifest::new(
            Layer::new(media::DOCKER_CONFIG, d(b"c"), 2),
            vec![model, Layer::new(media::PARAMS, d(b"p"), 3)],
        );
        let bytes = m.to_bytes();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(text.starts_with(
            "{\"schemaVersion\":2,\"mediaType\":\"application/vnd.docker.distribution.manifest.v2+json\",\"config\":{\"mediaType\""
        ));
        assert!(text.contains("\"size\":10,\"from\":\"llama3.2:latest\"}"));
        assert!(text.ends_with("}]}\n"));
        assert_eq!(Manifest::parse(&bytes).unwrap(), m);
        assert_eq!(m.total_size(), 15);
        assert_eq!(m.digests().len(), 3);
    }

    #[test]
    fn rejects_hostile_manifests() {
        let good = d(b"x").to_string();
        let cases = [
            r#"{"schemaVersion":2,"config":{"digest":"sha256:../../etc/passwd","size":1},"layers":[]}"#
                .to_string(),
            format!(
                r#"{{"schemaVersion":2,"config":{{"digest":"{good}","size":1}},"layers":[{{"digest":"../../x","size":1}}]}}"#
            ),
            format!(r#"{{"schemaVersion":2,"config":{{"digest":"{good}","size":-1}},"layers":[]}}"#),
            format!(
                r#"{{"schemaVersion":2,"config":{{"digest":"{good}","size":1125899906842625}},"layers":[]}}"#
            ),
            format!(r#"{{"schemaVersion":1,"config":{{"digest":"{good}","size":1}}}}"#),
            r#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#
                .to_string(),
            "not json".to_string(),
            format!(
                r#"{{"schemaVersion":2,"config":{{"digest":"{}","size":1}}}}"#,
                good.to_uppercase()
            ),
        ];
        for c in &cases {
            assert!(Manifest::parse(c.as_bytes()).is_err(), "{c} parsed");
        }
        let ok = format!(
            r#"{{"schemaVersion":2,"mediaType":"{}","config":{{"mediaType":"x","digest":"{good}","size":1}},"layers":[],"annotations":{{"a":"b"}}}}"#,
            media::OCI_MANIFEST
        );
        assert!(Manifest::parse(ok.as_bytes()).is_ok());
    }

    #[test]
    fn config_encodes_like_go() {
        let c = ModelConfig {
            model_format: "gguf".into(),
            model_family: "gemma3".into(),
            model_families: Some(vec!["gemma3".into()]),
            model_type: "268.10M".into(),
            file_type: "Q4_K_M".into(),
            architecture: "amd64".into(),
            os: "linux".into(),
            ..Default::default()
        };
        assert_eq!(
            String::from_utf8(c.to_bytes()).unwrap(),
            "{\"model_format\":\"gguf\",\"model_family\":\"gemma3\",\"model_families\":[\"gemma3\"],\"model_type\":\"268.10M\",\"file_type\":\"Q4_K_M\",\"architecture\":\"amd64\",\"os\":\"linux\"}\n"
        );
        assert_eq!(ModelConfig::parse_lenient(b"[1]"), ModelConfig::default());
    }
}
