/**
 * The API's JSON objects as TypeScript types. Field names are the wire's
 * (snake_case, as in api.md), so what you read here is what the server
 * sends and what the docs show; times are epoch milliseconds (`*_at`),
 * durations milliseconds (`*_ms`).
 *
 * Response types list the fields the API defines; a newer server may add
 * more, which the client passes through untouched.
 */

import type { DelaydError } from "./errors.js";

/** Message headers (string to string). Names `delayd-*` are reserved. */
export type MessageHeaders = Readonly<Record<string, string>>;

/** A payload as received: `payload` when the bytes are UTF-8, otherwise
 * `payload_base64`. Read it with {@link payloadText} or
 * {@link payloadBytes}. */
export type ReceivedPayload =
  | { readonly payload: string; readonly payload_base64?: undefined }
  | { readonly payload_base64: string; readonly payload?: undefined };

/** A payload to send: a string goes as `payload` (UTF-8), bytes as
 * `payload_base64`. */
export type PayloadInput = string | Uint8Array;

/** The states of a live message: the ones the listing pages. */
export type LiveMessageState = "scheduled" | "ready" | "leased" | "dead";

/** A message's `state`: a live state, or, only for a message that ended and
 * that its queue retains (`retain_ms`), `acked` or `cancelled`. */
export type MessageState = LiveMessageState | "acked" | "cancelled";

// ---------------------------------------------------------------- queues

export interface RetryPolicy {
  initial_ms: number;
  max_ms: number;
  /** At least 1.0; the only non-integer number of the API. */
  multiplier: number;
}

/** `push` of a queue `PUT`. */
export interface PushConfig {
  url: string;
  timeout_ms?: number;
  concurrency?: number;
  /** HMAC key of `delayd-signature`; never returned (`secret_set`). */
  secret?: string;
  /** Sent with every push request (credentials); values never returned. */
  headers?: MessageHeaders;
}

/** `push` as returned in a queue's config. */
export interface PushView {
  readonly url: string;
  readonly timeout_ms: number;
  readonly concurrency: number;
  readonly secret_set: boolean;
  readonly headers_set?: readonly string[];
}

/** A token bucket: `burst` tokens (default 1), one more every
 * `period_ms / limit` ms; each delivery takes one. */
export interface RateLimit {
  limit: number;
  period_ms: number;
  burst?: number;
}

/** A queue's flow control (api.md, Flow control). Every field optional. */
export interface FlowConfig {
  /** Deliveries of the whole queue. */
  rate?: RateLimit | null;
  /** Deliveries of each key. */
  key_rate?: RateLimit | null;
  /** Messages of the queue leased (or pushed) at once. */
  concurrency?: number | null;
  /** The same, per key. */
  key_concurrency?: number | null;
  /** One message of a key at a time, a failed one stays the key's next. */
  ordered?: boolean;
  /** Deferrals in a row before the message is dead (default 100). */
  max_deferrals?: number;
}

/** `flow` as returned: defaults filled in, absent limits `null`. */
export interface FlowView {
  readonly rate: RateLimit | null;
  readonly key_rate: RateLimit | null;
  readonly concurrency: number | null;
  readonly key_concurrency: number | null;
  readonly ordered: boolean;
  readonly max_deferrals: number;
}

/** Body of `PUT /v1/queues/{queue}`: merged into the current config
 * (absent fields keep their value; `retry`, `push` and `flow` are replaced
 * whole; `null` removes `push` or `flow`). */
export interface QueueConfigInput {
  lease_ms?: number;
  max_attempts?: number;
  retry?: Partial<RetryPolicy>;
  push?: PushConfig | null;
  flow?: FlowConfig | null;
  /** How long a message that ended (acked, a push answered 2xx, or
   * cancelled) is kept without its payload: 0 (not kept) to 2592000000
   * (30 days). Meanwhile `getMessage` answers it as `acked` or
   * `cancelled` with its `ended_at`, and its id stays taken. */
  retain_ms?: number;
}

