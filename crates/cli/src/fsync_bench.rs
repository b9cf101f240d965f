//! `delayd fsync-bench`: what the disk's own fsync costs, to read beside
//! delayd's commits per second and CPU per commit.
//!
//! For each way a log file can be laid out on disk, one temporary file under
//! `--dir` gets `--writes` sequential writes of one `--block` each, every
//! write followed by `fdatasync`, as the embedded store does with
//! `--durability always`:
//! - `append`: the file grows with each write, so every `fdatasync` also
//!   commits the new size (a journal transaction on most filesystems);
//! - `sparse`: `ftruncate` to the full size first: the size is set, but each
//!   write still allocates its block;
//! - `fallocate`: blocks reserved first (`fallocate`), written for the first
//!   time by the bench (unwritten extents to convert);
//! - `prezeroed`: zeroes written and synced first, so each `fdatasync`
//!   carries only the data.
//!
//! Reported per mode: fsyncs per second, latency of write + `fdatasync`
//! (p50, p99, max) and the process's CPU time per fsync (CLOCK_PROCESS_
//! CPUTIME_ID over the loop, divided by the writes): the floor under
//! delayd's own figure. Each temporary file is removed when its mode ends.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Args;
use hdrhistogram::Histogram;
use rustix::fs::FallocateFlags;
use rustix::time::{clock_gettime, ClockId};
use serde::Serialize;

use crate::output::{outln, print_json};
use crate::UsageError;

#[derive(Debug, Args)]
pub struct FsyncBenchArgs {
    /// Directory for the temporary files: a directory on the filesystem to
    /// measure (e.g. the parent of the server's --data).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
    /// Writes (each followed by fdatasync) per mode.
    #[arg(long, default_value_t = 1000)]
    writes: u64,
    /// Bytes per write.
    #[arg(long, default_value_t = 4096)]
    block: usize,
    /// One JSON object per mode, one per line.
    #[arg(long)]
    json: bool,
}

/// How the file is laid out before the measured writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    Append,
    Sparse,
    Fallocate,
    Prezeroed,
}

impl Layout {
    const ALL: [Layout; 4] = [Self::Append, Self::Sparse, Self::Fallocate, Self::Prezeroed];

    fn name(self) -> &'static str {
        match self {
            Self::Append => "append",
            Self::Sparse => "sparse",
            Self::Fallocate => "fallocate",
            Self::Prezeroed => "prezeroed",
        }
    }
}

/// One mode's result (one JSON line with `--json`).
#[derive(Debug, Serialize)]
struct ModeReport {
    mode: &'static str,
    writes: u64,
    block: usize,
    fsyncs_per_s: f64,
    p50_us: u64,
    p99_us: u64,
    max_us: u64,
    cpu_us_per_fsync: f64,
}

pub async fn run(args: FsyncBenchArgs) -> anyhow::Result<()> {
    if args.writes == 0 || args.block == 0 || args.block > 1 << 24 {
        return Err(
            UsageError("--writes must be at least 1, --block within 1..=16MiB".into()).into(),
        );
    }
    let dir = args.dir.clone();
    let (writes, block) = (args.writes, args.block);
    // Blocking file I/O for seconds: off the async workers.
    let reports = tokio::task::spawn_blocking(move || {
        Layout::ALL
            .iter()
            .map(|&layout| measure(&dir, layout, writes, block))
            .collect::<anyhow::Result<Vec<_>>>()
    })
    .await
    .context("the fsync bench's thread")??;
    print(&args, &reports)
}

fn measure(dir: &Path, layout: Layout, writes: u64, block: usize) -> anyhow::Result<ModeReport> {
    let temp = tempfile::Builder::new()
        .prefix(".delayd-fsync-bench-")
        .tempfile_in(dir)
        .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
    let file = temp.as_file();
    let size = writes * block as u64;
    prepare(file, layout, size, block)
        .with_context(|| format!("preparing the {} file", layout.name()))?;
    let data = vec![0xa5_u8; block];
    let mut latency = Histogram::<u64>::new(3)?;
    let cpu_before = cpu_time();
    let started = Instant::now();
    for offset in (0..writes).map(|i| i * block as u64) {
        let write_started = Instant::now();
        file.write_all_at(&data, offset)?;
        file.sync_data()?;
        let micros = u64::try_from(write_started.elapsed().as_micros()).unwrap_or(u64::MAX);
        latency.saturating_record(micros);
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu_time().saturating_sub(cpu_before);
    // Dropping `temp` removes the file; an error removing it is reported.
    temp.close().context("removing the temporary file")?;
    Ok(ModeReport {
        mode: layout.name(),
        writes,
        block,
        fsyncs_per_s: writes as f64 / seconds.max(f64::MIN_POSITIVE),
        p50_us: latency.value_at_quantile(0.50),
        p99_us: latency.value_at_quantile(0.99),
        max_us: latency.max(),
        cpu_us_per_fsync: cpu.as_secs_f64() * 1e6 / writes as f64,
    })
}

/// Lays the file out for `layout`, then syncs it whole, so the measured
/// loop pays only for what the layout leaves to each write.
fn prepare(mut file: &File, layout: Layout, size: u64, block: usize) -> anyhow::Result<()> {
    match layout {
        Layout::Append => return Ok(()),
        Layout::Sparse => file.set_len(size)?,
        Layout::Fallocate => rustix::fs::fallocate(file, FallocateFlags::empty(), 0, size)?,
        Layout::Prezeroed => {
            let zeroes = vec![0_u8; block.max(1 << 20)];
            let mut left = size;
            while left > 0 {
                let chunk = usize::try_from(left).map_or(zeroes.len(), |n| n.min(zeroes.len()));
                file.write_all(&zeroes[..chunk])?;
                left -= chunk as u64;
            }
        }
    }
    file.sync_all()?;
    Ok(())
}

/// CPU time of the whole process (all threads), user and system.
fn cpu_time() -> Duration {
    let now = clock_gettime(ClockId::ProcessCPUTime);
    let nanos = u32::try_from(now.tv_nsec).unwrap_or(0);
    Duration::new(u64::try_from(now.tv_sec).unwrap_or(0), nanos)
}

fn print(args: &FsyncBenchArgs, reports: &[ModeReport]) -> anyhow::Result<()> {
    if args.json {
        for report in reports {
            print_json(report)?;
        }
        return Ok(());
    }
    outln!(
        "fsync bench in {}: {} writes of {} bytes per mode, each followed by fdatasync",
        args.dir.display(),
        args.writes,
        args.block
    )?;
    outln!(
        "{:<10} {:>10} {:>9} {:>9} {:>9} {:>13}",
        "mode",
        "fsyncs/s",
        "p50 us",
        "p99 us",
        "max us",
        "cpu us/fsync"
    )?;
    for r in reports {
        outln!(
            "{:<10} {:>10.0} {:>9} {:>9} {:>9} {:>13.1}",
            r.mode,
            r.fsyncs_per_s,
            r.p50_us,
            r.p99_us,
            r.max_us,
            r.cpu_us_per_fsync
        )?;
    }
    Ok(())
}
