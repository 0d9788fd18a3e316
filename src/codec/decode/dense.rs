//! The hot path for the bodies that dominate image and feature models: nested
//! lists of plain JSON numbers for numeric inputs, scanned byte by byte
//! straight into the typed buffer. Anything else it meets (strings, objects,
//! `b64`, null, bools, numbers a strict input must refuse, ragged lists) makes
//! it give up, and the general serde decoder, which owns every error message,
//! decodes the value instead; so it changes speed, never answers.

use super::super::shape::ShapeTracker;
use crate::signature::{SignatureSpec, TensorSpec};
use crate::tensor::{Tensor, TensorData};

/// The powers of ten a double holds exactly.
const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

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

/// One element type's conversions from JSON number tokens; `None` where the
/// general decoder must decide (narrowing, floats into integers).
trait Element: Sized {
    fn from_int(value: i64) -> Option<Self>;
    fn from_float(value: f64) -> Option<Self>;
}

impl Element for f32 {
    fn from_int(value: i64) -> Option<Self> {
        Some(value as f32)
    }
    fn from_float(value: f64) -> Option<Self> {
        Some(value as f32)
    }
}

impl Element for f64 {
    fn from_int(value: i64) -> Option<Self> {
        Some(value as f64)
    }
    fn from_float(value: f64) -> Option<Self> {
        Some(value)
    }
}

impl Element for half::f16 {
    fn from_int(value: i64) -> Option<Self> {
        Some(half::f16::from_f64(value as f64))
    }
    fn from_float(value: f64) -> Option<Self> {
        Some(half::f16::from_f64(value))
    }
}

macro_rules! integer_element {
    ($($ty:ty),*) => {$(
        impl Element for $ty {
            fn from_int(value: i64) -> Option<Self> {
                value.try_into().ok()
            }
            fn from_float(_: f64) -> Option<Self> {
                None
            }
        }
    )*};
}
integer_element!(i8, i16, i32, i64, u8, u16, u32, u64);

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

/// A number as written: integers stay exact, as the general decoder keeps them.
enum Number {
    Int(i64),
    Float(f64),
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

