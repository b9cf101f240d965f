/**
 * Retries with a scripted `fetch`: only where a repeat is harmless (reads,
 * idempotent calls, an enqueue with an id), only after a 503 or no answer,
 * bounded; and the request each call sends (URL encoding, auth, body).
 */

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { DelaydClient, InvalidArgument, TransportError, Unavailable } from "delayd";

interface Sent {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: unknown;
}

/** A fetch answering from `script` in turn: a status (with an API error
 * body for >= 400), or an Error to reject with. */
function scripted(script: (number | Error)[], okBody: unknown = { status: "ok" }) {
  const sent: Sent[] = [];
  const fetchImpl = (async (input: string | URL | Request, init?: RequestInit) => {
    sent.push({
      method: init?.method ?? "GET",
      url: String(input),
      headers: Object.fromEntries(new Headers(init?.headers).entries()),
      body: typeof init?.body === "string" ? JSON.parse(init.body) : undefined,
    });
    const step = script.shift() ?? 200;
    if (step instanceof Error) throw step;
    if (step >= 400) {
      const code = step === 503 ? "unavailable" : "invalid_argument";
      return new Response(JSON.stringify({ error: { code, message: "scripted" } }), { status: step });
    }
    return new Response(step === 204 ? null : JSON.stringify(okBody), { status: step });
  }) as typeof fetch;
  return { sent, fetchImpl };
}

const fast = { attempts: 3, initialMs: 1, maxMs: 2 };
const enqueued = { id: "x", seq: 1, deliver_at: 1, created: true };

describe("retries", () => {
  test("a GET is retried after 503 and network errors, then succeeds", async () => {
    const { sent, fetchImpl } = scripted([503, new TypeError("fetch failed"), 200]);
    const c = new DelaydClient({ url: "http://d", fetch: fetchImpl, retry: fast });
    assert.equal((await c.health()).status, "ok");
    assert.equal(sent.length, 3);
  });

  test("bounded: the last error is thrown", async () => {
    const { sent, fetchImpl } = scripted([503, 503, 503, 200]);
    const c = new DelaydClient({ url: "http://d", fetch: fetchImpl, retry: fast });
    await assert.rejects(c.getQueue("q"), Unavailable);
    assert.equal(sent.length, 3);
  });

  test("an enqueue without an id is not retried; with an id it is", async () => {
    const first = scripted([503, 201], enqueued);
    const c1 = new DelaydClient({ url: "http://d", fetch: first.fetchImpl, retry: fast });
    await assert.rejects(c1.enqueue("q", "x"), Unavailable);
    assert.equal(first.sent.length, 1);
    const second = scripted([new TypeError("socket hang up"), 201], enqueued);
    const c2 = new DelaydClient({ url: "http://d", fetch: second.fetchImpl, retry: fast });
    await assert.rejects(c2.enqueue("q", "x"), TransportError);
    const third = scripted([503, new TypeError("reset"), 201], enqueued);
    const c3 = new DelaydClient({ url: "http://d", fetch: third.fetchImpl, retry: fast });
    assert.equal((await c3.enqueue("q", "x", { id: "x" })).id, "x");
    assert.equal(third.sent.length, 3);
  });

  test("ack is not retried after a lost answer, but is after connection refused", async () => {
    const lost = scripted([new TypeError("socket hang up"), 204]);
    const c = new DelaydClient({ url: "http://d", fetch: lost.fetchImpl, retry: fast });
    await assert.rejects(c.ack("q", "m", "l"), TransportError);
    assert.equal(lost.sent.length, 1);
    const refused = new TypeError("fetch failed", { cause: Object.assign(new Error("refused"), { code: "ECONNREFUSED" }) });
    const notSent = scripted([refused, 204]);
    const c2 = new DelaydClient({ url: "http://d", fetch: notSent.fetchImpl, retry: fast });
    await c2.ack("q", "m", "l");
    assert.equal(notSent.sent.length, 2);
  });

  test("a 4xx is never retried; retry: false turns retries off", async () => {
    const bad = scripted([400, 200]);
    await assert.rejects(new DelaydClient({ url: "http://d", fetch: bad.fetchImpl, retry: fast }).health(), InvalidArgument);
    assert.equal(bad.sent.length, 1);
    const off = scripted([503, 200]);
    await assert.rejects(new DelaydClient({ url: "http://d", fetch: off.fetchImpl, retry: false }).health(), Unavailable);
    assert.equal(off.sent.length, 1);
  });

  test("the client's timeout is a TransportError", async () => {
    const hang = ((_: unknown, init?: RequestInit) =>
      new Promise((_, reject) => init?.signal?.addEventListener("abort", () => reject(init.signal?.reason)))) as typeof fetch;
    const c = new DelaydClient({ url: "http://d", fetch: hang, timeoutMs: 50, retry: false });
    await assert.rejects(c.health(), (e: unknown) => e instanceof TransportError && /within 50 ms/.test(e.message));
  });
});

describe("requests", () => {
  test("path segments are percent-encoded, the token is sent, undefined fields are left out", async () => {
    const { sent, fetchImpl } = scripted([201], enqueued);
    const c = new DelaydClient({ url: "http://d/", token: "tk", fetch: fetchImpl });
    await c.enqueue("jobs/nightly$(1)", "p", { delay_ms: 5, priority: undefined });
    const [req] = sent;
    assert.ok(req);
    assert.equal(req.url, "http://d/v1/queues/jobs%2Fnightly%24(1)/messages");
    assert.equal(req.method, "POST");
    assert.equal(req.headers["authorization"], "Bearer tk");
    assert.equal(req.headers["content-type"], "application/json");
    assert.deepEqual(req.body, { delay_ms: 5, payload: "p" });
  });

  test("null is sent (it removes push), and '.' cannot be a path segment", async () => {
    const { sent, fetchImpl } = scripted([200], {});
    const c = new DelaydClient({ url: "http://d", fetch: fetchImpl });
    await c.putQueue("q", { push: null });
    assert.deepEqual(sent[0]?.body, { push: null });
    await assert.rejects(c.getMessage("q", ".."), TypeError);
  });

  test("a field outside the route table is refused before sending", async () => {
    const { sent, fetchImpl } = scripted([201], enqueued);
    const c = new DelaydClient({ url: "http://d", fetch: fetchImpl });
    // A JS caller (no type check) with a typo.
    const options = { dealy_ms: 5 } as unknown as Parameters<DelaydClient["enqueue"]>[2];
    await assert.rejects(c.enqueue("q", "p", options), /dealy_ms/);
    assert.equal(sent.length, 0);
  });
});
