//! HTTP/2 frames as RFC 9113 lays them out: the frame header a server reads
//! and the frames it writes.

/// What every client sends first.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A frame header's length.
pub const HEAD: usize = 9;
/// The largest frame either side may send until told otherwise.
pub const DEFAULT_MAX_FRAME: usize = 16_384;
/// Every flow-control window's size until told otherwise.
pub const DEFAULT_WINDOW: i64 = 65_535;
/// No window may grow past this.
pub const MAX_WINDOW: i64 = (1 << 31) - 1;
/// The highest stream id: a first GOAWAY names it to say "more may come".
pub const MAX_STREAM_ID: u32 = (1 << 31) - 1;

pub mod kind {
    pub const DATA: u8 = 0;
    pub const HEADERS: u8 = 1;
    pub const PRIORITY: u8 = 2;
    pub const RST_STREAM: u8 = 3;
    pub const SETTINGS: u8 = 4;
    pub const PUSH_PROMISE: u8 = 5;
    pub const PING: u8 = 6;
    pub const GOAWAY: u8 = 7;
    pub const WINDOW_UPDATE: u8 = 8;
    pub const CONTINUATION: u8 = 9;
}

pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 1;
    pub const ENABLE_PUSH: u16 = 2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 3;
    pub const INITIAL_WINDOW_SIZE: u16 = 4;
    pub const MAX_FRAME_SIZE: u16 = 5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 6;
}

/// An error code of RST_STREAM and GOAWAY.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason(pub u32);

impl Reason {
    pub const NO_ERROR: Reason = Reason(0);
    pub const PROTOCOL_ERROR: Reason = Reason(1);
    pub const INTERNAL_ERROR: Reason = Reason(2);
    pub const FLOW_CONTROL_ERROR: Reason = Reason(3);
    pub const STREAM_CLOSED: Reason = Reason(5);
    pub const FRAME_SIZE_ERROR: Reason = Reason(6);
    pub const REFUSED_STREAM: Reason = Reason(7);
    pub const CANCEL: Reason = Reason(8);
    pub const COMPRESSION_ERROR: Reason = Reason(9);
}

/// A frame's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head {
    pub len: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl Head {
    pub fn parse(bytes: &[u8; HEAD]) -> Head {
        Head {
            len: usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]),
            kind: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & MAX_STREAM_ID,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// A payload less its padding (DATA and HEADERS with PADDED).
pub fn unpadded(head: &Head, payload: &[u8]) -> Result<std::ops::Range<usize>, Reason> {
    if !head.has(flag::PADDED) {
        return Ok(0..payload.len());
    }
    let padding = usize::from(*payload.first().ok_or(Reason::PROTOCOL_ERROR)?);
    if padding >= payload.len() {
        return Err(Reason::PROTOCOL_ERROR);
    }
    Ok(1..payload.len() - padding)
}

pub fn head(out: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream: u32) {
    let len = len as u32;
    out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.extend_from_slice(&(stream & MAX_STREAM_ID).to_be_bytes());
}

pub fn settings(out: &mut Vec<u8>, values: &[(u16, u32)]) {
    head(out, values.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in values {
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&value.to_be_bytes());
    }
}

pub fn settings_ack(out: &mut Vec<u8>) {
    head(out, 0, kind::SETTINGS, flag::ACK, 0);
}

pub fn ping(out: &mut Vec<u8>, ack: bool, payload: [u8; 8]) {
    head(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.extend_from_slice(&payload);
}

pub fn window_update(out: &mut Vec<u8>, stream: u32, increment: u32) {
    head(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.extend_from_slice(&increment.to_be_bytes());
}

pub fn rst_stream(out: &mut Vec<u8>, stream: u32, reason: Reason) {
    head(out, 4, kind::RST_STREAM, 0, stream);
    out.extend_from_slice(&reason.0.to_be_bytes());
}

pub fn goaway(out: &mut Vec<u8>, last_stream: u32, reason: Reason, debug: &[u8]) {
    head(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.extend_from_slice(&(last_stream & MAX_STREAM_ID).to_be_bytes());
    out.extend_from_slice(&reason.0.to_be_bytes());
    out.extend_from_slice(debug);
}

pub fn data(out: &mut Vec<u8>, stream: u32, payload: &[u8], end_stream: bool) {
    head(
        out,
        payload.len(),
        kind::DATA,
        if end_stream { flag::END_STREAM } else { 0 },
        stream,
    );
    out.extend_from_slice(payload);
}

/// A header block as one HEADERS frame and as many CONTINUATIONs as the
/// peer's frame size asks for.
pub fn header_block(out: &mut Vec<u8>, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame.max(1));
    let first = chunks.next().unwrap_or(&[]);
    let last = first.len() == block.len();
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if last {
        flags |= flag::END_HEADERS;
    }
    head(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    let mut sent = first.len();
    for chunk in chunks {
        sent += chunk.len();
        let flags = if sent == block.len() { flag::END_HEADERS } else { 0 };
        head(out, chunk.len(), kind::CONTINUATION, flags, stream);
        out.extend_from_slice(chunk);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_head_round_trips() {
        let mut out = Vec::new();
        head(&mut out, 70_000, kind::HEADERS, flag::END_HEADERS, 7);
        let parsed = Head::parse(out[..HEAD].try_into().expect("nine bytes"));
        assert_eq!(
            parsed,
            Head {
                len: 70_000,
                kind: kind::HEADERS,
                flags: flag::END_HEADERS,
                stream: 7
            }
        );
    }

    #[test]
    fn the_reserved_bit_of_a_stream_id_is_ignored() {
        let bytes = [0, 0, 0, kind::DATA, 0, 0x80, 0, 0, 3];
        assert_eq!(Head::parse(&bytes).stream, 3);
    }

    #[test]
    fn padding_is_stripped_and_checked() {
        let padded = Head {
            len: 5,
            kind: kind::DATA,
            flags: flag::PADDED,
            stream: 1,
        };
        assert_eq!(unpadded(&padded, &[2, b'a', b'b', 0, 0]), Ok(1..3));
        assert_eq!(unpadded(&padded, &[5, 0, 0, 0, 0]), Err(Reason::PROTOCOL_ERROR));
        assert_eq!(unpadded(&padded, &[]), Err(Reason::PROTOCOL_ERROR));
    }

    #[test]
    fn long_header_blocks_continue() {
        let block = vec![7u8; 40];
        let mut out = Vec::new();
        header_block(&mut out, 1, &block, true, 16);
        let first = Head::parse(out[..HEAD].try_into().expect("head"));
        assert_eq!(
            (first.len, first.kind, first.flags),
            (16, kind::HEADERS, flag::END_STREAM)
        );
        let second = Head::parse(out[HEAD + 16..2 * HEAD + 16].try_into().expect("head"));
        assert_eq!((second.len, second.kind, second.flags), (16, kind::CONTINUATION, 0));
        let third = Head::parse(out[2 * HEAD + 32..3 * HEAD + 32].try_into().expect("head"));
        assert_eq!(
            (third.len, third.kind, third.flags),
            (8, kind::CONTINUATION, flag::END_HEADERS)
        );
        assert_eq!(out.len(), 3 * HEAD + 40);
    }
}
