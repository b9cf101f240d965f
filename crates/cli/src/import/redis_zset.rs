//! `delayd import redis-zset`: moves a Redis ZSET delay queue (member =
//! payload or id, score = due time) into a running delayd over HTTP.
//!
//! # How it reads, writes and deletes
//! - **Reading**: `ZSCAN`, which guarantees every member present from the
//!   start to the end of the scan is returned, however the old system adds,
//!   removes or rescores members meanwhile (`ZRANGE ... LIMIT` pages would
//!   skip members when earlier ones are removed, by `--delete` itself or by
//!   the old mover). A member added during the scan may or may not be read;
//!   a re-run reads it. `ZSCAN` may return a member twice when the ZSET is
//!   resized: the set `seen` (16 bytes of digest per member read) drops
//!   the repeat, so counts stay exact.
//! - **Ids**: derived from the member ([`message_id`]), so a re-run
//!   enqueues nothing twice while the first run's messages are live (the
//!   batch answers `created: false`).
//! - **Writing**: `POST /v1/queues/{queue}/batch`, at most 1000 messages and
//!   [`convert::MAX_BATCH_BYTES`] of JSON per request, one request at a time.
//! - **Deleting** (`--delete`): after each request, only the members delayd
//!   acknowledged (created, or already present with the same `deliver_at`)
//!   are removed, by one script call per request that removes a member
//!   (and its hash entry) only while its score is still the one read
//!   (`source::DELETE_SCRIPT`).
//!
//! # Layout
//! - this file: the arguments, the import loop and the report.
//! - `source`: the Redis side (`ZSCAN`, `HMGET`, the delete script).
//! - `convert`: pure rules: score to `deliver_at`, member to id, batch
//!   sizes.

mod convert;
mod source;

use std::collections::HashSet;

use clap::Args;
use delayd_client::{Client, ClientError, Enqueued, ErrorDetail, NewMessage, Payload};
use serde::Serialize;
use serde_json::json;

use crate::commands::format_time;
use crate::output::{outln, print_json};
use crate::{Connection, UsageError};
use convert::ScoreUnit;
use convert::{deliver_at, member_digest, message_id, request_size, shorten, BATCH};
use source::{Entry, Source};

#[derive(Debug, Args)]
pub struct ZsetArgs {
    #[command(flatten)]
    conn: Connection,
    /// The Redis holding the ZSET: redis://[:PASSWORD@]HOST:PORT[/DB] or
    /// rediss:// (one server, not a Cluster).
    #[arg(long, value_name = "URL")]
    url: String,
    /// The ZSET: member = payload (or id with --hash), score = due time.
    #[arg(long, value_name = "KEY")]
    key: String,
    /// The delayd queue to enqueue into.
    #[arg(long)]
    queue: String,
    /// Members are ids; their payloads are the values of this hash.
    #[arg(long, value_name = "KEY")]
    hash: Option<String>,
    /// The scores' unit: seconds (fractions kept to the ms) or milliseconds
    /// since the Unix epoch.
    #[arg(long, value_enum, default_value_t = ScoreUnit::S)]
    score: ScoreUnit,
    /// Read and count, write nothing (neither delayd nor Redis).
    #[arg(long)]
    dry_run: bool,
    /// Remove from Redis what delayd acknowledged, batch by batch.
    #[arg(long, conflicts_with = "dry_run")]
    delete: bool,
}

/// What the import did, printed at the end (`--json`: as this object).
#[derive(Debug, Default, Serialize)]
struct Tally {
    dry_run: bool,
    /// Distinct members read from the ZSET.
    read: u64,
    /// Messages delayd answered for (in a dry run: that would be sent).
    sent: u64,
    created: u64,
    /// Already live in delayd with the same `deliver_at` (a re-run).
    already_present: u64,
    /// Already live in delayd with another `deliver_at`: left in Redis.
    conflicts: u64,
    /// `--hash`: members without a hash entry, skipped and left in Redis.
    missing_from_hash: u64,
    /// Refused by delayd, or a score that is no time: left in Redis.
    errors: u64,
    /// Removed from Redis (`--delete`).
    deleted: u64,
    /// Acknowledged, but rescored or removed in Redis since it was read:
    /// left in Redis (`--delete`).
    changed_since_read: u64,
    /// Earliest and latest `deliver_at` sent (a wrong `--score` shows here).
    first_deliver_at: Option<u64>,
    last_deliver_at: Option<u64>,
}

impl Tally {
    fn not_imported(&self) -> u64 {
        self.conflicts + self.missing_from_hash + self.errors
    }
}

