//! HTTP/1.1 GET as the load generator speaks it: one request on a connection kept alive (or a
//! connection per request with `Connection: close`), the answer read whole and checked — status
//! 200, a `Content-Length` and exactly that many bytes, the size the server was given. Headers
//! are bounded (16 KiB), so a server that answers with garbage fails the request, never grows the
//! client.
//!
//! Written by hand: an HTTP library's pooling, redirects and decompression would be time the
//! client spends that is not the server's; this is the least a correct GET needs.

use std::net::SocketAddr;

use super::driver::{Feed, Protocol, Reader};

/// The most header bytes an answer may have.
const MAX_HEADERS: usize = 16 << 10;

/// Where and what to ask.
pub struct HttpGet {
    from: SocketAddr,
    to: SocketAddr,
    request: Vec<u8>,
    /// The body's length every answer must have.
    size: u64,
    keepalive: bool,
}

impl HttpGet {
    pub fn new(from: SocketAddr, to: SocketAddr, path: &str, size: u64, keepalive: bool) -> HttpGet {
        let conn = if keepalive { "keep-alive" } else { "close" };
        let request = format!("GET {path} HTTP/1.1\r\nHost: {to}\r\nConnection: {conn}\r\n\r\n").into_bytes();
        HttpGet { from, to, request, size, keepalive }
    }
}

impl Protocol for HttpGet {
    type Reader = HttpReader;
    fn addrs(&self) -> (SocketAddr, SocketAddr) {
        (self.from, self.to)
    }
    fn request(&self) -> &[u8] {
        &self.request
    }
    fn reader(&self) -> HttpReader {
        HttpReader { size: self.size, head: Vec::new(), left: None, close: false }
    }
    fn keepalive(&self) -> bool {
        self.keepalive
    }
}

/// One answer: its headers kept (bounded) until their end, then its body counted.
pub struct HttpReader {
    size: u64,
    head: Vec<u8>,
    /// Body bytes still to come, once the headers are read.
    left: Option<u64>,
    close: bool,
}

impl Reader for HttpReader {
    fn feed(&mut self, data: &[u8]) -> Result<Feed, String> {
        let mut used = 0;
        if self.left.is_none() {
            // The end of the headers may straddle two reads: look from 3 bytes back.
            let from = self.head.len().saturating_sub(3);
            let take = data.len().min(MAX_HEADERS + 4 - self.head.len().min(MAX_HEADERS + 4));
            self.head.extend_from_slice(&data[..take]);
            let Some(end) = self.head[from..].windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + from)
            else {
                if self.head.len() > MAX_HEADERS {
                    return Err(format!("no end of headers in the answer's first {MAX_HEADERS} bytes"));
                }
                return Ok(Feed::More);
            };
            let text = String::from_utf8_lossy(&self.head[..end]).into_owned();
            let (len, close) = parse_head(&text)?;
            if len != self.size {
                return Err(format!(
                    "the answer has {len} bytes, not the {} the server was given",
                    self.size
                ));
            }
            self.close = close;
            self.left = Some(len);
            // The bytes of this read that were headers.
            used = end + 4 - (self.head.len() - take);
        }
        let left = self.left.unwrap_or(0);
        let body = ((data.len() - used) as u64).min(left);
        self.left = Some(left - body);
        used += body as usize;
        if left - body == 0 {
            Ok(Feed::Done { used, close: self.close })
        } else {
            Ok(Feed::More)
        }
    }
}

fn parse_head(head: &str) -> Result<(u64, bool), String> {
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap_or_default();
    let code = status.split(' ').nth(1).unwrap_or_default();
    if !status.starts_with("HTTP/1.") || code != "200" {
        return Err(format!("the answer is `{}`, not 200", virtperf_proto::printable(status, 80)));
    }
    let mut len = None;
    let mut close = false;
    for l in lines {
        let Some((k, v)) = l.split_once(':') else { continue };
        let (k, v) = (k.trim(), v.trim());
        if k.eq_ignore_ascii_case("content-length") {
            len = Some(
                v.parse::<u64>()
                    .map_err(|_| format!("Content-Length `{}`", virtperf_proto::printable(v, 40)))?,
            );
        } else if k.eq_ignore_ascii_case("connection") && v.eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    Ok((len.ok_or("the answer has no Content-Length")?, close))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(size: u64) -> HttpGet {
        let a: SocketAddr = "127.0.0.1:80".parse().unwrap();
        HttpGet::new(a, a, "/x", size, true)
    }

    #[test]
    fn an_answer_is_read_by_its_length_and_checked() {
        let head = "HTTP/1.1 200 OK\r\nServer: nginx\r\nContent-Length: 5\r\nConnection: keep-alive";
        assert_eq!(parse_head(head).unwrap(), (5, false));
        let close = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\nConnection: close";
        assert_eq!(parse_head(close).unwrap(), (0, true));
        assert!(parse_head("HTTP/1.1 404 Not Found\r\nContent-Length: 3").unwrap_err().contains("404"));
        assert!(parse_head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked")
            .unwrap_err()
            .contains("Content-Length"));
    }

    #[test]
    fn an_answer_fed_in_any_pieces_ends_where_its_body_does() {
        let wire = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
        for cut in 1..wire.len() {
            let mut r = get(3).reader();
            assert_eq!(r.feed(&wire[..cut]).unwrap(), Feed::More, "cut at {cut}");
            assert_eq!(
                r.feed(&wire[cut..]).unwrap(),
                Feed::Done { used: wire.len() - cut, close: false },
                "cut at {cut}"
            );
        }
        // A body of the wrong size is refused.
        let mut r = get(4).reader();
        assert!(r.feed(wire).unwrap_err().contains("3 bytes"));
        // Bytes after the answer are not taken as its.
        let mut two = wire.to_vec();
        two.extend_from_slice(b"HTTP");
        assert_eq!(get(3).reader().feed(&two).unwrap(), Feed::Done { used: wire.len(), close: false });
    }

    #[test]
    fn headers_without_an_end_are_bounded() {
        let junk = vec![b'x'; 4 << 10];
        let mut r = get(1).reader();
        let mut last = Ok(Feed::More);
        for _ in 0..8 {
            last = r.feed(&junk);
            if last.is_err() {
                break;
            }
        }
        assert!(last.unwrap_err().contains("no end of headers"));
        assert!(r.head.len() <= MAX_HEADERS + 4);
    }
}