export interface QueueConfig {
  readonly lease_ms: number;
  readonly max_attempts: number;
  readonly retry: RetryPolicy;
  readonly push: PushView | null;
  /** Present on servers with flow control. */
  readonly flow?: FlowView | null;
  /** How long an ended message is kept (0: not kept); servers before
   * retention omit it. */
  readonly retain_ms?: number;
}

export interface QueueStats {
  readonly scheduled: number;
  readonly ready: number;
  readonly leased: number;
  readonly dead: number;
}

export interface Queue {
  readonly name: string;
  readonly config: QueueConfig;
  readonly paused: boolean;
  /** Only during a timed pause (beanstalkd's `pause-tube`). */
  readonly paused_until?: number;
  readonly stats: QueueStats;
}

/** `GET /v1/queues/{queue}/keys/{key}`. */
export interface KeyState {
  readonly key: string;
  readonly scheduled: number;
  readonly ready: number;
  readonly leased: number;
  readonly dead: number;
  /** Until when the key cools down after a deferral; `null` when it does
   * not. */
  readonly cooling_until: number | null;
}

// -------------------------------------------------------------- messages

/**
 * What an enqueue does when its `id` names a message that lives in the
 * queue (api.md, "Retention, replace and debounce"):
 * - `keep` (the default): nothing changes (`created: false`).
 * - `replace`: a scheduled or ready message takes the request's payload,
 *   headers, priority, key, max_attempts and due time; its `seq`,
 *   `attempts` and `enqueued_at` stay (`replaced: true`).
 * - `debounce`: as `replace`, with the due time capped at the message's
 *   `enqueued_at + debounce_max_ms`.
 *
 * A leased message is not changed: the request becomes its successor,
 * applied when the lease ends (`after_lease: true`). A dead message:
 * {@link InvalidState} for `replace` and `debounce`.
 */
export type OnConflict = "keep" | "replace" | "debounce";

/** Options of an enqueue (and of each batch item besides its payload).
 * At most one of `delay_ms` and `deliver_at`; neither means now. */
export interface EnqueueOptions {
  /** Client id: makes the enqueue idempotent (a live message with this id
   * answers `created: false`) and safe to retry. */
  id?: string;
  delay_ms?: number;
  deliver_at?: number;
  /** Lower is delivered first; default 1024. */
  priority?: number;
  headers?: MessageHeaders;
  max_attempts?: number;
  /** Flow-control key (1-256 bytes UTF-8, no control characters). */
  key?: string;
  /** What happens when `id` names a live message (see {@link OnConflict});
   * `replace` and `debounce` need an `id`. Such an enqueue is not retried
   * after a lost answer: a repeat would move the due time (`delay_ms`
   * counts from its arrival), or enqueue the content again once the
   * message ended. */
  on_conflict?: OnConflict;
  /** With `on_conflict: "debounce"` only: the due time is capped at the
   * message's `enqueued_at` plus this; no cap without it. */
  debounce_max_ms?: number;
}

/** One message of {@link DelaydClient.enqueueBatch}. */
export interface BatchItem extends EnqueueOptions {
  payload: PayloadInput;
}

export interface Enqueued {
  readonly id: string;
  readonly seq: number;
  readonly deliver_at: number;
  /** `false`: a live message with this id existed; nothing changed unless
   * `replaced`. */
  readonly created: boolean;
  /** `true`: a `replace` or `debounce` changed the existing message
   * (`seq` is its own, `deliver_at` its new due time), or, with
   * `after_lease`, became its successor. Absent when false. */
  readonly replaced?: boolean;
  /** `true`: the message was leased, so the request became its successor
   * (`deliver_at` is the successor's), applied when the lease ends: after
   * an ack as a new message with the same id, after a retry as its content
   * and the later due time, after its death in its place; a cancel drops
   * it. Absent when false. */
  readonly after_lease?: boolean;
}

