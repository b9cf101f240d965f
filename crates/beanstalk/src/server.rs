//! The TCP listener: binding, the accept loop with its connection limit,
//! drain mode, shutdown, and each connection's read-decode-execute-write
//! loop.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use delayd_core::accept::AcceptBackoff;
use delayd_core::{Broker, Clock, QueueName, Settling, SystemClock};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio::task::JoinSet;

use crate::jobs::Interrupt;
use crate::pipeline::{Segment, Waiting};
use crate::proto::{Decoder, Frame};
use crate::session::Flow;
use crate::shared::{BeanstalkConfig, Session, Shared};
use crate::stats::{Counters, CONNECTIONS, CONNECTIONS_REFUSED_TOTAL, MAX_CONNECTIONS};

/// Replies are flushed once this much is pending, so a client pipelining
/// many `peek`s of large jobs cannot make the server buffer them all.
const FLUSH_AT: usize = 64 * 1024;

/// Most pipelined commands run as one broker call.
const MAX_SEGMENT: usize = 512;

/// A bound beanstalkd listener. Bind, take a [`BeanstalkHandle`] if drain
/// mode is wanted (SIGUSR1), then [`run`](Self::run) it, usually spawned.
pub struct BeanstalkServer {
    listener: TcpListener,
    local_addr: SocketAddr,
    shared: Arc<Shared>,
    /// A connection limit shared with other listeners, if any.
    budget: Option<Arc<Semaphore>>,
}

/// Controls a running server from elsewhere (signal handlers).
#[derive(Clone)]
pub struct BeanstalkHandle {
    shared: Arc<Shared>,
}

impl BeanstalkHandle {
    /// Drain mode: from now on `put` answers `DRAINING`; everything else
    /// works as before. beanstalkd enters it on SIGUSR1.
    pub fn drain(&self) {
        self.shared.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.shared.draining.load(Ordering::SeqCst)
    }
}

impl BeanstalkServer {
    /// Binds `addr` (connections queue in the backlog until [`run`]).
    ///
    /// [`run`]: Self::run
    pub async fn bind(
        addr: SocketAddr,
        broker: Arc<dyn Broker>,
        config: BeanstalkConfig,
    ) -> io::Result<Self> {
        Self::bind_with_clock(addr, broker, config, Arc::new(SystemClock)).await
    }

    /// [`bind`](Self::bind) with the wall clock the broker uses (tests).
    pub async fn bind_with_clock(
        addr: SocketAddr,
        broker: Arc<dyn Broker>,
        config: BeanstalkConfig,
        clock: Arc<dyn Clock>,
    ) -> io::Result<Self> {
        let listener = TcpListener::bind(addr).await?;
        Self::from_listener(listener, broker, config, clock)
    }

    /// A server on a socket bound earlier. beanstalkd clients expect the
    /// port to accept within ~50 ms of process start, before a store may
    /// have finished opening: bind the socket first thing (the kernel
    /// completes handshakes into the backlog), open the broker, then call
    /// this.
    pub fn from_listener(
        listener: TcpListener,
        broker: Arc<dyn Broker>,
        config: BeanstalkConfig,
        clock: Arc<dyn Clock>,
    ) -> io::Result<Self> {
        let default_tube = QueueName::new("default")
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let local_addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            broker,
            clock,
            config,
            default_tube,
            tubes: Default::default(),
            counters: Counters::default(),
            draining: AtomicBool::new(false),
            started: Instant::now(),
            instance_id: format!("{:016x}", rand::random::<u64>()),
            hostname: read_proc("/proc/sys/kernel/hostname"),
            os: read_proc("/proc/sys/kernel/version"),
        });
        Ok(Self {
            listener,
            local_addr,
            shared,
            budget: None,
        })
    }

    /// Each connection also holds a permit of `budget`, a limit shared with
    /// other listeners (`delayd serve`'s `--max-connections` over HTTP and
    /// beanstalkd); when it is spent a new connection is closed as at
    /// `max_connections`.
    pub fn with_shared_budget(mut self, budget: Arc<Semaphore>) -> Self {
        self.budget = Some(budget);
        self
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    pub fn handle(&self) -> BeanstalkHandle {
        BeanstalkHandle {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Same as `self.handle().drain()`.
    pub fn drain(&self) {
        self.handle().drain();
    }

    /// Serves until `shutdown` completes; then stops accepting, closes every
    /// connection (releasing the jobs they had reserved) and returns once
    /// all connection tasks have ended.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut connections = JoinSet::new();
        metrics::gauge!(MAX_CONNECTIONS).set(self.shared.config.max_connections as f64);
        let mut backoff = AcceptBackoff::new("beanstalkd");
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, _)) => {
                        backoff.recovered();
                        self.admit(stream, &mut connections, stop_rx.clone());
                    }
                    // Per-connection failures (aborted handshakes, fd
                    // exhaustion) must not stop the listener.
                    Err(error) => if let Some(pause) = backoff.failed(&error) {
                        tokio::time::sleep(pause).await;
                    },
                },
                Some(_) = connections.join_next() => {}
            }
        }
        let _ = stop_tx.send(true);
        while connections.join_next().await.is_some() {}
    }

    fn admit(&self, stream: TcpStream, set: &mut JoinSet<()>, stop: watch::Receiver<bool>) {
        let counters = &self.shared.counters;
        let open = counters.current_connections.load(Ordering::SeqCst);
        let budget = self
            .budget
            .as_ref()
            .map(|budget| Arc::clone(budget).try_acquire_owned());
        let over_budget = matches!(budget, Some(Err(_)));
        if open >= self.shared.config.max_connections as u64 || over_budget {
            metrics::counter!(CONNECTIONS_REFUSED_TOTAL).increment(1);
            drop(stream);
            return;
        }
        counters.current_connections.fetch_add(1, Ordering::SeqCst);
        counters.total_connections.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!(CONNECTIONS).increment(1.0);
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&self.shared);
        set.spawn(async move {
            // Held until the connection ends.
            let _budget = budget.and_then(Result::ok);
            let connection = Connection::new(stream, Arc::clone(&shared), stop);
            if let Err(error) = connection.serve().await {
                tracing::debug!(%error, "beanstalkd connection ended with an error");
            }
            shared
                .counters
                .current_connections
                .fetch_sub(1, Ordering::SeqCst);
            metrics::gauge!(CONNECTIONS).decrement(1.0);
        });
    }
}

