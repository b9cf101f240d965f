//! `delayd import beanstalkd-binlog DIR`: every live job of a stopped
//! beanstalkd's binlog, enqueued into delayd's store (docs/import.md).
//!
//! The store is opened directly, with `delayd serve`'s store options and
//! their precedence (flags, `DELAYD_*`, `--config`): the HTTP API has no
//! per-message lease time and cannot create a dead message. So the
//! embedded store needs `delayd serve` stopped (it holds the store's
//! lock); with Redis, delayd may keep running.
//!
//! A job becomes one message with id `bs-<job id>` (`--id-prefix`), in
//! the queue named like its tube (created as delayd's beanstalkd listener
//! creates it):
//!
//! | beanstalkd | delayd                                                  |
//! |------------|---------------------------------------------------------|
//! | ready      | ready (`deliver_at` now)                                |
//! | reserved   | ready, as beanstalkd itself restores it                 |
//! | delayed    | scheduled at `deadline_at` (ns) rounded to the ms       |
//! | buried     | dead: enqueued, leased and buried (`attempts` 1)        |
//!
//! priority is kept, TTR becomes the message's `lease_ms`, the body loses
//! its trailing `\r\n`, and `max_attempts` is unlimited, as for a `put`.
//! Enqueue is idempotent by id, so a re-run adds nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use delayd_core::{
    Broker, BrokerError, EnqueueOptions, EnqueueRequest, MessageId, MessageState, QueueName,
    Schedule, MAX_BATCH,
};

use super::binlog::{self, Binlog, Job, JobState};
use crate::config::ServeArgs;
use crate::output::{outln, print_json};
use crate::UsageError;

#[derive(Debug, Args)]
pub struct BinlogArgs {
    /// beanstalkd's binlog directory (its `-b DIR`); beanstalkd must be
    /// stopped.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// delayd's embedded store, as `delayd serve --data` (delayd must be
    /// stopped) [default: ./delayd-data].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// delayd's Redis store, as `delayd serve --store` (delayd may run;
    /// no worker should consume the tubes until the import ends).
    #[arg(long, value_name = "URL[,URL...]")]
    store: Option<String>,
    /// As `delayd serve --redis-tls-ca`.
    #[arg(long, value_name = "FILE")]
    redis_tls_ca: Option<PathBuf>,
    /// `delayd serve`'s TOML file, for its store options.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Import what beanstalkd itself would restore from damaged binlog
    /// files (it skips the rest of a file after a bad record) instead of
    /// refusing.
    #[arg(long)]
    skip_damaged: bool,
    /// Message ids are this prefix and the job id. Give each beanstalkd
    /// its own when importing several into one delayd (their job ids
    /// overlap).
    #[arg(long, value_name = "PREFIX", default_value = "bs-")]
    id_prefix: String,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
}

/// What happened to one tube's jobs.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct TubeReport {
    pub queue: String,
    /// Newly enqueued, by the state they arrived in.
    pub ready: u64,
    pub scheduled: u64,
    pub dead: u64,
    /// Of `ready`: jobs that were reserved when beanstalkd stopped.
    pub were_reserved: u64,
    /// Ids already live in delayd (an earlier import): left unchanged.
    pub already_present: u64,
    pub failed: u64,
}

impl TubeReport {
    fn imported(&self) -> u64 {
        self.ready + self.scheduled + self.dead
    }
}

#[derive(Debug, serde::Serialize)]
struct Report {
    binlog_dir: PathBuf,
    files: usize,
    records: u64,
    jobs: usize,
    damage: Vec<String>,
    tubes: BTreeMap<String, TubeReport>,
}

/// Jobs that could not be imported: exit code 1, after the report.
#[derive(Debug, thiserror::Error)]
#[error("{0} job(s) could not be imported (see the messages above)")]
pub struct ImportFailed(u64);

