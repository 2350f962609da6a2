//! What keeps a web page out of a gateway on the operator's own machine. With no token
//! (the default) anything that can reach `127.0.0.1:8700` can spend the upstream quota,
//! and a browser can reach it: a page's form posts `text/plain` without a preflight,
//! and DNS rebinding points a foreign name at loopback so that the page may also read
//! the answers. Three checks close those doors; each is a pure function of the request
//! head, decided before the body is read.

use std::net::SocketAddr;

/// Whether `host` (the `Host` header) may be answered by a gateway listening on
/// `listen`. A gateway on a loopback address answers only names of loopback
/// (`localhost`, `127.x.x.x`, `[::1]`, with or without a port): a rebound name such as
/// `evil.example.com` is refused. One listening on another address is reached by names
/// the operator chose (a load balancer's, a pod's), which cannot be listed here.
/// A request without `Host` is not a browser's: HTTP/1.0 (an HTTP/1.1 one is refused
/// before this, by `host_missing`).
pub fn host_allowed(listen: SocketAddr, host: Option<&[u8]>) -> bool {
    if !listen.ip().is_loopback() {
        return true;
    }
    let Some(host) = host.and_then(|h| std::str::from_utf8(h).ok()) else {
        return host.is_none();
    };
    let name = match host.strip_prefix('[') {
        // `[::1]:8700`: the address is what the brackets hold.
        Some(rest) => match rest.split_once(']') {
            Some((addr, port)) if port.is_empty() || valid_port(port) => addr,
            _ => return false,
        },
        None => match host.rsplit_once(':') {
            Some((name, port)) if valid_port(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        },
    };
    let name = name.trim_end_matches('.');
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// What is wrong with a request's `Host` lines, by RFC 9112 §3.2, which has a server
/// answer 400 to an HTTP/1.1 request without one and to any request with several.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostFault {
    /// An HTTP/1.1 request without `Host`. HTTP/1.0 predates the header, so its
    /// requests are served without it (`host_allowed` lets them through).
    Missing,
    /// Several `Host` lines: a proxy in front and this gateway could each read another,
    /// and the loopback check would judge only the first.
    Several,
}

impl HostFault {
    /// The error code the refusal carries, and its metric's reason.
    pub fn code(self) -> &'static str {
        match self {
            HostFault::Missing => "missing_host",
            HostFault::Several => "several_hosts",
        }
    }
}

/// The fault of a request's `Host` lines, if any (`HostFault`).
pub fn host_fault(version: hyper::Version, headers: &hyper::HeaderMap) -> Option<HostFault> {
    let mut hosts = headers.get_all(hyper::header::HOST).iter();
    match (hosts.next(), hosts.next()) {
        (None, _) if version == hyper::Version::HTTP_11 => Some(HostFault::Missing),
        (Some(_), Some(_)) => Some(HostFault::Several),
        _ => None,
    }
}

