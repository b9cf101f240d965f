/**
 * `on_conflict` (replace and debounce, api.md "Retention, replace and
 * debounce"): the body the client sends and its retry rule (with a
 * scripted `fetch`), and against a real server: a waiting message
 * replaced, debounce's cap, a leased message's successor (after an ack, a
 * retry, a death; dropped by a cancel), a dead message refused, batches.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  DelaydClient,
  DelaydError,
  InvalidArgument,
  InvalidState,
  MessageNotFound,
  TransportError,
  payloadText,
  type Enqueued,
  type EnqueueOptions,
  type OnConflict,
} from "delayd";
import { queueName, startServer, type Server } from "./server.js";

/** A fetch that records each request and answers from `script` in turn
 * (an Error to reject with, or a 200/201 with `body`). */
function scripted(script: (number | Error)[], body: unknown) {
  const sent: unknown[] = [];
  const fetchImpl = (async (_input: string | URL | Request, init?: RequestInit) => {
    sent.push(typeof init?.body === "string" ? JSON.parse(init.body) : undefined);
    const step = script.shift() ?? 200;
    if (step instanceof Error) throw step;
    return new Response(JSON.stringify(body), { status: step });
  }) as typeof fetch;
  return { sent, fetchImpl };
}

const fast = { attempts: 3, initialMs: 1, maxMs: 2 };

describe("the request", () => {
  test("on_conflict and debounce_max_ms are sent as given, and only then", async () => {
    const { sent, fetchImpl } = scripted([201, 200], { id: "a", seq: 1, deliver_at: 1, created: true });
    const c = new DelaydClient({ url: "http://d", fetch: fetchImpl });
    await c.enqueue("q", "p", { id: "a" });
    await c.enqueue("q", "p", { id: "a", delay_ms: 600_000, on_conflict: "debounce", debounce_max_ms: 3_600_000 });
    assert.deepEqual(sent, [
      { id: "a", payload: "p" },
      { id: "a", delay_ms: 600_000, on_conflict: "debounce", debounce_max_ms: 3_600_000, payload: "p" },
    ]);
  });

  test("a replace or debounce is not repeated after a lost answer; keep is", async () => {
    const answer = { id: "a", seq: 1, deliver_at: 1, created: false, replaced: true, after_lease: true };
    const keep = scripted([new TypeError("socket hang up"), 200], { id: "a", seq: 1, deliver_at: 1, created: false });
    const k = await new DelaydClient({ url: "http://d", fetch: keep.fetchImpl, retry: fast }).enqueue("q", "x", {
      id: "a",
      on_conflict: "keep",
    });
    assert.deepEqual([k.replaced, k.after_lease, keep.sent.length], [undefined, undefined, 2]);
    for (const mode of ["replace", "debounce"] as const) {
      const lost = scripted([new TypeError("socket hang up"), 200], answer);
      const c = new DelaydClient({ url: "http://d", fetch: lost.fetchImpl, retry: fast });
      await assert.rejects(c.enqueue("q", "x", { id: "a", on_conflict: mode }), TransportError);
      assert.equal(lost.sent.length, 1, mode);
      const batch = scripted([new TypeError("socket hang up"), 200], { results: [] });
      const b = new DelaydClient({ url: "http://d", fetch: batch.fetchImpl, retry: fast });
      await assert.rejects(
        b.enqueueBatch("q", [{ payload: "x", id: "a" }, { payload: "y", id: "b", on_conflict: mode }]),
        TransportError,
      );
      assert.equal(batch.sent.length, 1, mode);
    }
    const refused = new TypeError("fetch failed", { cause: Object.assign(new Error("refused"), { code: "ECONNREFUSED" }) });
    const notSent = scripted([refused, 200], answer);
    const c = new DelaydClient({ url: "http://d", fetch: notSent.fetchImpl, retry: fast });
    const r: Enqueued = await c.enqueue("q", "x", { id: "a", on_conflict: "replace" });
    assert.deepEqual([r.replaced, r.after_lease, notSent.sent.length], [true, true, 2]);
  });
});

let server: Server;
let client: DelaydClient;

