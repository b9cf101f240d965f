//! A server on 127.0.0.1:0 over a fresh ModelBroker, and a small blocking
//! beanstalkd client that reads replies frame by frame.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use delayd_beanstalk::{BeanstalkConfig, BeanstalkHandle, BeanstalkServer};
use delayd_core::testkit::ModelBroker;
use delayd_core::Broker;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Any single reply must come within this; a hang fails the test.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct TestServer {
    pub addr: SocketAddr,
    pub handle: BeanstalkHandle,
    pub broker: Arc<dyn Broker>,
    /// The LocalBroker's data directory, removed when the test ends.
    _data: Option<tempfile::TempDir>,
}

pub async fn start() -> TestServer {
    start_with(Arc::new(ModelBroker::new()), BeanstalkConfig::default()).await
}

pub async fn start_with(broker: Arc<dyn Broker>, config: BeanstalkConfig) -> TestServer {
    let addr: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let server = BeanstalkServer::bind(addr, Arc::clone(&broker), config)
        .await
        .unwrap();
    let addr = server.local_addr();
    let handle = server.handle();
    tokio::spawn(server.run(std::future::pending()));
    TestServer {
        addr,
        handle,
        broker,
        _data: None,
    }
}

/// A server over a LocalBroker in a fresh temporary directory.
pub async fn start_local() -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let config = delayd_local::LocalConfig::new(dir.path());
    let broker = delayd_local::LocalBroker::open(config).await.unwrap();
    let mut server = start_with(Arc::new(broker), BeanstalkConfig::default()).await;
    server._data = Some(dir);
    server
}

pub struct Client {
    stream: BufReader<TcpStream>,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        Self {
            stream: BufReader::new(stream),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.get_mut().write_all(bytes).await.unwrap();
    }

    /// Sends EOF; the read side stays open.
    pub async fn half_close(&mut self) {
        self.stream.get_mut().shutdown().await.unwrap();
    }

    /// One reply line without its `\r\n`; "" at EOF.
    pub async fn line(&mut self) -> String {
        let mut line = Vec::new();
        let read = tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_until(b'\n', &mut line))
            .await
            .expect("reply timed out")
            .unwrap();
        if read == 0 {
            return String::new();
        }
        assert!(
            line.ends_with(b"\r\n"),
            "reply not CRLF-terminated: {line:?}"
        );
        line.truncate(line.len() - 2);
        String::from_utf8(line).unwrap()
    }

    /// `n` body bytes and the `\r\n` after them.
    pub async fn body(&mut self, n: usize) -> Vec<u8> {
        let mut body = vec![0; n + 2];
        tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_exact(&mut body))
            .await
            .expect("body timed out")
            .unwrap();
        assert_eq!(&body[n..], b"\r\n");
        body.truncate(n);
        body
    }

    /// Sends one command line, returns the reply line.
    pub async fn cmd(&mut self, line: &str) -> String {
        self.send(format!("{line}\r\n").as_bytes()).await;
        self.line().await
    }

    pub async fn put(&mut self, pri: u32, delay: u32, ttr: u32, body: &str) -> u64 {
        let cmd = format!("put {pri} {delay} {ttr} {}\r\n{body}\r\n", body.len());
        self.send(cmd.as_bytes()).await;
        let reply = self.line().await;
        let id = reply
            .strip_prefix("INSERTED ")
            .unwrap_or_else(|| panic!("put: {reply}"));
        id.parse().unwrap()
    }

    /// A command answered by `<WORD> <id> <bytes>` and a body; `None` when
    /// the reply is a single line (returned as the error).
    pub async fn job(&mut self, line: &str) -> Result<(String, u64, Vec<u8>), String> {
        let reply = self.cmd(line).await;
        let parts: Vec<&str> = reply.split(' ').collect();
        match parts.as_slice() {
            [word @ ("RESERVED" | "FOUND"), id, n] => {
                let body = self.body(n.parse().unwrap()).await;
                Ok((word.to_string(), id.parse().unwrap(), body))
            }
            _ => Err(reply),
        }
    }

    /// A command answered by `OK <bytes>` and YAML.
    pub async fn yaml(&mut self, line: &str) -> String {
        let reply = self.cmd(line).await;
        let n = reply
            .strip_prefix("OK ")
            .unwrap_or_else(|| panic!("{line}: {reply}"));
        String::from_utf8(self.body(n.parse().unwrap()).await).unwrap()
    }

    /// `key: value` pairs of a YAML dictionary, in order.
    pub async fn dict(&mut self, line: &str) -> Vec<(String, String)> {
        let doc = self.yaml(line).await;
        assert!(doc.starts_with("---\n"), "{doc}");
        doc.lines()
            .skip(1)
            .map(|l| {
                let (k, v) = l
                    .split_once(": ")
                    .unwrap_or_else(|| panic!("bad line {l:?}"));
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    pub async fn stat(&mut self, line: &str, key: &str) -> String {
        let dict = self.dict(line).await;
        dict.into_iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("{line}: no key {key}"))
            .1
    }

    /// Reads until the server closes; everything it sent.
    pub async fn read_to_end(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        tokio::time::timeout(REPLY_TIMEOUT, self.stream.read_to_end(&mut all))
            .await
            .expect("server did not close")
            .unwrap();
        all
    }
}
