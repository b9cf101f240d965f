//! The Redis side of the ZSET import: reading the ZSET page by page, the
//! payloads of id members, and removing what delayd acknowledged.

use std::time::Duration;

use anyhow::Context as _;
use redis::aio::MultiplexedConnection;

use crate::UsageError;

/// `ZSCAN`'s `COUNT` hint: about one batch per round trip.
const SCAN_COUNT: usize = 1000;

/// Removes each member (and with a second key, its hash entry) only if its
/// score is still the one read: ARGV holds member, score pairs; the reply
/// has 1 (removed) or 0 (rescored or gone: left alone) per pair. Scores are
/// compared as numbers, both sides in Redis's own text form. One script
/// call is atomic, so the old system cannot rescore a member between the
/// check and the removal.
const DELETE_SCRIPT: &str = r"
local removed = {}
for i = 1, #ARGV, 2 do
  local current = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if current and tonumber(current) == tonumber(ARGV[i + 1]) then
    redis.call('ZREM', KEYS[1], ARGV[i])
    if #KEYS == 2 then
      redis.call('HDEL', KEYS[2], ARGV[i])
    end
    removed[#removed + 1] = 1
  else
    removed[#removed + 1] = 0
  end
end
return removed
";

/// One member as `ZSCAN` returned it.
pub(super) struct Entry {
    pub member: Vec<u8>,
    /// The score in Redis's text form, given back to [`DELETE_SCRIPT`].
    pub score_text: String,
}

/// The ZSET (and with `--hash`, the hash) on one Redis.
pub(super) struct Source {
    conn: MultiplexedConnection,
    key: String,
    hash: Option<String>,
    delete_script: redis::Script,
}

impl Source {
    pub async fn connect(url: &str, key: String, hash: Option<String>) -> anyhow::Result<Self> {
        let client = delayd_redis::open_client(url)
            .map_err(|err| UsageError(format!("--url {}: {err}", redact(url))))?;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)))
            .set_response_timeout(Some(Duration::from_secs(60)));
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|err| failed(&format!("connecting to Redis at {}", redact(url)), &err))?;
        Ok(Self {
            conn,
            key,
            hash,
            delete_script: redis::Script::new(DELETE_SCRIPT),
        })
    }

    /// One `ZSCAN` step from `cursor` (0 to start): the next cursor (0 when
    /// the scan is complete) and its members.
    pub async fn scan(&mut self, cursor: u64) -> anyhow::Result<(u64, Vec<Entry>)> {
        let (next, flat): (String, Vec<Vec<u8>>) = redis::cmd("ZSCAN")
            .arg(&self.key)
            .arg(cursor)
            .arg("COUNT")
            .arg(SCAN_COUNT)
            .query_async(&mut self.conn)
            .await
            .map_err(|err| failed(&format!("reading the ZSET {:?} (ZSCAN)", self.key), &err))?;
        let next = next
            .parse()
            .with_context(|| format!("ZSCAN answered the cursor {next:?}"))?;
        let mut entries = Vec::with_capacity(flat.len() / 2);
        let mut flat = flat.into_iter();
        while let (Some(member), Some(score)) = (flat.next(), flat.next()) {
            let score_text =
                String::from_utf8(score).context("ZSCAN answered a score not UTF-8")?;
            entries.push(Entry { member, score_text });
        }
        Ok((next, entries))
    }

    /// Each entry's payload: the member itself, or with `--hash` its hash
    /// value (`None` when the hash has no entry for it).
    pub async fn payloads(&mut self, entries: &[Entry]) -> anyhow::Result<Vec<Option<Vec<u8>>>> {
        let Some(hash) = &self.hash else {
            return Ok(entries.iter().map(|e| Some(e.member.clone())).collect());
        };
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut command = redis::cmd("HMGET");
        command.arg(hash);
        for entry in entries {
            command.arg(&entry.member);
        }
        command.query_async(&mut self.conn).await.map_err(|err| {
            failed(
                &format!("reading payloads from the hash {hash:?} (HMGET)"),
                &err,
            )
        })
    }

    /// Removes the entries whose score is still the one read (and their
    /// hash entries); per entry, whether it was removed.
    pub async fn delete_unchanged(&mut self, entries: &[Entry]) -> anyhow::Result<Vec<bool>> {
        if entries.is_empty() {
            return Ok(Vec::new());
        }
        let mut invocation = self.delete_script.key(&self.key);
        if let Some(hash) = &self.hash {
            invocation.key(hash);
        }
        for entry in entries {
            invocation.arg(&entry.member).arg(&entry.score_text);
        }
        let removed: Vec<u8> = invocation
            .invoke_async(&mut self.conn)
            .await
            .map_err(|err| {
                let what = "removing imported members from Redis (they are in delayd; \
                            re-run with --delete)";
                failed(what, &err)
            })?;
        anyhow::ensure!(
            removed.len() == entries.len(),
            "the delete script answered {} flags for {} members",
            removed.len(),
            entries.len()
        );
        Ok(removed.into_iter().map(|flag| flag == 1).collect())
    }
}

