/**
 * The client's map of the HTTP API: every operation it calls, keyed by the
 * name of the {@link DelaydClient} method that calls it, with the request
 * body fields and query parameters it may send.
 *
 * Request bodies are built only through {@link buildBody}, which refuses a
 * field this table does not list, so the table is exactly what the client
 * sends. The test suite compares it with the server's `/openapi.json` in
 * both directions (every operation of the document is here and has its
 * method; every field here is in the document's request schema), so the
 * client cannot drift from the server unnoticed: the server refuses
 * unknown fields with 400, which would otherwise surface only in
 * production.
 */

export type HttpMethod = "GET" | "PUT" | "POST" | "DELETE" | "PATCH";

/** Body fields: `true` for a leaf (a scalar, or a string map such as
 * `headers`), a nested table for an object or an array of objects. */
export interface FieldTable {
  readonly [field: string]: true | FieldTable;
}

/** When a repeat of the call (after a 503 or a network error) is harmless:
 * `always` (reads, and calls idempotent by the API's contract), `with-id`
 * (an enqueue with a client id and `on_conflict` `keep`, the default: a
 * repeat answers `created: false`; a repeated `replace` or `debounce`
 * would move the due time, so it is not retried), or `never` (a repeated
 * ack, nack or lease would not be the same call). */
export type RetryRule = "always" | "with-id" | "never";

export interface Route {
  readonly method: HttpMethod;
  /** Path template; `{queue}`, `{id}` and `{key}` are percent-encoded
   * path segments. */
  readonly path: string;
  readonly body?: FieldTable;
  readonly query?: readonly string[];
  readonly retry: RetryRule;
  /** Dotted body fields (`messages.key`) that belong to flow control, which
   * servers older than it do not know; the drift test leaves them out
   * against such a server. */
  readonly flowFields?: readonly string[];
  /** The whole route is part of flow control. */
  readonly flow?: boolean;
}

const PAYLOAD = { payload: true, payload_base64: true } as const;
const MESSAGE: FieldTable = {
  ...PAYLOAD,
  id: true,
  delay_ms: true,
  deliver_at: true,
  priority: true,
  headers: true,
  max_attempts: true,
  key: true,
  on_conflict: true,
  debounce_max_ms: true,
};
const RATE: FieldTable = { limit: true, period_ms: true, burst: true };
const SCHEDULE_TIMES = { cron: true, every_ms: true, tz: true, start_at: true } as const;

const Q = "/v1/queues/{queue}";
const M = `${Q}/messages/{id}`;
const S = `${Q}/schedules/{id}`;

