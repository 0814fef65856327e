//! Creating a model from a Modelfile or an `/api/create` request.
//!
//! Two halves, as in Ollama:
//! - the client side, [`CreateRequest::from_modelfile`], turns `FROM` paths into blob
//!   digests through a callback (the CLI hashes and uploads each file with `/api/blobs`; the
//!   library path [`create_from_modelfile`] copies it into the store);
//! - the server side, [`create`], builds the layers from blobs already in the store: the base
//!   model's layers (`FROM name`, pulled if missing) or the GGUF files (split sets merged into one
//!   model blob), then template, system, license, params and messages layers, the config blob,
//!   and the manifest. LoRA adapters (`ADAPTER`, `adapters`) are refused: the engine does not
//!   apply them, and a model silently run without its adapter would answer otherwise. Existing blobs are reused; layer blobs are written byte for
//!   byte as Ollama writes them, so the same inputs give the same digests.

use std::collections::BTreeMap;
use std::io::{BufWriter, Write};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use engine::gguf::{GgufFile, GgufWriter};
use serde::{Deserialize, Serialize};

use crate::digest::{Digest, Hasher};
use crate::error::{Error, Result};
use crate::ggufmeta;
use crate::manifest::{media, Layer, Manifest, ModelConfig};
use crate::modelfile::{Instruction, Modelfile, Parameters};
use crate::name::Name;
use crate::progress::{run_blocking, Progress, ProgressFn};
use crate::remote::{Client, PullOptions};
use crate::store::{Pin, Store};

/// A chat message stored in the messages layer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// What to create: the fields of Ollama's `/api/create` request that build a model.
///
/// Empty strings count as absent, as in Ollama.
#[derive(Clone, Debug, Default)]
pub struct CreateRequest {
    /// An existing model to build on (pulled if it is not in the store).
    pub from: Option<String>,
    /// GGUF files by name (a file name, or a relative path inside a directory), as blobs already
    /// in the store. Split sets (`x-00001-of-00003.gguf`, ...) are joined into one model blob.
    pub files: BTreeMap<String, Digest>,
    /// LoRA adapters (GGUF), by name: refused by [`create`] (Ollama's field, so a request that
    /// has them gets a clear error rather than a model without them).
    pub adapters: BTreeMap<String, Digest>,
    pub template: Option<String>,
    pub system: Option<String>,
    /// License texts; each becomes a layer, added to the base model's.
    pub license: Vec<String>,
    /// Merged over the base model's parameters (new names win).
    pub parameters: Parameters,
    /// Replace the base model's messages when not empty.
    pub messages: Vec<Message>,
    /// Quantize the model to this type on the way (`q4_K_M`, `q8_0`, ...); the source must be
    /// F32, F16 or BF16.
    pub quantize: Option<String>,
    pub renderer: Option<String>,
    pub parser: Option<String>,
    /// Minimum Ollama version the model needs.
    pub requires: Option<String>,
}

/// Where `create` may pull a missing `FROM` model from.
#[derive(Clone, Copy, Default)]
pub struct CreateOptions<'a> {
    /// The registry client; without one, a missing base model is an error.
    pub client: Option<&'a Client>,
    pub pull: Option<&'a PullOptions>,
}

