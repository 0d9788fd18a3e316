//! The hot path for the bodies that dominate image and feature models: nested
//! lists of plain JSON numbers for numeric inputs, scanned byte by byte
//! straight into the typed buffer. Anything else it meets (strings, objects,
//! `b64`, null, bools, numbers a strict input must refuse, ragged lists) makes
//! it give up, and the general serde decoder, which owns every error message,
//! decodes the value instead; so it changes speed, never answers.

mod number;
#[cfg(test)]
mod tests;

use number::{Element, Number, EXACT_POWERS};

use super::super::shape::ShapeTracker;
use crate::signature::{SignatureSpec, TensorSpec};
use crate::tensor::{Tensor, TensorData};

/// serde_json's nesting limit: deeper bodies go to the general decoder, which refuses them.
const MAX_DEPTH: usize = 128;

/// `instances` as a list of values or lists for a single numeric input.
pub(super) fn instances(raw: &[u8], signature: &SignatureSpec) -> Option<Vec<Tensor>> {
    let [spec] = signature.inputs.as_slice() else {
        return None;
    };
    let mut scanner = Scanner::new(raw);
    scanner.skip_space();
    let tensor = scanner.column(spec, Layout::Rows)?;
    scanner.end()?;
    Some(vec![tensor])
}

/// Columnar `inputs` (or Simple TensorFlow Serving's `data`): a bare value for
/// a single input, or an object with one key per input, every input numeric.
pub(super) fn inputs(raw: &[u8], signature: &SignatureSpec) -> Option<Vec<Tensor>> {
    let mut scanner = Scanner::new(raw);
    scanner.skip_space();
    let tensors = if scanner.peek()? == b'{' {
        scanner.keyed(signature)?
    } else {
        let [spec] = signature.inputs.as_slice() else {
            return None;
        };
        vec![scanner.column(spec, Layout::Value)?]
    };
    scanner.end()?;
    Some(tensors)
}

/// Where one input's numbers go while the lists around them are checked.
struct Sink<T> {
    values: Vec<T>,
    shape: ShapeTracker,
}

/// What one input's JSON is: the `instances` list (one element per row, at
/// least one), or any value.
#[derive(Clone, Copy)]
enum Layout {
    Rows,
    Value,
}

struct Scanner<'b> {
    bytes: &'b [u8],
    pos: usize,
}

impl<'b> Scanner<'b> {
    fn new(bytes: &'b [u8]) -> Self {
        Scanner { bytes, pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    #[inline(always)]
    fn skip_space(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.peek() {
            self.pos += 1;
        }
    }

    /// Only white space may follow.
    fn end(&mut self) -> Option<()> {
        self.skip_space();
        (self.pos == self.bytes.len()).then_some(())
    }

    /// Decodes one input's value into a buffer of the input's dtype.
    fn column(&mut self, spec: &TensorSpec, layout: Layout) -> Option<Tensor> {
        macro_rules! typed {
            ($variant:ident, $ty:ty) => {{
                // Every number takes two bytes at least (a digit and a
                // separator): reserving that much never reallocates, and
                // pages never written cost no memory.
                let mut sink = Sink::<$ty> {
                    values: Vec::with_capacity(self.bytes.len().saturating_sub(self.pos) / 2 + 1),
                    shape: ShapeTracker::default(),
                };
                self.read(&mut sink, layout)?;
                Tensor::new(sink.shape.finish(), TensorData::$variant(sink.values))
            }};
        }
        Some(match TensorData::empty(spec.dtype)? {
            TensorData::Float(_) => typed!(Float, f32),
            TensorData::Double(_) => typed!(Double, f64),
            TensorData::Half(_) => typed!(Half, half::f16),
            TensorData::Int8(_) => typed!(Int8, i8),
            TensorData::Int16(_) => typed!(Int16, i16),
            TensorData::Int32(_) => typed!(Int32, i32),
            TensorData::Int64(_) => typed!(Int64, i64),
            TensorData::UInt8(_) => typed!(UInt8, u8),
            TensorData::UInt16(_) => typed!(UInt16, u16),
            TensorData::UInt32(_) => typed!(UInt32, u32),
            TensorData::UInt64(_) => typed!(UInt64, u64),
            TensorData::Bool(_) | TensorData::String(_) => return None,
        })
    }

    /// An object keyed by input name, every input present once.
    fn keyed(&mut self, signature: &SignatureSpec) -> Option<Vec<Tensor>> {
        let mut tensors: Vec<Option<Tensor>> = vec![None; signature.inputs.len()];
        self.pos += 1;
        self.skip_space();
        if self.peek()? == b'}' {
            return None;
        }
        loop {
            let key = self.plain_string()?;
            let position = signature.inputs.iter().position(|s| s.key == key)?;
            self.skip_space();
            self.expect(b':')?;
            self.skip_space();
            let tensor = self.column(&signature.inputs[position], Layout::Value)?;
            if tensors[position].replace(tensor).is_some() {
                return None;
            }
            self.skip_space();
            match self.next()? {
                b',' => self.skip_space(),
                b'}' => break,
                _ => return None,
            }
        }
        tensors.into_iter().collect()
    }

    /// A string without escapes (keys are plain names).
    fn plain_string(&mut self) -> Option<&'b str> {
        self.expect(b'"')?;
        let start = self.pos;
        let length = memchr::memchr2(b'"', b'\\', &self.bytes[start..])?;
        if self.bytes[start + length] != b'"' {
            return None;
        }
        self.pos = start + length + 1;
        std::str::from_utf8(&self.bytes[start..start + length]).ok()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.next()? == byte).then_some(())
    }

    fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    fn read<P: Push>(&mut self, sink: &mut P, layout: Layout) -> Option<()> {
        match layout {
            Layout::Value => self.value(sink, 0),
            Layout::Rows => {
                if self.peek()? != b'[' {
                    return None;
                }
                // An empty list is an error the general decoder words.
                (self.list(sink, 0)? > 0).then_some(())
            }
        }
    }

    /// A number or a list at `depth`.
    fn value<P: Push>(&mut self, sink: &mut P, depth: usize) -> Option<()> {
        match self.peek()? {
            b'[' => self.list(sink, depth).map(|_| ()),
            b'-' | b'0'..=b'9' => {
                sink.scalar(depth)?;
                let number = self.number()?;
                sink.push(number)
            }
            _ => None,
        }
    }

    /// A list at `depth`; returns its length.
    fn list<P: Push>(&mut self, sink: &mut P, depth: usize) -> Option<usize> {
        if depth >= MAX_DEPTH {
            return None;
        }
        sink.enter(depth)?;
        self.pos += 1;
        self.skip_space();
        let mut len = 0;
        match self.peek()? {
            b']' => self.pos += 1,
            // The innermost lists hold nearly every byte of a tensor: their
            // numbers are read in one loop. A list found among numbers is
            // ragged whatever else the body holds.
            b'-' | b'0'..=b'9' => {
                sink.scalar(depth + 1)?;
                len = self.numbers(sink)?;
            }
            _ => loop {
                self.value(sink, depth + 1)?;
                len += 1;
                self.skip_space();
                match self.next()? {
                    b',' => self.skip_space(),
                    b']' => break,
                    _ => return None,
                }
            },
        }
        sink.close(depth, len)?;
        Some(len)
    }

    /// The numbers of an innermost list, up to and past its `]`; returns how
    /// many. Short plain decimals (`0.549`, `-12`, `3.25`), which is what
    /// clients write for pixels and features, are read here digit by digit;
    /// exponents and long mantissas go through `number`.
    fn numbers<P: Push>(&mut self, sink: &mut P) -> Option<usize> {
        let bytes = self.bytes;
        let at = |i: usize| bytes.get(i).copied().unwrap_or(0);
        let mut i = self.pos;
        let mut len = 0;
        loop {
            let start = i;
            let negative = at(i) == b'-';
            i += usize::from(negative);
            let whole = i;
            let mut mantissa: u64 = 0;
            while let d @ 0..=9 = at(i).wrapping_sub(b'0') {
                mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
                i += 1;
            }
            let whole_digits = i - whole;
            if whole_digits == 0 || (whole_digits > 1 && at(whole) == b'0') {
                return None;
            }
            let mut fraction_digits = 0;
            if at(i) == b'.' {
                i += 1;
                let fraction = i;
                while let d @ 0..=9 = at(i).wrapping_sub(b'0') {
                    mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d));
                    i += 1;
                }
                fraction_digits = i - fraction;
                if fraction_digits == 0 {
                    return None;
                }
            }
            let plain = whole_digits + fraction_digits <= 18 && !matches!(at(i), b'e' | b'E');
            let number = if !plain {
                self.pos = start;
                let number = self.number()?;
                i = self.pos;
                number
            } else if fraction_digits == 0 {
                if negative && mantissa == 0 {
                    Number::Float(-0.0)
                } else {
                    let value = mantissa as i64;
                    Number::Int(if negative { -value } else { value })
                }
            } else if mantissa <= 1 << 53 {
                // Both operands exact, so the quotient is correctly rounded.
                let value = mantissa as f64 / EXACT_POWERS[fraction_digits];
                Number::Float(if negative { -value } else { value })
            } else {
                self.pos = start;
                let number = self.number()?;
                i = self.pos;
                number
            };
            sink.push(number)?;
            len += 1;
            while let b' ' | b'\n' | b'\r' | b'\t' = at(i) {
                i += 1;
            }
            match at(i) {
                b',' => {
                    i += 1;
                    while let b' ' | b'\n' | b'\r' | b'\t' = at(i) {
                        i += 1;
                    }
                }
                b']' => {
                    self.pos = i + 1;
                    return Some(len);
                }
                _ => return None,
            }
        }
    }
}

/// The typed half of a sink, so the scanner is written once for every dtype.
trait Push {
    fn scalar(&mut self, depth: usize) -> Option<()>;
    fn enter(&mut self, depth: usize) -> Option<()>;
    fn close(&mut self, depth: usize, len: usize) -> Option<()>;
    fn push(&mut self, number: Number) -> Option<()>;
}

impl<T: Element> Push for Sink<T> {
    fn scalar(&mut self, depth: usize) -> Option<()> {
        self.shape.scalar(depth).ok()
    }

    fn enter(&mut self, depth: usize) -> Option<()> {
        self.shape.enter_list(depth).ok()
    }

    fn close(&mut self, depth: usize, len: usize) -> Option<()> {
        self.shape.close_list(depth, len).ok()
    }

    #[inline]
    fn push(&mut self, number: Number) -> Option<()> {
        let value = match number {
            Number::Int(value) => T::from_int(value)?,
            Number::Float(value) => T::from_float(value)?,
        };
        self.values.push(value);
        Some(())
    }
}
