#!/usr/bin/env python3
"""What flow control's per-key state costs in memory, measured on a real
`delayd serve` (embedded store) from its RSS.

Two runs, each on a fresh server and data directory, enqueue the same N
ready messages, message i with the flow key `k<i>` (N keys of one message
each), into a paused queue (so nothing is delivered and every message stays
in memory):

- `plain`: the queue has no `flow`: the key is stored with the message and
  nothing else;
- `keyed`: the queue has `flow` with `key_concurrency: 1`: each key also has
  its gate state in the server.

(RSS after - RSS before) / N of each run is the cost per message; the
difference between the two is what one key's state costs beyond its
messages (target: at most 64 B).

Then, in both runs, every message is leased and acked (each key is done;
`flow_keys` must read 0), and a second round of N new keys is enqueued and
done on the same server: the RSS growth from the end of the first round to
the end of the second is what done messages leave behind (the store's
memtables, caches and the allocator's retained pages); the `keyed` run's
growth beyond the `plain` run's is what done keys leave.

Usage: scripts/flow-memory.py DELAYD_BIN [N]
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BATCH = 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


class Server:
    def __init__(self, binary):
        self.port = free_port()
        self.data = tempfile.TemporaryDirectory()
        self.proc = subprocess.Popen(
            [binary, "serve", "--http", f"127.0.0.1:{self.port}", "--beanstalk", "off",
             "--data", self.data.name, "--durability", "never"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                self.call("GET", "/healthz")
                return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        raise RuntimeError("delayd serve did not answer /healthz")

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", data=data,
                                     method=method, headers={"content-type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read()
            return json.loads(text) if text else None

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.data.cleanup()


def settle(pid):
    """RSS once it stopped moving (the server's background work is done)."""
    last = rss_bytes(pid)
    for _ in range(20):
        time.sleep(0.5)
        now = rss_bytes(pid)
        if abs(now - last) < 64 * 1024:
            return now
        last = now
    return last


def enqueue(server, queue, first, count):
    for start in range(first, first + count, BATCH):
        end = min(start + BATCH, first + count)
        messages = [{"payload": "x" * 16, "key": f"k{i}"} for i in range(start, end)]
        out = server.call("POST", f"/v1/queues/{queue}/batch", {"messages": messages})
        errors = [r for r in out["results"] if "error" in r]
        if errors:
            raise RuntimeError(f"enqueue failed: {errors[0]}")


def drain(server, queue, count):
    done = 0
    while done < count:
        out = server.call("POST", f"/v1/queues/{queue}/leases", {"max": 1000, "wait_ms": 1000})
        acks = [{"id": m["id"], "lease_id": m["lease_id"]} for m in out["messages"]]
        if not acks:
            raise RuntimeError(f"drain stalled after {done} of {count}")
        server.call("POST", f"/v1/queues/{queue}/acks", {"acks": acks})
        done += len(acks)


def run(binary, n, flow):
    server = Server(binary)
    try:
        config = {"flow": {"key_concurrency": 1}} if flow else {}
        server.call("PUT", "/v1/queues/q", config)
        server.call("POST", "/v1/queues/q/pause")
        before = settle(server.proc.pid)
        enqueue(server, "q", 0, n)
        after = settle(server.proc.pid)
        result = {"per_message": (after - before) / n}
        stats = server.call("GET", "/v1/queues/q")["stats"]
        result["flow_keys_loaded"] = stats.get("flow_keys")
        server.call("POST", "/v1/queues/q/resume")
        drain(server, "q", n)
        first_done = settle(server.proc.pid)
        result["flow_keys_done"] = server.call("GET", "/v1/queues/q")["stats"].get("flow_keys")
        enqueue(server, "q", n, n)
        drain(server, "q", n)
        second_done = settle(server.proc.pid)
        result["flow_keys_done_2"] = server.call("GET", "/v1/queues/q")["stats"].get("flow_keys")
        result["left_per_done_message"] = (second_done - first_done) / n
        result["rss_done_mib"] = [first_done / 2**20, second_done / 2**20]
        return result
    finally:
        server.stop()


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    binary = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    load = os.getloadavg()
    plain = run(binary, n, flow=False)
    keyed = run(binary, n, flow=True)
    print(json.dumps({"keys": n, "load": load, "plain": plain, "keyed": keyed,
                      "per_key_beyond_messages": keyed["per_message"] - plain["per_message"],
                      "left_per_done_key": keyed["left_per_done_message"]
                      - plain["left_per_done_message"]}))


if __name__ == "__main__":
    main()
