//! Raw HTTP/1.1 over TCP, for tests about connections themselves (idle,
//! slow, refused) that an HTTP client library would hide.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Reads one response (head and `content-length` body) within `limit`;
/// `None` when the connection closed or nothing complete came in time.
pub async fn read_response(stream: &mut TcpStream, limit: Duration) -> Option<String> {
    let mut received = Vec::new();
    let read = tokio::time::timeout(limit, async {
        loop {
            if let Some(response) = complete(&received) {
                return Some(response);
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => received.extend_from_slice(&chunk[..n]),
            }
        }
    });
    read.await.ok().flatten()
}

fn complete(received: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(received);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let length = head
        .lines()
        .find_map(|line| {
            let (name, value) = line.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    (body.len() >= length).then(|| text.into_owned())
}

/// Waits up to `limit` for the server to close `stream` (EOF or reset);
/// false if it is still open then. Bytes the server sends are skipped.
pub async fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let wait = tokio::time::timeout(limit, async {
        let mut chunk = [0u8; 4096];
        loop {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    });
    wait.await.is_ok()
}

/// `GET path` on a keep-alive connection.
pub async fn send_get(stream: &mut TcpStream, path: &str) {
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
}

/// The status code of a raw response.
pub fn status(response: &str) -> u16 {
    response
        .get(9..12)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response:?}"))
}
