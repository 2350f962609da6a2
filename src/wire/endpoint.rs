//! One provider as the wire calls it (`Endpoint`): where, how, with which key and
//! deadlines, and how its URLs are built.

use crate::classify::dialect::Dialect;
use crate::core::secret::Secret;
use crate::core::vocab::Wire;

/// The path of OpenAI's Responses API under a provider's base URL.
pub const RESPONSES_PATH: &str = "/responses";

/// One provider as the wire calls it: where, how, with which key and deadlines. What the
/// router does with its failures is in [`crate::config::route::RoutePolicy`].
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub provider: String,
    pub wire: Wire,
    pub dialect: Dialect,
    pub base_url: String,
    pub api_key: Secret,
    /// Whole non-streaming call.
    pub timeout_ms: u64,
    /// Streams: headers to first visible token.
    pub first_token_timeout_ms: u64,
    /// Streams: longest silence between chunks.
    pub stream_idle_ms: u64,
    /// Streams: the whole stream, headers to end.
    pub stream_max_ms: u64,
    /// Streams: text and tool-call arguments delivered.
    pub max_stream_bytes: u64,
    /// Streams: one SSE event.
    pub max_event_bytes: u64,
    /// LiteLLM's `drop_params`: a semantic field this route cannot carry is dropped
    /// and named instead of skipping the route (spec/fidelity.md §3).
    pub drop_params: bool,
}

pub const DEFAULT_TIMEOUT_MS: u64 = 30_000;

pub const DEFAULT_FIRST_TOKEN_TIMEOUT_MS: u64 = 15_000;

pub const DEFAULT_STREAM_IDLE_MS: u64 = 20_000;

impl Endpoint {
    /// `base_url` without a trailing slash and without its query, ready for a path to
    /// be appended. Build whole URLs with `url`, which keeps the query.
    pub fn base(&self) -> &str {
        let no_query = self.base_url.split('?').next().unwrap_or("");
        no_query.trim_end_matches('/')
    }

    /// This endpoint with every deadline cut to `left_ms` (what is left of the request's
    /// `max_elapsed_ms`), so no attempt outlives the budget. Borrowed when none is cut.
    pub fn within(&self, left_ms: u64) -> std::borrow::Cow<'_, Endpoint> {
        let left = left_ms.max(1);
        if self.timeout_ms <= left
            && self.first_token_timeout_ms <= left
            && self.stream_max_ms <= left
        {
            return std::borrow::Cow::Borrowed(self);
        }
        std::borrow::Cow::Owned(Endpoint {
            timeout_ms: self.timeout_ms.min(left),
            first_token_timeout_ms: self.first_token_timeout_ms.min(left),
            stream_max_ms: self.stream_max_ms.min(left),
            ..self.clone()
        })
    }

    /// The URL of `path` (which may carry its own query, `?alt=sse`) on this endpoint:
    /// the path joins the base's path, and a query in `base_url` (a gateway's `?key=`)
    /// is kept after it, never left in the middle of the path.
    pub fn url(&self, path: &str) -> String {
        join_url(&self.base_url, path)
    }
}

/// `base` + `path`, with the query of each kept and merged after the path.
pub fn join_url(base: &str, path: &str) -> String {
    let (base_path, base_query) = split_query(base);
    if base_query.is_none() && !path.contains('?') {
        // The common case, without the query merge: one allocation.
        let (base_path, path) = (
            base_path.trim_end_matches('/'),
            path.trim_start_matches('/'),
        );
        let mut url = String::with_capacity(base_path.len() + 1 + path.len());
        url.push_str(base_path);
        url.push('/');
        url.push_str(path);
        return url;
    }
    let (path, path_query) = split_query(path);
    let mut url = format!(
        "{}/{}",
        base_path.trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    let queries: Vec<&str> = [base_query, path_query]
        .into_iter()
        .flatten()
        .filter(|q| !q.is_empty())
        .collect();
    if !queries.is_empty() {
        url.push('?');
        url.push_str(&queries.join("&"));
    }
    url
}

fn split_query(s: &str) -> (&str, Option<&str>) {
    match s.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (s, None),
    }
}

#[cfg(test)]
mod tests {
    use super::join_url;

    #[test]
    fn urls_join_with_one_slash_and_every_query_after_the_path() {
        for (base, path, url) in [
            (
                "http://h/v1",
                "/chat/completions",
                "http://h/v1/chat/completions",
            ),
            (
                "http://h/v1/",
                "chat/completions",
                "http://h/v1/chat/completions",
            ),
            ("http://h/v1//", "//x", "http://h/v1/x"),
            ("http://h/v1?key=k", "/x", "http://h/v1/x?key=k"),
            (
                "http://h/v1?key=k",
                "/x?alt=sse",
                "http://h/v1/x?key=k&alt=sse",
            ),
            ("http://h/v1", "/x?alt=sse", "http://h/v1/x?alt=sse"),
            ("http://h/v1?", "/x", "http://h/v1/x"),
        ] {
            assert_eq!(join_url(base, path), url, "{base} + {path}");
        }
    }
}
