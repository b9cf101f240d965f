#!/usr/bin/env python3
"""A soak with faults (issue 23): kill -9 and restart, and a full disk,
while producers and consumers run; at the end it proves 0 lost, 0 early,
and duplicates only where at-least-once delivery allows them.

It starts its own `delayd serve` (free port on 127.0.0.1, `--beanstalk off`,
`--durability always`, `--disk-reserve 32MiB`) on a 256 MiB tmpfs it mounts
itself (run it as root; unmounted at the end, even on failure), then for
`--seconds`:

- every `--kill-every` seconds the server gets SIGKILL and is restarted at
  once on the same data directory and port;
- once, at about a third of the run, a file fills the tmpfs until its free
  space is below the reserve (enqueues get 507 `insufficient_storage`, acks
  still work), is held `--fill-hold` seconds and deleted; enqueues must
  resume by themselves;
- producer threads enqueue single messages, each with its own client `id`
  and a random delay of 0-3 s, retrying with the SAME id on connection
  errors, 503 and 507 (an answer 200 `created:false` is a fine retry); every
  id whose enqueue was answered 201 or 200 is recorded with its deliver_at;
- consumer threads lease (`max` 100, `wait_ms` 1000, `lease_ms` 5000) and
  batch-ack after a random 0..`--hold-ms` (default 500) of "work", so
  kills land while leases are open, recording per delivery its lease start (`lease_until -
  lease_ms`) and whether its ack succeeded. A delivery is "open at a crash"
  when a kill happened between sending its lease request and receiving its
  ack's answer.

Then producers stop, consumers drain (bounded by `--drain-seconds`) until
every acknowledged id has an acked delivery, and the verdict is printed:
0 lost (each acknowledged id delivered), 0 early (no lease start before
deliver_at - 1 ms), every duplicate explained (a delivery of that id open
at a crash or with a failed ack, or an enqueue retried after an ambiguous
failure that created the message anew), enqueues refused with 507 during
the fill and resumed after it, acks answered during the fill. Exits 1 on
any violation.

Every call the clients make is also written to a history (`--history`,
JSON lines in crates/history's format: client times around each call,
each enqueue attempt, each message a lease call handed out, each ack of a
batch; a call without an answer is `unknown`, a lease call without one
`lease_failed`; each kill a `crash`, each restart to its readiness a
`restart`; `stop` at the end, `drained` when the drain finished), and at
the end `delayd check-history` verifies every promise on it; its
violations fail the soak too.

Usage: sudo python3 scripts/soak-faults.py --bin target/release/delayd \
           [--seconds 600] [--kill-every 120] [--history FILE]
Python 3.11, standard library only.
"""
import argparse
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

LEASE_MS = 5000
QUEUE = "soak"
MiB = 1 << 20


def now_ms():
    return int(time.time() * 1000)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


