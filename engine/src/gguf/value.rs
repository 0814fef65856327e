//! GGUF metadata values and the ordered key/value map that holds them.
//!
//! Arrays are stored by element type (`Array::F32(Vec<f32>)`, `Array::String(Strings)`), not
//! as a `Vec<Value>`: a 262k-token vocabulary is then one vector of strings and its scores one
//! vector of floats, and a numeric array takes no more memory than its bytes in the file.

use std::collections::HashMap;
use std::fmt;

use crate::{Error, Result};

/// The type tag of a metadata value (`enum gguf_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

impl ValueType {
    pub fn from_id(id: u32) -> Option<ValueType> {
        use ValueType::*;
        Some(match id {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        self as u32
    }

    /// Size in bytes of one value of a fixed-size type; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<u64> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array: all elements of one type, stored compactly. Arrays of arrays hold each inner
/// array with its own element type (the spec allows nesting; llama.cpp itself rejects it).
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Strings),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

/// An array of strings stored as one buffer and the end offset of each string: a 262k-token
/// vocabulary takes about 4 MB this way instead of the ~17 MB of one `String` (and one heap
/// block) per element, and a loaded model keeps its metadata for as long as it is loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Strings {
    buf: String,
    /// End offset of string `i` in `buf` (its start is the previous end).
    ends: Vec<usize>,
}

impl Strings {
    pub fn with_capacity(n: usize, bytes: usize) -> Strings {
        Strings {
            buf: String::with_capacity(bytes),
            ends: Vec::with_capacity(n),
        }
    }

    pub fn push(&mut self, s: &str) {
        self.buf.push_str(s);
        self.ends.push(self.buf.len());
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The bytes of all strings together.
    pub fn total_len(&self) -> usize {
        self.buf.len()
    }

    pub fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.buf[start..end])
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &str> + '_ {
        (0..self.len()).map(|i| self.get(i).expect("index below len"))
    }

    pub fn to_vec(&self) -> Vec<String> {
        self.iter().map(str::to_string).collect()
    }
}

impl<S: AsRef<str>> FromIterator<S> for Strings {
    fn from_iter<I: IntoIterator<Item = S>>(iter: I) -> Strings {
        let mut out = Strings::default();
        iter.into_iter().for_each(|s| out.push(s.as_ref()));
        out
    }
}

impl From<Vec<String>> for Strings {
    fn from(v: Vec<String>) -> Strings {
        v.into_iter().collect()
    }
}

/// Runs `$e` with `$v` bound to the vector inside any `Array` variant.
macro_rules! each_array {
    ($arr:expr, $v:ident => $e:expr) => {
        match $arr {
            Array::U8($v) => $e,
            Array::I8($v) => $e,
            Array::U16($v) => $e,
            Array::I16($v) => $e,
            Array::U32($v) => $e,
            Array::I32($v) => $e,
            Array::F32($v) => $e,
            Array::Bool($v) => $e,
            Array::String($v) => $e,
            Array::Array($v) => $e,
            Array::U64($v) => $e,
            Array::I64($v) => $e,
            Array::F64($v) => $e,
        }
    };
}

