#!/usr/bin/env python3
"""Accuracy of a queue's `rate`, on one delayd node (embedded store) or on
several nodes sharing one Redis.

Starts the servers itself: `--nodes 1` is one `delayd serve` on a fresh
data directory; `--nodes N` (N > 1) is a `redis-server` on a free port and
N `delayd serve --store redis://...` nodes. The queue `rated` gets
`flow.rate` LIMIT per second with burst BURST (`PUT` on the first node) and
is paused; MESSAGES messages due now are enqueued (batches of 1,000, on the
first node), then the queue is resumed and CONSUMERS consumer threads in
all (default 12, spread evenly over the nodes) lease (up to 100, waiting up
to 1 s) and ack. A bucket that stays full for want of a lease call loses
tokens, so too few consumers read as a rate below LIMIT.

Each delivery's lease instant is read from the server's own answer
(`lease_until - lease_ms`, in ms). Reported: the deliveries per second
from the first lease to the last, the deviation from LIMIT, and the most
deliveries seen in any window of 100 ms, 1 s and 5 s against the bucket
bound for that window (`burst + floor(window * limit / period)`, plus one
for the ms rounding of the instants). Also the server CPU per message
(utime + stime of every delayd node, from /proc/PID/stat).

Usage: scripts/flow-rate.py DELAYD_BIN [--nodes N] [--messages M]
       [--limit L] [--burst B] [--consumers C]
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

LEASE_MS = 30_000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, body=None, timeout=60):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        text = resp.read()
        return json.loads(text) if text else None


def wait_healthy(base, proc):
    for _ in range(200):
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited ({proc.returncode})")
        try:
            call(base, "GET", "/healthz", timeout=2)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.05)
    raise RuntimeError(f"{base} did not answer /healthz")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def consume(base, leased, stop):
    while not stop.is_set():
        try:
            out = call(base, "POST", "/v1/queues/rated/leases",
                       {"max": 100, "wait_ms": 1000, "lease_ms": LEASE_MS})
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
            continue
        messages = out["messages"]
        if not messages:
            continue
        leased.extend(m["lease_until"] - LEASE_MS for m in messages)
        acks = [{"id": m["id"], "lease_id": m["lease_id"]} for m in messages]
        call(base, "POST", "/v1/queues/rated/acks", {"acks": acks})


def max_in_window(instants, width):
    best, lo = 0, 0
    for hi, t in enumerate(instants):
        while instants[lo] <= t - width:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bin")
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--messages", type=int, default=60_000)
    parser.add_argument("--limit", type=int, default=2_000)
    parser.add_argument("--burst", type=int, default=20)
    parser.add_argument("--consumers", type=int, default=12)
    args = parser.parse_args()

    work = tempfile.mkdtemp()
    procs = []
    try:
        store = []
        if args.nodes > 1:
            rport = free_port()
            procs.append(subprocess.Popen(
                ["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", work],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", rport), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            store = ["--store", f"redis://127.0.0.1:{rport}"]
        nodes = []
        for n in range(args.nodes):
            port = free_port()
            where = store or ["--data", os.path.join(work, f"data{n}")]
            proc = subprocess.Popen(
                [args.bin, "serve", "--http", f"127.0.0.1:{port}", "--beanstalk", "off", *where],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            procs.append(proc)
            base = f"http://127.0.0.1:{port}"
            wait_healthy(base, proc)
            nodes.append((base, proc))
        first = nodes[0][0]
        call(first, "PUT", "/v1/queues/rated",
             {"flow": {"rate": {"limit": args.limit, "period_ms": 1000, "burst": args.burst}}})
        call(first, "POST", "/v1/queues/rated/pause")
        for start in range(0, args.messages, 1000):
            batch = [{"payload": "x" * 100} for _ in range(min(1000, args.messages - start))]
            call(first, "POST", "/v1/queues/rated/batch", {"messages": batch})
        ticks = [cpu_ticks(p.pid) for _, p in nodes]
        leased, stop = [], threading.Event()
        threads = [threading.Thread(target=consume, args=(nodes[i % len(nodes)][0], leased, stop))
                   for i in range(args.consumers)]
        for t in threads:
            t.start()
        call(first, "POST", "/v1/queues/rated/resume")
        expected = args.messages / args.limit
        deadline = time.time() + expected * 1.5 + 30
        while len(leased) < args.messages and time.time() < deadline:
            time.sleep(0.2)
        stop.set()
        for t in threads:
            t.join()
        cpu = sum(cpu_ticks(p.pid) - t0 for (_, p), t0 in zip(nodes, ticks))
        instants = sorted(leased)
        span_s = (instants[-1] - instants[0]) / 1000 if len(instants) > 1 else 0.0
        # n deliveries from the first to the last instant: n - burst of them
        # needed tokens earned over the span.
        rate = (len(instants) - args.burst) / span_s if span_s else 0.0
        windows = {}
        for width in (100, 1000, 5000):
            bound = args.burst + width * args.limit // 1000 + 1
            windows[f"{width}ms"] = {"max": max_in_window(instants, width), "bound": bound}
        print(json.dumps({
            "nodes": args.nodes, "consumers": args.consumers, "store": "redis" if args.nodes > 1 else "local",
            "load": os.getloadavg(), "limit": args.limit, "burst": args.burst,
            "delivered": len(instants), "of": args.messages, "span_s": round(span_s, 3),
            "rate_per_s": round(rate, 2),
            "deviation_pct": round((rate - args.limit) / args.limit * 100, 3),
            "windows": windows,
            "server_cpu_us_per_message": round(
                cpu * 1e6 / os.sysconf("SC_CLK_TCK") / max(len(instants), 1), 1),
        }))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
