/**
 * Every endpoint against a real `delayd serve`: queues, messages, batch,
 * leases, ack/nack/extend, batch ack, dead letters and redrive, schedules,
 * operations, auth; and errors arriving as their classes.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import {
  DelaydClient,
  DelaydError,
  Forbidden,
  InvalidArgument,
  InvalidJson,
  InvalidState,
  LeaseMismatch,
  MessageNotFound,
  MethodNotAllowed,
  NotFound,
  QueueNotFound,
  ScheduleNotFound,
  TransportError,
  Unauthorized,
  payloadBytes,
  payloadText,
  type Enqueued,
} from "delayd";
import { queueName, startServer, type Server } from "./server.js";

let server: Server;
let client: DelaydClient;

before(async () => {
  server = await startServer();
  client = new DelaydClient(server.url);
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0, "delayd serve did not exit 0 on SIGTERM");
});

describe("operations", () => {
  test("health, ready, metrics, openapi", async () => {
    assert.equal((await client.health()).status, "ok");
    assert.equal((await client.ready()).status, "ready");
    assert.match(await client.metrics(), /delayd_http_requests_total/);
    const doc = await client.openapi();
    assert.ok(String(doc["openapi"]).startsWith("3."));
  });
});

describe("queues", () => {
  test("put, get, list, pause, resume, delete", async () => {
    const name = queueName();
    const created = await client.putQueue(name, {
      lease_ms: 5000,
      max_attempts: 3,
      retry: { initial_ms: 100, max_ms: 1000, multiplier: 1.5 },
    });
    assert.equal(created.name, name);
    assert.equal(created.config.lease_ms, 5000);
    assert.deepEqual(created.config.retry, { initial_ms: 100, max_ms: 1000, multiplier: 1.5 });
    // A PUT merges: lease_ms stays.
    const merged = await client.putQueue(name, { max_attempts: 4 });
    assert.equal(merged.config.lease_ms, 5000);
    assert.equal(merged.config.max_attempts, 4);
    assert.equal((await client.getQueue(name)).stats.ready, 0);
    assert.ok((await client.listQueues()).some((q) => q.name === name));
    assert.equal((await client.pauseQueue(name)).paused, true);
    assert.equal((await client.resumeQueue(name)).paused, false);
    await client.deleteQueue(name);
    await assert.rejects(client.getQueue(name), QueueNotFound);
    await assert.rejects(client.deleteQueue(name), QueueNotFound);
  });

  test("a push URL the server does not allow is InvalidArgument", async () => {
    // This server runs without --push-allow (push.test.ts has one with it).
    await assert.rejects(client.putQueue(queueName(), { push: { url: "http://127.0.0.1:9/hook" } }), InvalidArgument);
  });
});

describe("messages", () => {
  test("enqueue, idempotent enqueue, get, reschedule, cancel", async () => {
    const q = queueName();
    const first = await client.enqueue(q, '{"n":1}', {
      id: "m-1",
      delay_ms: 60_000,
      priority: 7,
      headers: { "x-tenant": "acme" },
      max_attempts: 2,
    });
    assert.equal(first.created, true);
    assert.equal(first.id, "m-1");
    const again = await client.enqueue(q, "other", { id: "m-1" });
    assert.deepEqual(again, { ...first, created: false });
    const msg = await client.getMessage(q, "m-1");
    assert.equal(msg.state, "scheduled");
    assert.equal(msg.priority, 7);
    assert.equal(msg.queue, q);
    assert.deepEqual(msg.headers, { "x-tenant": "acme" });
    assert.equal(payloadText(msg), '{"n":1}');
    assert.equal(msg.max_attempts, 2);
    const moved = await client.reschedule(q, "m-1", { delay_ms: 0, priority: 1 });
    assert.equal(moved.state, "ready");
    assert.equal(moved.priority, 1);
    await client.cancel(q, "m-1");
    await assert.rejects(client.getMessage(q, "m-1"), MessageNotFound);
    await assert.rejects(client.cancel(q, "m-1"), MessageNotFound);
  });

  test("binary payloads travel as base64 and come back as bytes", async () => {
    const q = queueName();
    const bytes = new Uint8Array([0, 255, 254, 1]);
    await client.enqueue(q, bytes, { id: "bin" });
    const msg = await client.getMessage(q, "bin");
    assert.equal(msg.payload, undefined);
    assert.equal(msg.payload_base64, "AP/+AQ==");
    assert.deepEqual(payloadBytes(msg), bytes);
    assert.throws(() => payloadText(msg), TypeError);
    const [leased] = await client.lease(q);
    assert.ok(leased);
    assert.deepEqual(payloadBytes(leased), bytes);
  });

  test("batch: results in order, one bad item fails alone", async () => {
    const q = queueName();
    const results = await client.enqueueBatch(q, [
      "a",
      { payload: "b", id: "b-1", priority: 3 },
      { payload: "c", headers: { "delayd-x": "no" } },
      new Uint8Array([1, 2]),
    ]);
    assert.equal(results.length, 4);
    const [a, b, c, d] = results;
    assert.ok(!(a instanceof DelaydError) && a?.created);
    assert.equal((b as Enqueued).id, "b-1");
    assert.ok(c instanceof InvalidArgument, "a delayd-* header is refused");
    assert.equal(c.status, 400);
    assert.ok(!(d instanceof DelaydError));
    assert.equal((await client.getQueue(q)).stats.ready, 3);
  });

  test("listMessages and histogram (the dashboard's reads)", async () => {
    const q = queueName();
    await client.enqueueBatch(q, [
      { payload: "1", id: "r1" },
      { payload: "2", id: "s1", delay_ms: 60_000 },
    ]);
    const ready = await client.listMessages(q, "ready", { limit: 10 });
    assert.deepEqual(
      ready.map((m) => m.id),
      ["r1"],
    );
    const hist = await client.histogram(q, { buckets: 4 });
    assert.equal(hist.counts.length, 4);
    assert.equal(
      hist.counts.reduce((x, y) => x + y, 0),
      1,
    );
  });
});

describe("consuming", () => {
  test("lease, extend, ack; stale lease is LeaseMismatch", async () => {
    const q = queueName();
    await client.enqueue(q, "hello", { id: "l-1" });
    assert.deepEqual(await client.lease(queueName()), [], "unknown queue: empty");
    const [m] = await client.lease(q, { max: 10, wait_ms: 1000, lease_ms: 5000 });
    assert.ok(m);
    assert.equal(m.id, "l-1");
    assert.equal(m.attempt, 1);
    assert.equal(payloadText(m), "hello");
    const until = await client.extend(q, m.id, m.lease_id, { lease_ms: 60_000 });
    assert.ok(until > m.lease_until);
    assert.equal((await client.getMessage(q, "l-1")).state, "leased");
    await assert.rejects(client.ack(q, m.id, "not-the-lease"), LeaseMismatch);
    await assert.rejects(client.extend(q, m.id, "not-the-lease"), LeaseMismatch);
    await assert.rejects(client.reschedule(q, m.id, { priority: 1 }), InvalidState);
    await client.ack(q, m.id, m.lease_id);
    await assert.rejects(client.ack(q, m.id, m.lease_id), MessageNotFound);
  });

  test("long poll returns when a message arrives", async () => {
    const q = queueName();
    const started = Date.now();
    const pending = client.lease(q, { wait_ms: 10_000 });
    await new Promise((r) => setTimeout(r, 200));
    await client.enqueue(q, "late");
    const got = await pending;
    assert.equal(got.length, 1);
    assert.ok(Date.now() - started < 5_000);
  });

  test("nack with delay, then dead at max_attempts, list and redrive", async () => {
    const q = queueName();
    await client.putQueue(q, { max_attempts: 2 });
    await client.enqueue(q, "x", { id: "n-1" });
    let [m] = await client.lease(q);
    assert.ok(m);
    assert.equal((await client.getMessage(q, "n-1")).last_error, null);
    await client.nack(q, m.id, m.lease_id, { delay_ms: 0, error: "billing answered 504" });
    const failed = await client.getMessage(q, "n-1");
    assert.equal(failed.last_error, "billing answered 504");
    assert.equal(failed.ended_at, null);
    [m] = await client.lease(q, { wait_ms: 2000 });
    assert.ok(m);
    assert.equal(m.attempt, 2);
    await client.nack(q, m.id, m.lease_id);
    assert.equal((await client.getMessage(q, "n-1")).state, "dead");
    const dead = await client.listDead(q, { limit: 10 });
    assert.deepEqual(
      dead.map((d) => d.id),
      ["n-1"],
    );
    assert.equal(typeof dead[0]?.died_at, "number");
    assert.deepEqual(await client.listDead(q, { after: "n-1" }), []);
    assert.equal(await client.redrive(q, ["n-1", "not-dead"]), 1);
    const back = await client.getMessage(q, "n-1");
    assert.equal(back.state, "ready");
    assert.equal(back.attempts, 0);
    assert.equal(await client.redrive(q), 0);
  });

  test("ackBatch: each item on its own", async () => {
    const q = queueName();
    await client.enqueueBatch(q, ["1", "2"]);
    const leased = await client.lease(q, { max: 2 });
    assert.equal(leased.length, 2);
    const results = await client.ackBatch(q, [
      ...leased.map((m) => ({ id: m.id, lease_id: m.lease_id })),
      { id: "ghost", lease_id: "x" },
    ]);
    assert.deepEqual(
      results.map((r) => r.acked),
      [true, true, false],
    );
    assert.ok(results[2]?.error instanceof MessageNotFound);
    assert.equal(results[2]?.id, "ghost");
  });
});

describe("schedules", () => {
  test("put, get, list, pause, resume, trigger, delete, preview", async () => {
    const q = queueName();
    const s = await client.putSchedule(q, "every", {
      every_ms: 3_600_000,
      message: { payload: "tick", priority: 5, headers: { "x-k": "v" } },
      overlap: "skip",
    });
    assert.equal(s.id, "every");
    assert.equal(s.queue, q);
    assert.equal(s.every_ms, 3_600_000);
    assert.equal(s.message.payload, "tick");
    assert.equal(s.next_fires.length, 5);
    const same = await client.putSchedule(q, "every", {
      every_ms: 3_600_000,
      message: { payload: "tick", priority: 5, headers: { "x-k": "v" } },
      overlap: "skip",
      start_at: s.start_at,
    });
    assert.equal(same.revision, s.revision, "the same definition changes nothing");
    await client.putSchedule(q, "cron", { cron: "0 9 * * MON-FRI", tz: "Europe/Paris", message: { payload: new Uint8Array([255]) } });
    assert.deepEqual(
      (await client.listSchedules(q)).map((x) => x.id),
      ["cron", "every"],
    );
    assert.equal((await client.getSchedule(q, "cron")).tz, "Europe/Paris");
    const paused = await client.pauseSchedule(q, "every");
    assert.equal(paused.paused, true);
    assert.equal(paused.next_fire_at, null);
    assert.equal((await client.resumeSchedule(q, "every")).paused, false);
    const fired = await client.triggerSchedule(q, "every");
    assert.match(fired.id, /^every:manual:\d+$/);
    const msg = await client.getMessage(q, fired.id);
    assert.equal(payloadText(msg), "tick");
    assert.equal(msg.headers["delayd-schedule"], "every");
    await client.deleteSchedule(q, "every");
    await assert.rejects(client.getSchedule(q, "every"), ScheduleNotFound);
    const fires = await client.previewSchedule({ every_ms: 1000, start_at: 1_767_225_600_000, count: 3 });
    assert.deepEqual(fires, [1_767_225_600_000, 1_767_225_601_000, 1_767_225_602_000]);
    await assert.rejects(client.putSchedule(q, "bad", { cron: "not cron" }), InvalidArgument);
  });
});

describe("errors", () => {
  test("each code maps to its class, carrying status, code and message", async () => {
    const err = await client.getQueue(queueName()).catch((e: unknown) => e);
    assert.ok(err instanceof QueueNotFound);
    assert.ok(err instanceof DelaydError);
    assert.equal(err.status, 404);
    assert.equal(err.code, "queue_not_found");
    assert.equal(err.name, "QueueNotFound");
    assert.ok(err.message.length > 0);
    await assert.rejects(client.enqueue(queueName(), "x", { delay_ms: 1, deliver_at: 1 }), InvalidArgument);
  });

  test("not_found, method_not_allowed, invalid_json via raw routes", async () => {
    // Reach routes the client never sends wrong, through a fetch that
    // rewrites the request: the mapping is what is under test.
    const rewrite = (to: (url: string, init: RequestInit) => [string, RequestInit]): typeof fetch =>
      ((input: string | URL | Request, init?: RequestInit) => fetch(...to(String(input), init ?? {}))) as typeof fetch;
    const wrongPath = new DelaydClient({ url: server.url, fetch: rewrite((u, i) => [u.replace("/v1/queues", "/v1/nope"), i]) });
    await assert.rejects(wrongPath.listQueues(), NotFound);
    const wrongMethod = new DelaydClient({ url: server.url, fetch: rewrite((u, i) => [u, { ...i, method: "PATCH" }]) });
    await assert.rejects(wrongMethod.listQueues(), (e: unknown) => e instanceof MethodNotAllowed && e.status === 405);
    const badJson = new DelaydClient({ url: server.url, fetch: rewrite((u, i) => [u, { ...i, body: "{" }]) });
    await assert.rejects(badJson.enqueue(queueName(), "x"), InvalidJson);
  });

  test("no server: TransportError with status null", async () => {
    const dead = new DelaydClient({ url: "http://127.0.0.1:9", retry: { attempts: 2, initialMs: 1, maxMs: 1 } });
    const err = await dead.health().catch((e: unknown) => e);
    assert.ok(err instanceof TransportError);
    assert.equal(err.status, null);
    assert.equal(err.code, "transport");
  });

  test("the caller's AbortSignal aborts a waiting lease call", async () => {
    const ac = new AbortController();
    const pending = client.lease(queueName(), { wait_ms: 30_000 }, { signal: ac.signal });
    setTimeout(() => ac.abort(new Error("enough")), 100);
    await assert.rejects(pending, /enough/);
  });
});

describe("auth", () => {
  test("a bearer token is sent; without it, Unauthorized", async () => {
    const secured = await startServer(["--token", "t0ken"]);
    try {
      const anon = new DelaydClient(secured.url);
      await assert.rejects(anon.listQueues(), Unauthorized);
      assert.equal((await anon.health()).status, "ok", "/healthz stays open");
      const authed = new DelaydClient({ url: secured.url, token: "t0ken" });
      await authed.enqueue("q", "x");
      assert.equal((await authed.listQueues()).length, 1);
      await authed.metrics();
    } finally {
      assert.equal(await secured.stop(), 0);
    }
  });

  test("a scoped token without the scope gets Forbidden naming the verb and queue", async () => {
    const secret = "publisher-secret";
    const sha256 = createHash("sha256").update(secret).digest("hex");
    const dir = mkdtempSync(join(tmpdir(), "delayd-ts-tokens-"));
    const file = join(dir, "tokens.toml");
    writeFileSync(file, `[[token]]\nname = "orders"\nsha256 = "${sha256}"\nscopes = ["publish:orders"]\n`);
    const secured = await startServer(["--token-file", file]);
    try {
      const scoped = new DelaydClient({ url: secured.url, token: secret });
      await scoped.enqueue("orders", "x");
      const refused = await scoped.enqueue("billing", "x").then(
        () => assert.fail("publish on billing must be refused"),
        (err: unknown) => err,
      );
      assert.ok(refused instanceof Forbidden, String(refused));
      assert.equal(refused.status, 403);
      assert.match(refused.message, /publish/);
      assert.match(refused.message, /"billing"/);
      assert.deepEqual(await scoped.whoami(), { name: "orders", scopes: ["publish:orders"], auth: true });
    } finally {
      assert.equal(await secured.stop(), 0);
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
