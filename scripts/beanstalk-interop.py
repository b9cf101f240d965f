#!/usr/bin/env python3
"""Interoperability check of delayd's beanstalkd listener with a real
beanstalkd client library (greenstalk, from PyPI).

Usage: beanstalk-interop.py HOST PORT

Drives put/reserve/delete/release/bury/kick/touch/peek/stats/tubes the way
an application would and compares every answer with what beanstalkd gives.
Uses a tube of its own, so it can run against a server holding other data.
Exits 0 when everything matched, 1 on any mismatch, 2 when it cannot run.
"""

import os
import sys
import time

try:
    import greenstalk
except ImportError:
    print("greenstalk is not installed: pip install greenstalk", file=sys.stderr)
    sys.exit(2)

failures = []


def check(what, got, want):
    if got == want:
        print(f"ok    {what}")
    else:
        print(f"FAIL  {what}: got {got!r}, want {want!r}")
        failures.append(what)


def raises(what, error, call):
    try:
        result = call()
    except error:
        print(f"ok    {what} raises {error.__name__}")
        return
    except Exception as other:  # noqa: BLE001 - any other outcome is a mismatch
        print(f"FAIL  {what}: raised {other!r}, want {error.__name__}")
        failures.append(what)
        return
    print(f"FAIL  {what}: returned {result!r}, want {error.__name__}")
    failures.append(what)


def producer_and_peeks(c, tube):
    check("using", c.using(), tube)
    check("watching", c.watching(), [tube])
    plain = c.put("hello", priority=10, ttr=30)
    urgent = c.put("urgent", priority=1, ttr=30)
    later = c.put("later", delay=60)
    check("ids increase", plain < urgent < later, True)
    check("peek", c.peek(plain).body, "hello")
    check("peek-ready", c.peek_ready().id, urgent)
    check("peek-delayed", c.peek_delayed().id, later)
    raises("peek-buried on none", greenstalk.NotFoundError, c.peek_buried)
    check("tubes lists ours", tube in c.tubes(), True)
    return plain, urgent, later


def worker_cycle(c, tube, plain, urgent, later):
    job = c.reserve(timeout=5)
    check("reserve takes the most urgent", (job.id, job.body), (urgent, "urgent"))
    c.touch(job)
    stats = c.stats_job(job)
    check("stats-job state", stats["state"], "reserved")
    check("stats-job tube", stats["tube"], tube)
    check("stats-job ttr", stats["ttr"], 30)
    check("stats-job time-left", stats["time-left"] in (29, 30), True)
    c.release(job, priority=5, delay=0)
    job = c.reserve(timeout=5)
    check("released job comes back first (pri 5)", job.id, urgent)
    c.bury(job, priority=7)
    check("peek-buried", c.peek_buried().id, urgent)
    check("stats-tube buried", c.stats_tube(tube)["current-jobs-buried"], 1)
    check("kick buried", c.kick(10), 1)
    check("kick delayed when none buried", c.kick(10), 1)
    check("kicked delayed job is ready", c.stats_job(later)["state"], "ready")
    for want in (urgent, plain, later):
        job = c.reserve(timeout=5)
        check(f"reserve order {want}", job.id, want)
        if want == later:
            c.bury(job)
            c.kick_job(job)
            job = c.reserve_job(later)
            check("kick-job then reserve-job", job.id, later)
        c.delete(job)
    raises("reserve on empty tube", greenstalk.TimedOutError, lambda: c.reserve(timeout=0))
    raises("delete twice", greenstalk.NotFoundError, lambda: c.delete(urgent))


def cross_connection(address, tube):
    with greenstalk.Client(address, use=tube, watch=tube) as a, greenstalk.Client(
        address, use=tube, watch=tube
    ) as b:
        jid = a.put("mine")
        job = a.reserve(timeout=5)
        check("reserve own job", job.id, jid)
        raises("delete another's reserved job", greenstalk.NotFoundError, lambda: b.delete(jid))
        raises("release another's job", greenstalk.NotFoundError, lambda: b.release(job))
        raises("ignore the only watched tube", greenstalk.NotIgnoredError, lambda: b.ignore(tube))
        c_pause = a.pause_tube(tube, 0)
        check("pause-tube 0", c_pause, None)
        a.delete(job)


def stats_and_limits(c):
    stats = c.stats()
    for key in ("current-connections", "total-jobs", "cmd-put", "uptime", "pid", "version"):
        check(f"stats has {key}", key in stats, True)
    check("stats draining", stats["draining"], "false")
    check("max-job-size", stats["max-job-size"], 65535)
    raises("job too big", greenstalk.JobTooBigError, lambda: c.put("x" * 65536))
    # The connection is still usable after the oversized body was skipped.
    check("still in step", c.using() is not None, True)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    address = (sys.argv[1], int(sys.argv[2]))
    # Every character beanstalkd allows in a tube name besides letters and
    # digits: delayd must take any tube name beanstalkd takes.
    tube = f"interop+/;.$_()-{os.getpid()}-{int(time.time())}"
    with greenstalk.Client(address, use=tube, watch=tube) as c:
        plain, urgent, later = producer_and_peeks(c, tube)
        worker_cycle(c, tube, plain, urgent, later)
        stats_and_limits(c)
    cross_connection(address, tube)
    if failures:
        print(f"{len(failures)} mismatch(es): {', '.join(failures)}")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
