//! Reading a stored model: what the scheduler loads ([`Model`]) and what `/api/show` reports
//! ([`ShowInfo`]): details, capabilities, the GGUF metadata, the texts and parameters, and a
//! Modelfile regenerated from the layers.

use std::path::PathBuf;
use std::time::SystemTime;

use engine::gguf::GgufFile;
use engine::template::{ChatFormat, ModelTemplates};
use serde_json::{Map, Value};

use crate::create::Message;
use crate::error::{Error, Result};
use crate::ggufmeta;
use crate::manifest::{media, ModelConfig};
use crate::modelfile::{Command, Instruction, Modelfile, Parameters, Role};
use crate::name::Name;
use crate::store::{Store, StoredManifest};

/// Text and JSON layers larger than this are refused (real ones are kilobytes).
const MAX_TEXT_LAYER: u64 = 16 << 20;

/// A model in the store, with its text layers read and its blob paths resolved.
#[derive(Clone, Debug)]
pub struct Model {
    /// The name as spelled on disk.
    pub name: Name,
    pub manifest: StoredManifest,
    pub config: ModelConfig,
    /// The GGUF weights (the `model` layer).
    pub model_path: Option<PathBuf>,
    /// `from` of the model layer: the model this one was built on.
    pub parent_model: Option<String>,
    pub adapters: Vec<PathBuf>,
    pub projectors: Vec<PathBuf>,
    /// The template layer (Go template syntax), if the model has one.
    pub template: Option<String>,
    pub system: Option<String>,
    pub license: Vec<String>,
    pub parameters: Parameters,
    pub messages: Vec<Message>,
}

/// What a model can do, as `/api/show` lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Capability {
    Completion,
    Tools,
    Insert,
    Vision,
    Embedding,
    Thinking,
    Audio,
}

impl Capability {
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::Completion => "completion",
            Capability::Tools => "tools",
            Capability::Insert => "insert",
            Capability::Vision => "vision",
            Capability::Embedding => "embedding",
            Capability::Thinking => "thinking",
            Capability::Audio => "audio",
        }
    }

    fn parse(s: &str) -> Option<Capability> {
        Some(match s {
            "completion" => Capability::Completion,
            "tools" => Capability::Tools,
            "insert" => Capability::Insert,
            "vision" => Capability::Vision,
            "embedding" => Capability::Embedding,
            "thinking" => Capability::Thinking,
            "audio" => Capability::Audio,
            _ => return None,
        })
    }
}

/// `details` of `/api/tags` and `/api/show`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    pub parent_model: String,
    pub format: String,
    pub family: String,
    pub families: Option<Vec<String>>,
    pub parameter_size: String,
    pub quantization_level: String,
}

impl Details {
    pub fn from_config(config: &ModelConfig, parent_model: Option<&str>) -> Details {
        Details {
            parent_model: parent_model.unwrap_or_default().to_string(),
            format: config.model_format.clone(),
            family: config.model_family.clone(),
            families: config.model_families.clone(),
            parameter_size: config.model_type.clone(),
            quantization_level: config.file_type.clone(),
        }
    }
}

/// A tensor of the model, for verbose `show`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSummary {
    pub name: String,
    pub ty: String,
    pub shape: Vec<u64>,
}

/// Everything `/api/show` reports.
#[derive(Clone, Debug)]
pub struct ShowInfo {
    pub model: Model,
    pub details: Details,
    pub capabilities: Vec<Capability>,
    /// GGUF metadata (`model_info`), without `general.name` and `tokenizer.chat_template`;
    /// arrays longer than 5 are empty unless verbose. Empty if the model has no GGUF.
    pub model_info: Map<String, Value>,
    pub projector_info: Option<Map<String, Value>>,
    pub tensors: Vec<TensorSummary>,
    /// The GGUF's Jinja chat template, if it has one.
    pub chat_template: Option<String>,
    /// A Modelfile that recreates the model ([`Model::modelfile`]).
    pub modelfile: String,
    /// The parameters as Ollama's `show` prints them.
    pub parameters_text: String,
    /// License texts joined with newlines.
    pub license_text: String,
    pub modified: SystemTime,
}

