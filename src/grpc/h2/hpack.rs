//! HPACK (RFC 7541) for the gRPC listener's HTTP/2: a decoder for the
//! header blocks clients send, with its dynamic table and Huffman-coded
//! strings, and the encoding of the blocks this side sends. The encoder
//! keeps no dynamic table: every block it writes is the same bytes for the
//! same fields, so an answer costs no table lookups, and the peer's table
//! size never needs to be followed.

use std::collections::VecDeque;
use std::sync::OnceLock;

use bytes::Bytes;

/// A dynamic table size update to 0: the first block on a connection
/// starts with it, so the peer keeps no table for this side's blocks.
pub const NO_TABLE: u8 = 0x20;
/// `:status: 200`, the static table's entry 8.
pub const STATUS_OK: u8 = 0x88;
/// The dynamic table this side allows (the protocol's default; never raised).
pub const TABLE_SIZE: usize = 4096;

/// A header block that cannot be decoded: a connection error.
#[derive(Debug, PartialEq, Eq)]
pub struct DecodeError(pub &'static str);

/// A connection's decoder: the dynamic table the client's encoder fills.
pub struct Decoder {
    table: VecDeque<(Bytes, Bytes)>,
    size: usize,
    max_size: usize,
    /// Recently decoded Huffman strings, by their encoding.
    recent: VecDeque<(Bytes, Bytes)>,
    /// The last block decoded inserted an entry or resized the table.
    table_changed: bool,
}

/// How many decoded strings are kept, and how long they may be encoded.
const RECENT: usize = 8;
const RECENT_LEN: usize = 128;

impl Default for Decoder {
    fn default() -> Decoder {
        Decoder {
            table: VecDeque::new(),
            size: 0,
            max_size: TABLE_SIZE,
            recent: VecDeque::new(),
            table_changed: false,
        }
    }
}

impl Decoder {
    /// Calls `field` with each field of `block` in order. Values come as
    /// `Bytes` that share the block's or the table's memory where they can.
    pub fn decode(&mut self, block: &Bytes, mut field: impl FnMut(&[u8], Bytes)) -> Result<(), DecodeError> {
        self.table_changed = false;
        let mut at = 0;
        let mut fields_seen = false;
        while at < block.len() {
            let first = block[at];
            if first & 0x80 != 0 {
                let index = integer(block, &mut at, 7)?;
                let (name, value) = self.entry(index)?;
                field(&name, value);
                fields_seen = true;
            } else if first & 0xe0 == 0x20 {
                if fields_seen {
                    return Err(DecodeError("a table size update after a field"));
                }
                let size = integer(block, &mut at, 5)?;
                if size > TABLE_SIZE {
                    return Err(DecodeError("a table size update over the allowed size"));
                }
                self.max_size = size;
                self.evict(0);
                self.table_changed = true;
            } else {
                let (prefix, indexing) = if first & 0xc0 == 0x40 { (6, true) } else { (4, false) };
                let index = integer(block, &mut at, prefix)?;
                let name = if index == 0 {
                    self.string(block, &mut at)?
                } else {
                    self.entry(index)?.0
                };
                let value = self.string(block, &mut at)?;
                if indexing {
                    self.table_changed = true;
                    // Copied, so the table does not hold on to a whole frame's buffer.
                    self.insert(Bytes::copy_from_slice(&name), Bytes::copy_from_slice(&value));
                }
                field(&name, value);
                fields_seen = true;
            }
        }
        Ok(())
    }

    /// Whether the last block decoded changed the dynamic table. When it
    /// did not, the same bytes decode to the same fields again.
    pub fn table_changed(&self) -> bool {
        self.table_changed
    }

    fn entry(&self, index: usize) -> Result<(Bytes, Bytes), DecodeError> {
        match index {
            0 => Err(DecodeError("index 0")),
            1..=61 => {
                let (name, value) = STATIC[index - 1];
                Ok((Bytes::from_static(name), Bytes::from_static(value)))
            }
            _ => self
                .table
                .get(index - 62)
                .cloned()
                .ok_or(DecodeError("an index past the tables")),
        }
    }

    fn insert(&mut self, name: Bytes, value: Bytes) {
        let size = name.len() + value.len() + 32;
        if size > self.max_size {
            // An entry larger than the table empties it (RFC 7541 §4.4).
            self.table.clear();
            self.size = 0;
            return;
        }
        self.evict(size);
        self.size += size;
        self.table.push_front((name, value));
    }

    /// Evicts until `room` more bytes fit.
    fn evict(&mut self, room: usize) {
        while self.size + room > self.max_size {
            let Some((name, value)) = self.table.pop_back() else {
                self.size = 0;
                return;
            };
            self.size -= name.len() + value.len() + 32;
        }
    }

    /// A string literal. Huffman-coded ones are looked up among the last
    /// few decoded: clients send some (a call's `:path`) the same way on
    /// every request without indexing them.
    fn string(&mut self, block: &Bytes, at: &mut usize) -> Result<Bytes, DecodeError> {
        let huffman = block.get(*at).ok_or(DecodeError("a truncated string"))? & 0x80 != 0;
        let len = integer(block, at, 7)?;
        let end = at
            .checked_add(len)
            .filter(|end| *end <= block.len())
            .ok_or(DecodeError("a truncated string"))?;
        let range = *at..end;
        *at = end;
        if !huffman {
            return Ok(block.slice(range));
        }
        let encoded = &block[range];
        if let Some((_, decoded)) = self.recent.iter().find(|(seen, _)| seen[..] == *encoded) {
            return Ok(decoded.clone());
        }
        let mut out = Vec::with_capacity(encoded.len() * 8 / 5 + 1);
        huffman_decode(encoded, &mut out)?;
        let decoded = Bytes::from(out);
        if encoded.len() <= RECENT_LEN {
            if self.recent.len() == RECENT {
                self.recent.pop_back();
            }
            self.recent
                .push_front((Bytes::copy_from_slice(encoded), decoded.clone()));
        }
        Ok(decoded)
    }
}

/// An integer with an N-bit prefix (RFC 7541 §5.1), from `block[*at]` on.
fn integer(block: &[u8], at: &mut usize, prefix_bits: u8) -> Result<usize, DecodeError> {
    let max = (1usize << prefix_bits) - 1;
    let first = usize::from(*block.get(*at).ok_or(DecodeError("a truncated integer"))?) & max;
    *at += 1;
    if first < max {
        return Ok(first);
    }
    let mut value = max;
    let mut shift = 0;
    loop {
        let byte = *block.get(*at).ok_or(DecodeError("a truncated integer"))?;
        *at += 1;
        if shift > 28 {
            return Err(DecodeError("an integer too large"));
        }
        value += usize::from(byte & 0x7f) << shift;
        shift += 7;
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
}

/// The canonical Huffman code of RFC 7541 Appendix B by length: codes of one
/// length are consecutive, so a code is found by its offset from the first.
struct Canonical {
    first: [u32; 31],
    count: [u32; 31],
    offset: [usize; 31],
    symbols: Vec<u16>,
}

fn canonical() -> &'static Canonical {
    static CODE: OnceLock<Canonical> = OnceLock::new();
    CODE.get_or_init(|| {
        let mut symbols: Vec<u16> = (0..257).collect();
        symbols.sort_by_key(|s| (HUFFMAN[usize::from(*s)].1, HUFFMAN[usize::from(*s)].0));
        let mut code = Canonical {
            first: [0; 31],
            count: [0; 31],
            offset: [0; 31],
            symbols,
        };
        for (at, symbol) in code.symbols.iter().enumerate() {
            let (bits, len) = HUFFMAN[usize::from(*symbol)];
            let len = usize::from(len);
            if code.count[len] == 0 {
                code.first[len] = bits;
                code.offset[len] = at;
            }
            code.count[len] += 1;
        }
        code
    })
}

fn huffman_decode(input: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    let table = canonical();
    let mut code: u32 = 0;
    let mut len = 0usize;
    for byte in input {
        for shift in (0..8).rev() {
            code = code << 1 | u32::from(byte >> shift & 1);
            len += 1;
            let index = code.wrapping_sub(table.first[len]);
            if index < table.count[len] {
                let symbol = table.symbols[table.offset[len] + index as usize];
                if symbol == 256 {
                    return Err(DecodeError("EOS inside a Huffman string"));
                }
                out.push(symbol as u8);
                code = 0;
                len = 0;
            } else if len == 30 {
                return Err(DecodeError("an invalid Huffman code"));
            }
        }
    }
    // What is left must be padding: fewer than 8 bits, all ones.
    if len >= 8 || code != (1 << len) - 1 {
        return Err(DecodeError("invalid Huffman padding"));
    }
    Ok(())
}

/// `:status` with a code: the static entry for 200, else a literal of the
/// static table's name 8.
pub fn status(out: &mut Vec<u8>, code: u16) {
    if code == 200 {
        out.push(STATUS_OK);
        return;
    }
    encode_integer(out, 8, 4, 0x00);
    let mut digits = itoa::Buffer::new();
    encode_string(out, digits.format(code).as_bytes());
}

/// A field the peer must not index; `sensitive` ones it must not index
/// either when passing them on.
pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8], sensitive: bool) {
    out.push(if sensitive { 0x10 } else { 0x00 });
    encode_string(out, name);
    encode_string(out, value);
}

