/**
 * The workers against a real server: ack when the handler resolves, nack
 * when it throws, lease extension while a slow handler runs, concurrency,
 * graceful stop on abort and on SIGTERM.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { DelaydClient, MessageNotFound, type Delivery } from "delayd";
import { PACKAGE_DIR, eventually, queueName, startServer, type Server } from "./server.js";

let server: Server;
let client: DelaydClient;
const quiet = () => undefined;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

before(async () => {
  server = await startServer();
  client = new DelaydClient(server.url);
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0);
});

describe("work", () => {
  test("acks on resolve, nacks on throw", async () => {
    const q = queueName();
    await client.putQueue(q, { max_attempts: 1 });
    await client.enqueueBatch(q, [
      { payload: "ok", id: "ok" },
      { payload: "fail", id: "fail" },
    ]);
    const ac = new AbortController();
    const seen: string[] = [];
    const errors: unknown[] = [];
    await client.work(
      q,
      async (d) => {
        seen.push(d.text);
        if (seen.length === 2) ac.abort();
        if (d.text === "fail") throw new Error("handler failed");
      },
      { signal: ac.signal, waitMs: 500, handleSignals: false, onError: (e) => errors.push(e) },
    );
    assert.deepEqual(seen.sort(), ["fail", "ok"]);
    await assert.rejects(client.getMessage(q, "ok"), MessageNotFound, "acked");
    const failed = await client.getMessage(q, "fail");
    assert.equal(failed.state, "dead", "nacked (max_attempts 1)");
    assert.equal(failed.last_error, "Error: handler failed", "the handler's error is the last error");
    assert.equal(errors.length, 1);
    assert.match(String(errors[0]), /handler failed/);
  });

  test("a nacked message comes back as attempt 2", async () => {
    const q = queueName();
    await client.putQueue(q, { retry: { initial_ms: 50, max_ms: 50, multiplier: 1 } });
    await client.enqueue(q, "again", { id: "a" });
    const ac = new AbortController();
    const attempts: number[] = [];
    await client.work(
      q,
      (d) => {
        attempts.push(d.attempt);
        if (d.attempt === 1) throw new Error("first try fails");
        ac.abort();
      },
      { signal: ac.signal, waitMs: 2000, handleSignals: false, onError: quiet },
    );
    assert.deepEqual(attempts, [1, 2]);
    await assert.rejects(client.getMessage(q, "a"), MessageNotFound);
  });

  test("extends a short lease while a slow handler runs", async () => {
    const q = queueName();
    await client.putQueue(q, { lease_ms: 1000 });
    await client.enqueue(q, "slow", { id: "s" });
    const ac = new AbortController();
    const errors: unknown[] = [];
    let leaseAtEnd = 0;
    await client.work(
      q,
      async (d) => {
        await sleep(2600); // over two leases: without extension it expires
        assert.equal(d.signal.aborted, false, "lease kept");
        leaseAtEnd = d.leaseUntil;
        assert.ok(d.leaseUntil > d.message.lease_until, "extended");
        ac.abort();
      },
      { signal: ac.signal, waitMs: 1000, handleSignals: false, onError: (e) => errors.push(e) },
    );
    assert.ok(leaseAtEnd > 0);
    assert.deepEqual(errors, [], "the ack found its lease");
    await assert.rejects(client.getMessage(q, "s"), MessageNotFound);
  });

  test("runs up to `concurrency` handlers at once", async () => {
    const q = queueName();
    await client.enqueueBatch(q, Array.from({ length: 8 }, (_, i) => String(i)));
    const ac = new AbortController();
    let running = 0;
    let peak = 0;
    let done = 0;
    await client.work(
      q,
      async () => {
        running++;
        peak = Math.max(peak, running);
        await sleep(200);
        running--;
        if (++done === 8) ac.abort();
      },
      { concurrency: 4, signal: ac.signal, waitMs: 500, handleSignals: false },
    );
    assert.equal(done, 8);
    assert.ok(peak >= 3 && peak <= 4, `peak ${peak}`);
    assert.equal((await client.getQueue(q)).stats.ready, 0);
  });

  test("abort: stops leasing at once, lets the running handler finish, returns", async () => {
    const q = queueName();
    await client.enqueue(q, "in-hand", { id: "h" });
    const ac = new AbortController();
    let finished = false;
    const started = Date.now();
    const worker = client.work(
      q,
      async () => {
        ac.abort(); // stop while this handler still runs
        await sleep(300);
        finished = true;
      },
      { signal: ac.signal, waitMs: 20_000, handleSignals: false },
    );
    await worker;
    assert.ok(finished, "work() returned only after the handler finished");
    await assert.rejects(client.getMessage(q, "h"), MessageNotFound, "and acked it");
    // An idle worker stops without waiting out its 20 s long poll.
    const idle = new AbortController();
    const idleWorker = client.work(queueName(), () => undefined, { signal: idle.signal, handleSignals: false });
    await sleep(200);
    idle.abort();
    await idleWorker;
    assert.ok(Date.now() - started < 5_000);
  });
});

describe("deliveries", () => {
  test("moving on acks; breaking out nacks the one in hand", async () => {
    const q = queueName();
    await client.putQueue(q, { retry: { initial_ms: 50, max_ms: 50, multiplier: 1 } });
    await client.enqueueBatch(q, ["1", "2", "3"]);
    const seen: string[] = [];
    let last: Delivery | undefined;
    for await (const d of client.deliveries(q, { waitMs: 500, handleSignals: false })) {
      seen.push(d.text);
      last = d;
      if (seen.length === 3) break; // the third is nacked, not acked
    }
    assert.equal(seen.length, 3);
    assert.ok(last);
    const back = await client.lease(q, { wait_ms: 2000 });
    assert.equal(back.length, 1);
    assert.equal(back[0]?.id, last.id);
    assert.equal(back[0]?.attempt, 2);
    await client.ack(q, back[0].id, back[0].lease_id);
  });

  test("an explicit settle wins over the automatic ack", async () => {
    const q = queueName();
    await client.enqueue(q, "x", { id: "x" });
    const ac = new AbortController();
    for await (const d of client.deliveries(q, { waitMs: 500, signal: ac.signal, handleSignals: false })) {
      await d.nack({ delay_ms: 60_000 });
      assert.equal(d.settled, true);
      ac.abort();
    }
    assert.equal((await client.getMessage(q, "x")).state, "scheduled", "nacked with delay, not acked");
  });

  test("a signal stops the loop and gives back buffered messages", async () => {
    const q = queueName();
    await client.enqueueBatch(q, ["a", "b", "c"]);
    const ac = new AbortController();
    let n = 0;
    for await (const _ of client.deliveries(q, { max: 3, waitMs: 500, signal: ac.signal, handleSignals: false })) {
      n++;
      ac.abort(); // this one is acked at the next step; two stay buffered
    }
    assert.equal(n, 1);
    await eventually(async () => (await client.getQueue(q)).stats.ready === 2, 5000, "two given back");
  });
});

describe("SIGTERM", () => {
  test("a worker process finishes the message in hand, then exits 0", async () => {
    const q = queueName();
    const script = join(PACKAGE_DIR, "build", "test", "fixtures", "sigterm-worker.js");
    const child = spawn(process.execPath, [script, server.url, q], { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => (out += chunk));
    try {
      await eventually(() => out.includes("ready"), 10_000, "worker start");
      await sleep(300); // in its long poll
      await client.enqueue(q, "x", { id: "w1" });
      await eventually(() => out.includes("got w1"), 10_000, "delivery");
      child.kill("SIGTERM");
      const [code] = (await once(child, "exit")) as [number | null];
      assert.equal(code, 0);
      assert.deepEqual(out.trim().split("\n"), ["ready", "got w1", "done w1", "stopped"]);
      await assert.rejects(client.getMessage(q, "w1"), MessageNotFound, "acked");
    } finally {
      child.kill("SIGKILL");
    }
  });
});