pub async fn run(args: BinlogArgs) -> anyhow::Result<()> {
    if !args.dir.is_dir() {
        return Err(UsageError(format!("{} is not a directory", args.dir.display())).into());
    }
    message_id(&args.id_prefix, u64::MAX)?;
    let _lock = hold_binlog_lock(&args.dir)?;
    let binlog = read_binlog(&args.dir, args.skip_damaged).await?;
    let serve_args = ServeArgs {
        data: args.data.clone(),
        store: args.store.clone(),
        redis_tls_ca: args.redis_tls_ca.clone(),
        config: args.config.clone(),
        ..ServeArgs::default()
    };
    let config = crate::config::resolve_from_process(&serve_args)?;
    let broker = crate::serve::open_broker(&config).await?;
    let importer = Importer {
        broker: broker.as_ref(),
        prefix: &args.id_prefix,
    };
    let imported = importer.import(&binlog).await;
    // Makes everything enqueued durable, whatever the durability setting.
    broker
        .shutdown()
        .await
        .context("cannot close delayd's store")?;
    let report = Report {
        binlog_dir: args.dir.clone(),
        files: binlog.files.len(),
        records: binlog.records,
        jobs: binlog.jobs.len(),
        damage: binlog.damage.iter().map(ToString::to_string).collect(),
        tubes: imported?,
    };
    print_report(&report, args.json)?;
    let failed: u64 = report.tubes.values().map(|t| t.failed).sum();
    if failed > 0 {
        return Err(ImportFailed(failed).into());
    }
    Ok(())
}

/// Every file of the binlog in `dir`; damage refused unless `skip_damaged`.
async fn read_binlog(dir: &Path, skip_damaged: bool) -> anyhow::Result<Binlog> {
    let owned = dir.to_path_buf();
    let binlog = tokio::task::spawn_blocking(move || binlog::read_dir(&owned))
        .await
        .context("binlog reader task failed")??;
    if !binlog.damage.is_empty() && !skip_damaged {
        let list: Vec<String> = binlog.damage.iter().map(ToString::to_string).collect();
        anyhow::bail!(
            "the binlog is damaged: {}; beanstalkd itself would skip the rest of each \
             damaged file: pass --skip-damaged to import what it would restore",
            list.join("; ")
        );
    }
    Ok(binlog)
}

/// Takes a shared lock on `DIR/lock`, held until the import ends. beanstalkd
/// holds an exclusive `fcntl` lock on that file while it runs (`walg.c`
/// `waldirlock`): taking ours fails while it runs, and a beanstalkd started
/// during the import fails to start. A shared lock needs only read access.
fn hold_binlog_lock(dir: &Path) -> anyhow::Result<Option<std::fs::File>> {
    let path = dir.join("lock");
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        // Never run with -b here, or its lock file was not copied: no
        // beanstalkd holds it.
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err).with_context(|| format!("cannot open {}", path.display())),
    };
    match rustix::fs::fcntl_lock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => Ok(Some(file)),
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::ACCESS) => Err(UsageError(format!(
            "{} is locked: a beanstalkd is running on {}; stop it first (the import \
             reads a stopped beanstalkd's binlog)",
            path.display(),
            dir.display()
        ))
        .into()),
        Err(err) => Err(err).with_context(|| format!("cannot lock {}", path.display())),
    }
}

/// Writes jobs into delayd's store as messages `<prefix><job id>`.
struct Importer<'a> {
    broker: &'a dyn Broker,
    prefix: &'a str,
}

