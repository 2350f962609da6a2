//! The call a mock answers: its kind, what a reply needs to know about it, and the
//! socket-level pieces every reply shares (the request-id header, a TCP reset). Both
//! the whole-body replies (`mock`, `wire_bodies`) and the streams (`stream_server`)
//! build on these, so they live below all three.

use crate::core::vocab::Wire;
use serde_json::Value;
use std::time::Duration;
use tokio::net::TcpStream;

/// What kind of call a request is, as its wire's endpoint says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    Chat,
    Stream,
    Embed,
    Rerank,
}

/// What a reply needs to know about the call it answers.
pub struct ReplyCtx<'a> {
    pub wire: Wire,
    pub call: CallKind,
    pub model: &'a str,
    /// 1-based call number of this route, for ids.
    pub seq: usize,
    pub request: &'a Value,
}

pub fn request_id_header(wire: Wire, seq: usize) -> (String, String) {
    match wire {
        Wire::Anthropic => ("request-id".into(), format!("req_mock_{seq:04}")),
        _ => ("x-request-id".into(), format!("req_mock_{seq:04}")),
    }
}

/// Closes the socket with an RST instead of a FIN: the peer sees "connection reset".
#[allow(deprecated)] // the deprecation is about blocking on drop; a zero linger never blocks
pub fn reset(stream: &mut TcpStream) {
    let _ = stream.set_linger(Some(Duration::ZERO));
    // Dropping the stream (by the caller returning) sends the RST.
}
