/**
 * Push verification: the signature rules against vectors computed with
 * Node's own crypto, and a real push from delayd to the example receiver
 * (examples/receiver.mjs).
 */

import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import type { Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, describe, test } from "node:test";

import { DelaydClient, MessageNotFound, SignatureError, signPush, verifyPush, type PushDelivery } from "delayd";
import { PACKAGE_DIR, eventually, queueName, startServer, type Server } from "./server.js";

const TS = 1_700_000_000;
const NOW = TS * 1000;

/** The reference: HMAC-SHA256(secret, timestamp + "." + body), hex. */
function reference(secret: string, ts: number, body: string | Uint8Array): string {
  return "v1=" + createHmac("sha256", secret).update(`${ts}.`).update(body).digest("hex");
}

function headers(body: string, secret = "k", ts = TS): Record<string, string> {
  return {
    "Delayd-Signature": reference(secret, ts, body),
    "delayd-timestamp": String(ts),
    "delayd-id": "m",
    "delayd-queue": "q",
    "delayd-attempt": "2",
    "delayd-deliver-at": "1000",
  };
}

describe("signatures", () => {
  test("signPush matches Node's HMAC-SHA256 of timestamp.body", async () => {
    assert.equal(await signPush("k", 1, "x"), reference("k", 1, "x"));
    const bytes = new Uint8Array([0, 255, 10, 46]);
    assert.equal(await signPush("s3cret", TS, bytes), reference("s3cret", TS, bytes));
    // A fixed vector, so a change in the reference cannot hide one here.
    assert.equal(
      await signPush("k", 1, "x"),
      "v1=" + createHmac("sha256", "k").update("1.x").digest("hex"),
    );
  });

  test("a valid request verifies and describes the delivery", async () => {
    const d = await verifyPush({ secret: "k", body: "body", headers: headers("body"), now: NOW + 10_000 });
    assert.deepEqual([d.id, d.queue, d.attempt, d.deliverAt, d.timestamp, d.text, d.key], ["m", "q", 2, 1000, TS, "body", null]);
    assert.equal(d.headers["delayd-id"], "m", "names lowercased");
  });

  test("tampered requests are refused", async () => {
    const h = headers("body");
    const cases: [Record<string, string>, string][] = [
      [{ ...h, "Delayd-Signature": reference("other", TS, "body") }, "body"],
      [h, "body!"],
      [Object.fromEntries(Object.entries(h).filter(([k]) => k !== "Delayd-Signature")), "body"],
      [{ ...h, "delayd-timestamp": "soon" }, "body"],
      [{ ...h, "Delayd-Signature": reference("k", TS, "body").toUpperCase().replace("V1=", "v2=") }, "body"],
      [{ ...h, "Delayd-Signature": "v1=" }, "body"],
    ];
    for (const [hs, body] of cases) {
      await assert.rejects(verifyPush({ secret: "k", body, headers: hs, now: NOW }), SignatureError);
    }
  });

  test("timestamp tolerance, default 300 s, both directions", async () => {
    const h = headers("x");
    await verifyPush({ secret: "k", body: "x", headers: h, now: NOW + 299_000 });
    await assert.rejects(verifyPush({ secret: "k", body: "x", headers: h, now: NOW + 301_000 }), /tolerance/);
    await assert.rejects(verifyPush({ secret: "k", body: "x", headers: h, now: NOW - 301_000 }), /tolerance/);
    await verifyPush({ secret: "k", body: "x", headers: h, now: new Date(NOW + 500_000), toleranceSec: 600 });
  });

  test("several v1= values, comma or space separated (secret rotation)", async () => {
    const good = reference("new", TS, "x");
    const old = reference("old", TS, "x");
    for (const sig of [`${old},${good}`, `${old} ${good}`, `${good}, ${old}`, `v0=abc ${good}`]) {
      const h = { ...headers("x"), "Delayd-Signature": sig };
      assert.equal((await verifyPush({ secret: "new", body: "x", headers: h, now: NOW })).id, "m");
    }
  });

  test("header shapes: Fetch Headers, Node's headers object, pairs", async () => {
    const h = headers("x");
    const fetchHeaders = new Headers(h);
    const nodeStyle: Record<string, string | string[] | undefined> = Object.fromEntries(
      Object.entries(h).map(([k, v]) => [k.toLowerCase(), v]),
    );
    nodeStyle["x-multi"] = ["a", "b"];
    nodeStyle["x-missing"] = undefined;
    const pairs = Object.entries(h) as [string, string][];
    for (const shape of [fetchHeaders, nodeStyle, pairs, new Map(Object.entries(h))]) {
      const d = await verifyPush({ secret: "k", body: new TextEncoder().encode("x"), headers: shape, now: NOW });
      assert.equal(d.id, "m");
    }
    const d = await verifyPush({ secret: "k", body: "x", headers: nodeStyle, now: NOW });
    assert.equal(d.headers["x-multi"], "a, b");
  });
});

describe("a real push from delayd", () => {
  let server: Server;
  let client: DelaydClient;
  const receivers: HttpServer[] = [];

  before(async () => {
    server = await startServer(["--push-allow", "127.0.0.1"]);
    client = new DelaydClient(server.url);
  });

  after(async () => {
    for (const r of receivers) r.close();
    if (server) assert.equal(await server.stop(), 0);
  });

  async function receiver(secret: string, onDelivery: (d: PushDelivery) => void): Promise<string> {
    const url = pathToFileURL(join(PACKAGE_DIR, "examples", "receiver.mjs")).href;
    const { createReceiver } = (await import(url)) as {
      createReceiver(o: { secret: string; onDelivery: (d: PushDelivery) => void }): HttpServer;
    };
    const srv = createReceiver({ secret, onDelivery });
    receivers.push(srv);
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
    return `http://127.0.0.1:${(srv.address() as AddressInfo).port}/hook`;
  }

  test("reaches the example receiver, verifies, and the 204 acks", async () => {
    const got: PushDelivery[] = [];
    const q = queueName();
    const url = await receiver("s3cret", (d) => void got.push(d));
    const queue = await client.putQueue(q, { push: { url, secret: "s3cret" } });
    assert.equal(queue.config.push?.secret_set, true);
    assert.equal((queue.config.push as unknown as Record<string, unknown>)["secret"], undefined);
    await client.enqueue(q, "pushed", { id: "p1", headers: { "x-tenant": "t1" } });
    await eventually(() => got.length > 0, 10_000, "the push");
    assert.deepEqual(
      got.map((d) => [d.id, d.queue, d.text, d.headers["x-tenant"]]),
      [["p1", q, "pushed", "t1"]],
    );
    await eventually(
      () => client.getMessage(q, "p1").then(() => false, (e: unknown) => e instanceof MessageNotFound),
      5_000,
      "the ack",
    );
  });

  test("a receiver with another secret refuses: delayd retries up to dead", async () => {
    const got: PushDelivery[] = [];
    const q = queueName();
    const url = await receiver("not-the-secret", (d) => void got.push(d));
    await client.putQueue(q, { max_attempts: 1, push: { url, secret: "s3cret" } });
    await client.enqueue(q, "refused", { id: "p2" });
    await eventually(async () => (await client.getMessage(q, "p2")).state === "dead", 10_000, "dead");
    assert.deepEqual(got, []);
  });
});
