//! Answering: relayed calls' events and finished calls turned into frames,
//! and the frames written as each stream's and the connection's windows allow.

use super::*;

impl<IO> Connection<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    pub(super) fn relayed(&mut self, id: u32, event: Event) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        match event {
            Event::Head(parts, end) => {
                let mut block = Vec::with_capacity(128);
                hpack::status(&mut block, parts.status.as_u16());
                encode_fields(&mut block, &parts.headers);
                stream.headers_sent = true;
                stream.out.push_back(Out::Block(block.into(), end));
            }
            Event::Data(data) => stream.out.push_back(Out::Data(data, false)),
            Event::Trailers(trailers) => {
                let mut block = Vec::with_capacity(64);
                encode_fields(&mut block, &trailers);
                stream.out.push_back(Out::Block(block.into(), true));
            }
            Event::End => stream.out.push_back(Out::Data(Bytes::new(), true)),
            Event::Failed => stream.out.push_back(Out::Reset(Reason::INTERNAL_ERROR)),
        }
        if !stream.queued {
            stream.queued = true;
            self.ready.push(id);
        }
    }

    pub(super) fn finished_call(&mut self, id: u32, finished: Option<Finished>) {
        match finished {
            Some(Finished::Predict(Ok(answer))) => self.predict_answer(id, answer),
            Some(Finished::Predict(Err(status))) => self.trailers_only(id, &status),
            Some(Finished::Relayed | Finished::Stopped) => {}
            None => {
                log::error!("a gRPC call on stream {id} panicked");
                match self.streams.get(&id) {
                    // The server's own failure: not counted against the client.
                    Some(stream) if stream.headers_sent => {
                        self.remove(id);
                        frame::rst_stream(&mut self.wbuf, id, Reason::INTERNAL_ERROR);
                    }
                    Some(_) => self.trailers_only(id, &Status::internal("the call failed unexpectedly")),
                    None => {}
                }
            }
        }
    }

    pub(super) fn predict_answer(&mut self, id: u32, answer: PredictAnswer) {
        let Some(stream) = self.streams.get_mut(&id) else {
            // Reset while it ran: nobody reads the answer.
            return;
        };
        let len = 5 + answer.message_len();
        let window = stream.send_window.min(self.send_window).max(0) as usize;
        if stream.out.is_empty() && !stream.queued && len <= window && len <= self.peer_max_frame {
            // The usual case: the windows take the whole answer now, so its
            // frames are written where they go, the message included.
            let at = self.wbuf.len();
            frame::head(&mut self.wbuf, 0, kind::HEADERS, flag::END_HEADERS, id);
            if !self.table_cleared {
                self.wbuf.push(hpack::NO_TABLE);
                self.table_cleared = true;
            }
            predict_head(&mut self.wbuf, &answer.request_id);
            let block = (self.wbuf.len() - at - frame::HEAD) as u32;
            self.wbuf[at..at + 3].copy_from_slice(&block.to_be_bytes()[1..]);
            frame::head(&mut self.wbuf, len, kind::DATA, 0, id);
            self.wbuf.push(0);
            self.wbuf
                .extend_from_slice(&(answer.message_len() as u32).to_be_bytes());
            answer.write(&mut self.wbuf);
            frame::head(
                &mut self.wbuf,
                GRPC_OK_TRAILERS.len(),
                kind::HEADERS,
                flag::END_HEADERS | flag::END_STREAM,
                id,
            );
            self.wbuf.extend_from_slice(GRPC_OK_TRAILERS);
            stream.send_window -= len as i64;
            self.send_window -= len as i64;
            if !stream.remote_closed {
                // Answered before the request ended: the rest is not wanted.
                frame::rst_stream(&mut self.wbuf, id, Reason::NO_ERROR);
            }
            self.remove(id);
            return;
        }
        let mut block = Vec::with_capacity(64 + answer.request_id.len());
        predict_head(&mut block, &answer.request_id);
        let mut body = Vec::with_capacity(len);
        body.push(0);
        body.extend_from_slice(&(answer.message_len() as u32).to_be_bytes());
        answer.write(&mut body);
        stream.headers_sent = true;
        stream.out.push_back(Out::Block(block.into(), false));
        stream.out.push_back(Out::Data(Bytes::from(body), false));
        stream.out.push_back(Out::Block(GRPC_OK_TRAILERS.into(), true));
        if !stream.queued {
            stream.queued = true;
            self.ready.push(id);
        }
    }

    /// A call's whole answer in one HEADERS frame: its status, no message.
    pub(super) fn trailers_only(&mut self, id: u32, status: &Status) {
        if !self.streams.contains_key(&id) {
            return;
        }
        let mut fields = HeaderMap::new();
        // A message no header can carry is replaced by tonic with its own status.
        if let Some(status) = status.add_header(&mut fields).err() {
            fields.clear();
            let _ = status.add_header(&mut fields);
        }
        let mut block = Vec::with_capacity(128);
        block.push(hpack::STATUS_OK);
        hpack::field(&mut block, b"content-type", GRPC, false);
        encode_fields(&mut block, &fields);
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.headers_sent = true;
        stream.out.push_back(Out::Block(block.into(), true));
        if !stream.queued {
            stream.queued = true;
            self.ready.push(id);
        }
    }

    /// A stream error: RST_STREAM, and its call stopped. A client causing
    /// many is sent away.
    /// Writes what each stream with something to send may send now.
    pub(super) fn send(&mut self) {
        let mut index = 0;
        while index < self.ready.len() {
            let id = self.ready[index];
            let Some(stream) = self.streams.get_mut(&id) else {
                self.ready.swap_remove(index);
                continue;
            };
            let mut closed = false;
            while let Some(out) = stream.out.front_mut() {
                match out {
                    Out::Block(block, end) => {
                        if !self.table_cleared {
                            block.to_mut().insert(0, hpack::NO_TABLE);
                            self.table_cleared = true;
                        }
                        frame::header_block(&mut self.wbuf, id, block, *end, self.peer_max_frame);
                        closed = *end;
                    }
                    Out::Reset(reason) => {
                        frame::rst_stream(&mut self.wbuf, id, *reason);
                        closed = true;
                        stream.remote_closed = true;
                    }
                    Out::Data(data, end) => {
                        let allowed = stream.send_window.min(self.send_window).max(0) as usize;
                        let n = data.len().min(allowed).min(self.peer_max_frame);
                        if n == 0 && !data.is_empty() {
                            break;
                        }
                        let last = n == data.len();
                        frame::data(&mut self.wbuf, id, &data[..n], last && *end);
                        stream.send_window -= n as i64;
                        self.send_window -= n as i64;
                        if let Some(flow) = &stream.flow {
                            flow.written(n);
                        }
                        closed = last && *end;
                        if !last {
                            data.advance(n);
                            continue;
                        }
                    }
                }
                stream.out.pop_front();
                if closed {
                    break;
                }
            }
            if closed {
                if !stream.remote_closed {
                    // Answered before the request ended: the rest is not wanted.
                    frame::rst_stream(&mut self.wbuf, id, Reason::NO_ERROR);
                }
                self.remove(id);
                self.ready.swap_remove(index);
            } else if stream.out.is_empty() {
                stream.queued = false;
                self.ready.swap_remove(index);
            } else {
                index += 1;
            }
        }
    }
}

/// `:status: 200` and `content-type: application/grpc`, as `hpack::field`
/// writes the type: a Predict answer's fields before its request id.
const PREDICT_HEAD: &[u8] = b"\x88\x00\x0ccontent-type\x10application/grpc";

/// A Predict answer's header block.
fn predict_head(block: &mut Vec<u8>, request_id: &str) {
    block.extend_from_slice(PREDICT_HEAD);
    // Never indexed: every id is new, so indexing one would only evict
    // useful entries from the client's table.
    hpack::field(block, REQUEST_ID.as_str().as_bytes(), request_id.as_bytes(), true);
}

/// `grpc-status: 0`.
const GRPC_OK_TRAILERS: &[u8] = b"\x00\x0bgrpc-status\x010";

fn encode_fields(block: &mut Vec<u8>, fields: &HeaderMap) {
    for (name, value) in fields {
        hpack::field(block, name.as_str().as_bytes(), value.as_bytes(), value.is_sensitive());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_predict_head_is_the_fields_it_names() {
        let mut fields = vec![hpack::STATUS_OK];
        hpack::field(&mut fields, b"content-type", GRPC, false);
        assert_eq!(PREDICT_HEAD, &fields[..]);
    }
}