export const ROUTES = {
  // Operations
  health: { method: "GET", path: "/healthz", retry: "always" },
  ready: { method: "GET", path: "/readyz", retry: "always" },
  metrics: { method: "GET", path: "/metrics", retry: "always" },
  openapi: { method: "GET", path: "/openapi.json", retry: "always" },
  whoami: { method: "GET", path: "/v1/whoami", retry: "always" },
  // Queues
  listQueues: { method: "GET", path: "/v1/queues", retry: "always" },
  getQueue: { method: "GET", path: Q, retry: "always" },
  putQueue: {
    method: "PUT",
    path: Q,
    body: {
      lease_ms: true,
      max_attempts: true,
      retry: { initial_ms: true, max_ms: true, multiplier: true },
      push: { url: true, timeout_ms: true, concurrency: true, secret: true, headers: true },
      flow: {
        rate: RATE,
        key_rate: RATE,
        concurrency: true,
        key_concurrency: true,
        ordered: true,
        max_deferrals: true,
      },
      retain_ms: true,
    },
    // A PUT merges the given fields: sending it twice leaves the same config.
    retry: "always",
    flowFields: ["flow"],
  },
  deleteQueue: { method: "DELETE", path: Q, retry: "never" },
  pauseQueue: { method: "POST", path: `${Q}/pause`, retry: "always" },
  resumeQueue: { method: "POST", path: `${Q}/resume`, retry: "always" },
  histogram: { method: "GET", path: `${Q}/histogram`, query: ["from", "to", "buckets"], retry: "always" },
  getKey: { method: "GET", path: `${Q}/keys/{key}`, retry: "always", flow: true },
  // Messages
  enqueue: { method: "POST", path: `${Q}/messages`, body: MESSAGE, retry: "with-id", flowFields: ["key"] },
  enqueueBatch: {
    method: "POST",
    path: `${Q}/batch`,
    body: { messages: MESSAGE },
    retry: "with-id",
    flowFields: ["messages.key"],
  },
  listMessages: { method: "GET", path: `${Q}/messages`, query: ["state", "limit", "after"], retry: "always" },
  getMessage: { method: "GET", path: M, retry: "always" },
  events: { method: "GET", path: `${M}/events`, retry: "always" },
  cancel: { method: "DELETE", path: M, retry: "never" },
  reschedule: {
    method: "PATCH",
    path: M,
    body: { delay_ms: true, deliver_at: true, priority: true },
    // `delay_ms` counts from the request's arrival: a repeat moves the time.
    retry: "never",
  },
  // Consuming
  lease: { method: "POST", path: `${Q}/leases`, body: { max: true, wait_ms: true, lease_ms: true }, retry: "never" },
  ack: { method: "POST", path: `${M}/ack`, body: { lease_id: true }, retry: "never" },
  ackBatch: { method: "POST", path: `${Q}/acks`, body: { acks: { id: true, lease_id: true } }, retry: "never" },
  nack: {
    method: "POST",
    path: `${M}/nack`,
    body: { lease_id: true, delay_ms: true, defer: true, error: true },
    retry: "never",
    flowFields: ["defer"],
  },
  extend: { method: "POST", path: `${M}/extend`, body: { lease_id: true, lease_ms: true }, retry: "never" },
  // Dead letters
  listDead: { method: "GET", path: `${Q}/dead`, query: ["limit", "after"], retry: "always" },
  redrive: { method: "POST", path: `${Q}/dead/redrive`, body: { ids: true }, retry: "never" },
  // Schedules
  putSchedule: {
    method: "PUT",
    path: S,
    body: {
      ...SCHEDULE_TIMES,
      end_at: true,
      max_fires: true,
      message: { ...PAYLOAD, priority: true, headers: true, max_attempts: true, key: true },
      catchup: true,
      catchup_window_ms: true,
      overlap: true,
      jitter_ms: true,
      paused: true,
    },
    // The same definition again changes nothing (api.md, Schedules).
    retry: "always",
    flowFields: ["message.key"],
  },
  listSchedules: { method: "GET", path: `${Q}/schedules`, retry: "always" },
  getSchedule: { method: "GET", path: S, retry: "always" },
  deleteSchedule: { method: "DELETE", path: S, retry: "never" },
  pauseSchedule: { method: "POST", path: `${S}/pause`, retry: "always" },
  resumeSchedule: { method: "POST", path: `${S}/resume`, retry: "always" },
  triggerSchedule: { method: "POST", path: `${S}/trigger`, retry: "never" },
  previewSchedule: {
    method: "POST",
    path: "/v1/schedules/preview",
    body: { ...SCHEDULE_TIMES, count: true },
    // Computes and stores nothing.
    retry: "always",
  },
} as const satisfies Readonly<Record<string, Route>>;

export type RouteName = keyof typeof ROUTES;

/**
 * The JSON body for `route` from `values`, leaving out `undefined`s
 * (`null` is kept: it means "remove", as in `push: null`). Throws a
 * TypeError for a field the route table does not list, at any depth: that
 * is a bug in this client, caught by its tests rather than by the server's
 * 400 in production.
 */
export function buildBody(name: RouteName, values: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const route: Route = ROUTES[name];
  if (route.body === undefined) throw new TypeError(`${name}: the route takes no body`);
  return clean(values, route.body, name) as Record<string, unknown>;
}

function clean(value: unknown, table: FieldTable, where: string): unknown {
  if (Array.isArray(value)) return value.map((item, i) => clean(item, table, `${where}[${i}]`));
  if (typeof value !== "object" || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [field, v] of Object.entries(value)) {
    if (v === undefined) continue;
    const sub = table[field];
    if (sub === undefined) throw new TypeError(`${where}: field ${JSON.stringify(field)} is not in the route table`);
    out[field] = sub === true ? v : clean(v, sub, `${where}.${field}`);
  }
  return out;
}
