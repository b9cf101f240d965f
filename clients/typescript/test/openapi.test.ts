/**
 * The client cannot drift from the server: every operation of the served
 * `/openapi.json` is in the client's route table and implemented by the
 * client method of that name; every route of the table is in the
 * document; the body fields and query parameters agree both ways (nothing
 * the client sends is unknown to the server, which refuses unknown fields,
 * and nothing the server takes is out of the client's reach).
 *
 * Flow control is being added to the server: against a server without it
 * (no `/v1/queues/{queue}/keys/{key}` in the document) the client's flow
 * route and fields are left out of the comparison, and say so.
 */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { DelaydClient, ROUTES, type Route } from "delayd";
import { compare } from "./openapi-check.js";
import { FLOW_SKIP, hasFlow, startServer, type Server } from "./server.js";

let server: Server;
let doc: Record<string, unknown>;
let flow: boolean;

before(async () => {
  server = await startServer();
  doc = await new DelaydClient(server.url).openapi();
  flow = hasFlow(doc);
});

after(async () => {
  if (server) assert.equal(await server.stop(), 0);
});

test("every operation of the document is in the route table", () => {
  assert.deepEqual(compare(doc, flow).uncovered, []);
});

test("every route of the table is in the document", () => {
  assert.deepEqual(compare(doc, flow).unknown, []);
});

test("body fields and query parameters match the document both ways", () => {
  assert.deepEqual(compare(doc, flow).fields, []);
});

test("flow-control routes and fields match the document", (t) => {
  if (!flow) {
    t.skip(FLOW_SKIP);
    return;
  }
  // With flow, compare() above already included them; say so explicitly.
  const c = compare(doc, true);
  assert.deepEqual([c.uncovered, c.unknown, c.fields], [[], [], []]);
});

test("every route is implemented by the client method of its name", () => {
  const proto = DelaydClient.prototype as unknown as Record<string, unknown>;
  const missing = Object.keys(ROUTES).filter((name) => typeof proto[name] !== "function");
  assert.deepEqual(missing, []);
});

test("the comparison catches drift (it is not vacuous)", () => {
  const typo: Route = { ...ROUTES.enqueue, body: { ...ROUTES.enqueue.body, dealy_ms: true } };
  const withTypo = compare(doc, flow, { ...ROUTES, enqueue: typo });
  assert.ok(withTypo.fields.some((p) => p.includes("dealy_ms") && p.includes("not in the document")));
  const { delay_ms: _dropped, ...rest } = ROUTES.enqueue.body;
  const withoutDelay = compare(doc, flow, { ...ROUTES, enqueue: { ...ROUTES.enqueue, body: rest } });
  assert.ok(withoutDelay.fields.some((p) => p.includes("delay_ms") && p.includes("cannot send")));
  const paths = { ...(doc["paths"] as object), "/v1/new": { get: {} } };
  assert.deepEqual(compare({ ...doc, paths }, flow).uncovered, ["GET /v1/new"]);
  const { cancel: _gone, ...fewer } = ROUTES;
  assert.deepEqual(compare(doc, flow, fewer).uncovered, ["DELETE /v1/queues/{queue}/messages/{id}"]);
});