/// An entry with its message, ready to send.
struct Item {
    entry: Entry,
    message: NewMessage,
}

struct Importer {
    args: ZsetArgs,
    source: Source,
    /// `None` in a dry run: nothing is sent.
    client: Option<Client>,
    /// Digests of the members read so far: drops `ZSCAN`'s repeats.
    seen: HashSet<[u8; 16]>,
    tally: Tally,
}

pub async fn run(args: ZsetArgs) -> anyhow::Result<()> {
    if !delayd_core::is_valid_queue_name(&args.queue) {
        return Err(UsageError(format!("invalid queue name {:?}", args.queue)).into());
    }
    let client = if args.dry_run {
        None
    } else {
        Some(args.conn.client()?)
    };
    let source = Source::connect(&args.url, args.key.clone(), args.hash.clone()).await?;
    let mut importer = Importer {
        tally: Tally {
            dry_run: args.dry_run,
            ..Tally::default()
        },
        args,
        source,
        client,
        seen: HashSet::new(),
    };
    // The counts are printed even when the import stopped, so the user
    // sees how far it got.
    let outcome = importer.import_all().await;
    let tally = &importer.tally;
    if importer.args.conn.json {
        print_json(tally)?;
    } else {
        print_tally(tally)?;
    }
    outcome?;
    if tally.not_imported() > 0 {
        anyhow::bail!(
            "{} of {} members were not imported (listed above on stderr)",
            tally.not_imported(),
            tally.read
        );
    }
    Ok(())
}