impl Model {
    /// Reads a model's manifest, config and text layers (matched ignoring case).
    pub fn load(store: &Store, name: &Name) -> Result<Model> {
        let manifest = store.read_manifest(name)?;
        let config = store
            .read_blob(&manifest.manifest.config.digest, 1 << 20)
            .map(|b| ModelConfig::parse_lenient(&b))
            .unwrap_or_default();
        let text = |d: &crate::Digest| -> Result<String> {
            let b = store.read_blob(d, MAX_TEXT_LAYER)?;
            String::from_utf8(b).map_err(|_| Error::manifest(format!("layer {d} is not UTF-8 text")))
        };
        let mut m = Model {
            name: manifest.name.clone(),
            config,
            model_path: None,
            parent_model: None,
            adapters: Vec::new(),
            projectors: Vec::new(),
            template: None,
            system: None,
            license: Vec::new(),
            parameters: Parameters::new(),
            messages: Vec::new(),
            manifest: manifest.clone(),
        };
        for l in &manifest.manifest.layers {
            match l.media_type.as_str() {
                media::MODEL => {
                    m.model_path = Some(store.blob_path(&l.digest));
                    m.parent_model = l.from.clone();
                }
                media::ADAPTER => m.adapters.push(store.blob_path(&l.digest)),
                media::PROJECTOR => m.projectors.push(store.blob_path(&l.digest)),
                media::TEMPLATE | media::PROMPT => m.template = Some(text(&l.digest)?),
                media::SYSTEM => m.system = Some(text(&l.digest)?),
                media::LICENSE => m.license.push(text(&l.digest)?),
                media::PARAMS => {
                    let obj: Map<String, Value> = serde_json::from_str(&text(&l.digest)?)
                        .map_err(|e| Error::manifest(format!("params layer {}: {e}", l.digest)))?;
                    m.parameters = Parameters::from_layer(&obj);
                }
                media::MESSAGES => {
                    m.messages = serde_json::from_str(&text(&l.digest)?)
                        .map_err(|e| Error::manifest(format!("messages layer {}: {e}", l.digest)))?;
                }
                _ => {} // embed (deprecated), tensors, unknown: not ours to interpret
            }
        }
        Ok(m)
    }

    pub fn details(&self) -> Details {
        Details::from_config(&self.config, self.parent_model.as_deref())
    }

    /// A Modelfile that recreates this model, as `ollama show --modelfile` prints it: `FROM` the
    /// model blob's path, then adapters, projectors, template, system, parameters, licenses and
    /// messages.
    pub fn modelfile(&self) -> String {
        let mut cmds = Vec::new();
        let path = |p: &PathBuf| p.display().to_string();
        if let Some(p) = &self.model_path {
            cmds.push(Instruction::From(path(p)));
        }
        for p in &self.adapters {
            cmds.push(Instruction::Adapter(path(p)));
        }
        for p in &self.projectors {
            cmds.push(Instruction::From(path(p)));
        }
        if let Some(t) = &self.template {
            cmds.push(Instruction::Template(t.clone()));
        }
        if let Some(s) = &self.system {
            cmds.push(Instruction::System(s.clone()));
        }
        if !self.config.renderer.is_empty() {
            cmds.push(Instruction::Renderer(self.config.renderer.clone()));
        }
        if !self.config.parser.is_empty() {
            cmds.push(Instruction::Parser(self.config.parser.clone()));
        }
        for (name, value) in self.parameters.modelfile_values() {
            cmds.push(Instruction::Parameter {
                name: name.to_string(),
                value,
            });
        }
        for l in &self.license {
            cmds.push(Instruction::License(l.clone()));
        }
        for msg in &self.messages {
            match Role::parse(&msg.role) {
                Some(role) => cmds.push(Instruction::Message {
                    role,
                    content: msg.content.clone(),
                }),
                None => continue, // a role a Modelfile cannot express (e.g. "tool")
            }
        }
        let mf = Modelfile {
            commands: cmds.into_iter().map(Command::new).collect(),
            warnings: Vec::new(),
        };
        format!(
            "# Modelfile generated by \"ollamars show\"\n# To build a new Modelfile based on this, replace FROM with:\n# FROM {}\n\n{mf}",
            self.name.display_shortest()
        )
    }