fn non_empty(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

impl CreateRequest {
    /// Builds a request from a Modelfile. `FROM` and `ADAPTER` values that name existing files or
    /// directories (relative to `base_dir`, `~` expanded) are passed to `file`, which returns
    /// their digest once the blob is available to the creator (uploaded or imported); any other
    /// `FROM` is a model name. Directories contribute their `*.gguf` files.
    pub fn from_modelfile(
        mf: &Modelfile,
        base_dir: &Path,
        mut file: impl FnMut(&Path) -> Result<Digest>,
    ) -> Result<CreateRequest> {
        let mut req = CreateRequest {
            parameters: mf.parameters()?,
            ..CreateRequest::default()
        };
        for c in &mf.commands {
            let at = |msg: String| Error::Modelfile(crate::modelfile::ParseError { line: c.line, msg });
            match &c.instruction {
                Instruction::From(v) => match local_files(v, base_dir).map_err(at)? {
                    Some(files) => {
                        for (key, path) in files {
                            req.files.insert(key, file(&path)?);
                        }
                    }
                    None => {
                        Name::parse(v).map_err(|e| at(e.to_string()))?;
                        req.from = Some(v.clone());
                    }
                },
                Instruction::Adapter(_) => return Err(at(ADAPTERS_UNSUPPORTED.into())),
                Instruction::Template(v) => req.template = Some(v.clone()),
                Instruction::System(v) => req.system = Some(v.clone()),
                Instruction::License(v) => req.license.push(v.clone()),
                Instruction::Message { role, content } => req.messages.push(Message {
                    role: role.as_str().to_string(),
                    content: content.clone(),
                }),
                Instruction::Requires(v) => req.requires = Some(v.clone()),
                Instruction::Renderer(v) => req.renderer = Some(v.clone()),
                Instruction::Parser(v) => req.parser = Some(v.clone()),
                Instruction::Draft(_) => return Err(at("DRAFT models are not supported by ollamars".into())),
                Instruction::Parameter { .. } => {} // collected above
            }
        }
        Ok(req)
    }
}

/// Why a model with a LoRA adapter is refused, and what to do instead.
pub const ADAPTERS_UNSUPPORTED: &str = "ADAPTER (LoRA adapters) is not supported by ollamars: merge the adapter into the model (llama.cpp's llama-export-lora) and use the merged GGUF in FROM";

/// Resolves a `FROM`/`ADAPTER` value to local files: `None` if it is not an existing path.
/// Whether a FROM value that names no file is meant as one (not as a model name).
fn looks_like_path(value: &str) -> bool {
    value.starts_with(['.', '/', '~', '\\']) || value.to_ascii_lowercase().ends_with(".gguf")
}

fn local_files(value: &str, base_dir: &Path) -> std::result::Result<Option<Vec<(String, PathBuf)>>, String> {
    let path = expand_path(value, base_dir);
    let meta = match std::fs::metadata(&path) {
        Ok(m) => m,
        Err(_) => {
            return if looks_like_path(value) {
                Err(format!("{value}: no such file or directory"))
            } else {
                Ok(None)
            };
        }
    };
    if meta.is_file() {
        let key = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model.gguf".into());
        return Ok(Some(vec![(key, path)]));
    }
    if !meta.is_dir() {
        return Err(format!("{value}: not a regular file or a directory"));
    }
    let mut files: Vec<(String, PathBuf)> = std::fs::read_dir(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let is_file = std::fs::metadata(e.path()).ok()?.is_file();
            (is_file && name.to_ascii_lowercase().ends_with(".gguf")).then(|| (name, e.path()))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        let has_safetensors = std::fs::read_dir(&path)
            .map(|rd| {
                rd.flatten()
                    .any(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
            })
            .unwrap_or(false);
        return Err(if has_safetensors {
            format!(
                "{value} holds safetensors files; ollamars imports GGUF only (convert with llama.cpp's convert_hf_to_gguf.py)"
            )
        } else {
            format!("{value}: no .gguf files in this directory")
        });
    }
    Ok(Some(files))
}

/// `~` and `~/…` are the user's home; other relative paths are relative to `base_dir`.
fn expand_path(value: &str, base_dir: &Path) -> PathBuf {
    let home = || directories::BaseDirs::new().map(|d| d.home_dir().to_path_buf());
    if value == "~" {
        if let Some(h) = home() {
            return h;
        }
    }
    if let Some(rest) = value.strip_prefix("~/") {
        if let Some(h) = home() {
            return h.join(rest);
        }
    }
    let p = Path::new(value);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir.join(p)
    }
}

/// Go's `fs.ValidPath` plus no backslashes: a relative, clean, slash-separated name.
fn valid_file_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains(['\\', '\0'])
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        && name.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
}

