//! JSON number tokens into exact integers or correctly rounded doubles, and
//! each element type's conversion from them: the part of the dense scanner
//! that must agree with serde_json to the bit.

use super::Scanner;

/// The powers of ten a double holds exactly.
pub(super) const EXACT_POWERS: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

/// One element type's conversions from JSON number tokens; `None` where the
/// general decoder must decide (narrowing, floats into integers).
pub(super) trait Element: Sized {
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

/// A number as written: integers stay exact, as the general decoder keeps them.
pub(super) enum Number {
    Int(i64),
    Float(f64),
}

impl Scanner<'_> {
    /// A JSON number (RFC 8259's grammar). Integers of up to 18 digits stay
    /// integers; decimals whose digits fit 2^53 and whose power of ten is
    /// exact are one correctly rounded multiply or divide; the rest go
    /// through the standard library's correctly rounded parser.
    // Kept whole: one pass over a number's digits on the hottest decode path; split, the position
    // and the digits gathered so far would cross calls that must inline anyway.
    #[inline(always)]
    pub(super) fn number(&mut self) -> Option<Number> {
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