impl Importer {
    async fn import_all(&mut self) -> anyhow::Result<()> {
        let mut cursor = 0u64;
        let mut pending = Vec::new();
        loop {
            let (next, page) = self.source.scan(cursor).await?;
            for entry in page {
                if self
                    .seen
                    .insert(member_digest(&self.args.key, &entry.member))
                {
                    self.tally.read += 1;
                    pending.push(entry);
                }
            }
            while pending.len() >= BATCH {
                let rest = pending.split_off(BATCH);
                self.import_batch(std::mem::replace(&mut pending, rest))
                    .await?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        if !pending.is_empty() {
            self.import_batch(pending).await?;
        }
        Ok(())
    }

    /// Sends up to one batch of entries (more requests when large payloads
    /// exceed [`convert::MAX_BATCH_BYTES`]), then deletes what was acknowledged.
    async fn import_batch(&mut self, entries: Vec<Entry>) -> anyhow::Result<()> {
        let payloads = self.source.payloads(&entries).await?;
        let mut items = Vec::with_capacity(entries.len());
        for (entry, payload) in entries.into_iter().zip(payloads) {
            if let Some(item) = self.prepare(entry, payload) {
                items.push(item);
            }
        }
        while !items.is_empty() {
            let size = request_size(items.iter().map(|item| &item.message.payload));
            let rest = items.split_off(size);
            let chunk = std::mem::replace(&mut items, rest);
            let acknowledged = self.send(chunk).await?;
            if self.args.delete && !acknowledged.is_empty() {
                self.delete(&acknowledged).await?;
            }
        }
        Ok(())
    }

    /// The message for an entry, or `None` (counted and reported) when it
    /// has no payload or its score is no time.
    fn prepare(&mut self, entry: Entry, payload: Option<Vec<u8>>) -> Option<Item> {
        let Some(payload) = payload else {
            self.tally.missing_from_hash += 1;
            self.report(&entry, "missing_from_hash", "no entry in the hash; skipped");
            return None;
        };
        let deliver_at = match deliver_at(&entry.score_text, self.args.score) {
            Ok(at) => at,
            Err(why) => {
                self.tally.errors += 1;
                self.report(&entry, "invalid_score", &why);
                return None;
            }
        };
        let id = message_id(&self.args.key, &entry.member, self.args.hash.is_some());
        let mut message = NewMessage::new(Payload::from_bytes(payload));
        message.id = Some(id);
        message.deliver_at = Some(deliver_at);
        Some(Item { entry, message })
    }

    /// Sends one request (counts only, in a dry run) and returns the
    /// entries delayd acknowledged.
    async fn send(&mut self, items: Vec<Item>) -> anyhow::Result<Vec<Entry>> {
        let Some(client) = &self.client else {
            self.count_sent(&items);
            return Ok(Vec::new());
        };
        let messages: Vec<NewMessage> = items.iter().map(|i| i.message.clone()).collect();
        let results = match client.enqueue_batch(&self.args.queue, &messages).await {
            Ok(results) if results.len() == items.len() => results,
            Ok(results) => anyhow::bail!(
                "delayd answered {} results for a batch of {}",
                results.len(),
                items.len()
            ),
            // A lone item too large for the server's body limit is that
            // item's error; any other refusal of a whole batch stops.
            Err(ClientError::Api {
                status: 413,
                code,
                message,
                ..
            }) if items.len() == 1 => vec![Err(ErrorDetail { code, message })],
            Err(err) => {
                return Err(anyhow::Error::new(err).context(format!(
                    "enqueueing a batch into {:?} (import stopped; what was counted \
                     above is in delayd, and re-running is safe)",
                    self.args.queue
                )))
            }
        };
        self.count_sent(&items);
        let mut acknowledged = Vec::new();
        for (item, result) in items.into_iter().zip(results) {
            if self.classify(&item, result) {
                acknowledged.push(item.entry);
            }
        }
        Ok(acknowledged)
    }

    /// Counts messages sent (or, in a dry run, that would be) and their
    /// range of due times.
    fn count_sent(&mut self, items: &[Item]) {
        let tally = &mut self.tally;
        tally.sent += items.len() as u64;
        for item in items {
            let at = item.message.deliver_at.unwrap_or_default();
            tally.first_deliver_at = Some(tally.first_deliver_at.map_or(at, |t| t.min(at)));
            tally.last_deliver_at = Some(tally.last_deliver_at.map_or(at, |t| t.max(at)));
        }
    }

    /// Counts one batch result; true when delayd holds the message as read.
    fn classify(&mut self, item: &Item, result: Result<Enqueued, ErrorDetail>) -> bool {
        let wanted = item.message.deliver_at.unwrap_or_default();
        match result {
            Ok(done) if done.created => {
                self.tally.created += 1;
                true
            }
            Ok(done) if done.deliver_at == wanted => {
                self.tally.already_present += 1;
                true
            }
            Ok(done) => {
                self.tally.conflicts += 1;
                let why = format!(
                    "id {} is live in delayd with deliver_at {} (Redis: {}); left in Redis",
                    done.id,
                    format_time(done.deliver_at),
                    format_time(wanted)
                );
                self.report(&item.entry, "conflict", &why);
                false
            }
            Err(error) => {
                self.tally.errors += 1;
                self.report(&item.entry, &error.code, &error.message);
                false
            }
        }
    }

    /// Removes acknowledged members whose score is unchanged since read.
    async fn delete(&mut self, acknowledged: &[Entry]) -> anyhow::Result<()> {
        let removed = self.source.delete_unchanged(acknowledged).await?;
        for (entry, removed) in acknowledged.iter().zip(removed) {
            if removed {
                self.tally.deleted += 1;
            } else {
                self.tally.changed_since_read += 1;
                let why = "rescored or removed in Redis since it was read; \
                           imported as read, left in Redis";
                self.report(entry, "changed_since_read", why);
            }
        }
        Ok(())
    }

    /// One line on stderr about a member that was not moved as read.
    fn report(&self, entry: &Entry, code: &str, message: &str) {
        if self.args.conn.json {
            let member = shorten(String::from_utf8_lossy(&entry.member).chars());
            let line = json!({"member": member, "score": entry.score_text, "code": code, "message": message});
            eprintln!("{line}");
        } else {
            let member = shorten(String::from_utf8_lossy(&entry.member).escape_debug());
            eprintln!(
                "member \"{member}\" (score {}): {code}: {message}",
                entry.score_text
            );
        }
    }
}

fn print_tally(t: &Tally) -> anyhow::Result<()> {
    if t.dry_run {
        outln!("dry run: nothing was written")?;
    }
    outln!("read                {}", t.read)?;
    outln!(
        "{}{}",
        if t.dry_run {
            "would send          "
        } else {
            "sent                "
        },
        t.sent
    )?;
    if !t.dry_run {
        outln!("created             {}", t.created)?;
        outln!("already present     {}", t.already_present)?;
        outln!("conflicts           {}", t.conflicts)?;
    }
    outln!("missing from hash   {}", t.missing_from_hash)?;
    outln!("errors              {}", t.errors)?;
    outln!("deleted             {}", t.deleted)?;
    if t.changed_since_read > 0 {
        outln!("changed since read  {}", t.changed_since_read)?;
    }
    if let (Some(first), Some(last)) = (t.first_deliver_at, t.last_deliver_at) {
        outln!(
            "due                 {} .. {}",
            format_time(first),
            format_time(last)
        )?;
    }
    Ok(())
}