/// Parses a Modelfile's `FROM`/`ADAPTER` files into the store and creates the model: the
/// library path for a process that is both client and server (tests, tools).
pub async fn create_from_modelfile(
    store: &Store,
    name: &Name,
    mf: &Modelfile,
    base_dir: &Path,
    quantize: Option<&str>,
    opts: CreateOptions<'_>,
    progress: &ProgressFn<'_>,
) -> Result<()> {
    for w in &mf.warnings {
        progress(Progress::Warning(w.to_string()));
    }
    let pin = Arc::new(store.pin()?);
    let (mf2, base, st, pin2) = (mf.clone(), base_dir.to_path_buf(), store.clone(), pin.clone());
    let mut req = run_blocking(progress, move |_| {
        CreateRequest::from_modelfile(&mf2, &base, |p| st.import_file(p, Some(&pin2)).map(|w| w.digest))
    })
    .await?;
    if let Some(q) = quantize {
        req.quantize = Some(q.to_string());
    }
    let result = create(store, name, req, opts, progress).await;
    drop(pin);
    result
}

/// A GGUF layer read for create.
struct GgufLayer {
    layer: Layer,
    file: GgufFile,
}

/// Creates (or replaces) the model `name` from `req`. Progress follows Ollama's statuses and
/// ends with [`Progress::Success`].
pub async fn create(
    store: &Store,
    name: &Name,
    req: CreateRequest,
    opts: CreateOptions<'_>,
    progress: &ProgressFn<'_>,
) -> Result<()> {
    // Accepting an adapter and running the model without it would give answers the user did
    // not ask for, silently.
    if !req.adapters.is_empty() {
        return Err(Error::request(ADAPTERS_UNSUPPORTED));
    }
    for key in req.files.keys() {
        if !valid_file_name(key) {
            return Err(Error::request(format!("invalid file name {key:?}")));
        }
    }
    if let Some(t) = non_empty(&req.template) {
        engine::template::ChatFormat::check_template(t)
            .map_err(|e| Error::request(format!("template error: {e}")))?;
    }
    let quantize = match non_empty(&req.quantize) {
        Some(q) => Some(engine::quant::FileType::from_name(q).ok_or_else(|| {
            Error::request(format!(
                "unsupported quantization type {q:?} (e.g. q4_K_M, q4_K_S, q8_0)"
            ))
        })?),
        None => None,
    };
    let name = store.canonical(name)?;
    let pin = Arc::new(store.pin()?);
    let old = store.find_manifest(&name).ok().flatten();

    let mut config = ModelConfig {
        renderer: non_empty(&req.renderer).unwrap_or_default().to_string(),
        parser: non_empty(&req.parser).unwrap_or_default().to_string(),
        requires: non_empty(&req.requires).unwrap_or_default().to_string(),
        architecture: "amd64".into(),
        os: "linux".into(),
        ..ModelConfig::default()
    };

    // Base layers: another model's, or the given files'.
    let layers: Vec<Layer>;
    if let Some(from) = non_empty(&req.from) {
        // A path reaches here when the client found no file there (Ollama's CLI then sends it as
        // a name): say that, not why it is no model name. The path is not echoed (CVE-2024-39719).
        if looks_like_path(from) {
            return Err(Error::InvalidRequest(
                "FROM names a file path, which the server does not read: the client uploads the file and creates from it, so check that the file exists where the client runs".into(),
            ));
        }
        let from_name = Name::parse(from)?;
        let base = match store.find_manifest(&from_name)? {
            Some(m) => m,
            None => match opts.client {
                Some(client) => {
                    let default = PullOptions::default();
                    client
                        .pull(store, &from_name, opts.pull.unwrap_or(&default), progress)
                        .await?;
                    store.read_manifest(&from_name)?
                }
                None => return Err(Error::ModelNotFound(from_name.display_shortest())),
            },
        };
        pin.add_all(&base.manifest.digests())?;
        for d in base.manifest.digests() {
            if !store.has_blob(&d) {
                return Err(Error::BlobNotFound(d));
            }
        }
        let base_config = store
            .read_blob(&base.manifest.config.digest, 1 << 20)
            .map(|b| ModelConfig::parse_lenient(&b))
            .unwrap_or_default();
        for (mine, theirs) in [
            (&mut config.renderer, &base_config.renderer),
            (&mut config.parser, &base_config.parser),
            (&mut config.requires, &base_config.requires),
            (&mut config.model_format, &base_config.model_format),
        ] {
            if mine.is_empty() {
                mine.clone_from(theirs);
            }
        }
        if config.capabilities.is_empty() {
            config.capabilities = base_config.capabilities.clone();
        }
        let shown = base.name.display_shortest();
        layers = base
            .manifest
            .layers
            .iter()
            .map(|l| Layer {
                from: Some(shown.clone()),
                ..l.clone()
            })
            .collect();
    } else if !req.files.is_empty() {
        progress(Progress::ParsingGguf);
        let (st, p, files) = (store.clone(), pin.clone(), req.files.clone());
        layers = run_blocking(progress, move |emit| gguf_layers(&st, &p, &files, emit)).await?;
        if layers.iter().any(|l| l.media_type == media::ADAPTER) {
            return Err(Error::request(format!(
                "a file in FROM is a LoRA adapter, not a model; {ADAPTERS_UNSUPPORTED}"
            )));
        }
    } else {
        return Err(Error::request("neither 'from' nor 'files' was specified"));
    }

    // Model layers: quantize if asked, and take the config details from them.
    let (st, p, cfg) = (store.clone(), pin.clone(), config);
    let (layers_out, config_out) = run_blocking(progress, move |emit| {
        let mut config = cfg;
        let mut layers = layers;
        for l in layers.iter_mut().filter(|l| l.media_type == media::MODEL) {
            let mut file = GgufFile::open(st.blob_path(&l.digest))?;
            if let Some(to) = quantize {
                if let Some(q) = quantize_layer(&st, &p, &file, to, emit)? {
                    *l = Layer {
                        from: None,
                        ..Layer::new(media::MODEL, q.digest, q.size)
                    };
                    file = GgufFile::open(st.blob_path(&l.digest))?;
                }
            }
            ggufmeta::fill_config(&mut config, &file);
        }
        Ok((layers, config))
    })
    .await?;
    let mut layers = layers_out;
    let config = config_out;

    let mut created: Vec<Digest> = Vec::new();
    let mut text_layer = |media_type: &str, bytes: &[u8]| -> Result<Layer> {
        let w = store.write_blob_bytes(bytes, Some(&pin))?;
        if w.created {
            created.push(w.digest);
        }
        Ok(Layer::new(media_type, w.digest, w.size))
    };
    if let Some(t) = non_empty(&req.template) {
        layers.retain(|l| l.media_type != media::TEMPLATE && l.media_type != media::PROMPT);
        layers.push(text_layer(media::TEMPLATE, t.as_bytes())?);
    }
    if let Some(s) = non_empty(&req.system) {
        layers.retain(|l| l.media_type != media::SYSTEM);
        layers.push(text_layer(media::SYSTEM, s.as_bytes())?);
    }
    for l in req.license.iter().filter(|l| !l.is_empty()) {
        layers.push(text_layer(media::LICENSE, l.as_bytes())?);
    }
    let mut params = req.parameters.clone();
    for l in layers.iter().filter(|l| l.media_type == media::PARAMS) {
        let bytes = store.read_blob(&l.digest, 16 << 20)?;
        let existing: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&bytes)
            .map_err(|e| Error::manifest(format!("params layer {}: {e}", l.digest)))?;
        params.inherit(&Parameters::from_layer(&existing));
    }
    if !params.is_empty() {
        layers.retain(|l| l.media_type != media::PARAMS);
        layers.push(text_layer(
            media::PARAMS,
            &crate::gojson::to_vec(&params.to_json()),
        )?);
    }
    if !req.messages.is_empty() {
        layers.retain(|l| l.media_type != media::MESSAGES);
        layers.push(text_layer(
            media::MESSAGES,
            &crate::gojson::to_vec(&req.messages),
        )?);
    }
    let config_blob = store.write_blob_bytes(&config.to_bytes(), Some(&pin))?;
    let config_layer = Layer::new(media::DOCKER_CONFIG, config_blob.digest, config_blob.size);

    for l in &layers {
        progress(if created.contains(&l.digest) {
            Progress::CreatingNewLayer(l.digest)
        } else {
            Progress::UsingExistingLayer(l.digest)
        });
    }
    progress(Progress::WritingManifest);
    let manifest = Manifest::new(config_layer, layers);
    store.replace_manifest(
        &name,
        &manifest.to_bytes(),
        old.as_ref().map(|o| &o.manifest),
        progress,
    )?;
    drop(pin);
    progress(Progress::Success);
    Ok(())
}