export type Message = ReceivedPayload & {
  readonly id: string;
  readonly seq: number;
  readonly queue: string;
  /** `acked` or `cancelled` only for a retained message, whose payload is
   * not kept (it reads `payload: ""`). */
  readonly state: MessageState;
  readonly deliver_at: number;
  readonly attempts: number;
  readonly priority: number;
  readonly headers: MessageHeaders;
  /** `null` without a key (servers before flow control omit it). */
  readonly key?: string | null;
  readonly enqueued_at: number;
  /** The message's own, when it has one. */
  readonly max_attempts?: number;
  /** While leased. */
  readonly lease_until?: number;
  /** While dead. */
  readonly died_at?: number;
  /** Deferrals in a row so far. */
  readonly deferrals?: number;
  /** The last failure recorded (a nack's `error`, what a failed push
   * answered), or `null` (servers before it omit it). */
  readonly last_error?: string | null;
  /** When a retained message ended (epoch ms); `null` while it lives. */
  readonly ended_at?: number | null;
};

// --------------------------------------------------------------- history

/** The frontend a delivery went out through. */
export type LeaseVia = "http" | "beanstalk" | "push";
/** Why a delivery was deferred: a nack with `defer: true`, or a push
 * answered 429 or 503 with `Retry-After`. */
export type DeferReason = "nack" | "push_429" | "push_503";
/** Why a message died. */
export type DeathReason = "max_attempts" | "max_deferrals" | "buried";

/** What every event has: when it happened and the message's attempt
 * number after it. */
interface EventBase {
  /** Epoch ms. */
  readonly at: number;
  readonly attempt: number;
}

/**
 * One transition of a message, narrowed by `type` to its own fields
 * (api.md, Message history). A newer server may add types (and fields):
 * the answer passes them through, so give a `switch` on `type` a
 * `default` branch rather than assume the list below is all there is.
 */
export type HistoryEvent =
  | (EventBase & { readonly type: "enqueued" })
  /** Its content replaced by an enqueue of its id (`on_conflict`);
   * `after_lease`: it became the successor of the leased message. */
  | (EventBase & { readonly type: "replaced"; readonly after_lease: boolean })
  /** `PATCH`. */
  | (EventBase & { readonly type: "rescheduled" })
  | (EventBase & { readonly type: "leased"; readonly lease_until: number; readonly via: LeaseVia })
  | (EventBase & { readonly type: "acked" })
  /** `delay_ms` and `error` are `null` when the nack gave none. */
  | (EventBase & { readonly type: "nacked"; readonly delay_ms: number | null; readonly error: string | null })
  /** Due again at `until`; the attempt was given back. */
  | (EventBase & { readonly type: "deferred"; readonly until: number; readonly reason: DeferReason })
  /** Its lease ran out (`at` is the lease's end). */
  | (EventBase & { readonly type: "expired" })
  /** `status` is `null` for a transport error; `error` is also the
   * message's `last_error`. */
  | (EventBase & {
      readonly type: "push_failed";
      readonly status: number | null;
      readonly error: string;
      readonly duration_ms: number;
    })
  | (EventBase & { readonly type: "dead"; readonly reason: DeathReason })
  | (EventBase & { readonly type: "redriven" })
  | (EventBase & { readonly type: "cancelled" });

/** An event's `type`. */
export type EventType = HistoryEvent["type"];

/** `GET .../messages/{id}/events`: the message's last 32 events, oldest
 * first, and how many older ones were dropped. */
export interface MessageHistory {
  readonly events: readonly HistoryEvent[];
  readonly dropped: number;
}

/** `PATCH .../messages/{id}`: `delay_ms` or `deliver_at`, and/or
 * `priority`. */
export interface RescheduleOptions {
  delay_ms?: number;
  deliver_at?: number;
  priority?: number;
}

export interface ListMessagesOptions {
  limit?: number;
  /** The id of the last message of the previous page. */
  after?: string;
}

export interface HistogramOptions {
  from?: number;
  to?: number;
  buckets?: number;
}

