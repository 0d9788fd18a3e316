//! JSON string escaping for capture records, the part of a JSON Lines
//! record that grows with the bodies it holds.

/// The byte after the backslash that escapes a byte in a JSON string: 0 for
/// none, `u` for `\u00XX`.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = b'u';
        byte += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// The high bit of each of 8 bytes that needs escaping (a control byte, a
/// quote or a backslash), little-endian. The lowest flag is always exact, as
/// a false one needs a borrow from a flagged byte below it.
fn escape_flags(word: u64) -> u64 {
    let below = |x: u64, n: u64| x.wrapping_sub(ONES * n) & !x & HIGHS;
    below(word, 0x20) | below(word ^ (ONES * b'"' as u64), 1) | below(word ^ (ONES * b'\\' as u64), 1)
}

/// A stack buffer that a flush leaves room in for one more word written as 8
/// `\u00XX` escapes, stored 8 bytes at a time.
const FLUSH_AT: usize = 128;
type Buffer = [u8; FLUSH_AT + 64];

/// Writes the first `count` bytes of `word` (little-endian) at `filled`,
/// escaped: the word is stored whole, then from each escape on, again.
/// Returns the new fill.
fn put_word(buffer: &mut Buffer, mut filled: usize, mut word: u64, mut count: usize) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    loop {
        let valid = if count >= 8 {
            u64::MAX
        } else {
            (1u64 << (count * 8)) - 1
        };
        let flags = escape_flags(word) & valid;
        buffer[filled..filled + 8].copy_from_slice(&word.to_le_bytes());
        if flags == 0 {
            return filled + count;
        }
        let at = (flags.trailing_zeros() / 8) as usize;
        filled += at;
        let byte = (word >> (at * 8)) as u8;
        match ESCAPE[byte as usize] {
            b'u' => {
                buffer[filled..filled + 6].copy_from_slice(&[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[(byte >> 4) as usize],
                    HEX[(byte & 15) as usize],
                ]);
                filled += 6;
            }
            escape => {
                buffer[filled] = b'\\';
                buffer[filled + 1] = escape;
                filled += 2;
            }
        }
        count -= at + 1;
        if count == 0 {
            return filled;
        }
        // `at` < 7 here, so the shift stays within the word.
        word >>= (at + 1) * 8;
    }
}

/// Appends `text` as a JSON string. Bodies are escaped for every captured
/// request, and JSON bodies are short runs between quotes and newlines: each
/// 8-byte word is stored whole into a stack buffer and only its escapes are
/// handled apart, with no write per run or per byte.
pub(super) fn string(out: &mut Vec<u8>, text: &str) {
    let mut buffer: Buffer = [0; FLUSH_AT + 64];
    let mut filled = 0;
    let bytes = text.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut words = bytes.chunks_exact(8);
    for chunk in &mut words {
        if filled >= FLUSH_AT {
            out.extend_from_slice(&buffer[..filled]);
            filled = 0;
        }
        let mut eight = [0u8; 8];
        eight.copy_from_slice(chunk);
        filled = put_word(&mut buffer, filled, u64::from_le_bytes(eight), 8);
    }
    let tail = words.remainder();
    if !tail.is_empty() {
        if filled >= FLUSH_AT {
            out.extend_from_slice(&buffer[..filled]);
            filled = 0;
        }
        // Padding that needs no escape.
        let mut eight = [0xffu8; 8];
        eight[..tail.len()].copy_from_slice(tail);
        filled = put_word(&mut buffer, filled, u64::from_le_bytes(eight), tail.len());
    }
    out.extend_from_slice(&buffer[..filled]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_escape_as_json_reads_them_back_whatever_their_length_and_bytes() {
        let mut texts: Vec<String> = (0u8..0x80).map(|b| format!("ab{}cdefghij", b as char)).collect();
        texts.push(String::new());
        texts.push("é\u{2028}😀 \u{7f}".into());
        // Every escape kind in every position of a word, past the buffer's flush point.
        let mixed: String = (0..700).map(|i| ['"', '\\', '\n', '\u{1}', 'x', 'é'][i % 6]).collect();
        for end in [0, 1, 7, 8, 9, 255, 256, 257, 300, 699] {
            texts.push(mixed.chars().take(end).collect());
        }
        texts.push("\u{1f}".repeat(300));
        texts.push(r#"{"instances": [[0.5, 0.5]], "signature_name": "x"}"#.repeat(40));
        for text in texts {
            let mut out = b"[".to_vec();
            string(&mut out, &text);
            out.push(b']');
            let back: Vec<String> = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}: {out:?}"));
            assert_eq!(back, [text]);
        }
    }
}