/// Layers for GGUF files given by digest: each file classified (model, adapter, projector), split
/// sets joined into one model blob.
fn gguf_layers(
    store: &Store,
    pin: &Pin,
    files: &BTreeMap<String, Digest>,
    emit: &dyn Fn(Progress),
) -> Result<Vec<Layer>> {
    pin.add_all(files.values())?;
    let mut singles = Vec::new();
    // Split parts by (prefix, count): (part index, file name, layer).
    type Parts = Vec<(u64, String, GgufLayer)>;
    let mut splits: BTreeMap<(String, u64), Parts> = BTreeMap::new();
    for (file_name, digest) in files {
        let path = store.blob_path(digest);
        let size = store.blob_size(digest).ok_or(Error::BlobNotFound(*digest))?;
        let file = GgufFile::open(&path).map_err(|e| match e {
            engine::Error::UnsupportedFormat(_) => Error::request(format!(
                "{file_name} is not a GGUF file; ollamars imports GGUF models only"
            )),
            e => Error::request(format!("{file_name}: {e}")),
        })?;
        let meta = &file.header().metadata;
        let layer = Layer::new(ggufmeta::media_type(meta), *digest, size);
        let count = meta.get_u64("split.count").map_err(Error::from)?.unwrap_or(1);
        if count > 1 {
            let (prefix, index, of) = split_file_name(file_name).ok_or_else(|| {
                Error::request(format!(
                    "{file_name} is part of a split GGUF (split.count {count}) but is not named like prefix-00001-of-{count:05}.gguf"
                ))
            })?;
            let no = meta.get_u64("split.no").map_err(Error::from)?;
            if of != count || no != Some(index) {
                return Err(Error::request(format!(
                    "{file_name}: its name says part {} of {of}, its metadata says part {} of {count}",
                    index + 1,
                    no.map_or("?".to_string(), |n| (n + 1).to_string())
                )));
            }
            splits.entry((prefix, count)).or_default().push((
                index,
                file_name.clone(),
                GgufLayer { layer, file },
            ));
        } else {
            singles.push(GgufLayer { layer, file });
        }
    }
    let mut layers: Vec<Layer> = singles.into_iter().map(|g| g.layer).collect();
    for ((prefix, count), mut parts) in splits {
        parts.sort_by_key(|p| p.0);
        for (i, p) in parts.iter().enumerate() {
            if p.0 != i as u64 {
                return Err(Error::request(format!(
                    "split GGUF {prefix}: part {} of {count} is missing",
                    i + 1
                )));
            }
        }
        if parts.len() as u64 != count {
            return Err(Error::request(format!(
                "split GGUF {prefix}: {} of {count} parts given",
                parts.len()
            )));
        }
        emit(Progress::MergingSplitGguf { parts: parts.len() });
        let media_type = parts[0].2.layer.media_type.clone();
        let files: Vec<&GgufFile> = parts.iter().map(|p| &p.2.file).collect();
        let merged = merge_split(store, pin, &files)?;
        layers.push(Layer::new(&media_type, merged.digest, merged.size));
    }
    if layers.iter().filter(|l| l.media_type == media::MODEL).count() > 1 {
        return Err(Error::request(
            "more than one model GGUF given; a model has one (split files are joined automatically)",
        ));
    }
    Ok(layers)
}