/// An integer with an N-bit prefix (RFC 7541 §5.1).
pub fn encode_integer(out: &mut Vec<u8>, mut value: usize, prefix_bits: u8, first: u8) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    value -= max;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A string literal, not Huffman-coded.
pub fn encode_string(out: &mut Vec<u8>, bytes: &[u8]) {
    encode_integer(out, bytes.len(), 7, 0x00);
    out.extend_from_slice(bytes);
}

/// RFC 7541 Appendix A.
static STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// RFC 7541 Appendix B: each symbol's code and its length in bits (256 is EOS).
static HUFFMAN: [(u32, u8); 257] = [
    (0x1ff8, 13),
    (0x7fffd8, 23),
    (0xfffffe2, 28),
    (0xfffffe3, 28),
    (0xfffffe4, 28),
    (0xfffffe5, 28),
    (0xfffffe6, 28),
    (0xfffffe7, 28),
    (0xfffffe8, 28),
    (0xffffea, 24),
    (0x3ffffffc, 30),
    (0xfffffe9, 28),
    (0xfffffea, 28),
    (0x3ffffffd, 30),
    (0xfffffeb, 28),
    (0xfffffec, 28),
    (0xfffffed, 28),
    (0xfffffee, 28),
    (0xfffffef, 28),
    (0xffffff0, 28),
    (0xffffff1, 28),
    (0xffffff2, 28),
    (0x3ffffffe, 30),
    (0xffffff3, 28),
    (0xffffff4, 28),
    (0xffffff5, 28),
    (0xffffff6, 28),
    (0xffffff7, 28),
    (0xffffff8, 28),
    (0xffffff9, 28),
    (0xffffffa, 28),
    (0xffffffb, 28),
    (0x14, 6),
    (0x3f8, 10),
    (0x3f9, 10),
    (0xffa, 12),
    (0x1ff9, 13),
    (0x15, 6),
    (0xf8, 8),
    (0x7fa, 11),
    (0x3fa, 10),
    (0x3fb, 10),
    (0xf9, 8),
    (0x7fb, 11),
    (0xfa, 8),
    (0x16, 6),
    (0x17, 6),
    (0x18, 6),
    (0x0, 5),
    (0x1, 5),
    (0x2, 5),
    (0x19, 6),
    (0x1a, 6),
    (0x1b, 6),
    (0x1c, 6),
    (0x1d, 6),
    (0x1e, 6),
    (0x1f, 6),
    (0x5c, 7),
    (0xfb, 8),
    (0x7ffc, 15),
    (0x20, 6),
    (0xffb, 12),
    (0x3fc, 10),
    (0x1ffa, 13),
    (0x21, 6),
    (0x5d, 7),
    (0x5e, 7),
    (0x5f, 7),
    (0x60, 7),
    (0x61, 7),
    (0x62, 7),
    (0x63, 7),
    (0x64, 7),
    (0x65, 7),
    (0x66, 7),
    (0x67, 7),
    (0x68, 7),
    (0x69, 7),
    (0x6a, 7),
    (0x6b, 7),
    (0x6c, 7),
    (0x6d, 7),
    (0x6e, 7),
    (0x6f, 7),
    (0x70, 7),
    (0x71, 7),
    (0x72, 7),
    (0xfc, 8),
    (0x73, 7),
    (0xfd, 8),
    (0x1ffb, 13),
    (0x7fff0, 19),
    (0x1ffc, 13),
    (0x3ffc, 14),
    (0x22, 6),
    (0x7ffd, 15),
    (0x3, 5),
    (0x23, 6),
    (0x4, 5),
    (0x24, 6),
    (0x5, 5),
    (0x25, 6),
    (0x26, 6),
    (0x27, 6),
    (0x6, 5),
    (0x74, 7),
    (0x75, 7),
    (0x28, 6),
    (0x29, 6),
    (0x2a, 6),
    (0x7, 5),
    (0x2b, 6),
    (0x76, 7),
    (0x2c, 6),
    (0x8, 5),
    (0x9, 5),
    (0x2d, 6),
    (0x77, 7),
    (0x78, 7),
    (0x79, 7),
    (0x7a, 7),
    (0x7b, 7),
    (0x7ffe, 15),
    (0x7fc, 11),
    (0x3ffd, 14),
    (0x1ffd, 13),
    (0xffffffc, 28),
    (0xfffe6, 20),
    (0x3fffd2, 22),
    (0xfffe7, 20),
    (0xfffe8, 20),
    (0x3fffd3, 22),
    (0x3fffd4, 22),
    (0x3fffd5, 22),
    (0x7fffd9, 23),
    (0x3fffd6, 22),
    (0x7fffda, 23),
    (0x7fffdb, 23),
    (0x7fffdc, 23),
    (0x7fffdd, 23),
    (0x7fffde, 23),
    (0xffffeb, 24),
    (0x7fffdf, 23),
    (0xffffec, 24),
    (0xffffed, 24),
    (0x3fffd7, 22),
    (0x7fffe0, 23),
    (0xffffee, 24),
    (0x7fffe1, 23),
    (0x7fffe2, 23),
    (0x7fffe3, 23),
    (0x7fffe4, 23),
    (0x1fffdc, 21),
    (0x3fffd8, 22),
    (0x7fffe5, 23),
    (0x3fffd9, 22),
    (0x7fffe6, 23),
    (0x7fffe7, 23),
    (0xffffef, 24),
    (0x3fffda, 22),
    (0x1fffdd, 21),
    (0xfffe9, 20),
    (0x3fffdb, 22),
    (0x3fffdc, 22),
    (0x7fffe8, 23),
    (0x7fffe9, 23),
    (0x1fffde, 21),
    (0x7fffea, 23),
    (0x3fffdd, 22),
    (0x3fffde, 22),
    (0xfffff0, 24),
    (0x1fffdf, 21),
    (0x3fffdf, 22),
    (0x7fffeb, 23),
    (0x7fffec, 23),
    (0x1fffe0, 21),
    (0x1fffe1, 21),
    (0x3fffe0, 22),
    (0x1fffe2, 21),
    (0x7fffed, 23),
    (0x3fffe1, 22),
    (0x7fffee, 23),
    (0x7fffef, 23),
    (0xfffea, 20),
    (0x3fffe2, 22),
    (0x3fffe3, 22),
    (0x3fffe4, 22),
    (0x7ffff0, 23),
    (0x3fffe5, 22),
    (0x3fffe6, 22),
    (0x7ffff1, 23),
    (0x3ffffe0, 26),
    (0x3ffffe1, 26),
    (0xfffeb, 20),
    (0x7fff1, 19),
    (0x3fffe7, 22),
    (0x7ffff2, 23),
    (0x3fffe8, 22),
    (0x1ffffec, 25),
    (0x3ffffe2, 26),
    (0x3ffffe3, 26),
    (0x3ffffe4, 26),
    (0x7ffffde, 27),
    (0x7ffffdf, 27),
    (0x3ffffe5, 26),
    (0xfffff1, 24),
    (0x1ffffed, 25),
    (0x7fff2, 19),
    (0x1fffe3, 21),
    (0x3ffffe6, 26),
    (0x7ffffe0, 27),
    (0x7ffffe1, 27),
    (0x3ffffe7, 26),
    (0x7ffffe2, 27),
    (0xfffff2, 24),
    (0x1fffe4, 21),
    (0x1fffe5, 21),
    (0x3ffffe8, 26),
    (0x3ffffe9, 26),
    (0xffffffd, 28),
    (0x7ffffe3, 27),
    (0x7ffffe4, 27),
    (0x7ffffe5, 27),
    (0xfffec, 20),
    (0xfffff3, 24),
    (0xfffed, 20),
    (0x1fffe6, 21),
    (0x3fffe9, 22),
    (0x1fffe7, 21),
    (0x1fffe8, 21),
    (0x7ffff3, 23),
    (0x3fffea, 22),
    (0x3fffeb, 22),
    (0x1ffffee, 25),
    (0x1ffffef, 25),
    (0xfffff4, 24),
    (0xfffff5, 24),
    (0x3ffffea, 26),
    (0x7ffff4, 23),
    (0x3ffffeb, 26),
    (0x7ffffe6, 27),
    (0x3ffffec, 26),
    (0x3ffffed, 26),
    (0x7ffffe7, 27),
    (0x7ffffe8, 27),
    (0x7ffffe9, 27),
    (0x7ffffea, 27),
    (0x7ffffeb, 27),
    (0xffffffe, 28),
    (0x7ffffec, 27),
    (0x7ffffed, 27),
    (0x7ffffee, 27),
    (0x7ffffef, 27),
    (0x7fffff0, 27),
    (0x3ffffee, 26),
    (0x3fffffff, 30),
];

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(decoder: &mut Decoder, block: &[u8]) -> Result<Vec<(String, String)>, DecodeError> {
        let mut out = Vec::new();
        decoder.decode(&Bytes::copy_from_slice(block), |name, value| {
            out.push((
                String::from_utf8_lossy(name).into_owned(),
                String::from_utf8_lossy(&value).into_owned(),
            ))
        })?;
        Ok(out)
    }

    fn hex(text: &str) -> Vec<u8> {
        let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
            .collect()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect()
    }

    /// RFC 7541 C.4: three requests with Huffman coding and a growing table.
    #[test]
    fn the_rfc_examples_with_huffman_coding_decode() {
        let mut decoder = Decoder::default();
        let first = hex("8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff");
        assert_eq!(
            fields(&mut decoder, &first).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com")
            ])
        );
        let second = hex("8286 84be 5886 a8eb 1064 9cbf");
        assert_eq!(
            fields(&mut decoder, &second).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache")
            ])
        );
        let third = hex("8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf");
        assert_eq!(
            fields(&mut decoder, &third).unwrap(),
            pairs(&[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value")
            ])
        );
        assert_eq!(decoder.size, 164);
    }

    /// RFC 7541 C.6: responses that evict from a 256-byte table.
    #[test]
    fn entries_are_evicted_as_the_rfc_says() {
        let mut decoder = Decoder::default();
        fields(&mut decoder, &[0x3f, 0xe1, 0x01]).unwrap(); // size update to 256
        let first = hex(
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        );
        assert_eq!(
            fields(&mut decoder, &first).unwrap(),
            pairs(&[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
                ("location", "https://www.example.com")
            ])
        );
        let second = hex("4883 640e ffc1 c0bf");
        assert_eq!(
            fields(&mut decoder, &second).unwrap()[0],
            (":status".into(), "307".into())
        );
        assert_eq!(decoder.size, 222);
        assert_eq!(decoder.table.len(), 4);
    }

    #[test]
    fn the_huffman_code_is_canonical() {
        let mut order: Vec<usize> = (0..257).collect();
        order.sort_by_key(|s| (HUFFMAN[*s].1, HUFFMAN[*s].0));
        for pair in order.windows(2) {
            let (code, len) = HUFFMAN[pair[0]];
            let (next, next_len) = HUFFMAN[pair[1]];
            assert_eq!(next, (code + 1) << (next_len - len), "symbols {pair:?}");
        }
    }

    #[test]
    fn bad_blocks_are_refused() {
        let mut decoder = Decoder::default();
        assert!(fields(&mut decoder, &[0x80]).is_err(), "index 0");
        assert!(fields(&mut decoder, &[0xbe]).is_err(), "an empty dynamic table's entry");
        assert!(
            fields(&mut decoder, &[0x3f, 0xe2, 0x1f]).is_err(),
            "a table over 4096 bytes"
        );
        assert!(
            fields(&mut decoder, &[0x82, 0x20]).is_err(),
            "a size update after a field"
        );
        assert!(fields(&mut decoder, &[0x00, 0x85, 0xff]).is_err(), "a truncated string");
        // Huffman "a" (00011) padded with zeros instead of ones.
        assert!(fields(&mut decoder, &[0x00, 0x81, 0x18, 0x00]).is_err(), "bad padding");
        assert!(fields(&mut decoder, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]).is_err());
    }

    #[test]
    fn encoded_fields_decode() {
        let mut block = vec![NO_TABLE];
        status(&mut block, 200);
        field(&mut block, b"content-type", b"application/grpc", false);
        field(&mut block, b"x-request-id", &[b'a'; 300], true);
        status(&mut block, 404);
        let decoded = fields(&mut Decoder::default(), &block);
        assert_eq!(
            decoded.unwrap(),
            pairs(&[
                (":status", "200"),
                ("content-type", "application/grpc"),
                ("x-request-id", &"a".repeat(300)),
                (":status", "404")
            ])
        );
    }

    /// Huffman-codes `bytes` with the table, for the decoder's round trip.
    fn huffman_encode(bytes: &[u8]) -> Vec<u8> {
        let (mut out, mut bits, mut pending) = (Vec::new(), 0u64, 0u32);
        for byte in bytes {
            let (code, len) = HUFFMAN[usize::from(*byte)];
            bits = bits << len | u64::from(code);
            pending += u32::from(len);
            while pending >= 8 {
                pending -= 8;
                out.push((bits >> pending) as u8);
            }
        }
        if pending > 0 {
            out.push((bits << (8 - pending)) as u8 | (0xff >> pending));
        }
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(512))]

        #[test]
        fn any_bytes_decode_or_fail_without_a_panic(
            blocks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 1..4)
        ) {
            let mut decoder = Decoder::default();
            for block in blocks {
                let _ = decoder.decode(&Bytes::from(block), |_, _| {});
                proptest::prop_assert!(decoder.size <= decoder.max_size);
            }
        }

        #[test]
        fn huffman_strings_round_trip(value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let encoded = huffman_encode(&value);
            let mut block = vec![0x00];
            encode_string(&mut block, b"x-name");
            encode_integer(&mut block, encoded.len(), 7, 0x80);
            block.extend_from_slice(&encoded);
            // Twice: the second decode comes from the recently decoded strings.
            let mut decoder = Decoder::default();
            for _ in 0..2 {
                let mut decoded = Vec::new();
                decoder
                    .decode(&Bytes::from(block.clone()), |name, got| decoded.push((name.to_vec(), got.to_vec())))
                    .unwrap();
                proptest::prop_assert_eq!(&decoded[0].0[..], b"x-name");
                proptest::prop_assert_eq!(&decoded[0].1, &value);
            }
        }

        #[test]
        fn indexed_literals_fill_and_evict_the_table(
            values in proptest::collection::vec("[a-z0-9]{0,200}", 1..40)
        ) {
            let mut decoder = Decoder::default();
            for value in &values {
                // Literal with incremental indexing, new name, then the entry by index 62.
                let mut block = vec![0x40];
                encode_string(&mut block, b"x-key");
                encode_string(&mut block, value.as_bytes());
                block.push(0x80 | 62);
                let decoded = fields(&mut decoder, &block).unwrap();
                proptest::prop_assert_eq!(&decoded[1].1, value);
                proptest::prop_assert!(decoder.size <= TABLE_SIZE);
            }
        }
    }
}
