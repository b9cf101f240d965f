// A push receiver on node:http: verifies each delivery's signature on the
// raw body, hands it to your code, answers 204 (ack) or an error (delayd
// retries with the queue's backoff).
//
//   DELAYD_PUSH_SECRET=s3cret node examples/receiver.mjs      # port 8000, or PORT
//
// Point a queue at it, with the same secret (and start delayd with
// `--push-allow 127.0.0.1`):
//
//   await client.putQueue("emails", { push: { url: "http://127.0.0.1:8000/hook", secret: "s3cret" } });

import { createServer } from "node:http";
import { pathToFileURL } from "node:url";
import { SignatureError, verifyPush } from "delayd";

/** Your work goes here; throwing makes delayd retry the message. */
async function handle(delivery) {
  console.log(`${delivery.queue}/${delivery.id} attempt ${delivery.attempt}: ${delivery.text}`);
}

/** The raw request body: the signature is over these exact bytes, so
 * never verify a body a framework has parsed and re-serialized. */
async function rawBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new Uint8Array(Buffer.concat(chunks));
}

export function createReceiver({ secret, onDelivery = handle }) {
  return createServer(async (req, res) => {
    if (req.method !== "POST") {
      res.writeHead(405).end();
      return;
    }
    let delivery;
    try {
      delivery = await verifyPush({ secret, body: await rawBody(req), headers: req.headers });
    } catch (err) {
      // 401 also makes delayd retry: a request signed with a rotated-out
      // secret succeeds once the receiver has the new one.
      const status = err instanceof SignatureError ? 401 : 400;
      res.writeHead(status, { "content-type": "text/plain" }).end(String(err.message));
      return;
    }
    try {
      await onDelivery(delivery);
    } catch (err) {
      console.error(`${delivery.queue}/${delivery.id}:`, err);
      res.writeHead(500, { "content-type": "text/plain" }).end("failed; delayd will retry");
      return;
    }
    res.writeHead(204).end();
  });
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const secret = process.env.DELAYD_PUSH_SECRET;
  if (!secret) throw new Error("set DELAYD_PUSH_SECRET to the queue's push.secret");
  const port = Number(process.env.PORT ?? 8000);
  createReceiver({ secret }).listen(port, "127.0.0.1", () => console.log(`listening on http://127.0.0.1:${port}/hook`));
}