impl Array {
    /// An empty array of element type `ty`.
    pub fn empty(ty: ValueType) -> Array {
        match ty {
            ValueType::U8 => Array::U8(Vec::new()),
            ValueType::I8 => Array::I8(Vec::new()),
            ValueType::U16 => Array::U16(Vec::new()),
            ValueType::I16 => Array::I16(Vec::new()),
            ValueType::U32 => Array::U32(Vec::new()),
            ValueType::I32 => Array::I32(Vec::new()),
            ValueType::F32 => Array::F32(Vec::new()),
            ValueType::Bool => Array::Bool(Vec::new()),
            ValueType::String => Array::String(Strings::default()),
            ValueType::Array => Array::Array(Vec::new()),
            ValueType::U64 => Array::U64(Vec::new()),
            ValueType::I64 => Array::I64(Vec::new()),
            ValueType::F64 => Array::F64(Vec::new()),
        }
    }

    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    pub fn len(&self) -> usize {
        each_array!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a `Value` (strings and inner arrays are cloned: meant for display, not for
    /// bulk access, which the typed variants give directly).
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            Array::U8(v) => Value::U8(*v.get(i)?),
            Array::I8(v) => Value::I8(*v.get(i)?),
            Array::U16(v) => Value::U16(*v.get(i)?),
            Array::I16(v) => Value::I16(*v.get(i)?),
            Array::U32(v) => Value::U32(*v.get(i)?),
            Array::I32(v) => Value::I32(*v.get(i)?),
            Array::F32(v) => Value::F32(*v.get(i)?),
            Array::Bool(v) => Value::Bool(*v.get(i)?),
            Array::String(v) => Value::String(v.get(i)?.to_string()),
            Array::Array(v) => Value::Array(v.get(i)?.clone()),
            Array::U64(v) => Value::U64(*v.get(i)?),
            Array::I64(v) => Value::I64(*v.get(i)?),
            Array::F64(v) => Value::F64(*v.get(i)?),
        })
    }

    /// The elements as signed integers, whatever integer (or bool) type they are stored as;
    /// `None` for other element types or a u64 beyond `i64::MAX`.
    pub fn to_i64s(&self) -> Option<Vec<i64>> {
        fn conv<T: Copy + TryInto<i64>>(v: &[T]) -> Option<Vec<i64>> {
            v.iter().map(|&x| x.try_into().ok()).collect()
        }
        match self {
            Array::U8(v) => conv(v),
            Array::I8(v) => conv(v),
            Array::U16(v) => conv(v),
            Array::I16(v) => conv(v),
            Array::U32(v) => conv(v),
            Array::I32(v) => conv(v),
            Array::U64(v) => conv(v),
            Array::I64(v) => Some(v.clone()),
            Array::Bool(v) => Some(v.iter().map(|&b| i64::from(b)).collect()),
            Array::F32(_) | Array::F64(_) | Array::String(_) | Array::Array(_) => None,
        }
    }

    /// The elements as floats, from any float or integer element type.
    pub fn to_f32s(&self) -> Option<Vec<f32>> {
        match self {
            Array::F32(v) => Some(v.clone()),
            Array::F64(v) => Some(v.iter().map(|&x| x as f32).collect()),
            Array::U64(v) => Some(v.iter().map(|&x| x as f32).collect()),
            _ => Some(self.to_i64s()?.into_iter().map(|x| x as f32).collect()),
        }
    }

    pub fn as_strings(&self) -> Option<&Strings> {
        match self {
            Array::String(v) => Some(v),
            _ => None,
        }
    }
}

impl Value {
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(..) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// The value as a signed integer, whatever integer (or bool) type the writer chose.
    pub fn as_i64(&self) -> Option<i64> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => i64::try_from(v).ok()?,
            Value::I64(v) => v,
            Value::Bool(v) => v.into(),
            _ => return None,
        })
    }

    /// The value as an unsigned integer; negative values give `None`.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U64(v) => Some(v),
            _ => u64::try_from(self.as_i64()?).ok(),
        }
    }

    /// The value as a float, from any float or integer type.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::U64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(v) => Some(v),
            _ => self.as_i64().map(|v| v != 0),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    /// A short human rendering: strings quoted and escaped, arrays summarised (see [`Array`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::U8(v) => write!(f, "{v}"),
            Value::I8(v) => write!(f, "{v}"),
            Value::U16(v) => write!(f, "{v}"),
            Value::I16(v) => write!(f, "{v}"),
            Value::U32(v) => write!(f, "{v}"),
            Value::I32(v) => write!(f, "{v}"),
            Value::F32(v) => write!(f, "{v}"),
            Value::Bool(v) => write!(f, "{v}"),
            Value::String(s) => write!(f, "{s:?}"),
            Value::U64(v) => write!(f, "{v}"),
            Value::I64(v) => write!(f, "{v}"),
            Value::F64(v) => write!(f, "{v}"),
            Value::Array(a) => write!(f, "{a}"),
        }
    }
}

