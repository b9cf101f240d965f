/**
 * Retention (`retain_ms`) against a real server: the queue setting, an
 * acked and a cancelled message read back as retained (`state`,
 * `ended_at`, no payload), their ids taken, every other call seeing them
 * as absent, and a `retain_ms` over 30 days refused naming the field.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { DelaydClient, InvalidArgument, MessageNotFound, payloadText, type MessageState } from "delayd";
import { queueName, startServer, type Server } from "./server.js";

const DAY_MS = 86_400_000;

let server: Server;
let client: DelaydClient;

before(async () => {
  server = await startServer();
  client = new DelaydClient(server.url);
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0, "delayd serve did not exit 0 on SIGTERM");
});

describe("retention", () => {
  test("retain_ms is set, returned and kept by a PUT without it", async () => {
    const q = queueName();
    assert.equal((await client.putQueue(q)).config.retain_ms, 0);
    assert.equal((await client.putQueue(q, { retain_ms: DAY_MS })).config.retain_ms, DAY_MS);
    assert.equal((await client.putQueue(q, { max_attempts: 3 })).config.retain_ms, DAY_MS);
    await client.deleteQueue(q);
  });

  test("acked and cancelled messages are retained without their payload", async () => {
    const q = queueName();
    await client.putQueue(q, { retain_ms: DAY_MS });
    const first = await client.enqueue(q, "secret", { id: "a", priority: 7 });
    const before = Date.now();
    const [m] = await client.lease(q);
    assert.ok(m);
    await client.ack(q, m.id, m.lease_id);
    const acked = await client.getMessage(q, "a");
    const state: MessageState = acked.state;
    assert.equal(state, "acked");
    assert.ok(typeof acked.ended_at === "number" && acked.ended_at >= before - 1000, String(acked.ended_at));
    assert.equal(payloadText(acked), "", "the payload is not kept");
    assert.deepEqual([acked.seq, acked.attempts, acked.priority], [first.seq, 1, 7]);

    await client.enqueue(q, "x", { id: "c", delay_ms: 60_000 });
    await client.cancel(q, "c");
    const cancelled = await client.getMessage(q, "c");
    assert.equal(cancelled.state, "cancelled");
    assert.equal(typeof cancelled.ended_at, "number");

    // Not counted, not listed, never delivered; the id is a duplicate.
    const stats = (await client.getQueue(q)).stats;
    assert.deepEqual([stats.scheduled, stats.ready, stats.leased, stats.dead], [0, 0, 0, 0]);
    assert.deepEqual(await client.listMessages(q, "ready"), []);
    assert.deepEqual(await client.lease(q, { max: 10 }), []);
    const again = await client.enqueue(q, "new", { id: "a" });
    assert.deepEqual([again.created, again.seq], [false, first.seq]);

    // Every other call: absent.
    await assert.rejects(client.cancel(q, "a"), MessageNotFound);
    await assert.rejects(client.ack(q, "a", m.lease_id), MessageNotFound);
    await assert.rejects(client.reschedule(q, "a", { priority: 1 }), MessageNotFound);
    assert.equal((await client.getMessage(q, "a")).state, "acked");
    await client.deleteQueue(q);
  });

  test("retain_ms over 30 days is refused naming the field, changing nothing", async () => {
    const q = queueName();
    await client.putQueue(q, { retain_ms: 60_000 });
    await assert.rejects(client.putQueue(q, { retain_ms: 2_592_000_001 }), (err: unknown) => {
      assert.ok(err instanceof InvalidArgument);
      assert.match(err.message, /retain_ms/);
      return true;
    });
    assert.equal((await client.getQueue(q)).config.retain_ms, 60_000);
    await client.deleteQueue(q);
  });
});