impl Importer<'_> {
    /// Imports every job, tube by tube, in job-id order (beanstalkd's order
    /// among equal priorities). Errors of single jobs are printed and
    /// counted; a store that fails as a whole ends the import.
    async fn import(&self, binlog: &Binlog) -> anyhow::Result<BTreeMap<String, TubeReport>> {
        let mut tubes: BTreeMap<&str, Vec<&Job>> = BTreeMap::new();
        for job in binlog.jobs.values() {
            tubes.entry(job.tube.as_str()).or_default().push(job);
        }
        let mut reports = BTreeMap::new();
        for (tube, jobs) in tubes {
            let mut report = TubeReport {
                queue: tube.to_string(),
                ..TubeReport::default()
            };
            match QueueName::new(tube) {
                Ok(queue) => self.tube(&queue, &jobs, &mut report).await?,
                Err(err) => {
                    eprintln!("delayd: tube {tube:?}: no queue can have its name ({err})");
                    report.failed = jobs.len() as u64;
                }
            }
            reports.insert(tube.to_string(), report);
        }
        Ok(reports)
    }

    async fn tube(
        &self,
        queue: &QueueName,
        jobs: &[&Job],
        report: &mut TubeReport,
    ) -> anyhow::Result<()> {
        let broker = self.broker;
        match broker.get_queue(queue).await {
            Ok(_) => {}
            Err(BrokerError::QueueNotFound(_)) => delayd_beanstalk::create_queue(broker, queue)
                .await
                .with_context(|| format!("cannot create queue {queue}"))?,
            Err(err) => return Err(err).with_context(|| format!("cannot read queue {queue}")),
        }
        for chunk in jobs.chunks(MAX_BATCH) {
            let requests = chunk
                .iter()
                .map(|job| Ok(request(job, self.id(job)?)))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let outcomes = broker
                .enqueue(queue, requests, EnqueueOptions { auto_create: false })
                .await
                .with_context(|| format!("cannot enqueue into queue {queue}"))?;
            anyhow::ensure!(
                outcomes.len() == chunk.len(),
                "the store answered {} results for {} jobs",
                outcomes.len(),
                chunk.len()
            );
            for (job, outcome) in chunk.iter().zip(outcomes) {
                let result = match outcome {
                    Ok(o) if o.created => self.arrive(queue, job, o.deliver_at, report).await,
                    Ok(_) => self.already_present(queue, job, report).await,
                    Err(err) => Err(err.into()),
                };
                if let Err(err) = result {
                    eprintln!("delayd: job {} (tube {queue}): {err:#}", job.id);
                    report.failed += 1;
                }
            }
        }
        Ok(())
    }

    /// The message id of `job`.
    fn id(&self, job: &Job) -> anyhow::Result<MessageId> {
        message_id(self.prefix, job.id)
    }

    /// Counts a new message (due at `deliver_at`); a buried job is buried
    /// now.
    async fn arrive(
        &self,
        queue: &QueueName,
        job: &Job,
        deliver_at: u64,
        report: &mut TubeReport,
    ) -> anyhow::Result<()> {
        match job.state {
            JobState::Ready => report.ready += 1,
            JobState::Reserved => {
                report.ready += 1;
                report.were_reserved += 1;
            }
            // Its deadline passed while beanstalkd was stopped.
            JobState::Delayed if deliver_at <= now_ms() => report.ready += 1,
            JobState::Delayed => report.scheduled += 1,
            JobState::Buried => {
                self.bury(queue, job).await?;
                report.dead += 1;
            }
        }
        Ok(())
    }

    /// A job whose id is live already: an earlier import's, unless its body
    /// differs (then another beanstalkd's job has that id: a failure that
    /// `--id-prefix` avoids). A buried job that an earlier import enqueued
    /// but did not get to bury (stopped in between) is buried now: never
    /// buried, redriven or released, it can only be that.
    async fn already_present(
        &self,
        queue: &QueueName,
        job: &Job,
        report: &mut TubeReport,
    ) -> anyhow::Result<()> {
        let id = self.id(job)?;
        let message = self.broker.get(queue, &id).await?;
        anyhow::ensure!(
            message.payload == job.payload(),
            "message {id} exists with another body (a job of another beanstalkd? \
             import that one with its own --id-prefix)"
        );
        report.already_present += 1;
        let c = message.counters;
        let unfinished = job.state == JobState::Buried
            && matches!(message.state, MessageState::Ready | MessageState::Scheduled)
            && c.buries == 0
            && c.kicks == 0
            && c.releases == 0;
        if unfinished {
            self.bury(queue, job).await?;
            eprintln!(
                "delayd: job {} (tube {queue}): buried now (an earlier import stopped before)",
                job.id
            );
        }
        Ok(())
    }

    /// The buried job's message to `dead`: leased by id (`reserve-job`)
    /// and buried with the job's priority, as a beanstalkd `bury` does.
    async fn bury(&self, queue: &QueueName, job: &Job) -> anyhow::Result<()> {
        let id = self.id(job)?;
        let delivery = self
            .broker
            .lease_message(queue, &id, Some(lease_ms(job.ttr_ns)))
            .await?;
        self.broker
            .bury(queue, &id, &delivery.lease_id, Some(job.pri))
            .await?;
        Ok(())
    }
}

/// `<prefix><job id>`; fails only for a prefix that makes an invalid id.
pub fn message_id(prefix: &str, job_id: u64) -> anyhow::Result<MessageId> {
    MessageId::new(format!("{prefix}{job_id}"))
        .map_err(|err| UsageError(format!("--id-prefix {prefix:?}: {err}")).into())
}