/// A /proc text, trimmed and kept to printable ASCII without quotes or
/// backslashes: it goes into a quoted YAML scalar that clients parse
/// naively (greenstalk decodes stats as ASCII).
fn read_proc(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .chars()
        .filter(|c| c.is_ascii_graphic() && !matches!(c, '"' | '\\') || *c == ' ')
        .collect()
}

struct Connection {
    reader: OwnedReadHalf,
    writer: tokio::net::tcp::OwnedWriteHalf,
    input: BytesMut,
    output: Vec<u8>,
    /// Replies held back until their commit is durable, as (where in
    /// `output` they start, the commit): the bytes from a gate's start on
    /// wait for it and for every gate before it.
    gates: VecDeque<(usize, Settling)>,
    decoder: Decoder,
    session: Session,
    stop: watch::Receiver<bool>,
}

impl Connection {
    fn new(stream: TcpStream, shared: Arc<Shared>, stop: watch::Receiver<bool>) -> Self {
        let (reader, writer) = stream.into_split();
        Self {
            reader,
            writer,
            input: BytesMut::with_capacity(4096),
            output: Vec::with_capacity(4096),
            gates: VecDeque::new(),
            decoder: Decoder::new(shared.config.max_job_size),
            session: Session::new(shared),
            stop,
        }
    }

    async fn serve(mut self) -> io::Result<()> {
        let result = self.serve_commands().await;
        self.session.release_all().await;
        result
    }

    /// Executes every complete command in the input, writes the replies,
    /// then reads more; ends on EOF, `quit`, or server shutdown.
    async fn serve_commands(&mut self) -> io::Result<()> {
        let mut segment = Segment::default();
        loop {
            loop {
                // Consecutive pipelinable commands go to the broker as one
                // call (see `pipeline`).
                let frame = match self.decoder.decode(&mut self.input) {
                    Some(Frame::Command(command)) => {
                        match self.session.pipeline_push(&mut segment, command) {
                            Ok(()) => {
                                if segment.len() >= MAX_SEGMENT
                                    && !self.run_segment(&mut segment).await?
                                {
                                    return self.flush().await;
                                }
                                continue;
                            }
                            Err(command) => Some(Frame::Command(command)),
                        }
                    }
                    other => other,
                };
                let buffered = self.input.len();
                if !self.run_segment(&mut segment).await? {
                    return self.flush().await;
                }
                let Some(frame) = frame else {
                    // A reserve that waited kept reading what the client
                    // pipelined meanwhile: decode that before reading more.
                    if self.input.len() > buffered {
                        continue;
                    }
                    break;
                };
                if !self.handle(frame).await? {
                    return self.flush().await;
                }
                if self.output.len() >= FLUSH_AT {
                    self.flush().await?;
                }
            }
            // What no commit holds back goes out now; the rest when its
            // commit is durable, while the next commands are read and run.
            self.write_ready().await?;
            let Self {
                reader,
                input,
                stop,
                gates,
                ..
            } = self;
            let woke = tokio::select! {
                read = reader.read_buf(input) => Woke::Read(read?),
                settled = next_gate(gates) => {
                    settled?;
                    Woke::Gate
                }
                _ = stop.wait_for(|stop| *stop) => Woke::Stop,
            };
            match woke {
                Woke::Read(0) => return self.flush().await,
                // Shutting down: what is not yet durable is not answered
                // (the client sees the connection close, as on any
                // disconnect); waiting for it could hold the shutdown.
                Woke::Stop => return self.write_ready().await,
                Woke::Read(_) | Woke::Gate => {}
            }
        }
    }

