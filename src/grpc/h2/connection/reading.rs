//! Reading: frames as they arrive, settings, flow-control updates, request
//! header blocks and bodies, and how each stream's call is started.

use super::*;

impl<IO> Connection<IO>
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    pub(super) fn frames(&mut self) -> Result<(), Reason> {
        if !self.preface_read {
            if self.rbuf.len() < frame::PREFACE.len() {
                return if frame::PREFACE.starts_with(&self.rbuf) {
                    Ok(())
                } else {
                    Err(Reason::PROTOCOL_ERROR)
                };
            }
            if &self.rbuf[..frame::PREFACE.len()] != frame::PREFACE {
                return Err(Reason::PROTOCOL_ERROR);
            }
            self.rbuf.advance(frame::PREFACE.len());
            self.preface_read = true;
        }
        while self.rbuf.len() >= frame::HEAD && !self.failed {
            let Ok(bytes) = <&[u8; frame::HEAD]>::try_from(&self.rbuf[..frame::HEAD]) else {
                return Err(Reason::INTERNAL_ERROR);
            };
            let head = Head::parse(bytes);
            if head.len > frame::DEFAULT_MAX_FRAME {
                return Err(Reason::FRAME_SIZE_ERROR);
            }
            if self.rbuf.len() < frame::HEAD + head.len {
                break;
            }
            self.rbuf.advance(frame::HEAD);
            let payload = self.rbuf.split_to(head.len).freeze();
            self.frame(head, payload)?;
        }
        Ok(())
    }

    pub(super) fn frame(&mut self, head: Head, payload: Bytes) -> Result<(), Reason> {
        if let Some((stream, ..)) = &self.continuation {
            if head.kind != kind::CONTINUATION || head.stream != *stream {
                return Err(Reason::PROTOCOL_ERROR);
            }
        }
        match head.kind {
            kind::DATA => self.data(&head, payload),
            kind::HEADERS => self.headers(&head, payload),
            kind::CONTINUATION => self.continuation(&head, &payload),
            kind::PRIORITY => {
                if head.stream == 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if head.len != 5 && self.streams.contains_key(&head.stream) {
                    self.reset(head.stream, Reason::FRAME_SIZE_ERROR);
                }
                Ok(())
            }
            kind::RST_STREAM => {
                if head.stream == 0 || head.stream > self.highest_stream {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if head.len != 4 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                if self.remove(head.stream) {
                    self.count_peer_reset()?;
                }
                Ok(())
            }
            kind::SETTINGS => self.settings(&head, &payload),
            kind::PUSH_PROMISE => Err(Reason::PROTOCOL_ERROR),
            kind::PING => {
                if head.stream != 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                let Ok(opaque) = <[u8; 8]>::try_from(&payload[..]) else {
                    return Err(Reason::FRAME_SIZE_ERROR);
                };
                if !head.has(flag::ACK) {
                    frame::ping(&mut self.wbuf, true, opaque);
                } else if opaque == KEEPALIVE_PING {
                    self.ping_deadline = None;
                } else if opaque == GOAWAY_PING && matches!(self.away, Away::Draining(_)) {
                    self.final_go_away();
                }
                Ok(())
            }
            kind::GOAWAY => {
                if head.stream != 0 {
                    return Err(Reason::PROTOCOL_ERROR);
                }
                if head.len < 8 {
                    return Err(Reason::FRAME_SIZE_ERROR);
                }
                self.peer_away = true;
                Ok(())
            }
            kind::WINDOW_UPDATE => self.window_update(&head, &payload),
            // Unknown frames are ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    pub(super) fn settings(&mut self, head: &Head, payload: &[u8]) -> Result<(), Reason> {
        if head.stream != 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if head.has(flag::ACK) {
            return if head.len == 0 {
                Ok(())
            } else {
                Err(Reason::FRAME_SIZE_ERROR)
            };
        }
        if head.len % 6 != 0 {
            return Err(Reason::FRAME_SIZE_ERROR);
        }
        for entry in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            match id {
                setting::INITIAL_WINDOW_SIZE => {
                    let value = i64::from(value);
                    if value > frame::MAX_WINDOW {
                        return Err(Reason::FLOW_CONTROL_ERROR);
                    }
                    let delta = value - self.peer_initial_window;
                    self.peer_initial_window = value;
                    for (id, stream) in self.streams.iter_mut() {
                        stream.send_window += delta;
                        if stream.send_window > frame::MAX_WINDOW {
                            return Err(Reason::FLOW_CONTROL_ERROR);
                        }
                        if !stream.out.is_empty() && !stream.queued {
                            stream.queued = true;
                            self.ready.push(*id);
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(frame::DEFAULT_MAX_FRAME as u32..=(1 << 24) - 1).contains(&value) {
                        return Err(Reason::PROTOCOL_ERROR);
                    }
                    self.peer_max_frame = value as usize;
                }
                setting::ENABLE_PUSH if value > 1 => return Err(Reason::PROTOCOL_ERROR),
                // The header table is never used (`hpack::NO_TABLE`); nothing is pushed.
                setting::HEADER_TABLE_SIZE | setting::MAX_CONCURRENT_STREAMS | setting::MAX_HEADER_LIST_SIZE => {}
                _ => {}
            }
        }
        frame::settings_ack(&mut self.wbuf);
        Ok(())
    }

    pub(super) fn window_update(&mut self, head: &Head, payload: &[u8]) -> Result<(), Reason> {
        let Ok(bytes) = <[u8; 4]>::try_from(payload) else {
            return Err(Reason::FRAME_SIZE_ERROR);
        };
        let increment = i64::from(u32::from_be_bytes(bytes) & 0x7fff_ffff);
        if head.stream == 0 {
            if increment == 0 {
                return Err(Reason::PROTOCOL_ERROR);
            }
            self.send_window += increment;
            if self.send_window > frame::MAX_WINDOW {
                return Err(Reason::FLOW_CONTROL_ERROR);
            }
            // Every stream waiting on the connection's window may go on.
            for (id, stream) in self.streams.iter_mut() {
                if !stream.out.is_empty() && !stream.queued {
                    stream.queued = true;
                    self.ready.push(*id);
                }
            }
            return Ok(());
        }
        let Some(stream) = self.streams.get_mut(&head.stream) else {
            return if head.stream > self.highest_stream {
                Err(Reason::PROTOCOL_ERROR)
            } else {
                Ok(())
            };
        };
        if increment == 0 {
            self.reset(head.stream, Reason::PROTOCOL_ERROR);
            return Ok(());
        }
        stream.send_window += increment;
        if stream.send_window > frame::MAX_WINDOW {
            self.reset(head.stream, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        if !stream.out.is_empty() && !stream.queued {
            stream.queued = true;
            self.ready.push(head.stream);
        }
        Ok(())
    }

    pub(super) fn data(&mut self, head: &Head, payload: Bytes) -> Result<(), Reason> {
        if head.stream == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let len = head.len as i64;
        if len > self.recv_window {
            return Err(Reason::FLOW_CONTROL_ERROR);
        }
        self.recv_window -= len;
        let range = frame::unpadded(head, &payload)?;
        let padding = head.len - range.len();
        let id = head.stream;
        let limit = self.services.receive_limit;
        let Some(stream) = self.streams.get_mut(&id) else {
            if id > self.highest_stream {
                return Err(Reason::PROTOCOL_ERROR);
            }
            // A stream already closed here: its bytes still count against
            // the connection's window, so they are returned.
            self.credit(head.len);
            return Ok(());
        };
        if stream.remote_closed {
            self.credit(head.len);
            self.reset(id, Reason::STREAM_CLOSED);
            return Ok(());
        }
        if len > stream.recv_window {
            self.credit(head.len);
            self.reset(id, Reason::FLOW_CONTROL_ERROR);
            return Ok(());
        }
        stream.recv_window -= len;
        let end = head.has(flag::END_STREAM);
        let data = payload.slice(range);
        let mut credit = padding;
        let mut relay = false;
        match &mut stream.recv {
            Recv::Message(_, body) => {
                body.extend_from_slice(&data);
                credit += data.len();
                relay = !end && !predict_fits(body, limit);
            }
            Recv::Relayed(inbox) => match inbox.lock() {
                Ok(mut inbox) if !inbox.dropped => {
                    stream.uncredited += data.len();
                    inbox.push(data);
                }
                // Nobody reads this body any more.
                _ => credit += data.len(),
            },
            Recv::Done => credit += data.len(),
        }
        if credit > 0 {
            self.credit_stream(id, credit);
            self.credit(credit);
        }
        if relay {
            self.start_relay(id, false);
        }
        if end {
            self.end_of_body(id);
        }
        Ok(())
    }

    pub(super) fn headers(&mut self, head: &Head, payload: Bytes) -> Result<(), Reason> {
        if head.stream == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        let mut range = frame::unpadded(head, &payload)?;
        if head.has(flag::PRIORITY) {
            if range.len() < 5 {
                return Err(Reason::PROTOCOL_ERROR);
            }
            range.start += 5;
        }
        let block = payload.slice(range);
        let end_stream = head.has(flag::END_STREAM);
        if head.has(flag::END_HEADERS) {
            self.header_block(head.stream, end_stream, &block)
        } else {
            if block.len() > MAX_HEADER_BLOCK {
                return Err(ENHANCE_YOUR_CALM);
            }
            self.continuation = Some((head.stream, end_stream, block.to_vec()));
            Ok(())
        }
    }

    pub(super) fn continuation(&mut self, head: &Head, payload: &[u8]) -> Result<(), Reason> {
        let Some((id, end_stream, mut block)) = self.continuation.take() else {
            return Err(Reason::PROTOCOL_ERROR);
        };
        if block.len() + payload.len() > MAX_HEADER_BLOCK {
            return Err(ENHANCE_YOUR_CALM);
        }
        block.extend_from_slice(payload);
        if head.has(flag::END_HEADERS) {
            self.header_block(id, end_stream, &Bytes::from(block))
        } else {
            self.continuation = Some((id, end_stream, block));
            Ok(())
        }
    }

    /// A header block as a request's head; the last head again when the
    /// block is the last one's bytes and that one left the table unchanged.
    fn decode_head(&mut self, block: &Bytes) -> Result<Fields, Reason> {
        if let Some(head) = &self.last_head {
            if self.last_block[..] == block[..] {
                return Ok(Fields::Request(head.clone()));
            }
        }
        let fields = decode(&mut self.decoder, block)?;
        self.last_head = None;
        if let Fields::Request(head) = &fields {
            if !self.decoder.table_changed() {
                self.last_block.clear();
                self.last_block.extend_from_slice(block);
                self.last_head = Some(head.clone());
            }
        }
        Ok(fields)
    }

    pub(super) fn header_block(&mut self, id: u32, end_stream: bool, block: &Bytes) -> Result<(), Reason> {
        // Decoded whatever becomes of the stream, to keep the table in step.
        let fields = self.decode_head(block)?;
        if id % 2 == 0 {
            return Err(Reason::PROTOCOL_ERROR);
        }
        if let Some(stream) = self.streams.get(&id) {
            // Trailers: they end the request.
            if stream.remote_closed {
                self.reset(id, Reason::STREAM_CLOSED);
            } else if !end_stream {
                self.reset(id, Reason::PROTOCOL_ERROR);
            } else {
                self.end_of_body(id);
            }
            return Ok(());
        }
        if id <= self.highest_stream {
            // A stream this side has closed or refused; whatever it was is over.
            return Ok(());
        }
        self.highest_stream = id;
        if self.away == Away::Final {
            // Past the last stream the final GOAWAY named: refused unrun.
            frame::rst_stream(&mut self.wbuf, id, Reason::REFUSED_STREAM);
            return Ok(());
        }
        self.last_stream = id;
        if self.streams.len() >= self.max_streams as usize {
            frame::rst_stream(&mut self.wbuf, id, Reason::REFUSED_STREAM);
            self.count_local_reset();
            return Ok(());
        }
        self.count_opened();
        let request = match fields {
            Fields::Request(request) => request,
            Fields::Malformed => {
                frame::rst_stream(&mut self.wbuf, id, Reason::PROTOCOL_ERROR);
                self.count_local_reset();
                return Ok(());
            }
            Fields::TooLarge(size) => {
                self.open(id, Recv::Done, end_stream);
                let status = Status::resource_exhausted(format!(
                    "the request's header list of {size} bytes is over the limit of {MAX_HEADER_LIST} bytes"
                ));
                self.trailers_only(id, &status);
                return Ok(());
            }
        };
        let take = self.predict.is_some() && request.is_predict();
        self.open(id, Recv::Message(request, BytesMut::new()), end_stream);
        if !take {
            self.start_relay(id, end_stream);
        } else if end_stream {
            self.end_of_body(id);
        }
        Ok(())
    }

    pub(super) fn open(&mut self, id: u32, recv: Recv, end_stream: bool) {
        self.streams.insert(
            id,
            Stream {
                recv,
                recv_window: i64::from(WINDOW),
                unacked: 0,
                precredited: 0,
                uncredited: 0,
                remote_closed: end_stream,
                send_window: self.peer_initial_window,
                out: VecDeque::new(),
                queued: false,
                headers_sent: false,
                flow: None,
                abort: None,
            },
        );
    }

    /// The request ended (END_STREAM on DATA or on trailers).
    pub(super) fn end_of_body(&mut self, id: u32) {
        let limit = self.services.receive_limit;
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        stream.remote_closed = true;
        let message = match &mut stream.recv {
            Recv::Relayed(inbox) => {
                if let Ok(mut inbox) = inbox.lock() {
                    inbox.end();
                }
                return;
            }
            Recv::Done => return,
            Recv::Message(_, body) if decodable(body, limit) => {
                // Decoded from shared bytes: `tensor_content` is a slice of
                // the body, not a copy.
                let bytes = std::mem::take(body).freeze();
                match PredictRequest::decode(bytes.slice(5..)) {
                    Ok(message) => Some(message),
                    Err(_) => {
                        *body = BytesMut::from(&bytes[..]);
                        None
                    }
                }
            }
            Recv::Message(..) => None,
        };
        let (Some(message), Some(api)) = (message, self.predict.clone()) else {
            // Not one whole message: tonic answers it.
            self.start_relay(id, true);
            return;
        };
        let Recv::Message(head, _) = std::mem::replace(&mut stream.recv, Recv::Done) else {
            return;
        };
        // A stream the client resets stops its call, as tonic's would.
        let (abort, registration) = AbortHandle::new_pair();
        stream.abort = Some(abort);
        let peer = self.peer.as_ref().and_then(|peer| peer.remote_addr());
        let call = Abortable::new(
            calls::predict(api, head, peer, message, self.services.send_limit),
            registration,
        )
        .map(|result| result.unwrap_or(Finished::Stopped));
        self.calls.push(caught(id, call));
    }

    /// Hands a stream collected as a Predict, or just opened, to the tonic
    /// services, with what has arrived so far as the start of its body.
    pub(super) fn start_relay(&mut self, id: u32, ended: bool) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let Recv::Message(head, body) = std::mem::replace(&mut stream.recv, Recv::Done) else {
            return;
        };
        let Some(parts) = Arc::unwrap_or_clone(head).into_parts() else {
            self.reset(id, Reason::PROTOCOL_ERROR);
            return;
        };
        let mut inbox = Inbox::default();
        stream.precredited = body.len();
        inbox.push(body.freeze());
        if ended {
            inbox.end();
        }
        let inbox = Arc::new(Mutex::new(inbox));
        let mut request = Request::from_parts(parts, RecvBody::new(inbox.clone(), self.shared.clone()));
        if let Some(peer) = &self.peer {
            request.extensions_mut().insert(peer.clone());
        }
        let flow = Arc::new(Flow::default());
        let (abort, registration) = AbortHandle::new_pair();
        stream.recv = Recv::Relayed(inbox);
        stream.flow = Some(flow.clone());
        stream.abort = Some(abort);
        let response = self.services.route(request);
        let call = calls::relay(id, response, self.shared.clone(), flow);
        let call = Abortable::new(call, registration).map(|result| result.unwrap_or(Finished::Stopped));
        self.calls.push(caught(id, call));
    }
}
