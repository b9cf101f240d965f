//! A TCP relay in front of a server that records the first bytes of every
//! connection it accepts: tests count a client's connections and tell
//! HTTP/2 (which opens with its connection preface) from HTTP/1.1.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

/// The client connection preface of HTTP/2 (RFC 9113, section 3.4).
pub const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The first [`HTTP2_PREFACE`]-length bytes of every relayed connection.
pub type Openings = Arc<Mutex<Vec<Vec<u8>>>>;

/// A relay on 127.0.0.1:0 in front of `server`: its `http://` URL and the
/// openings it sees.
pub async fn relay(server: SocketAddr) -> (String, Openings) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind relay");
    let url = format!("http://{}", listener.local_addr().expect("relay addr"));
    let openings = Openings::default();
    let seen = Arc::clone(&openings);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(pipe(client, server, Arc::clone(&seen)));
        }
    });
    (url, openings)
}

async fn pipe(mut client: TcpStream, server: SocketAddr, seen: Openings) {
    let mut upstream = TcpStream::connect(server).await.expect("connect server");
    let mut first = vec![0; HTTP2_PREFACE.len()];
    // Every request (either version) is longer than the preface.
    client.read_exact(&mut first).await.expect("first bytes");
    seen.lock().expect("openings").push(first.clone());
    upstream.write_all(&first).await.expect("forward");
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}