    /// Runs a segment of pipelined commands; reserves that find too few
    /// jobs wait on their own before the rest runs. False when the
    /// connection must close (the server is stopping during a reserve).
    async fn run_segment(&mut self, segment: &mut Segment) -> io::Result<bool> {
        while !segment.is_empty() {
            let start = self.output.len();
            let (waiting, settling) = self.session.run_segment(segment, &mut self.output).await;
            if let Some(settling) = settling {
                self.gates.push_back((start, settling));
            }
            if let Some(Waiting { timeout, count }) = waiting {
                if !self.reserve(timeout, count).await? {
                    return Ok(false);
                }
            }
        }
        if self.output.len() >= FLUSH_AT {
            self.flush().await?;
        }
        Ok(true)
    }

    /// `count` pipelined reserves: each broker lease answers as many as
    /// jobs are ready. Replies that no commit holds back go out before the
    /// wait, and the held ones as their commits settle while the reserve
    /// waits: the reserve waits in the broker's line from the start, not
    /// behind the commits of the replies before it (their order on the wire
    /// stays: its own reply goes after them).
    async fn reserve(&mut self, timeout: Option<u32>, count: u32) -> io::Result<bool> {
        let mut remaining = count;
        while remaining > 0 {
            self.write_ready().await?;
            let cap = self.decoder.max_frame();
            let mut reply = Vec::new();
            let Self {
                reader,
                writer,
                input,
                output,
                gates,
                session,
                stop,
                ..
            } = self;
            let answered = {
                let interrupted = interrupted(reader, input, cap, stop);
                let reserve = session.reserve(timeout, remaining, interrupted, &mut reply);
                tokio::pin!(reserve);
                loop {
                    tokio::select! {
                        answered = &mut reserve => break answered,
                        opened = next_gate(gates) => {
                            opened?;
                            write_ready(writer, output, gates).await?;
                        }
                    }
                }
            };
            self.output.extend_from_slice(&reply);
            match answered {
                Some(answered) => remaining = remaining.saturating_sub(answered),
                None => return Ok(false),
            }
        }
        Ok(true)
    }

    /// Runs one frame; false when the connection must close.
    async fn handle(&mut self, frame: Frame) -> io::Result<bool> {
        let command = match frame {
            Frame::Command(command) => command,
            Frame::Error(error) => {
                self.output.extend_from_slice(error.reply());
                return Ok(true);
            }
        };
        match self.session.execute(command, &mut self.output).await {
            Flow::Continue => Ok(true),
            Flow::Quit => Ok(false),
        }
    }

    /// Writes every reply, each once its commit is durable.
    async fn flush(&mut self) -> io::Result<()> {
        while !self.gates.is_empty() {
            next_gate(&mut self.gates).await?;
        }
        self.write_ready().await
    }

    /// Writes the replies no commit holds back (those before the first
    /// gate).
    async fn write_ready(&mut self) -> io::Result<()> {
        write_ready(&mut self.writer, &mut self.output, &mut self.gates).await
    }
}

/// Writes the replies in `output` that no commit holds back (those before
/// the first gate).
async fn write_ready(
    writer: &mut tokio::net::tcp::OwnedWriteHalf,
    output: &mut Vec<u8>,
    gates: &mut VecDeque<(usize, Settling)>,
) -> io::Result<()> {
    let ready = gates.front().map_or(output.len(), |(start, _)| *start);
    if ready > 0 {
        writer.write_all(&output[..ready]).await?;
        output.drain(..ready);
        for (start, _) in gates.iter_mut() {
            *start -= ready;
        }
    }
    Ok(())
}

/// What ended a connection's wait for input.
enum Woke {
    Read(usize),
    /// A gate opened: its replies can go out.
    Gate,
    Stop,
}

/// Waits for the first gate's commit and opens it; never resolves when no
/// gate is closed. A failed commit is an error: the connection closes
/// without sending what the gate held back (nothing unacknowledged is ever
/// answered as done). Cancel-safe: the commit stays in its gate.
async fn next_gate(gates: &mut VecDeque<(usize, Settling)>) -> io::Result<()> {
    let Some((_, settling)) = gates.front_mut() else {
        return std::future::pending().await;
    };
    let settled = settling.await;
    gates.pop_front();
    settled.map_err(|error| io::Error::other(format!("commit failed: {error}")))
}

/// Completes when the client half-closes (or the server stops) while a
/// `reserve` waits. Bytes the client pipelines meanwhile are kept for
/// later, up to `cap`; beyond that the socket is left unread.
async fn interrupted(
    reader: &mut OwnedReadHalf,
    input: &mut BytesMut,
    cap: usize,
    stop: &mut watch::Receiver<bool>,
) -> Interrupt {
    loop {
        let read = tokio::select! {
            read = reader.read_buf(input), if input.len() < cap => read,
            _ = stop.wait_for(|stop| *stop) => return Interrupt::Stopping,
        };
        match read {
            Ok(0) | Err(_) => return Interrupt::HalfClosed,
            Ok(_) => {}
        }
    }
}