class Client:
    """One keep-alive HTTP connection; reconnects after any error."""

    def __init__(self, port, timeout=10):
        self.port, self.timeout, self.conn = port, timeout, None

    def call(self, method, path, body=None):
        """(status, json-or-None); raises OSError/HTTPException on transport errors."""
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            data = json.dumps(body).encode() if body is not None else None
            hdrs = {"content-type": "application/json"} if data is not None else {}
            self.conn.request(method, path, body=data, headers=hdrs)
            r = self.conn.getresponse()
            raw = r.read()
            try:
                doc = json.loads(raw) if raw else None
            except ValueError:
                doc = None
            return r.status, doc
        except (OSError, http.client.HTTPException):
            self.close()
            raise

    def close(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except Exception:
                pass
            self.conn = None


class History:
    """The history file: one JSON line per operation, written as it happens
    (a long soak's history is not held in memory)."""

    def __init__(self, path):
        self.path = path
        self.file = open(path, "w", encoding="utf-8")
        self.lock = threading.Lock()
        self.ops = 0

    def add(self, op, invoke, complete, **fields):
        line = json.dumps({"op": op, "invoke": invoke, "complete": complete, **fields})
        with self.lock:
            self.file.write(line + "\n")
            self.ops += 1

    def stop(self, at, drained):
        with self.lock:
            self.file.write(json.dumps({"op": "stop", "at": at, "drained": drained}) + "\n")
            self.ops += 1
            self.file.close()


def status_outcome(status):
    """What an answer's status says the call did (no answer, a 5xx: unknown)."""
    if status is None or (status >= 500 and status != 507):
        return "unknown"
    if 200 <= status < 300:
        return "ok"
    if status == 404:
        return "not_found"
    if status == 409:
        return "lease_mismatch"
    return "error"  # a 4xx, or 507: refused, nothing changed


def ack_outcome(item):
    """One item of a batch ack's answer."""
    if item.get("acked") is True:
        return "ok"
    code = (item.get("error") or {}).get("code", "")
    if code == "lease_mismatch":
        return "lease_mismatch"
    if code.endswith("not_found"):
        return "not_found"
    return "unknown"


class Server:
    def __init__(self, binary, data, port, log):
        self.binary, self.data, self.port, self.log = binary, data, port, log
        self.proc = None
        self.max_rss_kb = 0
        self.lock = threading.Lock()

    def start(self):
        args = [self.binary, "serve", "--http", f"127.0.0.1:{self.port}", "--beanstalk", "off",
                "--data", self.data, "--durability", "always", "--disk-reserve", "32MiB"]
        for attempt in range(50):
            self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                    c.request("GET", "/readyz")
                    ok = c.getresponse().status == 200
                    c.close()
                    if ok:
                        return
                except (OSError, http.client.HTTPException):
                    pass
                time.sleep(0.05)
            if self.proc.poll() is None:
                raise RuntimeError("delayd serve did not become ready within 30 s")
            time.sleep(0.2)  # exited (e.g. port not yet free): try again
        raise RuntimeError("delayd serve kept exiting at start; see its log")

    def sample_rss(self):
        p = self.proc
        if p is None or p.poll() is not None:
            return
        try:
            with open(f"/proc/{p.pid}/status") as f:
                for line in f:
                    if line.startswith(("VmHWM:", "VmRSS:")):
                        self.max_rss_kb = max(self.max_rss_kb, int(line.split()[1]))
        except OSError:
            pass

    def kill9(self):
        self.sample_rss()
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.sample_rss()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.epoch = 0  # number of kills so far
        self.acked_enqueue = {}  # id -> deliver_at (from the enqueue answer)
        self.ambiguous = set()  # ids with an enqueue attempt whose outcome is unknown
        self.created_after_ambiguous = set()  # ids answered 201 after an ambiguous attempt
        self.deliveries = {}  # id -> list of [lease_start, deliver_at, ack_ok, open_at_crash]
        self.acked_ids = set()  # ids with at least one delivery whose ack succeeded
        self.n507 = 0
        self.n503 = 0
        self.conn_errors = 0
        self.fill_start = None  # monotonic
        self.fill_end = None
        self.acks_during_fill = 0
        self.enq_ok_during_fill = 0
        self.first_enqueue_after_fill = None
        self.unknown_deliveries = 0
        self.errors = []


def producer(tid, port, st, hist, stop, deadline_hard, rate_per_thread, rng):
    cl = Client(port)
    n = 0
    interval = 1.0 / rate_per_thread
    while not stop.is_set() and time.monotonic() < deadline_hard:
        mid = f"p{tid}-{n}"
        n += 1
        body = {"id": mid, "payload": f"soak {mid}", "delay_ms": rng.randint(0, 3000)}
        ambiguous = False
        for _ in range(100000):
            if time.monotonic() > deadline_hard:
                break
            invoke = now_ms()
            try:
                status, doc = cl.call("POST", f"/v1/queues/{QUEUE}/messages", body)
            except (OSError, http.client.HTTPException):
                hist.add("enqueue", invoke, now_ms(), queue=QUEUE, id=mid, outcome="unknown")
                with st.lock:
                    st.conn_errors += 1
                    st.ambiguous.add(mid)
                ambiguous = True
                time.sleep(0.1)
                continue
            answered = status in (200, 201)
            line = {"queue": QUEUE, "id": mid, "outcome": status_outcome(status)}
            if answered:
                line.update(exists=status == 200, deliver_at=doc["deliver_at"])
                if status == 201:
                    line["seq"] = doc["seq"]
            hist.add("enqueue", invoke, now_ms(), **line)
            if answered:
                with st.lock:
                    st.acked_enqueue[mid] = doc["deliver_at"]
                    if status == 201 and ambiguous:
                        st.created_after_ambiguous.add(mid)
                    if st.fill_start is not None and st.fill_end is None:
                        st.enq_ok_during_fill += 1
                    if st.fill_end is not None and st.first_enqueue_after_fill is None:
                        st.first_enqueue_after_fill = time.monotonic()
                break
            if status == 507:
                with st.lock:
                    st.n507 += 1
                time.sleep(0.2)
                continue
            if status >= 500:
                with st.lock:
                    st.n503 += 1
                    st.ambiguous.add(mid)
                ambiguous = True
                time.sleep(0.1)
                continue
            with st.lock:
                st.errors.append(f"enqueue {mid}: unexpected {status} {doc}")
            break
        time.sleep(interval)
    cl.close()


def consumer(port, st, hist, stop_consumers, deadline_hard, hold_ms, rng):
    cl = Client(port)
    while not stop_consumers.is_set() and time.monotonic() < deadline_hard:
        with st.lock:
            e0 = st.epoch
        invoke = now_ms()
        try:
            status, doc = cl.call("POST", f"/v1/queues/{QUEUE}/leases",
                                  {"max": 100, "wait_ms": 1000, "lease_ms": LEASE_MS})
        except (OSError, http.client.HTTPException):
            # It may have handed out messages nobody saw.
            hist.add("lease_failed", invoke, now_ms(), queue=QUEUE)
            time.sleep(0.1)
            continue
        complete = now_ms()
        if status != 200:
            if status_outcome(status) == "unknown":
                hist.add("lease_failed", invoke, complete, queue=QUEUE)
            time.sleep(0.1)
            continue
        msgs = doc["messages"]
        for m in msgs:
            # granted_at stays out: lease_until - lease_ms is the server's
            # clock read for the call, not surely the grant's moment.
            hist.add("lease", invoke, complete, queue=QUEUE, id=m["id"], seq=m["seq"],
                     attempt=m["attempt"], lease_id=m["lease_id"], lease_until=m["lease_until"],
                     deliver_at=m["deliver_at"], key=m.get("key"))
        if not msgs:
            continue
        recs = []
        with st.lock:
            for m in msgs:
                rec = [m["lease_until"] - LEASE_MS, m["deliver_at"], False, False]
                st.deliveries.setdefault(m["id"], []).append(rec)
                recs.append(rec)
        if hold_ms:
            time.sleep(rng.uniform(0, hold_ms) / 1000)  # "work": keeps leases open across kills
        acks = [{"id": m["id"], "lease_id": m["lease_id"]} for m in msgs]
        results = None
        status = None
        invoke = now_ms()
        try:
            status, doc = cl.call("POST", f"/v1/queues/{QUEUE}/acks", {"acks": acks})
            if status == 200:
                results = doc["results"]
        except (OSError, http.client.HTTPException):
            pass
        complete = now_ms()
        for i, m in enumerate(msgs):
            outcome = ack_outcome(results[i]) if results is not None else status_outcome(status)
            if results is None and outcome == "ok":
                outcome = "unknown"  # a 2xx without the results it promises
            hist.add("ack", invoke, complete, queue=QUEUE, id=m["id"], lease_id=m["lease_id"],
                     outcome=outcome)
        with st.lock:
            crashed = st.epoch != e0
            in_fill = st.fill_start is not None and st.fill_end is None
            for i, rec in enumerate(recs):
                ok = results is not None and results[i].get("acked") is True
                rec[2] = ok
                rec[3] = crashed
                if ok:
                    st.acked_ids.add(msgs[i]["id"])
                    if in_fill:
                        st.acks_during_fill += 1
    cl.close()


def fill_disk(mnt, reserve, path):
    """Writes `path` until the filesystem's free space is below reserve/2."""
    vfs = os.statvfs(mnt)
    free = vfs.f_bavail * vfs.f_frsize
    size = max(free - reserve // 2, 0)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            chunk = b"\0" * MiB
            while True:
                vfs = os.statvfs(mnt)
                if vfs.f_bavail * vfs.f_frsize < reserve // 2:
                    break
                try:
                    os.write(fd, chunk)
                except OSError:
                    break
    finally:
        os.close(fd)
    vfs = os.statvfs(mnt)
    return vfs.f_bavail * vfs.f_frsize


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default="target/release/delayd")
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--kill-every", type=int, default=120)
    ap.add_argument("--fill-hold", type=int, default=20)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument("--consumers", type=int, default=4)
    ap.add_argument("--rate", type=float, default=200, help="enqueues/s over all producers, at most")
    ap.add_argument("--drain-seconds", type=int, default=90)
    ap.add_argument("--hold-ms", type=int, default=500,
                    help="consumers wait a random 0..HOLD ms between lease and ack")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--history", default=None,
                    help="write the history here (default: a temporary file, kept and named at the end)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 32)
    print(f"soak-faults: seed {seed}, {a.seconds} s, kill every {a.kill_every} s", flush=True)
    binary = os.path.abspath(a.bin)
    reserve = 32 * MiB

    mnt = tempfile.mkdtemp(prefix="delayd-soak-faults-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256M", "tmpfs", mnt], check=True)
    log_path = tempfile.mktemp(prefix="delayd-soak-faults-", suffix=".log")
    log = open(log_path, "wb")
    # Not on the tmpfs: the fill must not cut the history short.
    hist_path = a.history or tempfile.mktemp(prefix="delayd-soak-faults-", suffix=".history.jsonl")
    hist = History(hist_path)
    server = None
    try:
        data = os.path.join(mnt, "data")
        port = free_port()
        server = Server(binary, data, port, log)
        server.start()
        print(f"soak-faults: delayd on 127.0.0.1:{port}, data {data} (tmpfs 256M), log {log_path}", flush=True)

        st = State()
        stop_prod, stop_cons = threading.Event(), threading.Event()
        t0 = time.monotonic()
        hard = t0 + a.seconds + a.drain_seconds + 60
        threads = []
        for i in range(a.producers):
            threads.append(threading.Thread(target=producer, daemon=True, args=(
                i, port, st, hist, stop_prod, t0 + a.seconds + 30, a.rate / a.producers, random.Random(seed + i))))
        cons = [threading.Thread(target=consumer, daemon=True, args=(
                port, st, hist, stop_cons, hard, a.hold_ms, random.Random(seed + 1000 + i)))
                for i in range(a.consumers)]
        for t in threads + cons:
            t.start()

        kills = 0
        next_kill = t0 + a.kill_every
        fill_at = t0 + a.seconds / 3
        # keep the fill clear of kills: a restart on a full disk is another test
        while next_kill - a.fill_hold - 10 < fill_at < next_kill + 5 and fill_at < t0 + a.seconds:
            fill_at += 5
        fill_file = os.path.join(mnt, "fill")
        filled = False
        fill_free = None
        end = t0 + a.seconds
        while time.monotonic() < end:
            time.sleep(0.25)
            server.sample_rss()
            nowm = time.monotonic()
            if nowm >= next_kill and nowm < end - 5:
                with st.lock:
                    st.epoch += 1
                killed_at = now_ms()
                server.kill9()
                hist.add("crash", killed_at, now_ms(), ends_leases=True)
                kills += 1
                tk = time.monotonic()
                restart_at = now_ms()
                server.start()
                hist.add("restart", restart_at, now_ms())
                print(f"  t={nowm - t0:6.1f}s kill -9 #{kills}, ready again in {time.monotonic() - tk:.2f} s", flush=True)
                next_kill = time.monotonic() + a.kill_every
            if not filled and nowm >= fill_at:
                filled = True
                with st.lock:
                    st.fill_start = time.monotonic()
                fill_free = fill_disk(mnt, reserve, fill_file)
                print(f"  t={nowm - t0:6.1f}s disk filled: {fill_free / MiB:.1f} MiB free (reserve 32 MiB), holding {a.fill_hold} s", flush=True)
                time.sleep(a.fill_hold)
                with st.lock:
                    s507 = st.n507
                os.unlink(fill_file)
                with st.lock:
                    st.fill_end = time.monotonic()
                print(f"  t={time.monotonic() - t0:6.1f}s fill file deleted ({s507} x 507 so far)", flush=True)

        stop_prod.set()
        for t in threads:
            t.join(timeout=60)
        with st.lock:
            enq = dict(st.acked_enqueue)
        print(f"  producers stopped: {len(enq)} enqueues acknowledged; draining", flush=True)
        drain_deadline = time.monotonic() + a.drain_seconds
        drained = False
        while time.monotonic() < drain_deadline:
            with st.lock:
                missing = [i for i in enq if i not in st.acked_ids]
            if not missing:
                drained = True
                break
            time.sleep(0.5)
        time.sleep(LEASE_MS / 1000 + 1.5)  # let a late redelivery show up
        stop_cons.set()
        for t in cons:
            t.join(timeout=15)
        stuck = [t for t in threads + cons if t.is_alive()]
        # A thread still running could add a line after the stop.
        hist.stop(now_ms(), drained and not stuck)
        server.stop()
        checker = subprocess.run([binary, "check-history", hist_path],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

        # ---- verdict ----
        with st.lock:
            violations = []
            lost = [i for i in enq if i not in st.deliveries]
            unacked = [i for i in enq if i in st.deliveries and i not in st.acked_ids]
            early = []
            dups, explained, unexplained = 0, 0, []
            delivered = 0
            for mid, recs in st.deliveries.items():
                delivered += len(recs)
                da = enq.get(mid)
                if da is None:
                    st.unknown_deliveries += 1
                for ls, mda, _ok, _open in recs:
                    if ls < min(mda, da if da is not None else mda) - 1:
                        early.append((mid, ls, mda, da))
                if len(recs) > 1:
                    dups += 1
                    cause = any(r[3] or not r[2] for r in recs[:-1]) or mid in st.created_after_ambiguous
                    if cause:
                        explained += 1
                    else:
                        unexplained.append((mid, recs))
            if lost:
                violations.append(f"{len(lost)} lost (acknowledged, never delivered), e.g. {lost[:5]}")
            if unacked:
                violations.append(f"{len(unacked)} delivered but never acked by the end of the drain, e.g. {unacked[:5]}")
            if early:
                violations.append(f"{len(early)} early (lease start before deliver_at - 1 ms), e.g. {early[:3]}")
            if unexplained:
                violations.append(f"{len(unexplained)} unexplained duplicates, e.g. {unexplained[:3]}")
            if filled:
                if st.n507 == 0:
                    violations.append("no 507 during the disk fill")
                if st.first_enqueue_after_fill is None:
                    violations.append("enqueues did not resume after the fill file was deleted")
                if st.acks_during_fill == 0:
                    violations.append("no ack answered during the disk fill")
            if kills == 0:
                violations.append("no kill happened (run longer than --kill-every)")
            violations += st.errors[:10]
            if stuck:
                violations.append(f"{len(stuck)} client threads did not stop")
            if checker.returncode != 0:
                violations.append(f"delayd check-history {hist_path} exited {checker.returncode}:\n"
                                  + checker.stdout.strip())
            resume = (st.first_enqueue_after_fill - st.fill_end) if st.first_enqueue_after_fill and st.fill_end else None
            print("soak-faults summary")
            print(f"  seconds {a.seconds}, kill every {a.kill_every} s, seed {seed}")
            print(f"  enqueued (acknowledged)   {len(enq)}")
            print(f"  delivered (deliveries)    {delivered} of {len(st.deliveries)} ids")
            print(f"  lost                      {len(lost)}")
            print(f"  early                     {len(early)}")
            print(f"  duplicates                {dups}")
            print(f"  explained duplicates      {explained}")
            print(f"  kills (SIGKILL+restart)   {kills}")
            n_open = sum(1 for recs in st.deliveries.values() for r in recs if r[3])
            n_fail = sum(1 for recs in st.deliveries.values() for r in recs if not r[2])
            print(f"  deliveries open at a crash {n_open}, acks failed {n_fail}")
            print(f"  507s seen                 {st.n507}")
            print(f"  acks during disk fill     {st.acks_during_fill}")
            print(f"  enqueues resumed after    {resume:.2f} s" if resume is not None else "  enqueues resumed after    n/a")
            print(f"  enqueue retries: conn errors {st.conn_errors}, other 5xx {st.n503}, "
                  f"created anew after ambiguous {len(st.created_after_ambiguous)}")
            print(f"  deliveries of ids never acknowledged {st.unknown_deliveries}")
            print(f"  max RSS of the server     {server.max_rss_kb / 1024:.1f} MiB")
            print(f"  history ({hist.ops} ops)    {hist_path}")
            print(f"  check-history: {checker.stdout.strip()}")
            if violations:
                print("FAIL:")
                for v in violations:
                    print(f"  - {v}")
                return 1
            print("PASS: 0 lost, 0 early, every duplicate explained; the history checker agrees")
            return 0
    finally:
        if server is not None:
            try:
                server.stop()
            except Exception:
                pass
        log.close()
        subprocess.run(["umount", mnt], check=False)
        try:
            os.rmdir(mnt)
        except OSError:
            subprocess.run(["umount", "-l", mnt], check=False)


if __name__ == "__main__":
    sys.exit(main())