/// The enqueue of one job as message `id`. A buried job is enqueued ready,
/// then buried (see [`Importer::arrive`]).
fn request(job: &Job, id: MessageId) -> EnqueueRequest {
    let schedule = match job.state {
        JobState::Delayed => Schedule::At(deliver_at_ms(job.deadline_at_ns)),
        JobState::Ready | JobState::Reserved | JobState::Buried => Schedule::Now,
    };
    EnqueueRequest {
        id: Some(id),
        schedule,
        priority: Some(job.pri),
        payload: job.payload().to_vec(),
        lease_ms: Some(lease_ms(job.ttr_ns)),
        // As the beanstalkd listener's `put`: never dead-lettered by
        // timeouts.
        max_attempts: Some(u32::MAX),
        ..EnqueueRequest::default()
    }
}

/// A delayed job's deadline (wall-clock ns) as epoch ms, to the nearest ms;
/// a deadline at or before the epoch is due at once, as beanstalkd treats
/// it.
pub fn deliver_at_ms(deadline_ns: i64) -> u64 {
    let ns = u64::try_from(deadline_ns).unwrap_or(0);
    ns.saturating_add(500_000) / 1_000_000
}

fn now_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// TTR (ns) as a lease length in ms, rounded up, at least 1 s as
/// beanstalkd raises a TTR of 0.
pub fn lease_ms(ttr_ns: i64) -> u64 {
    let ns = u64::try_from(ttr_ns).unwrap_or(0);
    ns.div_ceil(1_000_000).max(1000)
}

fn print_report(report: &Report, json: bool) -> anyhow::Result<()> {
    if json {
        return print_json(report);
    }
    outln!(
        "{}: {} binlog file(s), {} record(s), {} live job(s)",
        report.binlog_dir.display(),
        report.files,
        report.records,
        report.jobs
    )?;
    for damage in &report.damage {
        outln!("damaged (skipped as beanstalkd would): {damage}")?;
    }
    for (tube, t) in &report.tubes {
        let reserved = match t.were_reserved {
            0 => String::new(),
            n => format!(" ({n} were reserved)"),
        };
        outln!(
            "tube {tube}: {} imported ({} ready{reserved}, {} scheduled, {} dead), \
             {} already present, {} failed",
            t.imported(),
            t.ready,
            t.scheduled,
            t.dead,
            t.already_present,
            t.failed
        )?;
    }
    let sum = |f: fn(&TubeReport) -> u64| report.tubes.values().map(f).sum::<u64>();
    outln!(
        "total: {} imported, {} already present, {} failed",
        sum(TubeReport::imported),
        sum(|t| t.already_present),
        sum(|t| t.failed)
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_round_to_the_nearest_ms() {
        assert_eq!(deliver_at_ms(1_700_000_000_123_499_999), 1_700_000_000_123);
        assert_eq!(deliver_at_ms(1_700_000_000_123_500_000), 1_700_000_000_124);
        assert_eq!(deliver_at_ms(-5), 0);
    }

    #[test]
    fn ttr_becomes_a_lease_of_at_least_a_second() {
        assert_eq!(lease_ms(30_000_000_000), 30_000);
        assert_eq!(lease_ms(1_500_000_001), 1501);
        assert_eq!(lease_ms(0), 1000);
        assert_eq!(lease_ms(-1), 1000);
    }

    #[test]
    fn jobs_keep_priority_ttr_payload_and_schedule() {
        let job = Job {
            id: 12,
            tube: "t".into(),
            pri: 3,
            delay_ns: 0,
            ttr_ns: 5_000_000_000,
            created_at_ns: 0,
            deadline_at_ns: 2_000_000_000_000_400_000,
            state: JobState::Delayed,
            body: b"a\r\nb\r\n".to_vec(),
        };
        let id = message_id("bs-", 12).expect("an id");
        assert_eq!(id.as_str(), "bs-12");
        let r = request(&job, id.clone());
        assert_eq!(r.id, Some(id.clone()));
        assert_eq!(r.schedule, Schedule::At(2_000_000_000_000));
        assert_eq!((r.priority, r.lease_ms), (Some(3), Some(5000)));
        assert_eq!(r.payload, b"a\r\nb");
        let ready = Job {
            state: JobState::Reserved,
            ..job.clone()
        };
        assert_eq!(request(&ready, id.clone()).schedule, Schedule::Now);
        let buried = Job {
            state: JobState::Buried,
            ..job
        };
        assert_eq!(request(&buried, id).schedule, Schedule::Now);
        assert!(message_id("no spaces ", 1).is_err());
    }
}
