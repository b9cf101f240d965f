/**
 * delayd: the TypeScript client of the durable delayed-message service.
 *
 * ```ts
 * import { DelaydClient } from "delayd";
 * const client = new DelaydClient("http://127.0.0.1:7070");
 * await client.enqueue("emails", JSON.stringify({ to: "ann@example.com" }), { delay_ms: 60_000 });
 * await client.work("emails", async (d) => send(d.json()), { concurrency: 8 });
 * ```
 *
 * No runtime dependencies: `fetch`, Web Crypto and the ES globals, so it
 * runs in Node >= 20, Deno and (for the read-only calls) browsers.
 */

export { DelaydClient, type CallOptions } from "./client.js";
export type { ClientOptions, RetryOptions } from "./transport.js";
export { Delivery, Defer } from "./delivery.js";
export type { DeliveriesOptions, ErrorReporter, Handler, WorkOptions } from "./worker.js";
export {
  DelaydError,
  Forbidden,
  InsufficientStorage,
  InvalidArgument,
  InvalidJson,
  InvalidState,
  LeaseMismatch,
  MessageNotFound,
  MethodNotAllowed,
  NotFound,
  PayloadTooLarge,
  QueueNotFound,
  ScheduleNotFound,
  TransportError,
  Unauthorized,
  Unavailable,
  errorClassOf,
  type ApiErrorClass,
  type ApiErrorOptions,
} from "./errors.js";
export {
  SignatureError,
  signPush,
  verifyPush,
  type BodyInput,
  type HeaderInput,
  type PushDelivery,
  type VerifyPushOptions,
} from "./push.js";
export { payloadBytes, payloadJson, payloadText } from "./payload.js";
export { ROUTES, type FieldTable, type HttpMethod, type RetryRule, type Route, type RouteName } from "./routes.js";
export type * from "./models.js";
