//! Throughput of the beanstalkd listener end to end: producers pipelining
//! `put`s, then workers doing `reserve` + `delete`, over real TCP.
//!
//! `cargo run --release -p delayd-beanstalk --example bench -- [local|model] [jobs] [conns]`
//! (scripts/beanstalk-bench.sh). `local` (default) is the durable
//! LocalBroker in a temporary directory with its default durability.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use delayd_beanstalk::{BeanstalkConfig, BeanstalkServer};
use delayd_core::testkit::ModelBroker;
use delayd_core::Broker;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Puts in flight per producer connection.
const WINDOW: usize = 64;
/// The whole run gives up after this long.
const TIME_LIMIT: Duration = Duration::from_secs(120);

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let kind = args.first().map_or("local", String::as_str).to_owned();
    let jobs: usize = args.get(1).map_or(Ok(20_000), |s| s.parse())?;
    let conns: usize = args.get(2).map_or(Ok(8), |s| s.parse())?;
    let dir = tempfile::tempdir()?;
    let broker: Arc<dyn Broker> = match kind.as_str() {
        "model" => Arc::new(ModelBroker::new()),
        _ => {
            let config = delayd_local::LocalConfig::new(dir.path());
            Arc::new(delayd_local::LocalBroker::open(config).await?)
        }
    };
    let addr: SocketAddr = "127.0.0.1:0".parse()?;
    let server = BeanstalkServer::bind(addr, broker, BeanstalkConfig::default()).await?;
    let addr = server.local_addr();
    tokio::spawn(server.run(std::future::pending()));

    let per_conn = jobs / conns;
    let total = per_conn * conns;
    let puts = phase(conns, |_| produce(addr, per_conn)).await?;
    let works = phase(conns, |_| work(addr, per_conn)).await?;
    println!(
        "broker={kind} jobs={total} conns={conns} body=100B\n\
         put (pipelined x{WINDOW}): {:.0} jobs/s ({:.2?})\n\
         reserve+delete:           {:.0} jobs/s ({:.2?})",
        total as f64 / puts.as_secs_f64(),
        puts,
        total as f64 / works.as_secs_f64(),
        works,
    );
    Ok(())
}

/// Runs `conns` clients at once; the time until the last one finished.
async fn phase<F, Fut>(conns: usize, client: F) -> Result<Duration, BoxError>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), BoxError>> + Send + 'static,
{
    let started = Instant::now();
    let tasks: Vec<_> = (0..conns).map(|i| tokio::spawn(client(i))).collect();
    for task in tasks {
        tokio::time::timeout(TIME_LIMIT, task).await???;
    }
    Ok(started.elapsed())
}

async fn produce(addr: SocketAddr, count: usize) -> Result<(), BoxError> {
    let mut stream = BufReader::new(TcpStream::connect(addr).await?);
    let body = "x".repeat(100);
    let put = format!("put 100 0 60 {}\r\n{body}\r\n", body.len());
    let mut line = String::new();
    let mut sent = 0;
    while sent < count {
        let batch = WINDOW.min(count - sent);
        stream
            .get_mut()
            .write_all(put.repeat(batch).as_bytes())
            .await?;
        for _ in 0..batch {
            line.clear();
            stream.read_line(&mut line).await?;
            if !line.starts_with("INSERTED") {
                return Err(format!("put: {line}").into());
            }
        }
        sent += batch;
    }
    Ok(())
}

async fn work(addr: SocketAddr, count: usize) -> Result<(), BoxError> {
    let mut stream = BufReader::new(TcpStream::connect(addr).await?);
    let mut line = String::new();
    for _ in 0..count {
        stream
            .get_mut()
            .write_all(b"reserve-with-timeout 5\r\n")
            .await?;
        line.clear();
        stream.read_line(&mut line).await?;
        let parts: Vec<&str> = line.trim_end().split(' ').collect();
        let ["RESERVED", id, bytes] = parts.as_slice() else {
            return Err(format!("reserve: {line}").into());
        };
        let mut body = vec![0; bytes.parse::<usize>()? + 2];
        stream.read_exact(&mut body).await?;
        let delete = format!("delete {id}\r\n");
        stream.get_mut().write_all(delete.as_bytes()).await?;
        line.clear();
        stream.read_line(&mut line).await?;
        if line != "DELETED\r\n" {
            return Err(format!("delete: {line}").into());
        }
    }
    Ok(())
}
