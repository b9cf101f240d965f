/**
 * Flow control (keys, `flow` queue config, deferrals) against a real
 * server. The server gains flow control in parallel with this client: the
 * tests run only when its /openapi.json has the key route, and are
 * reported as skipped, with the reason, otherwise.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Defer, DelaydClient, InvalidArgument } from "delayd";
import { FLOW_SKIP, hasFlow, queueName, startServer, type Server } from "./server.js";

let server: Server;
let client: DelaydClient;
let flow = false;

before(async () => {
  server = await startServer();
  client = new DelaydClient(server.url);
  flow = hasFlow(await client.openapi());
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0);
});

/** Runs `fn` only on a server with flow control. */
function flowTest(name: string, fn: () => Promise<void>) {
  test(name, async (t) => {
    if (!flow) {
      t.skip(FLOW_SKIP);
      return;
    }
    await fn();
  });
}

describe("flow control", () => {
  flowTest("flow config is stored with its defaults filled in, and removed with null", async () => {
    const q = queueName();
    const queue = await client.putQueue(q, {
      flow: { rate: { limit: 10, period_ms: 1000 }, key_concurrency: 2, max_deferrals: 5 },
    });
    const f = queue.config.flow;
    assert.ok(f);
    // api.md's default burst: max(2, ceil(limit / period_ms) + 1).
    assert.deepEqual(f.rate, { limit: 10, period_ms: 1000, burst: 2 });
    assert.equal(f.key_concurrency, 2);
    assert.equal(f.ordered, false);
    assert.equal(f.max_deferrals, 5);
    assert.equal(f.concurrency, null);
    assert.equal((await client.putQueue(q, { flow: null })).config.flow ?? null, null);
    await assert.rejects(client.putQueue(q, { flow: { concurrency: 0 } }), InvalidArgument);
  });

  flowTest("keys: set at enqueue, in a batch and a schedule template; getKey counts", async () => {
    const q = queueName();
    await client.enqueue(q, "a", { id: "a", key: "tenant-1" });
    await client.enqueueBatch(q, [{ payload: "b", id: "b", key: "tenant-1", delay_ms: 60_000 }, { payload: "c", id: "c" }]);
    assert.equal((await client.getMessage(q, "a")).key, "tenant-1");
    assert.equal((await client.getMessage(q, "c")).key, null);
    const k = await client.getKey(q, "tenant-1");
    assert.deepEqual(
      [k.key, k.scheduled, k.ready, k.leased, k.dead, k.cooling_until],
      ["tenant-1", 1, 1, 0, 0, null],
    );
    const none = await client.getKey(q, "nobody");
    assert.deepEqual([none.ready, none.scheduled], [0, 0]);
    const s = await client.putSchedule(q, "s", { every_ms: 3_600_000, message: { payload: "t", key: "tenant-2" } });
    assert.equal(s.message.key, "tenant-2");
    const fired = await client.triggerSchedule(q, "s");
    assert.equal((await client.getMessage(q, fired.id)).key, "tenant-2");
  });

  flowTest("a handler's Defer nacks with defer: the attempt is not spent", async () => {
    const q = queueName();
    await client.putQueue(q, { flow: {} });
    await client.enqueue(q, "x", { id: "d", key: "k1" });
    const ac = new AbortController();
    const attempts: number[] = [];
    await client.work(
      q,
      (d) => {
        attempts.push(d.attempt);
        if (attempts.length === 1) throw new Defer(200);
        ac.abort();
      },
      { signal: ac.signal, waitMs: 3000, handleSignals: false },
    );
    assert.deepEqual(attempts, [1, 1], "a deferral is not an attempt");
  });

  flowTest("the key of a deferred message reports its cool-down", async () => {
    const q = queueName();
    await client.putQueue(q, { flow: {} });
    await client.enqueue(q, "x", { id: "d", key: "k2" });
    const [m] = await client.lease(q);
    assert.ok(m);
    assert.equal(m.key, "k2");
    await client.nack(q, m.id, m.lease_id, { defer: true, delay_ms: 60_000 });
    const k = await client.getKey(q, "k2");
    assert.ok(k.cooling_until !== null && k.cooling_until > Date.now());
    assert.equal((await client.getMessage(q, "d")).attempts, 0);
  });

  flowTest("defer on a queue without flow is InvalidArgument", async () => {
    const q = queueName();
    await client.enqueue(q, "x");
    const [m] = await client.lease(q);
    assert.ok(m);
    await assert.rejects(client.nack(q, m.id, m.lease_id, { defer: true }), InvalidArgument);
  });
});
