//! The replication link between the replica and the primary, through a
//! proxy the test controls: `stall` stops forwarding in both directions
//! (what the primary writes from then on never reaches the replica, and
//! the replica's acknowledgements never reach the primary), `cut` closes
//! every connection and stops accepting.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

pub struct Link {
    pub port: u16,
    stalled: Arc<AtomicBool>,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
}

impl Link {
    /// Forwards 127.0.0.1:`port` (a free port) to 127.0.0.1:`upstream`.
    pub async fn start(upstream: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let stalled = Arc::new(AtomicBool::new(false));
        let tasks: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let accept = {
            let (stalled, tasks) = (stalled.clone(), tasks.clone());
            tokio::spawn(async move {
                while let Ok((downstream, _)) = listener.accept().await {
                    let Ok(upstream) = TcpStream::connect(("127.0.0.1", upstream)).await else {
                        continue;
                    };
                    let (down_read, down_write) = downstream.into_split();
                    let (up_read, up_write) = upstream.into_split();
                    let there = tokio::spawn(pump(down_read, up_write, stalled.clone()));
                    let back = tokio::spawn(pump(up_read, down_write, stalled.clone()));
                    let mut tasks = tasks.lock().expect("tasks");
                    tasks.push(there.abort_handle());
                    tasks.push(back.abort_handle());
                }
            })
        };
        tasks.lock().expect("tasks").push(accept.abort_handle());
        Self {
            port,
            stalled,
            tasks,
        }
    }

    /// From now on nothing crosses the link (bytes read are held back).
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    /// Drops every connection, and what a stall held back with them.
    pub fn cut(&self) {
        for task in self.tasks.lock().expect("tasks").drain(..) {
            task.abort();
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.cut();
    }
}

async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, stalled: Arc<AtomicBool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if stalled.load(Ordering::SeqCst) {
            // Hold these bytes (and stop reading) until the link is cut.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
