//! Opening GGUF files through mmap, including split sets (`name-00001-of-00003.gguf`).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::reader::{self, Header, TensorInfo};
use super::value::Metadata;
use crate::{Error, Result};

/// One GGUF file mapped into memory.
pub struct GgufFile {
    path: PathBuf,
    map: Mmap,
    header: Header,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let len = file.metadata().map_err(|e| Error::io(&path, e))?.len();
        if len < 4 {
            return Err(Error::UnsupportedFormat(format!(
                "{}: file too short ({len} bytes) to be GGUF",
                path.display()
            )));
        }
        // SAFETY: the mapping is read-only and we never hand out references that outlive it. As with
        // every mmap-based loader (llama.cpp included), another process truncating or rewriting the
        // file while it is mapped is outside what we can defend against; the store never does that
        // (blobs are immutable and replaced only by rename).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        let header = reader::parse(&map).map_err(|e| with_path(e, &path))?;
        Ok(GgufFile { path, map, header })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The bytes of a tensor of this file (bounds were checked when the header was parsed).
    pub fn tensor_data(&self, t: &TensorInfo) -> &[u8] {
        let start = (self.header.data_offset + t.offset) as usize;
        &self.map[start..start + t.size as usize]
    }

    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// Prefixes errors about a file's contents with the file's path.
fn with_path(e: Error, path: &Path) -> Error {
    match e {
        Error::UnsupportedFormat(m) => Error::UnsupportedFormat(format!("{}: {m}", path.display())),
        Error::Corrupt { offset, msg } => Error::Corrupt {
            offset,
            msg: format!("{}: {msg}", path.display()),
        },
        other => other,
    }
}

/// A tensor of a (possibly split) model: its info and which file holds it.
#[derive(Clone, Debug)]
pub struct Tensor {
    pub info: TensorInfo,
    /// Index into [`Gguf::files`].
    pub file: usize,
}

/// A model in GGUF form: one file, or all parts of a split set opened as one.
///
/// Metadata comes from the first part (llama.cpp writes model metadata only there); tensors from
/// all parts, by name.
pub struct Gguf {
    files: Vec<GgufFile>,
    tensors: Vec<Tensor>,
    by_name: HashMap<String, usize>,
}

impl Gguf {
    /// Opens a GGUF file. If it is the first part of a split set, the other parts are found next to
    /// it by llama.cpp's naming (`prefix-%05d-of-%05d.gguf`) and opened too.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let first = GgufFile::open(path.as_ref())?;
        let meta = &first.header.metadata;
        let count = meta.get_u64("split.count")?.unwrap_or(1);
        let mut files = vec![first];
        if count > 1 {
            let no = files[0].header.metadata.get_u64("split.no")?.unwrap_or(0);
            if no != 0 {
                return Err(Error::Split(format!(
                    "{} is part {} of {count}; open the first part (-00001-of-{count:05}.gguf)",
                    path.as_ref().display(),
                    no + 1
                )));
            }
            if count > 99_999 {
                return Err(Error::Split(format!(
                    "split.count {count} is not a valid part count"
                )));
            }
            let prefix = split_prefix(path.as_ref(), count).ok_or_else(|| {
                Error::Split(format!(
                    "{} has split.count {count} but its name does not end in -00001-of-{count:05}.gguf",
                    path.as_ref().display()
                ))
            })?;
            for i in 1..count {
                let p = split_path(&prefix, i, count);
                let part = GgufFile::open(&p)?;
                let part_no = part.header.metadata.get_u64("split.no")?;
                if part_no != Some(i) {
                    return Err(Error::Split(format!(
                        "{} has split.no {part_no:?}, expected {i}",
                        p.display()
                    )));
                }
                files.push(part);
            }
        }
        let mut tensors = Vec::new();
        let mut by_name = HashMap::new();
        for (fi, f) in files.iter().enumerate() {
            for t in &f.header.tensors {
                if by_name.insert(t.name.clone(), tensors.len()).is_some() {
                    return Err(Error::Split(format!(
                        "tensor '{}' appears in more than one part",
                        t.name
                    )));
                }
                tensors.push(Tensor {
                    info: t.clone(),
                    file: fi,
                });
            }
        }
        if count > 1 {
            let expect = files[0].header.metadata.get_u64("split.tensors.count")?;
            if let Some(expect) = expect {
                if expect != tensors.len() as u64 {
                    return Err(Error::Split(format!(
                        "split.tensors.count says {expect} tensors, the parts hold {}",
                        tensors.len()
                    )));
                }
            }
        }
        Ok(Gguf {
            files,
            tensors,
            by_name,
        })
    }

    pub fn metadata(&self) -> &Metadata {
        &self.files[0].header.metadata
    }

    pub fn version(&self) -> u32 {
        self.files[0].header.version
    }

    pub fn files(&self) -> &[GgufFile] {
        &self.files
    }

    /// All tensors, in file order (part by part).
    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.by_name.get(name).map(|&i| &self.tensors[i])
    }

    /// A tensor that must exist: a clear error naming it otherwise.
    pub fn require_tensor(&self, name: &str) -> Result<&Tensor> {
        self.tensor(name)
            .ok_or_else(|| Error::MissingTensor(name.to_string()))
    }

    pub fn tensor_data(&self, t: &Tensor) -> &[u8] {
        self.files[t.file].tensor_data(&t.info)
    }

    /// Total size of all parts in bytes.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(GgufFile::len).sum()
    }
}

/// `dir/model-00001-of-00003.gguf` -> `dir/model` when the suffix matches `count`.
fn split_prefix(path: &Path, count: u64) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let suffix = format!("-00001-of-{count:05}.gguf");
    let stem = name.strip_suffix(&suffix)?;
    Some(path.with_file_name(stem))
}

/// llama.cpp's `llama_split_path`: part `i` (0-based) of `count`.
pub fn split_path(prefix: &Path, i: u64, count: u64) -> PathBuf {
    let name = prefix
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    prefix.with_file_name(format!("{name}-{:05}-of-{count:05}.gguf", i + 1))
}
