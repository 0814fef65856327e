//! GGUF metadata values and the ordered key/value map that holds them.

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
    /// An array: the element type is kept so that an empty array round-trips.
    Array(ValueType, Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
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

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(_, v) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    /// A short human rendering: arrays longer than 8 elements are summarised.
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
            Value::Array(ty, items) => {
                const SHOWN: usize = 8;
                write!(f, "[")?;
                for (i, v) in items.iter().take(SHOWN).enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                if items.len() > SHOWN {
                    write!(f, ", ... ({} {} values)", items.len(), ty.name())?;
                }
                write!(f, "]")
            }
        }
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
                msg: format!("expected {what}, found {} value {v}", v.value_type().name()),
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
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(v) => Err(Error::BadKey {
                key: key.to_string(),
                msg: format!("expected a string, found {} value", v.value_type().name()),
            }),
        }
    }

    pub fn get_array(&self, key: &str) -> Result<Option<&[Value]>> {
        self.typed(key, "an array", Value::as_array)
    }

    /// A required key: like the `get_*` getters, but a missing key is an error naming it.
    pub fn require<T>(&self, key: &str, got: Result<Option<T>>) -> Result<T> {
        got?.ok_or_else(|| Error::MissingKey(key.to_string()))
    }

    /// An array of strings (e.g. `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>> {
        self.typed_array(key, "strings", Value::as_str)
    }

    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        self.typed_array(key, "numbers", |v| v.as_f64().map(|x| x as f32))
    }

    pub fn get_i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        self.typed_array(key, "integers", Value::as_i64)
    }

    fn typed_array<'a, T>(
        &'a self,
        key: &str,
        what: &str,
        f: impl Fn(&'a Value) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        let Some(items) = self.get_array(key)? else {
            return Ok(None);
        };
        items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                f(v).ok_or_else(|| Error::BadKey {
                    key: key.to_string(),
                    msg: format!(
                        "expected an array of {what}, element {i} is {}",
                        v.value_type().name()
                    ),
                })
            })
            .collect::<Result<Vec<T>>>()
            .map(Some)
    }

    /// A per-layer hyperparameter: either one scalar for every layer or an array with one entry
    /// per layer (llama.cpp's `get_key_or_arr`).
    pub fn get_per_layer_u64(&self, key: &str, n_layer: usize) -> Result<Option<Vec<u64>>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(..)) => {
                let arr = self
                    .typed_array(key, "unsigned integers", Value::as_u64)?
                    .unwrap_or_default();
                if arr.len() != n_layer {
                    return Err(Error::BadKey {
                        key: key.to_string(),
                        msg: format!("has {} entries for {n_layer} layers", arr.len()),
                    });
                }
                Ok(Some(arr))
            }
            Some(_) => Ok(self.get_u64(key)?.map(|v| vec![v; n_layer])),
        }
    }
}