/// `:8700`: a colon and one to five digits.
fn valid_port(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a request carrying `Origin: origin` is served: only when the operator listed
/// it (`--allow-origin`), compared exactly as browsers send it (scheme, host, port;
/// ASCII case aside). `*` lists every origin.
pub fn origin_allowed(allowed: &[String], origin: &[u8]) -> bool {
    let Ok(origin) = std::str::from_utf8(origin) else {
        return false;
    };
    allowed
        .iter()
        .any(|a| a == "*" || a.trim_end_matches('/').eq_ignore_ascii_case(origin))
}

/// Whether `content_type` declares JSON: `application/json`, with parameters
/// (`; charset=utf-8`) or without. A form's `text/plain` or no type at all is how a
/// page posts without the browser's preflight; no SDK sends either.
pub fn is_json(content_type: Option<&[u8]>) -> bool {
    let Some(ct) = content_type.and_then(|v| std::str::from_utf8(v).ok()) else {
        return false;
    };
    let essence = ct.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// The first content coding of a request body other than `identity`, as the client
/// named it (clipped for the error message), or `None` for a body sent as it stands.
/// Every `Content-Encoding` line and every item of a list counts: codings apply in turn.
pub fn encoded<'a>(
    content_encoding: impl IntoIterator<Item = &'a hyper::header::HeaderValue>,
) -> Option<String> {
    content_encoding.into_iter().find_map(|v| {
        let text = String::from_utf8_lossy(v.as_bytes());
        text.split(',')
            .map(str::trim)
            .find(|c| !c.is_empty() && !c.eq_ignore_ascii_case("identity"))
            .map(|c| crate::core::clip::clip(c, 40).into_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coding_is_found_on_any_line_and_in_any_list() {
        let v = |s: &'static str| hyper::header::HeaderValue::from_static(s);
        assert_eq!(encoded([&v("identity")]), None);
        assert_eq!(encoded([&v(" Identity ")]), None);
        assert_eq!(encoded(std::iter::empty()), None);
        assert_eq!(encoded([&v("gzip")]).as_deref(), Some("gzip"));
        assert_eq!(encoded([&v("identity, br")]).as_deref(), Some("br"));
        assert_eq!(
            encoded([&v("identity"), &v("zstd")]).as_deref(),
            Some("zstd")
        );
    }

    fn loopback() -> SocketAddr {
        "127.0.0.1:8700".parse().unwrap()
    }

    #[test]
    fn a_loopback_gateway_answers_loopback_names_only() {
        for ok in [
            "localhost",
            "localhost:8700",
            "LOCALHOST:8700",
            "127.0.0.1",
            "127.0.0.1:8700",
            "127.1.2.3:1",
            "[::1]",
            "[::1]:8700",
            "localhost.",
        ] {
            assert!(host_allowed(loopback(), Some(ok.as_bytes())), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:8700",
            "localhost.evil.example.com",
            "127.0.0.1.evil.example.com",
            "10.0.0.1:8700",
            "[::2]:8700",
            "[::1]x",
            "localhost:87000000",
            "localhost:",
            "",
        ] {
            assert!(!host_allowed(loopback(), Some(bad.as_bytes())), "{bad}");
        }
        assert!(host_allowed(loopback(), None));
        assert!(!host_allowed(loopback(), Some(b"\xff")));
    }

    /// Guards RFC 9112 §3.2: an HTTP/1.1 request without `Host` was served.
    #[test]
    fn an_http_1_1_request_without_host_is_missing_it_and_an_http_1_0_one_is_not() {
        use hyper::Version;
        let none = hyper::HeaderMap::new();
        let mut one = hyper::HeaderMap::new();
        one.insert(hyper::header::HOST, "localhost:8700".parse().unwrap());
        assert_eq!(
            host_fault(Version::HTTP_11, &none),
            Some(HostFault::Missing)
        );
        assert_eq!(host_fault(Version::HTTP_11, &one), None);
        assert_eq!(host_fault(Version::HTTP_10, &none), None);
    }

    /// Guards RFC 9112 §3.2's other half: a request with two `Host` lines was judged
    /// by its first alone.
    #[test]
    fn a_request_with_several_host_lines_is_at_fault_whatever_its_version() {
        use hyper::Version;
        let mut two = hyper::HeaderMap::new();
        two.append(hyper::header::HOST, "localhost:8700".parse().unwrap());
        two.append(hyper::header::HOST, "evil.example".parse().unwrap());
        assert_eq!(host_fault(Version::HTTP_11, &two), Some(HostFault::Several));
        assert_eq!(host_fault(Version::HTTP_10, &two), Some(HostFault::Several));
    }

    #[test]
    fn a_gateway_on_another_address_answers_any_name() {
        let any: SocketAddr = "0.0.0.0:8700".parse().unwrap();
        assert!(host_allowed(any, Some(b"gateway.internal:8700")));
    }

    #[test]
    fn an_origin_is_served_only_when_listed() {
        let listed = vec!["https://app.example.com".to_string()];
        assert!(origin_allowed(&listed, b"https://app.example.com"));
        assert!(origin_allowed(&listed, b"HTTPS://APP.EXAMPLE.COM"));
        assert!(!origin_allowed(&listed, b"https://evil.example.com"));
        assert!(!origin_allowed(&listed, b"null"));
        assert!(!origin_allowed(&[], b"https://app.example.com"));
        assert!(origin_allowed(&["*".to_string()], b"https://any.example"));
    }

    #[test]
    fn only_json_is_a_json_body() {
        for ok in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
            " application/json ;charset=UTF-8",
        ] {
            assert!(is_json(Some(ok.as_bytes())), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "",
        ] {
            assert!(!is_json(Some(bad.as_bytes())), "{bad}");
        }
        assert!(!is_json(None));
    }
}