/// `prefix-00002-of-00003.gguf` -> (`prefix`, 1, 3).
fn split_file_name(name: &str) -> Option<(String, u64, u64)> {
    let base = name.rsplit('/').next()?;
    let stem = base.strip_suffix(".gguf")?;
    let (rest, of) = stem.rsplit_once("-of-")?;
    let (prefix, index) = rest.rsplit_once('-')?;
    if index.len() != 5 || of.len() != 5 {
        return None;
    }
    let index: u64 = index.parse().ok()?;
    let of: u64 = of.parse().ok()?;
    (index >= 1 && index <= of).then(|| (prefix.to_string(), index - 1, of))
}

/// Joins the parts of a split GGUF into one file in the store: the first part's metadata without
/// the `split.*` keys, then every part's tensors in order.
fn merge_split(store: &Store, pin: &Pin, parts: &[&GgufFile]) -> Result<crate::store::BlobWrite> {
    let mut w = GgufWriter::new();
    w.metadata = parts[0].header().metadata.clone();
    for k in ["split.no", "split.count", "split.tensors.count"] {
        w.metadata.remove(k);
    }
    let mut sources = Vec::new();
    for (pi, part) in parts.iter().enumerate() {
        for t in &part.header().tensors {
            w.add_tensor(t.name.clone(), t.ty, &t.dims)?;
            sources.push((pi, t));
        }
    }
    let total: u64 = parts.iter().map(|p| p.len()).sum();
    store.check_space(total)?;
    let tmp = store.temp_blob()?;
    let mut out = BufWriter::with_capacity(
        4 << 20,
        Tee {
            file: tmp,
            hasher: Hasher::new(),
        },
    );
    w.write(&mut out, |i, _| {
        let (pi, t) = sources[i];
        Ok(std::borrow::Cow::Borrowed(parts[pi].tensor_data(t)))
    })
    .map_err(|e| match e {
        engine::Error::Io { source, .. } => Error::io("writing the merged GGUF", source),
        e => e.into(),
    })?;
    let tee = out
        .into_inner()
        .map_err(|e| Error::io("writing the merged GGUF", e.into_error()))?;
    let size = tee.hasher.len();
    store.finish_blob(tee.file, tee.hasher.finish(), size, None, Some(pin))
}