    /// A JSON number (RFC 8259's grammar). Integers of up to 18 digits stay
    /// integers; decimals whose digits fit 2^53 and whose power of ten is
    /// exact are one correctly rounded multiply or divide; the rest go
    /// through the standard library's correctly rounded parser.
    #[inline(always)]
    fn number(&mut self) -> Option<Number> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let mut mantissa: u64 = 0;
        let mut digits = 0usize;
        match self.peek()? {
            b'0' => self.pos += 1,
            b'1'..=b'9' => {
                while let Some(d @ b'0'..=b'9') = self.peek() {
                    mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                    digits += 1;
                    self.pos += 1;
                }
            }
            _ => return None,
        }
        let mut exponent: i64 = 0;
        let mut integer = true;
        if self.peek() == Some(b'.') {
            integer = false;
            self.pos += 1;
            let first = self.pos;
            while let Some(d @ b'0'..=b'9') = self.peek() {
                if mantissa != 0 || d != b'0' {
                    digits += 1;
                }
                mantissa = mantissa.wrapping_mul(10).wrapping_add(u64::from(d - b'0'));
                exponent -= 1;
                self.pos += 1;
            }
            if self.pos == first {
                return None;
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            integer = false;
            self.pos += 1;
            let negative_exponent = match self.peek()? {
                b'-' => {
                    self.pos += 1;
                    true
                }
                b'+' => {
                    self.pos += 1;
                    false
                }
                _ => false,
            };
            let first = self.pos;
            let mut written: i64 = 0;
            while let Some(d @ b'0'..=b'9') = self.peek() {
                written = (written * 10 + i64::from(d - b'0')).min(1 << 32);
                self.pos += 1;
            }
            if self.pos == first {
                return None;
            }
            exponent += if negative_exponent { -written } else { written };
        }
        if integer {
            if digits > 18 {
                return None;
            }
            // serde_json reads `-0` as the float -0.0, which integer inputs refuse.
            if negative && mantissa == 0 {
                return Some(Number::Float(-0.0));
            }
            let value = mantissa as i64;
            return Some(Number::Int(if negative { -value } else { value }));
        }
        let value = if digits <= 19 && mantissa <= 1 << 53 && exponent.unsigned_abs() < EXACT_POWERS.len() as u64 {
            let scale = EXACT_POWERS[exponent.unsigned_abs() as usize];
            if exponent < 0 {
                mantissa as f64 / scale
            } else {
                mantissa as f64 * scale
            }
        } else {
            // The token is ASCII: it was just scanned digit by digit.
            // Out of range is an error the general decoder words.
            let text = std::str::from_utf8(&self.bytes[start..self.pos]).ok()?;
            return text.parse::<f64>().ok().filter(|v| v.is_finite()).map(Number::Float);
        };
        Some(Number::Float(if negative { -value } else { value }))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::SignatureSpec;
    use crate::tensor::DType;

    fn signature(inputs: &[(&str, DType)]) -> SignatureSpec {
        SignatureSpec {
            name: "serving_default".into(),
            method_name: String::new(),
            inputs: inputs
                .iter()
                .map(|(key, dtype)| TensorSpec {
                    key: key.to_string(),
                    tensor_name: format!("{key}:0"),
                    dtype: *dtype,
                    shape: None,
                })
                .collect(),
            outputs: Vec::new(),
            base64_inputs: Vec::new(),
        }
    }

    fn floats(tensor: &Tensor) -> &[f32] {
        match &tensor.data {
            TensorData::Float(v) => v,
            other => panic!("not float: {other:?}"),
        }
    }

    #[test]
    fn numbers_parse_as_the_standard_library_does() {
        let sig = signature(&[("x", DType::Double)]);
        let tokens = [
            "0",
            "-0",
            "7",
            "-12",
            "0.5",
            "-0.25",
            "3.14159",
            "1e3",
            "1E-3",
            "2.5e+2",
            "0.549",
            "1e22",
            "1e23",
            "123456789012345678",
            "0.1234567890123456789",
            "5e-324",
            "1.7976931348623157e308",
            "0.000001",
            "9007199254740993",
            "4.35",
            "1e-400",
        ];
        for token in tokens {
            let tensors = inputs(format!("[{token}]").as_bytes(), &sig).unwrap_or_else(|| panic!("{token}"));
            let TensorData::Double(values) = &tensors[0].data else {
                panic!()
            };
            let expected: f64 = token.parse().unwrap();
            assert_eq!(values[0].to_bits(), expected.to_bits(), "{token}");
        }
    }

    #[test]
    fn image_rows_keep_their_shape() {
        let sig = signature(&[("x", DType::Float)]);
        let tensors = instances(b"[[[0.5, 1, 2], [3, 4.25, 5]], [[6,7,8],[9,10,11]]]", &sig).unwrap();
        assert_eq!(tensors[0].shape, vec![2, 2, 3]);
        assert_eq!(floats(&tensors[0])[..4], [0.5, 1.0, 2.0, 3.0]);
        let tensors = instances(b" [1.0, 2.0] ", &sig).unwrap();
        assert_eq!(tensors[0].shape, vec![2]);
    }

    #[test]
    fn keyed_inputs_fill_each_column() {
        let sig = signature(&[("a", DType::Int32), ("b", DType::Float)]);
        let tensors = inputs(br#"{"b": [[1.5, 2]], "a": [1, 2, 3]}"#, &sig).unwrap();
        assert_eq!(tensors[0].data, TensorData::Int32(vec![1, 2, 3]));
        assert_eq!(tensors[1].shape, vec![1, 2]);
        assert_eq!(floats(&tensors[1]), [1.5, 2.0]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        /// Whatever numbers and layout, the dense reader accepts only what
        /// serde accepts, in the same shape, and every value is the correctly
        /// rounded one (serde_json's own reading of long mantissas can be a
        /// unit or two off).
        #[test]
        fn reads_what_serde_reads(
            numbers in proptest::collection::vec(proptest::prelude::any::<f64>(), 1..24),
            width in 1usize..4,
            style in 0u8..4,
            dtype in proptest::sample::select(vec![DType::Float, DType::Double, DType::Half, DType::Int64, DType::Int32]),
        ) {
            let written: Vec<String> = numbers
                .iter()
                .map(|v| match style {
                    0 => format!("{v}"),
                    1 => format!("{v:e}"),
                    2 => format!("{:.3}", v.fract()),
                    _ => format!("{}", (v.fract() * 1000.0) as i64),
                })
                .filter(|t| !t.contains("inf") && !t.contains("NaN"))
                .collect();
            proptest::prop_assume!(!written.is_empty());
            let rows: Vec<String> = written.chunks(width).map(|c| format!("[{}]", c.join(", "))).collect();
            // Only whole rows, so the lists are never ragged unless the last is short.
            let raw = format!("[{}]", rows.join(",\n "));
            let sig = signature(&[("x", dtype)]);
            let general = super::super::decode_inputs_with_serde(&raw, &sig, super::super::Coercion::Strict);
            match (inputs(raw.as_bytes(), &sig), general) {
                (Some(dense), Ok(general)) => {
                    proptest::prop_assert_eq!(&dense[0].shape, &general[0].shape);
                    proptest::prop_assert_eq!(&dense[0].data, &correctly_rounded(&written, dtype));
                }
                // Declining is always allowed; reading what serde refuses is not.
                (Some(dense), Err(error)) => proptest::prop_assert!(false, "read {dense:?} where serde says {error}"),
                (None, _) => {}
            }
        }
    }

    /// What each token means: integers exactly, decimals through the
    /// standard library's correctly rounded parser, then the dtype's cast.
    fn correctly_rounded(tokens: &[String], dtype: DType) -> TensorData {
        let integer = |t: &String| !t.contains(['.', 'e', 'E']);
        let float = |t: &String| t.parse::<f64>().unwrap();
        match dtype {
            DType::Double => TensorData::Double(
                tokens
                    .iter()
                    .map(|t| {
                        if integer(t) {
                            t.parse::<i64>().unwrap() as f64
                        } else {
                            float(t)
                        }
                    })
                    .collect(),
            ),
            DType::Float => TensorData::Float(
                tokens
                    .iter()
                    .map(|t| {
                        if integer(t) {
                            t.parse::<i64>().unwrap() as f32
                        } else {
                            float(t) as f32
                        }
                    })
                    .collect(),
            ),
            DType::Half => TensorData::Half(tokens.iter().map(|t| half::f16::from_f64(float(t))).collect()),
            DType::Int64 => TensorData::Int64(tokens.iter().map(|t| t.parse().unwrap()).collect()),
            DType::Int32 => TensorData::Int32(tokens.iter().map(|t| t.parse().unwrap()).collect()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn leaves_every_other_case_to_the_general_decoder() {
        let float = signature(&[("x", DType::Float)]);
        let int = signature(&[("x", DType::Int32)]);
        let byte = signature(&[("x", DType::UInt8)]);
        let text = signature(&[("x", DType::String)]);
        let two = signature(&[("a", DType::Float), ("b", DType::Float)]);
        for (raw, sig) in [
            ("[]", &float),
            ("[1, 2", &float),
            ("[1, 2,]", &float),
            ("[[1, 2], [3]]", &float),
            ("[[1, 2], 3]", &float),
            ("[NaN]", &float),
            ("[\"1\"]", &float),
            ("[null]", &float),
            ("[true]", &float),
            ("[01]", &float),
            ("[1.]", &float),
            ("[.5]", &float),
            ("[1e]", &float),
            ("[-]", &float),
            ("[+1]", &float),
            ("[1e400]", &float),
            ("[-0]", &int),
            ("[{\"b64\": \"AA==\"}]", &float),
            ("[1.5]", &int),
            ("[256]", &byte),
            ("[-1]", &byte),
            ("[1]", &text),
            ("[12345678901234567890]", &int),
            ("[1] x", &float),
            ("[{\"a\": 1, \"b\": 2}]", &two),
        ] {
            assert!(instances(raw.as_bytes(), sig).is_none(), "{raw}");
        }
        for (raw, sig) in [
            (r#"{"a": [1]}"#, &two),
            (r#"{"a": [1], "a": [2], "b": [3]}"#, &two),
            (r#"{"a": [1], "c": [2], "b": [3]}"#, &two),
            (r#"{"a\u0041": [1]}"#, &two),
            (r#"{}"#, &two),
            ("[1]", &two),
        ] {
            assert!(inputs(raw.as_bytes(), sig).is_none(), "{raw}");
        }
        let deep = format!("{}1{}", "[".repeat(200), "]".repeat(200));
        assert!(inputs(deep.as_bytes(), &float).is_none());
    }
}
