#!/usr/bin/env python3
"""Recurring schedules against a real `delayd serve` it starts itself.

Two benches (docs/BENCHMARKS.md, "Schedules"):

  burst   N schedules (`every_ms` 60000, one anchor) fire in the same second.
          Same-run baseline first: N durable single enqueues over HTTP
          (64 connections), the server's CPU per enqueue. Then the first
          fire with no consumer (server CPU per fire over the fire window)
          and the second fire with consumers waiting (lateness = lease start
          - fire time, from each message's `lease_until - lease_ms` and its
          `delayd-scheduled-for` header; none early, each fire time once;
          one consumer per 1000 schedules, --consumers to change), with
          the server's own stage lateness (`ready`, `leased`) and the fires
          enqueued late from /metrics.
  memory  N schedules (`every_ms` 3600000, spread start times): the
          server's RSS per schedule (VmRSS after - before, divided by N),
          then a restart (SIGKILL, start again) and the time from the new
          process's start to the first fire of a schedule that was due
          during the downtime (catch-up `latest`) being leasable.
  redis-kill  three nodes on one redis-server (started here, free port), N
          schedules (`every_ms` --every-ms, one anchor), consumers on every
          node recording each delivery's (id, seq); after a third of
          --seconds, node 2 is killed with SIGKILL and restarted a tenth
          later. At the end: every fire time up to the end enqueued exactly
          once (one seq per id, every expected id seen), none leased early.

Server CPU is utime + stime from /proc/PID/stat. Usage:
  scripts/schedule-bench.py burst  [--schedules 10000] [--bin target/release/delayd]
  scripts/schedule-bench.py memory [--schedules 100000]
  scripts/schedule-bench.py redis-kill [--schedules 10000] [--seconds 300] [--every-ms 60000]
Only 127.0.0.1; every loop is bounded in count and time.
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

HZ = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def now_ms():
    return int(time.time() * 1000)


class Server:
    def __init__(self, binary, data, port, extra):
        self.binary, self.data, self.port, self.extra = binary, data, port, extra
        self.proc = None

    def start(self):
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [self.binary, "serve", "--http", f"127.0.0.1:{self.port}", "--beanstalk", "off",
             *(["--data", self.data] if self.data else []), *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                sys.exit(f"delayd serve exited with {self.proc.returncode}")
            try:
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=1)
                conn.request("GET", "/healthz")
                if conn.getresponse().status == 200:
                    return
            except OSError:
                time.sleep(0.02)
        sys.exit("delayd serve did not answer /healthz within 30 s")

    def cpu_s(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / HZ

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=20)


class Api:
    """One keep-alive connection per thread."""

    def __init__(self, port):
        self.port = port
        self.local = threading.local()

    def call(self, method, path, body=None, ok=(200, 201, 204)):
        for attempt in range(3):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            try:
                data = None if body is None else json.dumps(body)
                conn.request(method, path, body=data, headers={"content-type": "application/json"})
                response = conn.getresponse()
                text = response.read()
            except (OSError, http.client.HTTPException):
                self.local.conn = None
                if attempt == 2:
                    raise
                continue
            if response.status not in ok:
                raise RuntimeError(f"{method} {path}: {response.status} {text[:200]!r}")
            return json.loads(text) if text else None
        return None


def parallel(count, threads, fn):
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(fn, range(count)))


def put_schedules(api, queue, count, body_for, threads=32):
    parallel(count, threads, lambda i: api.call("PUT", f"/v1/queues/{queue}/schedules/s{i}", body_for(i)))


def drain(api, queue, expected, deadline_s, record=None, consumers=4):
    """Leases and acks until `expected` messages came (or the deadline),
    with `consumers` connections, each leasing up to 1000 at a time."""
    got = 0
    lock = threading.Lock()
    stop = time.monotonic() + deadline_s

    def consumer(_):
        nonlocal got
        while time.monotonic() < stop:
            with lock:
                if got >= expected:
                    return
            leased = api.call("POST", f"/v1/queues/{queue}/leases", {"max": 1000, "wait_ms": 1000})["messages"]
            if not leased:
                continue
            if record:
                record(leased)
            api.call("POST", f"/v1/queues/{queue}/acks",
                     {"acks": [{"id": m["id"], "lease_id": m["lease_id"]} for m in leased]})
            with lock:
                got += len(leased)

    parallel(consumers, consumers, consumer)
    return got


def histogram(api, name, label):
    """Cumulative buckets {label value: [(le, count)]} of histogram `name`
    from /metrics."""
    conn = http.client.HTTPConnection("127.0.0.1", api.port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    out = {}
    for line in text.splitlines():
        if not line.startswith(name + "_bucket{"):
            continue
        labels, value = line[len(name) + 8:].rsplit("} ", 1)
        fields = dict(kv.split("=", 1) for kv in labels.split(","))
        key = fields.get(label, "").strip('"')
        le = fields["le"].strip('"')
        out.setdefault(key, []).append((float("inf") if le == "+Inf" else float(le), float(value)))
    return {k: sorted(v) for k, v in out.items()}


def bucket_percentiles(before, after):
    """{label: (count, p50 ms at most, p99 ms at most)} of what was
    recorded between two `histogram` readings (bucket upper bounds)."""
    out = {}
    for key, buckets in after.items():
        old = dict(before.get(key, []))
        delta = [(le, count - old.get(le, 0)) for le, count in buckets]
        total = delta[-1][1] if delta else 0
        if total <= 0:
            continue
        def at(p):
            for le, count in delta:
                if count >= p * total:
                    return le * 1000
            return float("inf")
        out[key] = (int(total), at(0.5), at(0.99))
    return out


def wait_until_ms(t):
    while True:
        left = t - now_ms()
        if left <= 0:
            return
        time.sleep(min(left, 500) / 1000)


def bench_burst(args, server, api):
    n = args.schedules
    # Baseline: durable single enqueues, one per request, 64 connections.
    before = server.cpu_s()
    began = time.monotonic()
    parallel(n, 64, lambda i: api.call("POST", "/v1/queues/base/messages", {"payload": "x" * 100, "delay_ms": 3_600_000}))
    enqueue_wall = time.monotonic() - began
    enqueue_cpu_us = (server.cpu_s() - before) * 1e6 / n
    api.call("DELETE", "/v1/queues/base")
    print(f"baseline: {n} durable single enqueues in {enqueue_wall:.2f} s "
          f"({n / enqueue_wall:,.0f}/s), server cpu {enqueue_cpu_us:.1f} us per enqueue")

    anchor = (now_ms() // 1000 + max(20, n // 500)) * 1000
    body = {"every_ms": 60_000, "start_at": anchor, "message": {"payload": "y" * 100}}
    began = time.monotonic()
    put_schedules(api, "sched", n, lambda i: body)
    print(f"created {n} schedules in {time.monotonic() - began:.2f} s; first fire at +{(anchor - now_ms()) / 1000:.1f} s")

    # First fire, no consumer: CPU per fire.
    wait_until_ms(anchor - 1000)
    before = server.cpu_s()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        stats = api.call("GET", "/v1/queues/sched")["stats"]
        if now_ms() > anchor and stats["scheduled"] + stats["ready"] >= n:
            break
        time.sleep(0.05)
    fire_cpu_us = (server.cpu_s() - before) * 1e6 / n
    print(f"first fire: {stats['scheduled'] + stats['ready']} enqueued by +{(now_ms() - anchor) / 1000:.2f} s, "
          f"server cpu from 1 s before the fire instant {fire_cpu_us:.1f} us per fire = {fire_cpu_us / enqueue_cpu_us:.2f}x "
          f"a durable single enqueue (fires written ahead were written earlier)")
    drained = drain(api, "sched", n, 60)
    assert drained == n, f"drained {drained} of {n} first-fire messages"

    # Second fire, consumers waiting: lateness.
    second = anchor + 60_000
    lateness, ids, early = [], set(), 0
    lock = threading.Lock()

    def record(leased):
        nonlocal early
        with lock:
            for m in leased:
                t = int(m["headers"]["delayd-scheduled-for"])
                if t != second:
                    continue
                start = m["lease_until"] - m.get("lease_ms", 30_000)
                ids.add(m["id"])
                lateness.append(start - t)
                early += start < m["deliver_at"]

    # Enough consumers waiting to take every fire at once (1000 a lease
    # call), so the lateness is the server's, not the consumers' ack round
    # trips; --consumers sets fewer to see those.
    consumers = args.consumers or max(4, -(-n // 1000))
    wait_until_ms(second - 2000)
    stages_before = histogram(api, "delayd_delivery_lateness_seconds", "stage")
    fire_before = histogram(api, "delayd_schedule_fire_lateness_seconds", "queue")
    got = drain(api, "sched", n, 60, record, consumers)
    lateness.sort()
    pct = lambda p: lateness[min(len(lateness) - 1, int(p * len(lateness)))]
    print(f"second fire with {consumers} consumers waiting: {len(ids)} distinct of {n} fire messages ({got} leased), early {early}, "
          f"lateness ms p50 {pct(0.5)} p99 {pct(0.99)} max {lateness[-1]} mean {statistics.mean(lateness):.1f}")
    stages = bucket_percentiles(stages_before, histogram(api, "delayd_delivery_lateness_seconds", "stage"))
    fires = bucket_percentiles(fire_before, histogram(api, "delayd_schedule_fire_lateness_seconds", "queue"))
    for stage, (count, p50, p99) in sorted(stages.items()):
        print(f"  server stage {stage}: {count} messages, p50 <= {p50:g} ms, p99 <= {p99:g} ms")
    for queue, (count, p50, p99) in sorted(fires.items()):
        print(f"  fires enqueued late (not written ahead) in {queue}: {count}, p50 <= {p50:g} ms, p99 <= {p99:g} ms")


def bench_memory(args, server, api, restart):
    n = args.schedules
    rss_before = server.rss_kib()
    base = now_ms() + 3_600_000
    # Spread over the hour so that the timers hold n distinct instants.
    put_schedules(api, "mem", n, lambda i: {"every_ms": 3_600_000, "start_at": base + (i * 997) % 3_600_000,
                                            "message": {"payload": "m"}})
    time.sleep(2)
    rss_after = server.rss_kib()
    print(f"{n} schedules: RSS {rss_before / 1024:.1f} -> {rss_after / 1024:.1f} MiB, "
          f"{(rss_after - rss_before) * 1024 / n:.0f} B per schedule")
    # A schedule that falls due while the server is down.
    due = now_ms() + 1500
    api.call("PUT", "/v1/queues/first/schedules/soon", {"every_ms": 3_600_000, "start_at": due})
    server.stop(signal.SIGKILL)
    wait_until_ms(due + 500)
    server.start()
    api.local.conn = None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        leased = api.call("POST", "/v1/queues/first/leases", {"max": 1, "wait_ms": 100})["messages"]
        if leased:
            break
    took = time.monotonic() - server.started
    print(f"restart with {n + 1} schedules: first fire leasable {took:.3f} s after the process started "
          f"({'ok' if leased else 'NOT FIRED'}); RSS after restart {server.rss_kib() / 1024:.1f} MiB")


def bench_redis_kill(args):
    n, every, seconds = args.schedules, args.every_ms, args.seconds
    redis_port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    time.sleep(0.5)
    store = ["--store", f"redis://127.0.0.1:{redis_port}", *args.serve_arg]
    nodes = [Server(args.bin, None, free_port(), store) for _ in range(3)]
    try:
        for node in nodes:
            node.start()
        apis = [Api(node.port) for node in nodes]
        anchor = (now_ms() // 1000 + max(10, n // 400)) * 1000
        body = {"every_ms": every, "start_at": anchor, "message": {"payload": "r"}}
        began = time.monotonic()
        put_schedules(apis[0], "rk", n, lambda i: body)
        print(f"created {n} schedules in {time.monotonic() - began:.1f} s; first fire at +{(anchor - now_ms()) / 1000:.1f} s")
        end = anchor + seconds * 1000
        seen, early, lock, lateness = {}, 0, threading.Lock(), {}
        stop = threading.Event()

        failures = []

        def consume(api):
            nonlocal early
            while not stop.is_set():
                try:
                    leased = api.call("POST", "/v1/queues/rk/leases", {"max": 1000, "wait_ms": 1000})["messages"]
                except (OSError, RuntimeError, http.client.HTTPException) as error:
                    failures.append(f"+{(now_ms() - anchor) / 1000:.1f}s lease: {error}"[:160])
                    time.sleep(0.2)  # the node is down: retry
                    continue
                with lock:
                    for m in leased:
                        seen.setdefault(m["id"], set()).add(m["seq"])
                        start = m["lease_until"] - 30_000
                        early += start < m["deliver_at"]
                        t = int(m["id"].rsplit(":", 1)[1])
                        lateness.setdefault(t, []).append(start - t)
                if leased:
                    try:
                        api.call("POST", "/v1/queues/rk/acks",
                                 {"acks": [{"id": m["id"], "lease_id": m["lease_id"]} for m in leased]})
                    except (OSError, RuntimeError, http.client.HTTPException) as error:
                        # Unacked: delivered again after the lease (a duplicate delivery, same seq).
                        failures.append(f"+{(now_ms() - anchor) / 1000:.1f}s ack: {error}"[:160])

        consumers = [threading.Thread(target=consume, args=(Api(node.port),)) for node in nodes for _ in range(2)]
        for c in consumers:
            c.start()
        wait_until_ms(anchor + seconds * 1000 // 3)
        nodes[1].stop(signal.SIGKILL)
        killed_at = now_ms()
        wait_until_ms(anchor + seconds * 1000 // 3 + seconds * 100)
        nodes[1].start()
        print(f"node 2 killed at +{(killed_at - anchor) / 1000:.1f} s, restarted at +{(now_ms() - anchor) / 1000:.1f} s")
        # Drain: the last fire's messages, and any whose lease died with
        # node 2 (redelivered after the 30 s lease), before the next fire.
        # The last fire time's burst must be over too: wait until the
        # queue is empty and no delivery came for 5 s.
        wait_until_ms(end + 5_000)
        drain_until = time.monotonic() + min(every / 1000 - 10, 90)
        last_count, quiet_since = -1, time.monotonic()
        while time.monotonic() < drain_until:
            stats = apis[0].call("GET", "/v1/queues/rk")["stats"]
            with lock:
                count = len(seen)
            if count != last_count:
                last_count, quiet_since = count, time.monotonic()
            busy = stats["scheduled"] + stats["ready"] + stats["leased"]
            if busy == 0 and time.monotonic() - quiet_since >= 5:
                break
            time.sleep(0.5)
        print(f"queue at the end: {stats}")
        stop.set()
        for c in consumers:
            c.join(timeout=30)
        expected = {f"s{i}:{t}" for i in range(n) for t in range(anchor, end + 1, every)}
        doubled = sum(1 for seqs in seen.values() if len(seqs) > 1)
        print(f"client call failures: {len(failures)} {failures[:5]}")
        missing = len(expected - seen.keys())
        extra = len(seen.keys() - expected)
        for t in sorted(lateness):
            values = sorted(lateness[t])
            print(f"fire +{(t - anchor) // 1000}s: {len(values)} first leases, lateness ms "
                  f"p50 {values[len(values) // 2]} p99 {values[min(len(values) - 1, int(len(values) * 0.99))]} max {values[-1]}")
        print(f"fire times expected {len(expected)}, delivered ids {len(seen)}, missing {missing}, "
              f"not expected {extra} (fires after the end), enqueued twice {doubled}, leased early {early}")
        if missing:
            by_time = {}
            for m in expected - seen.keys():
                t = int(m.rsplit(":", 1)[1])
                by_time[(t - anchor) // 1000] = by_time.get((t - anchor) // 1000, 0) + 1
            print(f"missing by fire time (s after the first): {dict(sorted(by_time.items()))}")
        if doubled or missing or early:
            sys.exit("FAILED")
    finally:
        for node in nodes:
            node.stop(signal.SIGKILL)
        redis.kill()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["burst", "memory", "redis-kill"])
    parser.add_argument("--seconds", type=int, default=300)
    parser.add_argument("--every-ms", type=int, default=60_000)
    parser.add_argument("--schedules", type=int)
    parser.add_argument("--consumers", type=int, help="burst: consumers of the second fire (default: one per 1000 schedules, at least 4)")
    parser.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "delayd"))
    parser.add_argument("--serve-arg", action="append", default=[], help="extra `delayd serve` argument")
    args = parser.parse_args()
    args.schedules = args.schedules or (100_000 if args.mode == "memory" else 10_000)
    if args.mode == "redis-kill":
        return bench_redis_kill(args)
    data = tempfile.mkdtemp(prefix="delayd-schedule-bench-")
    # `--serve-arg=--store --serve-arg=redis://...` runs on Redis: no data
    # directory then.
    on_redis = "--store" in args.serve_arg
    server = Server(args.bin, None if on_redis else data, free_port(), args.serve_arg)
    print(f"mode={args.mode} schedules={args.schedules} load: {open('/proc/loadavg').read().split()[:3]} cores: {os.cpu_count()}")
    server.start()
    api = Api(server.port)
    try:
        if args.mode == "burst":
            bench_burst(args, server, api)
        else:
            bench_memory(args, server, api, restart=True)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
