/**
 * Message history (`GET .../messages/{id}/events`) against a real server:
 * a message's events narrowed by `type` to their fields, `dropped`, and
 * `MessageNotFound` for an unknown id.
 */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { DelaydClient, MessageNotFound, type EventType, type HistoryEvent } from "delayd";
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

/** One line per event, each type with its own fields (a `switch` that
 * compiles only while the union narrows). */
function describeEvent(e: HistoryEvent): string {
  switch (e.type) {
    case "leased":
      return `leased via ${e.via} until ${e.lease_until > 0}`;
    case "nacked":
      return `nacked ${e.delay_ms} ${e.error}`;
    case "deferred":
      return `deferred ${e.reason}`;
    case "push_failed":
      return `push_failed ${e.status} ${e.error} ${e.duration_ms}`;
    case "dead":
      return `dead ${e.reason}`;
    case "replaced":
      return `replaced ${e.after_lease}`;
    default:
      return e.type;
  }
}

describe("events", () => {
  test("a message's life, oldest first", async () => {
    const q = queueName();
    await client.putQueue(q, { retain_ms: 86_400_000 });
    const before = Date.now();
    await client.enqueue(q, "work", { id: "m" });
    const [first] = await client.lease(q);
    assert.ok(first);
    await client.nack(q, "m", first.lease_id, { delay_ms: 0, error: "disk full" });
    const [second] = await client.lease(q, { wait_ms: 5_000 });
    assert.ok(second);
    await client.ack(q, "m", second.lease_id);

    const history = await client.events(q, "m");
    assert.equal(history.dropped, 0);
    const types: EventType[] = history.events.map((e) => e.type);
    assert.deepEqual(types, ["enqueued", "leased", "nacked", "leased", "acked"]);
    assert.deepEqual(
      history.events.map((e) => e.attempt),
      [0, 1, 1, 2, 2],
    );
    assert.ok(history.events.every((e, i, all) => e.at >= before - 1000 && (i === 0 || all[i - 1]!.at <= e.at)));
    assert.deepEqual(history.events.map(describeEvent), [
      "enqueued",
      "leased via http until true",
      "nacked 0 disk full",
      "leased via http until true",
      "acked",
    ]);
    const leased = history.events[1];
    assert.ok(leased?.type === "leased");
    assert.equal(leased.lease_until, first.lease_until);

    await assert.rejects(client.events(q, "nope"), MessageNotFound);
    await client.deleteQueue(q);
  });
});