    /// Capabilities inferred as Ollama does: the config's list; `embedding` if the GGUF has a
    /// pooling type, else `completion`; `vision`/`audio` from encoder metadata or a projector;
    /// `tools`, `insert` and `thinking` from the template requests use (the Modelfile TEMPLATE,
    /// else the GGUF chat template), exactly as the daemon checks them.
    pub fn capabilities(&self, gguf: Option<&GgufFile>) -> Vec<Capability> {
        let mut caps: Vec<Capability> = Vec::new();
        let mut add = |c: Capability| {
            if !caps.contains(&c) {
                caps.push(c);
            }
        };
        for c in &self.config.capabilities {
            if let Some(c) = Capability::parse(c) {
                add(c);
            }
        }
        if let Some(f) = gguf {
            let meta = &f.header().metadata;
            let arch = meta.get_str("general.architecture").ok().flatten().unwrap_or("");
            let has = |k: &str| meta.get(&format!("{arch}.{k}")).is_some();
            if has("pooling_type") {
                add(Capability::Embedding);
            } else {
                add(Capability::Completion);
            }
            if has("vision.block_count") {
                add(Capability::Vision);
            }
            if has("audio.block_count") {
                add(Capability::Audio);
            }
        }
        if !self.projectors.is_empty() {
            add(Capability::Vision);
        }
        let templates = ModelTemplates {
            modelfile_template: self.template.clone(),
            chat_template: gguf.and_then(|f| {
                let t = f.header().metadata.get_str("tokenizer.chat_template");
                t.ok().flatten().map(str::to_string)
            }),
            ..ModelTemplates::default()
        };
        // A template that does not compile fails every request, so it offers nothing.
        if let Ok(format) = ChatFormat::select(&templates, None) {
            let t = format.capabilities();
            if t.tools {
                add(Capability::Tools);
            }
            if t.insert {
                add(Capability::Insert);
            }
            if t.thinking {
                add(Capability::Thinking);
            }
        }
        if matches!(self.config.model_family.as_str(), "gptoss" | "gpt-oss") {
            add(Capability::Thinking);
        }
        caps
    }
}

/// A model and its weights' header (none for a model without weights).
fn load_with_header(store: &Store, name: &Name) -> Result<(Model, Option<GgufFile>)> {
    let model = Model::load(store, name)?;
    let gguf = match &model.model_path {
        Some(p) => Some(GgufFile::open(p)?),
        None => None,
    };
    Ok((model, gguf))
}

/// A model's capabilities, as `/api/show` reports them ([`Model::capabilities`]).
pub fn capabilities(store: &Store, name: &Name) -> Result<Vec<Capability>> {
    let (model, gguf) = load_with_header(store, name)?;
    Ok(model.capabilities(gguf.as_ref()))
}

/// Everything `/api/show` reports about a model. `verbose` keeps long metadata arrays and lists
/// tensors.
pub fn show(store: &Store, name: &Name, verbose: bool) -> Result<ShowInfo> {
    let (model, gguf) = load_with_header(store, name)?;
    let capabilities = model.capabilities(gguf.as_ref());
    let mut details = model.details();
    let (mut model_info, mut tensors, mut chat_template) = (Map::new(), Vec::new(), None);
    if let Some(f) = &gguf {
        model_info = ggufmeta::model_info(f, verbose);
        if details.quantization_level.is_empty() || details.quantization_level == "unknown" {
            details.quantization_level = ggufmeta::file_type_name(&f.header().metadata);
        }
        chat_template = f
            .header()
            .metadata
            .get_str("tokenizer.chat_template")
            .ok()
            .flatten()
            .map(str::to_string);
        if verbose {
            tensors = f
                .header()
                .tensors
                .iter()
                .map(|t| TensorSummary {
                    name: t.name.clone(),
                    // Ollama's spelling: `Q4_K`, `F32`.
                    ty: t.ty.name().to_uppercase(),
                    shape: t.dims.clone(),
                })
                .collect();
        }
    }
    let projector_info = match model.projectors.first() {
        Some(p) => Some(ggufmeta::model_info(&GgufFile::open(p)?, verbose)),
        None => None,
    };
    Ok(ShowInfo {
        details,
        capabilities,
        model_info,
        projector_info,
        tensors,
        chat_template,
        modelfile: model.modelfile(),
        parameters_text: model.parameters.show_text(),
        license_text: model.license.join("\n"),
        modified: model.manifest.modified,
        model,
    })
}
