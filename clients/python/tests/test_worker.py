"""The sync worker helpers against a real server: ack on return, nack on
raise, lease extension while a handler runs, concurrency, graceful stop on
SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import Server

import delayd


def test_consume_acks_when_the_loop_moves_on(queue: delayd.Queue) -> None:
    queue.enqueue_many([str(i) for i in range(5)])
    seen = []
    consumer = queue.consume(max=2, wait=0.2, stop_on_signal=False)
    for msg in consumer:
        seen.append(msg.text)
        if len(seen) == 5:
            consumer.stop()
    assert sorted(seen) == ["0", "1", "2", "3", "4"]
    stats = queue.info().stats
    assert (stats.ready, stats.leased) == (0, 0)


def test_a_raising_body_nacks_and_propagates(queue: delayd.Queue) -> None:
    queue.put(retry=delayd.Retry(initial_ms=50, max_ms=50, multiplier=1.0))
    queue.enqueue("boom", id="b")
    with pytest.raises(RuntimeError):
        with queue.consume(wait=1, stop_on_signal=False) as consumer:
            for _msg in consumer:
                raise RuntimeError("handler failed")
    # Nacked (not left leased): it comes back as attempt 2.
    [again] = queue.lease(wait=5)
    assert again.id == "b" and again.attempt == 2


def test_leases_not_yet_handed_out_are_released_on_stop(queue: delayd.Queue) -> None:
    queue.enqueue_many(["a", "b", "c"])
    with queue.consume(max=3, wait=1, stop_on_signal=False) as consumer:
        for _msg in consumer:
            consumer.stop()
    # one acked, two given back at once
    assert len(queue.lease(max=3)) == 2


def test_lease_is_extended_while_the_handler_runs(queue: delayd.Queue) -> None:
    queue.put(lease=1.5)
    queue.enqueue("slow", id="s")
    for msg in queue.consume(wait=1, stop_on_signal=False):
        time.sleep(3.5)  # over 2 leases: without extension it would expire
        msg.ack()  # raises LeaseMismatch if the lease was lost
        break
    with pytest.raises(delayd.MessageNotFound):
        queue.get("s")


def test_work_runs_handlers_concurrently(queue: delayd.Queue) -> None:
    queue.enqueue_many([str(i) for i in range(8)] + ["fail"])
    queue.put(max_attempts=1)
    stop = threading.Event()
    running, peak, done = [0], [0], []
    lock = threading.Lock()

    def handler(msg: delayd.Delivery) -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
            done.append(msg.text)
            if len(done) == 9:
                stop.set()
        if msg.text == "fail":
            raise ValueError("nacked")

    queue.work(handler, concurrency=4, wait=0.5, stop_on_signal=False, stop_event=stop)
    assert len(done) == 9 and peak[0] >= 3  # handlers overlapped
    assert [m.id for m in queue.dead()] != [] and queue.dead()[0].text == "fail"
    # The handler's exception is the message's last error.
    assert queue.dead()[0].last_error == "ValueError: nacked"
    assert queue.info().stats.ready == 0


WORKER = textwrap.dedent(
    """
    import sys, time, delayd
    client = delayd.Client(sys.argv[1])
    queue = client.queue(sys.argv[2])
    for msg in queue.consume(wait=20):
        print("got", msg.id, flush=True)
        time.sleep(1.0)  # SIGTERM arrives here: the message is finished first
        print("done", msg.id, flush=True)
    print("stopped", flush=True)
    """
)


def test_sigterm_finishes_the_message_in_hand(queue: delayd.Queue, server: Server, tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=str(Path(delayd.__file__).parents[1]))
    proc = subprocess.Popen(
        [sys.executable, str(script), server.url, queue.name], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        time.sleep(0.5)  # let it block in a long-poll lease
        queue.enqueue("x", id="w1")
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "got w1"
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert out.split() == ["done", "w1", "stopped"]
    with pytest.raises(delayd.MessageNotFound):
        queue.get("w1")  # acked


def wait_for_sigterm_handler(pid: int) -> None:
    """Waits until process `pid` catches SIGTERM (its worker loop has
    started): a fixed sleep lost the race on a loaded machine, and the
    signal killed the interpreter before the handler was installed."""
    bit = 1 << (signal.SIGTERM - 1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:") and int(line.split()[1], 16) & bit:
                return
        time.sleep(0.02)
    raise AssertionError("the worker did not install its SIGTERM handler within 30 s")


def test_sigterm_interrupts_an_idle_long_poll(queue: delayd.Queue, server: Server, tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=str(Path(delayd.__file__).parents[1]))
    proc = subprocess.Popen(
        [sys.executable, str(script), server.url, queue.name], stdout=subprocess.PIPE, text=True, env=env
    )
    wait_for_sigterm_handler(proc.pid)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and out.split() == ["stopped"]
    assert time.monotonic() - t0 < 8  # not the 20 s wait