impl fmt::Display for Array {
    /// The first elements and, for a longer array, how many there are in all:
    /// `["<pad>", "<eos>", "<bos>", ... (262144 string values)]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const SHOWN: usize = 8;
        write!(f, "[")?;
        for i in 0..self.len().min(SHOWN) {
            if i > 0 {
                write!(f, ", ")?;
            }
            if let Some(v) = self.get(i) {
                write!(f, "{v}")?;
            }
        }
        if self.len() > SHOWN {
            write!(f, ", ... ({} {} values)", self.len(), self.elem_type())?;
        }
        write!(f, "]")
    }
}

/// The metadata of a GGUF file: keys in file order, unique, with lookup by name.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts a key, replacing the value of an existing key in place (order is kept).
    pub fn set(&mut self, key: impl Into<String>, value: Value) {
        let key = key.into();
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value,
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value));
            }
        }
    }

    /// Inserts a new key; returns `false` (and changes nothing) if it is already there.
    pub fn insert_new(&mut self, key: String, value: Value) -> bool {
        if self.index.contains_key(&key) {
            return false;
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value));
        true
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.index.remove(key)?;
        let (_, v) = self.entries.remove(i);
        for idx in self.index.values_mut() {
            if *idx > i {
                *idx -= 1;
            }
        }
        Some(v)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        what: &str,
        f: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| Error::BadKey {
                key: key.to_string(),
                msg: format!("expected {what}, found {} value {v}", v.value_type()),
            }),
        }
    }

    /// An unsigned integer key of any integer type; `Ok(None)` if absent, an error if mistyped.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "an unsigned integer", Value::as_u64)
    }

    pub fn get_u32(&self, key: &str) -> Result<Option<u32>> {
        self.typed(key, "an unsigned 32-bit integer", |v| {
            u32::try_from(v.as_u64()?).ok()
        })
    }

    pub fn get_i64(&self, key: &str) -> Result<Option<i64>> {
        self.typed(key, "an integer", Value::as_i64)
    }

    pub fn get_f32(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "a number", |v| v.as_f64().map(|x| x as f32))
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a boolean", Value::as_bool)
    }

    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "a string", Value::as_str)
    }

    pub fn get_array(&self, key: &str) -> Result<Option<&Array>> {
        self.typed(key, "an array", Value::as_array)
    }

    /// A required key: like the `get_*` getters, but a missing key is an error naming it.
    pub fn require<T>(&self, key: &str, got: Result<Option<T>>) -> Result<T> {
        got?.ok_or_else(|| Error::MissingKey(key.to_string()))
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`), borrowed.
    pub fn get_str_array(&self, key: &str) -> Result<Option<&Strings>> {
        self.typed_array(key, "strings", Array::as_strings)
    }

    /// An array of numbers of any numeric element type, as f32 (e.g. `tokenizer.ggml.scores`).
    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        self.typed_array(key, "numbers", Array::to_f32s)
    }

    /// An array of integers of any integer element type (e.g. `tokenizer.ggml.token_type`).
    pub fn get_i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        self.typed_array(key, "integers", Array::to_i64s)
    }

    fn typed_array<'a, T>(
        &'a self,
        key: &str,
        what: &str,
        f: impl Fn(&'a Array) -> Option<T>,
    ) -> Result<Option<T>> {
        let Some(arr) = self.get_array(key)? else {
            return Ok(None);
        };
        f(arr).map(Some).ok_or_else(|| Error::BadKey {
            key: key.to_string(),
            msg: format!(
                "expected an array of {what}, found an array of {} {} values",
                arr.len(),
                arr.elem_type()
            ),
        })
    }

    /// A per-layer hyperparameter: either one scalar for every layer or an array with one entry
    /// per layer (llama.cpp's `get_key_or_arr`).
    pub fn get_per_layer_u64(&self, key: &str, n_layer: usize) -> Result<Option<Vec<u64>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(_)) => {
                let bad = |msg: String| Error::BadKey {
                    key: key.to_string(),
                    msg,
                };
                let arr = self.get_i64_array(key)?.unwrap_or_default();
                if arr.len() != n_layer {
                    return Err(bad(format!("has {} entries for {n_layer} layers", arr.len())));
                }
                arr.into_iter()
                    .map(|v| u64::try_from(v).map_err(|_| bad(format!("negative entry {v}"))))
                    .collect::<Result<Vec<u64>>>()
                    .map(Some)
            }
            Some(_) => Ok(self.get_u64(key)?.map(|v| vec![v; n_layer])),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getters_coerce_integer_types() {
        let mut m = Metadata::new();
        m.set("a", Value::U16(7));
        m.set("b", Value::I32(-1));
        m.set("c", Value::Array(Array::I32(vec![1, 2, 3])));
        m.set("d", Value::Array(Array::String(vec!["x".to_string()].into())));
        m.set("e", Value::Array(Array::U64(vec![u64::MAX])));
        assert_eq!(m.get_u64("a").unwrap(), Some(7));
        assert_eq!(m.get_u32("a").unwrap(), Some(7));
        assert!(m.get_u64("b").is_err());
        assert_eq!(m.get_i64("b").unwrap(), Some(-1));
        assert_eq!(m.get_f32_array("c").unwrap(), Some(vec![1.0, 2.0, 3.0]));
        assert_eq!(m.get_i64_array("c").unwrap(), Some(vec![1, 2, 3]));
        assert!(m.get_i64_array("d").is_err());
        assert!(m.get_i64_array("e").is_err(), "u64::MAX is no i64");
        assert_eq!(m.get_str_array("d").unwrap().unwrap().to_vec(), ["x"]);
        assert_eq!(m.get_per_layer_u64("a", 2).unwrap(), Some(vec![7, 7]));
        assert_eq!(m.get_per_layer_u64("c", 3).unwrap(), Some(vec![1, 2, 3]));
        assert!(m.get_per_layer_u64("c", 2).is_err());
        assert_eq!(m.get_u64("missing").unwrap(), None);
        assert!(matches!(
            m.require("missing", m.get_u64("missing")),
            Err(Error::MissingKey(_))
        ));
    }

    #[test]
    fn strings_keep_order_empties_and_bounds() {
        let v: Strings = ["<s>", "", "▁a", "héllo"].into_iter().collect();
        assert_eq!(v.len(), 4);
        assert_eq!(v.total_len(), "<s>▁ahéllo".len());
        assert_eq!(v.get(1), Some(""));
        assert_eq!(v.get(3), Some("héllo"));
        assert_eq!(v.get(4), None);
        assert_eq!(v.iter().collect::<Vec<_>>(), ["<s>", "", "▁a", "héllo"]);
        assert_eq!(Strings::from(v.to_vec()), v);
        let a = Array::String(v);
        assert_eq!(a.get(2), Some(Value::String("▁a".into())));
        assert_eq!(a.to_string(), r#"["<s>", "", "▁a", "héllo"]"#);
    }

    #[test]
    fn long_arrays_are_summarised() {
        let v = Value::Array(Array::U32((0..100).collect()));
        assert_eq!(v.to_string(), "[0, 1, 2, 3, 4, 5, 6, 7, ... (100 u32 values)]");
        let v = Value::Array(Array::String(vec!["a\n".to_string()].into()));
        assert_eq!(v.to_string(), r#"["a\n"]"#);
    }

    #[test]
    fn remove_keeps_order_and_index() {
        let mut m = Metadata::new();
        for (i, k) in ["a", "b", "c"].into_iter().enumerate() {
            m.set(k, Value::U32(i as u32));
        }
        assert_eq!(m.remove("a"), Some(Value::U32(0)));
        assert_eq!(m.get("c"), Some(&Value::U32(2)));
        assert_eq!(m.iter().map(|(k, _)| k).collect::<Vec<_>>(), ["b", "c"]);
    }
}