export interface Histogram {
  readonly from: number;
  readonly to: number;
  readonly bucket_ms: number;
  readonly counts: readonly number[];
  readonly truncated: boolean;
}

// ------------------------------------------------------------- consuming

export interface LeaseOptions {
  /** 1..1000, default 1. */
  max?: number;
  /** 0..60000, default 0: how long the server may hold the call open. */
  wait_ms?: number;
  /** Default: the queue's `lease_ms`. */
  lease_ms?: number;
}

export type LeasedMessage = ReceivedPayload & {
  readonly id: string;
  readonly seq: number;
  readonly lease_id: string;
  readonly lease_until: number;
  /** 1 for the first delivery. */
  readonly attempt: number;
  readonly deliver_at: number;
  readonly priority: number;
  readonly headers: MessageHeaders;
  readonly key?: string | null;
};

export interface NackOptions {
  /** Redeliver after this long; without it the queue's backoff applies. */
  delay_ms?: number;
  /** Not a failed attempt: the consumer was told to slow down (flow
   * control; a queue without `flow` answers 400). */
  defer?: boolean;
  /** Why it failed (at most 1024 bytes of UTF-8): the message's
   * `last_error`. */
  error?: string;
}

export interface AckItem {
  id: string;
  lease_id: string;
}

export type AckResult =
  | { readonly id: string; readonly acked: true; readonly error?: undefined }
  | { readonly id: string; readonly acked: false; readonly error: DelaydError };

// ------------------------------------------------------------- schedules

/** The message a schedule enqueues at each fire (no id, no delay). */
export interface ScheduleMessageInput {
  payload?: PayloadInput;
  priority?: number;
  headers?: MessageHeaders;
  max_attempts?: number;
  key?: string;
}

export type CatchupMode = "latest" | "all";
export type OverlapMode = "allow" | "skip";

/** Body of `PUT .../schedules/{id}`: exactly one of `cron` and
 * `every_ms`. */
export interface ScheduleInput {
  cron?: string;
  every_ms?: number;
  /** IANA zone of `cron` (default UTC). */
  tz?: string;
  start_at?: number;
  end_at?: number;
  max_fires?: number;
  message?: ScheduleMessageInput;
  catchup?: CatchupMode;
  catchup_window_ms?: number;
  overlap?: OverlapMode;
  jitter_ms?: number;
  paused?: boolean;
}

export type ScheduleMessage = ReceivedPayload & {
  readonly priority: number;
  readonly headers: MessageHeaders;
  readonly max_attempts?: number;
  readonly key?: string | null;
};

export interface Schedule {
  readonly id: string;
  readonly queue: string;
  readonly cron?: string;
  readonly tz?: string;
  readonly every_ms?: number;
  readonly start_at: number;
  readonly end_at: number | null;
  readonly max_fires: number | null;
  readonly message: ScheduleMessage;
  /** A string: accept values newer servers may add. */
  readonly catchup: CatchupMode | (string & {});
  readonly catchup_window_ms: number;
  readonly overlap: OverlapMode | (string & {});
  readonly jitter_ms: number;
  readonly paused: boolean;
  readonly revision: number;
  readonly updated_at: number;
  readonly fires: number;
  readonly last_fire_at: number | null;
  readonly next_fire_at: number | null;
  readonly next_fires: readonly number[];
}

/** `POST /v1/schedules/preview`. */
export interface PreviewInput {
  cron?: string;
  every_ms?: number;
  tz?: string;
  start_at?: number;
  /** 1..100, default 10. */
  count?: number;
}

// ------------------------------------------------------------ operations

export interface Status {
  readonly status: string;
}

/** `GET /v1/whoami`: the client's token. `scopes` are `VERB:QUEUE_GLOB`
 * strings; a full-access token, or a server without tokens, has the name
 * `null` and the scopes `["*:*"]`. */
export interface Whoami {
  readonly name: string | null;
  readonly scopes: readonly string[];
  /** Whether the server requires a token. */
  readonly auth: boolean;
}