/// Writes to a temporary blob and hashes what it writes.
struct Tee {
    file: crate::fsutil::AtomicFile,
    hasher: Hasher,
}

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

/// Quantizes a model layer to `to` with the engine's quantizer (llama-quantize's mixes and
/// bytes); `None` if it already has that type. The output is written in the pin's scratch space
/// (so a crash leaves nothing in `blobs/`) and then adopted as a blob.
fn quantize_layer(
    store: &Store,
    pin: &Pin,
    file: &GgufFile,
    to: engine::quant::FileType,
    emit: &dyn Fn(Progress),
) -> Result<Option<crate::store::BlobWrite>> {
    let from = ggufmeta::file_type_name(&file.header().metadata);
    if from == to.name() {
        return Ok(None);
    }
    if !matches!(from.as_str(), "F16" | "BF16" | "F32") {
        return Err(Error::request(format!(
            "quantization is only supported for F16, BF16 and F32 models (this one is {from})"
        )));
    }
    store.check_space(file.len())?;
    let out = pin.scratch_path("quantized.gguf");
    let event = |total: u64, completed: u64| Progress::Quantizing {
        from: from.clone(),
        to: to.name().to_string(),
        total,
        completed,
    };
    emit(event(file.len(), 0));
    let opts = engine::quant::QuantizeOptions::new(to);
    let quantized = engine::quant::quantize_file(file.path(), &out, &opts, |p| {
        emit(event(p.total_bytes_in, p.done_bytes_in))
    });
    let result = quantized
        .map_err(|e| match e {
            engine::Error::Io { source, .. } => Error::io(format!("quantizing to {to}"), source),
            e => Error::request(format!("cannot quantize this model to {to}: {e}")),
        })
        .and_then(|_| store.adopt_file(&out, pin));
    let _ = std::fs::remove_file(&out);
    result.map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert!(valid_file_name("model.gguf"));
        assert!(valid_file_name("sub/model.gguf"));
        for bad in [
            "",
            "/etc/passwd",
            "../x",
            "a/../b",
            "./a",
            "a//b",
            "a/",
            "a\\b",
            "a\0",
        ] {
            assert!(!valid_file_name(bad), "{bad:?}");
        }
        assert_eq!(split_file_name("m-00002-of-00003.gguf"), Some(("m".into(), 1, 3)));
        assert_eq!(split_file_name("m-00004-of-00003.gguf"), None);
        assert_eq!(split_file_name("m.gguf"), None);
    }
}