before(async () => {
  server = await startServer();
  client = new DelaydClient(server.url);
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0, "delayd serve did not exit 0 on SIGTERM");
});

describe("replace and debounce against the server", () => {
  test("replace: a waiting message takes the request's content and due time, keeping its seq", async () => {
    const q = queueName();
    const first = await client.enqueue(q, "v1", { id: "r", delay_ms: 60_000, priority: 9, headers: { v: "1" } });
    assert.deepEqual([first.created, first.replaced, first.after_lease], [true, undefined, undefined]);
    const before = Date.now();
    const opts: EnqueueOptions = { id: "r", delay_ms: 120_000, priority: 3, headers: { v: "2" }, on_conflict: "replace" };
    const r = await client.enqueue(q, "v2", opts);
    assert.deepEqual([r.created, r.replaced, r.after_lease, r.seq], [false, true, undefined, first.seq]);
    assert.ok(r.deliver_at >= before + 119_000 && r.deliver_at <= Date.now() + 121_000, String(r.deliver_at));
    const m = await client.getMessage(q, "r");
    assert.deepEqual(
      [m.state, payloadText(m), m.priority, m.headers, m.seq, m.deliver_at, m.attempts],
      ["scheduled", "v2", 3, { v: "2" }, first.seq, r.deliver_at, 0],
    );
    const kept = await client.enqueue(q, "v3", { id: "r", on_conflict: "keep" });
    assert.deepEqual([kept.created, kept.replaced, kept.deliver_at], [false, undefined, r.deliver_at]);
    assert.equal(payloadText(await client.getMessage(q, "r")), "v2", "keep changes nothing");
    const { events } = await client.events(q, "r");
    assert.deepEqual(
      events.map((e) => (e.type === "replaced" ? `replaced ${e.after_lease}` : e.type)),
      ["enqueued", "replaced false"],
    );
    await client.deleteQueue(q);
  });

  test("debounce: each request moves the due time, never past enqueued_at + debounce_max_ms", async () => {
    const q = queueName();
    const opts = (delay_ms: number): EnqueueOptions => ({
      id: "digest",
      delay_ms,
      on_conflict: "debounce",
      debounce_max_ms: 90_000,
    });
    const first = await client.enqueue(q, "change 1", opts(60_000));
    assert.equal(first.created, true);
    const enqueuedAt = (await client.getMessage(q, "digest")).enqueued_at;
    const second = await client.enqueue(q, "change 2", opts(60_000));
    assert.ok(second.replaced && second.deliver_at >= first.deliver_at);
    const third = await client.enqueue(q, "change 3", opts(600_000));
    assert.deepEqual([third.replaced, third.deliver_at, third.seq], [true, enqueuedAt + 90_000, first.seq]);
    const m = await client.getMessage(q, "digest");
    assert.deepEqual([payloadText(m), m.deliver_at, m.enqueued_at], ["change 3", enqueuedAt + 90_000, enqueuedAt]);
    await client.deleteQueue(q);
  });

  test("a leased message gets a successor: a new message after the ack", async () => {
    const q = queueName();
    const first = await client.enqueue(q, "old", { id: "l" });
    const [leased] = await client.lease(q);
    assert.ok(leased);
    const r = await client.enqueue(q, "new", { id: "l", delay_ms: 60_000, on_conflict: "replace" });
    assert.deepEqual([r.created, r.replaced, r.after_lease, r.seq], [false, true, true, first.seq]);
    const r2 = await client.enqueue(q, "newer", { id: "l", delay_ms: 30_000, on_conflict: "replace" });
    assert.equal(r2.after_lease, true);
    const held = await client.getMessage(q, "l");
    assert.deepEqual([held.state, payloadText(held)], ["leased", "old"]);
    await client.ack(q, leased.id, leased.lease_id);
    const next = await client.getMessage(q, "l");
    assert.deepEqual([payloadText(next), next.state, next.deliver_at], ["newer", "scheduled", r2.deliver_at]);
    assert.ok(next.seq > first.seq, "a new message, with its own seq");
    await client.deleteQueue(q);
  });

  test("a successor after a retry, after a death, and dropped by a cancel", async () => {
    const q = queueName();
    await client.putQueue(q, { max_attempts: 2 });
    const first = await client.enqueue(q, "old", { id: "s" });
    const [leased] = await client.lease(q);
    assert.ok(leased);
    const r = await client.enqueue(q, "new", { id: "s", delay_ms: 60_000, priority: 4, on_conflict: "replace" });
    await client.nack(q, leased.id, leased.lease_id, { delay_ms: 1000 });
    let m = await client.getMessage(q, "s");
    assert.deepEqual(
      [payloadText(m), m.priority, m.seq, m.attempts, m.deliver_at],
      ["new", 4, first.seq, 1, r.deliver_at],
    );

    await client.reschedule(q, "s", { delay_ms: 0 });
    const [again] = await client.lease(q);
    assert.ok(again && again.attempt === 2);
    await client.enqueue(q, "after death", { id: "s", delay_ms: 60_000, on_conflict: "replace" });
    await client.nack(q, again.id, again.lease_id);
    m = await client.getMessage(q, "s");
    assert.deepEqual([m.state, payloadText(m), m.attempts], ["scheduled", "after death", 0]);
    assert.deepEqual(await client.listDead(q), []);

    await client.enqueue(q, "c", { id: "c" });
    const [held] = await client.lease(q);
    assert.ok(held && held.id === "c");
    assert.equal((await client.enqueue(q, "c2", { id: "c", on_conflict: "debounce" })).after_lease, true);
    await client.cancel(q, "c");
    await assert.rejects(client.getMessage(q, "c"), MessageNotFound);
    await client.deleteQueue(q);
  });

  test("a dead message is not replaced; an unknown on_conflict is refused naming the field", async () => {
    const q = queueName();
    await client.enqueue(q, "x", { id: "d", max_attempts: 1 });
    const [leased] = await client.lease(q);
    assert.ok(leased);
    await client.nack(q, leased.id, leased.lease_id);
    for (const mode of ["replace", "debounce"] as const) {
      await assert.rejects(client.enqueue(q, "y", { id: "d", on_conflict: mode }), (err: unknown) => {
        assert.ok(err instanceof InvalidState);
        assert.deepEqual([err.code, err.status], ["invalid_state", 409]);
        return true;
      });
    }
    assert.equal((await client.enqueue(q, "y", { id: "d" })).created, false);
    const unknown = "overwrite" as unknown as OnConflict;
    await assert.rejects(client.enqueue(q, "y", { id: "d", on_conflict: unknown }), (err: unknown) => {
      assert.ok(err instanceof InvalidArgument);
      assert.match(err.message, /on_conflict/);
      return true;
    });
    await assert.rejects(client.enqueue(q, "y", { on_conflict: "replace" }), InvalidArgument);
    await assert.rejects(client.enqueue(q, "y", { id: "e", debounce_max_ms: 1000 }), (err: unknown) => {
      assert.ok(err instanceof InvalidArgument);
      assert.match(err.message, /debounce_max_ms/);
      return true;
    });
    await client.deleteQueue(q);
  });

  test("batch items carry replaced and after_lease one by one", async () => {
    const q = queueName();
    await client.enqueue(q, "a1", { id: "a", delay_ms: 60_000 });
    await client.enqueue(q, "l1", { id: "l" });
    const [leased] = await client.lease(q);
    assert.ok(leased && leased.id === "l");
    const results = await client.enqueueBatch(q, [
      { payload: "a2", id: "a", delay_ms: 120_000, on_conflict: "replace" },
      { payload: "l2", id: "l", on_conflict: "debounce", debounce_max_ms: 120_000 },
      { payload: "b1", id: "b", on_conflict: "debounce", delay_ms: 60_000 },
      { payload: "a3", id: "a" },
    ]);
    const [a2, l2, b1, a3] = results.map((r) => {
      assert.ok(!(r instanceof DelaydError), String(r));
      return [r.created, r.replaced ?? false, r.after_lease ?? false];
    });
    assert.deepEqual([a2, l2, b1, a3], [
      [false, true, false],
      [false, true, true],
      [true, false, false],
      [false, false, false],
    ]);
    assert.equal(payloadText(await client.getMessage(q, "a")), "a2");
    await client.deleteQueue(q);
  });
});
