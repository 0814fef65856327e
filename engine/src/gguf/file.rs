//! Opening GGUF files through mmap, including split sets (`name-00001-of-00003.gguf`).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::reader::{self, Header, TensorInfo};
use super::value::Metadata;
use crate::quant::FileType;
use crate::{Error, Result};

/// The metadata keys that tie the parts of a split model together (llama.cpp's `LLM_KV_SPLIT_*`).
pub const SPLIT_NO: &str = "split.no";
pub const SPLIT_COUNT: &str = "split.count";
pub const SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// One GGUF file mapped into memory.
pub struct GgufFile {
    path: PathBuf,
    /// Kept open for positioned reads ([`GgufFile::read_tensor_data`]).
    file: File,
    map: Mmap,
    header: Header,
}

impl GgufFile {
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref().to_path_buf();
        let file = File::open(&path).map_err(|e| Error::io(&path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
        if !meta.is_file() {
            return Err(Error::UnsupportedFormat("not a regular file".into()).in_file(&path));
        }
        let len = meta.len();
        if len < 4 {
            return Err(
                Error::UnsupportedFormat(format!("file too short ({len} bytes) to be GGUF")).in_file(&path),
            );
        }
        // SAFETY: the mapping is read-only and we never hand out references that outlive it. As with
        // every mmap-based loader (llama.cpp included), another process truncating or rewriting the
        // file while it is mapped is outside what we can defend against; the store never does that
        // (blobs are immutable and replaced only by rename).
        let map = unsafe { Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        let header = reader::parse(&map).map_err(|e| e.in_file(&path))?;
        Ok(GgufFile {
            path,
            file,
            map,
            header,
        })
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

    /// Unmaps this process's pages of the file (Linux; elsewhere a no-op). The page cache keeps
    /// them and a later read maps the same bytes again: for when the loader has copied what it
    /// needs, so that memory counts only what is read again.
    pub fn release_pages(&self) {
        #[cfg(target_os = "linux")]
        // SAFETY: this is a read-only shared mapping of the file; for such a mapping
        // MADV_DONTNEED only unmaps pages, and the next read of them maps the file's same bytes,
        // so what a borrow of the mapping sees does not change. Only a hint: an error changes
        // nothing.
        let _ = unsafe { self.map.unchecked_advise(memmap2::UncheckedAdvice::DontNeed) };
    }

    /// Copies the `out.len()` bytes of tensor `t`'s data from its byte `at` into `out`, with a
    /// positioned read of the file (Unix) rather than through the mapping, so that the bytes
    /// copied never become mapped pages of this process (its memory then holds them once).
    ///
    /// # Panics
    /// If the range is not within the tensor's data.
    pub fn read_tensor_data(&self, t: &TensorInfo, at: usize, out: &mut [u8]) -> Result<()> {
        assert!(
            at.checked_add(out.len()).is_some_and(|end| end as u64 <= t.size),
            "a range outside the tensor's data"
        );
        let start = self.header.data_offset + t.offset + at as u64;
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            self.file
                .read_exact_at(out, start)
                .map_err(|e| Error::io(&self.path, e))
        }
        #[cfg(not(unix))]
        {
            let start = start as usize;
            out.copy_from_slice(&self.map[start..start + out.len()]);
            Ok(())
        }
    }

    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
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
    /// it by llama.cpp's naming (`prefix-%05d-of-%05d.gguf`) and opened too, as llama.cpp does.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref();
        let first = GgufFile::open(path)?;
        let count = split_count(&first)?;
        let mut files = vec![first];
        if count > 1 {
            let no = files[0]
                .header
                .metadata
                .get_u64(SPLIT_NO)
                .map_err(|e| e.in_file(path))?;
            if no.unwrap_or(0) != 0 {
                let no = no.unwrap_or(0);
                let hint = split_prefix(path, no, count)
                    .map(|p| format!(", {}", split_path(&p, 0, count).display()))
                    .unwrap_or_default();
                return Err(Error::Split(format!(
                    "{} is part {} of {count} of a split model; open its first part{hint}",
                    path.display(),
                    no + 1
                )));
            }
            let prefix = split_prefix(path, 0, count).ok_or_else(|| {
                Error::Split(format!(
                    "{} is the first part of {count} but is not named like one: the name must end in -00001-of-{count:05}.gguf",
                    path.display()
                ))
            })?;
            for i in 1..count {
                files.push(open_part(&prefix, i, count)?);
            }
        }
        let mut tensors = Vec::new();
        let mut by_name = HashMap::new();
        for (fi, f) in files.iter().enumerate() {
            for t in &f.header.tensors {
                if let Some(&other) = by_name.get(&t.name) {
                    let other: &Tensor = &tensors[other];
                    return Err(Error::Split(format!(
                        "tensor {:?} is in both {} and {}",
                        t.name,
                        files[other.file].path.display(),
                        f.path.display()
                    )));
                }
                by_name.insert(t.name.clone(), tensors.len());
                tensors.push(Tensor {
                    info: t.clone(),
                    file: fi,
                });
            }
        }
        if count > 1 {
            let expect = files[0]
                .header
                .metadata
                .get_u64(SPLIT_TENSORS_COUNT)
                .map_err(|e| e.in_file(path))?;
            if let Some(expect) = expect {
                if expect != tensors.len() as u64 {
                    return Err(Error::Split(format!(
                        "{} says the model has {expect} tensors ({SPLIT_TENSORS_COUNT}), its {count} parts hold {}",
                        path.display(),
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

    /// The file (or split parts, in order) the model was read from.
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

    /// [`GgufFile::release_pages`] of every part.
    pub fn release_pages(&self) {
        self.files.iter().for_each(GgufFile::release_pages);
    }

    /// [`GgufFile::read_tensor_data`] of the part that holds `t`.
    pub fn read_tensor_data(&self, t: &Tensor, at: usize, out: &mut [u8]) -> Result<()> {
        self.files[t.file].read_tensor_data(&t.info, at, out)
    }

    /// Total size of all parts in bytes.
    pub fn total_size(&self) -> u64 {
        self.files.iter().map(GgufFile::len).sum()
    }

    /// Number of parameters: elements of all tensors (what llama.cpp prints as "model params").
    pub fn n_params(&self) -> u64 {
        self.tensors
            .iter()
            .fold(0u64, |n, t| n.saturating_add(t.info.n_elements()))
    }

    /// The model's quantization mix: `general.file_type` if the file records it, otherwise guessed
    /// from the tensor types as llama.cpp does.
    pub fn file_type(&self) -> Result<ModelFileType> {
        let recorded = self
            .metadata()
            .get_u32("general.file_type")
            .map_err(|e| e.in_file(self.files[0].path()))?;
        Ok(match recorded {
            Some(id) => ModelFileType {
                id: id & !FileType::GUESSED_FLAG,
                ftype: FileType::from_id(id),
                guessed: id & FileType::GUESSED_FLAG != 0,
            },
            None => {
                let ftype = FileType::guess(self.tensors.iter().map(|t| (t.info.name.as_str(), t.info.ty)));
                ModelFileType {
                    id: ftype.id(),
                    ftype: Some(ftype),
                    guessed: true,
                }
            }
        })
    }
}

/// A model's quantization mix as llama.cpp reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelFileType {
    /// The `llama_ftype` id (without llama.cpp's "guessed" flag).
    pub id: u32,
    /// `None` for an id this engine does not know (removed or newer than us).
    pub ftype: Option<FileType>,
    /// Guessed from the tensor types rather than recorded in `general.file_type`.
    pub guessed: bool,
}

impl fmt::Display for ModelFileType {
    /// The short name (`Q4_K_M`), marked when guessed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.ftype {
            Some(t) => write!(f, "{}", t.name())?,
            None => write!(f, "unknown file type {}", self.id)?,
        }
        if self.guessed {
            write!(f, " (guessed)")?;
        }
        Ok(())
    }
}

/// `split.count` of a file: 1 when absent (or 0, which llama.cpp treats as "not split").
fn split_count(f: &GgufFile) -> Result<u64> {
    let count = f
        .header
        .metadata
        .get_u64(SPLIT_COUNT)
        .map_err(|e| e.in_file(f.path()))?
        .unwrap_or(1);
    if count > u64::from(u16::MAX) {
        return Err(Error::BadKey {
            key: SPLIT_COUNT.into(),
            msg: format!("{count} parts is more than a split set can have (65535)"),
        }
        .in_file(f.path()));
    }
    Ok(count.max(1))
}

/// Opens part `i` (0-based) of a split set and checks that it says it is that part.
fn open_part(prefix: &Path, i: u64, count: u64) -> Result<GgufFile> {
    let p = split_path(prefix, i, count);
    let part = GgufFile::open(&p).map_err(|e| match e {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Error::Split(format!("part {} of {count} is missing: {}", i + 1, p.display()))
        }
        e => e,
    })?;
    let meta = &part.header.metadata;
    let no = meta.get_u64(SPLIT_NO).map_err(|e| e.in_file(&p))?;
    if no != Some(i) {
        let found = no.map_or("no split.no key".to_string(), |n| format!("split.no {n}"));
        return Err(Error::Split(format!(
            "{} should be part {} of {count} (split.no {i}) but has {found}",
            p.display(),
            i + 1
        )));
    }
    let part_count = meta.get_u64(SPLIT_COUNT).map_err(|e| e.in_file(&p))?;
    if part_count != Some(count) {
        let found = part_count.map_or("no split.count key".to_string(), |n| format!("split.count {n}"));
        return Err(Error::Split(format!(
            "{} is part {} of a set of {count} but has {found}",
            p.display(),
            i + 1
        )));
    }
    Ok(part)
}

/// llama.cpp's `llama_split_prefix`: `dir/model-00002-of-00003.gguf` -> `dir/model` when the name
/// is part `i` (0-based) of `count`.
fn split_prefix(path: &Path, i: u64, count: u64) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let suffix = format!("-{:05}-of-{count:05}.gguf", i + 1);
    let stem = name.strip_suffix(&suffix)?;
    Some(path.with_file_name(stem))
}

/// llama.cpp's `llama_split_path`: part `i` (0-based) of `count`, e.g.
/// `split_path("dir/model", 0, 3)` is `dir/model-00001-of-00003.gguf`.
pub fn split_path(prefix: &Path, i: u64, count: u64) -> PathBuf {
    let name = prefix
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    prefix.with_file_name(format!("{name}-{:05}-of-{count:05}.gguf", i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_names_follow_llama_cpp() {
        let p = split_path(Path::new("/m/model"), 1, 3);
        assert_eq!(p, Path::new("/m/model-00002-of-00003.gguf"));
        assert_eq!(split_prefix(&p, 1, 3), Some(PathBuf::from("/m/model")));
        assert_eq!(split_prefix(&p, 0, 3), None);
        assert_eq!(split_prefix(&p, 1, 4), None);
    }
}
