//! The serde visitors for TF Serving's two request layouts: `instances` (a
//! list of examples, values or objects keyed by input name) and columnar
//! `inputs`. They stream values into the columns without building a tree.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use super::super::CodecError;
use super::column::{Column, ValueSeed};
use crate::signature::SignatureSpec;

/// The `instances` list: one element per example.
pub(super) struct InstancesSeed<'c, 's> {
    pub(super) columns: &'c mut [Column<'s>],
    pub(super) signature: &'s SignatureSpec,
    pub(super) layout: &'c mut Layout,
}

/// Whether `instances` holds objects keyed by input name or bare values and
/// lists: the first element decides, and TF Serving refuses a mix.
#[derive(Default)]
pub(super) struct Layout {
    pub(super) objects: Option<bool>,
    pub(super) index: usize,
    pub(super) error: Option<CodecError>,
}

impl Layout {
    fn element<E: de::Error>(&mut self, is_object: bool) -> Result<(), E> {
        let expected = *self.objects.get_or_insert(is_object);
        if expected == is_object {
            return Ok(());
        }
        let error = match expected {
            true => CodecError::ListForObject(self.index),
            false => CodecError::ObjectForList(self.index),
        };
        let message = error.to_string();
        self.error = Some(error);
        Err(E::custom(message))
    }
}

impl<'de> DeserializeSeed<'de> for InstancesSeed<'_, '_> {
    type Value = usize;
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<usize, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for InstancesSeed<'_, '_> {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("'instances' to be a list/array")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<usize, A::Error> {
        let mut index = 0;
        loop {
            self.layout.index = index;
            let seed = InstanceSeed {
                columns: &mut *self.columns,
                signature: self.signature,
                layout: &mut *self.layout,
            };
            match seq.next_element_seed(seed) {
                Ok(Some(())) => index += 1,
                Ok(None) => return Ok(index),
                Err(err) => {
                    name_failed_element(self.columns, index);
                    return Err(err);
                }
            }
        }
    }
}

/// Prefixes a column's error with the element it came from, in TF Serving's words.
pub(super) fn name_failed_element(columns: &mut [Column<'_>], index: usize) {
    if let Some(column) = columns.iter_mut().find(|c| c.error.is_some()) {
        if let Some(inner) = column.error.take() {
            column.error = Some(CodecError::Element {
                index,
                inner: Box::new(inner),
            });
        }
    }
}

/// One element of `instances`: a bare value (single-input signatures) or an
/// object keyed by input name.
pub(super) struct InstanceSeed<'c, 's> {
    pub(super) columns: &'c mut [Column<'s>],
    pub(super) signature: &'s SignatureSpec,
    pub(super) layout: &'c mut Layout,
}

impl<'s> InstanceSeed<'_, 's> {
    fn single<E: de::Error>(&mut self) -> Result<ValueSeed<'_, 's>, E> {
        self.layout.element(false)?;
        if self.columns.len() != 1 {
            let message = format!(
                "instances is a plain list, but expecting list of objects as multiple input tensors required as per tensorinfo_map (inputs: {})",
                self.signature.input_names()
            );
            return Err(self.columns[0].fail(message));
        }
        Ok(ValueSeed {
            column: &mut self.columns[0],
            depth: 1,
        })
    }
}

impl<'de> DeserializeSeed<'de> for InstanceSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

/// A value that is not an object is the only input's: every visit but
/// `visit_map` goes to the seed of that input (`single`).
macro_rules! forward_to_single {
    () => {
        forward_to_single!(visit_bool(bool), visit_i64(i64), visit_u64(u64), visit_f64(f64), visit_str(&str));

        fn visit_unit<E: de::Error>(mut self) -> Result<(), E> {
            self.single()?.visit_unit()
        }

        fn visit_seq<A: SeqAccess<'de>>(mut self, seq: A) -> Result<(), A::Error> {
            self.single()?.visit_seq(seq)
        }
    };
    ($($method:ident($ty:ty)),*) => {$(
        fn $method<E: de::Error>(mut self, v: $ty) -> Result<(), E> {
            self.single()?.$method(v)
        }
    )*};
}

impl<'de> Visitor<'de> for InstanceSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an instance: a value, a list, or an object keyed by input name")
    }

    forward_to_single!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = vec![false; self.columns.len()];
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if first && key == "b64" && self.columns.len() == 1 {
                // A binary string value for the only input, not a named-input object.
                self.layout.element(false)?;
                return self.columns[0].read_b64(&mut map, 1);
            }
            if first {
                self.layout.element(true)?;
            }
            first = false;
            let Some(position) = self.signature.input_index(&key) else {
                let names = self.signature.input_names();
                return Err(self.columns[0].fail(format!(
                    "JSON object has key '{key}', but its keys must be equal to: {names}"
                )));
            };
            if std::mem::replace(&mut seen[position], true) {
                return Err(self.columns[position].fail(format!("duplicate key '{key}'")));
            }
            map.next_value_seed(ValueSeed {
                column: &mut self.columns[position],
                depth: 1,
            })?;
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            let names = self.signature.input_names();
            return Err(self.columns[missing].fail(format!(
                "JSON object is missing this input; its keys must be equal to: {names}"
            )));
        }
        Ok(())
    }
}

/// The columnar `inputs` value: a bare value (single input) or an object keyed by input name.
pub(super) struct InputsSeed<'c, 's> {
    pub(super) columns: &'c mut [Column<'s>],
    pub(super) seen: &'c mut [bool],
}

impl<'s> InputsSeed<'_, 's> {
    fn single<E: de::Error>(&mut self) -> Result<ValueSeed<'_, 's>, E> {
        if self.columns.len() != 1 {
            let message =
                "'inputs' is a plain value, but the signature has several inputs; use an object keyed by input name"
                    .to_string();
            return Err(self.columns[0].fail(message));
        }
        self.seen[0] = true;
        Ok(ValueSeed {
            column: &mut self.columns[0],
            depth: 0,
        })
    }
}

impl<'de> DeserializeSeed<'de> for InputsSeed<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for InputsSeed<'_, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("'inputs' to be a value, a list, or an object keyed by input name")
    }

    forward_to_single!();

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut first = true;
        while let Some(key) = map.next_key::<String>()? {
            if first && key == "b64" && self.columns.len() == 1 && self.columns[0].spec.key != "b64" {
                self.seen[0] = true;
                return self.columns[0].read_b64(&mut map, 0);
            }
            first = false;
            let Some(position) = self.columns.iter().position(|c| c.spec.key == key) else {
                let names: Vec<&str> = self.columns.iter().map(|c| c.spec.key.as_str()).collect();
                return Err(self.columns[0].fail(format!(
                    "'inputs' has key '{key}', which is not an input of the signature (inputs: {})",
                    names.join(",")
                )));
            };
            if std::mem::replace(&mut self.seen[position], true) {
                return Err(self.columns[position].fail(format!("duplicate key '{key}'")));
            }
            map.next_value_seed(ValueSeed {
                column: &mut self.columns[position],
                depth: 0,
            })?;
        }
        Ok(())
    }
}