/// A Redis error in context. Its text only: a `RedisError` prints its
/// cause and also returns it as its source, which `{:#}` would print twice.
fn failed(what: &str, err: &redis::RedisError) -> anyhow::Error {
    anyhow::anyhow!("{what}: {err}")
}

/// `url` without its password, for messages.
pub(super) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***{}", &url[..scheme], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Child, ChildStdin, Command, Stdio};
    use std::time::Instant;

    use delayd_core::testkit::net::{free_port, redis_ping};

    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(redact("redis://:pw@host:6379/0"), "redis://***@host:6379/0");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
    }

    /// Runs redis-server under a shell that kills it when our end of the
    /// shell's stdin closes: on drop, and when the test process dies.
    const WRAPPER: &str = r#"exec 3<&0
redis-server "$@" </dev/null & pid=$!
(read _ <&3; kill -9 $pid 2>/dev/null) &
wait $pid"#;

    /// `redis-server` on a free port, killed when dropped.
    struct RedisServer {
        child: Child,
        stdin: Option<ChildStdin>,
        port: u16,
    }

    impl Drop for RedisServer {
        fn drop(&mut self) {
            self.stdin.take();
            let _ = self.child.wait();
        }
    }

    fn redis_server() -> RedisServer {
        let port = free_port();
        let mut child = Command::new("sh")
            .args(["-c", WRAPPER, "sh", "--port", &port.to_string()])
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server (run scripts/ensure-redis.sh)");
        let stdin = child.stdin.take();
        let server = RedisServer { child, stdin, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !redis_ping(port) {
            assert!(Instant::now() < deadline, "redis-server did not start");
            // Polls: a starting redis-server has no event this test can await.
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    fn entry(member: &str, score: &str) -> Entry {
        Entry {
            member: member.into(),
            score_text: score.into(),
        }
    }

    /// The race `--delete` guards against: a member rescored (or removed)
    /// by the old system after it was read stays in Redis, with its hash
    /// entry; the others go, with theirs.
    #[tokio::test]
    async fn delete_removes_only_members_with_the_score_read() {
        let server = redis_server();
        let url = format!("redis://127.0.0.1:{}", server.port);
        let mut source = Source::connect(&url, "z".into(), Some("h".into()))
            .await
            .expect("connect");
        let mut conn = source.conn.clone();
        let _: () = redis::cmd("ZADD")
            .arg("z")
            .arg(&[("1.5", "a"), ("2", "b"), ("3", "c")])
            .query_async(&mut conn)
            .await
            .expect("ZADD");
        let _: () = redis::cmd("HSET")
            .arg("h")
            .arg(&[("a", "A"), ("b", "B"), ("c", "C")])
            .query_async(&mut conn)
            .await
            .expect("HSET");
        let (cursor, mut read) = source.scan(0).await.expect("scan");
        assert_eq!(cursor, 0, "a small ZSET comes in one step");
        read.sort_by(|x, y| x.member.cmp(&y.member));
        assert_eq!(read[0].score_text, "1.5");
        let payloads = source.payloads(&read).await.expect("HMGET");
        assert_eq!(payloads[1], Some(b"B".to_vec()));

        // b rescored after it was read; d was never there.
        let _: () = redis::cmd("ZADD")
            .arg("z")
            .arg("9")
            .arg("b")
            .query_async(&mut conn)
            .await
            .expect("ZADD");
        let stale = [entry("a", "1.5"), entry("b", "2"), entry("d", "4")];
        let removed = source.delete_unchanged(&stale).await.expect("delete");
        assert_eq!(removed, [true, false, false]);
        let left: Vec<String> = redis::cmd("ZRANGE")
            .arg("z")
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await
            .expect("ZRANGE");
        assert_eq!(left, ["c", "b"]);
        let fields: Vec<String> = redis::cmd("HKEYS")
            .arg("h")
            .query_async(&mut conn)
            .await
            .expect("HKEYS");
        assert_eq!(fields.len(), 2);
        assert!(!fields.contains(&"a".to_owned()));
    }
}
