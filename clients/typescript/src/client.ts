/**
 * {@link DelaydClient}: one method per operation of the HTTP API (the
 * method names are the keys of {@link ROUTES}), plus the worker helpers
 * `deliveries` and `work`.
 */

import { DelaydError, errorFromBody } from "./errors.js";
import type {
  AckItem,
  AckResult,
  BatchItem,
  Enqueued,
  EnqueueOptions,
  Histogram,
  HistogramOptions,
  HistoryEvent,
  KeyState,
  LeasedMessage,
  LeaseOptions,
  ListMessagesOptions,
  Message,
  MessageHistory,
  LiveMessageState,
  NackOptions,
  PayloadInput,
  PreviewInput,
  Queue,
  QueueConfigInput,
  RescheduleOptions,
  Schedule,
  ScheduleInput,
  Status,
  Whoami,
} from "./models.js";
import { encodePayload } from "./payload.js";
import { buildBody, ROUTES, type RouteName } from "./routes.js";
import { Transport, type ClientOptions } from "./transport.js";
import { deliveries, work, type DeliveriesOptions, type Handler, type WorkOptions } from "./worker.js";
import type { Delivery } from "./delivery.js";

/** Options every method takes as its last argument. */
export interface CallOptions {
  /** Aborts the request (and its retries); the call rejects with the
   * signal's reason. */
  signal?: AbortSignal;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Whether an enqueue (or batch item) may be sent again after a lost
 * answer: it has an id and `on_conflict` `keep`, so a repeat answers
 * `created: false` and changes nothing (the `with-id` rule). */
function repeatable(options: EnqueueOptions): boolean {
  return options.id !== undefined && (options.on_conflict === undefined || options.on_conflict === "keep");
}

/** Turns an answer's list field into a typed array, failing loudly when
 * the server answered something else (a proxy, a wrong base URL). */
function listOf<T>(answer: unknown, field: string): T[] {
  const list = isRecord(answer) ? answer[field] : undefined;
  if (!Array.isArray(list)) {
    throw new DelaydError(`expected {"${field}": [...]} in the answer`, { code: "invalid_response", status: null });
  }
  return list as T[];
}

export class DelaydClient {
  private readonly transport: Transport;

  /** `new DelaydClient("http://127.0.0.1:7070")` or with options
   * (`token`, `timeoutMs`, `retry`, `fetch`, `headers`). */
  constructor(options: string | ClientOptions) {
    this.transport = new Transport(typeof options === "string" ? { url: options } : options);
  }

  /** The server's base URL, without a trailing slash. */
  get url(): string {
    return this.transport.baseUrl;
  }

  private call(name: RouteName, spec: Omit<Parameters<Transport["call"]>[1], "retrySafe">, retrySafe?: boolean) {
    const rule = ROUTES[name].retry;
    return this.transport.call(name, { ...spec, retrySafe: retrySafe ?? rule === "always" });
  }

  // ------------------------------------------------------------ operations

  /** `GET /healthz`: the process is up. */
  async health(opts: CallOptions = {}): Promise<Status> {
    return (await this.call("health", { signal: opts.signal })) as Status;
  }

  /** `GET /readyz`: the store is reachable and accepting writes; throws
   * {@link Unavailable} otherwise. */
  async ready(opts: CallOptions = {}): Promise<Status> {
    return (await this.call("ready", { signal: opts.signal })) as Status;
  }

  /** `GET /metrics`: Prometheus text. */
  async metrics(opts: CallOptions = {}): Promise<string> {
    return (await this.call("metrics", { text: true, signal: opts.signal })) as string;
  }

  /** `GET /openapi.json`: the server's OpenAPI 3.1 document. */
  async openapi(opts: CallOptions = {}): Promise<Record<string, unknown>> {
    return (await this.call("openapi", { signal: opts.signal })) as Record<string, unknown>;
  }

  /** `GET /v1/whoami`: this client's token, its name and scopes. */
  async whoami(opts: CallOptions = {}): Promise<Whoami> {
    return (await this.call("whoami", { signal: opts.signal })) as Whoami;
  }

  // ---------------------------------------------------------------- queues

  /** `GET /v1/queues`, ordered by name. */
  async listQueues(opts: CallOptions = {}): Promise<Queue[]> {
    return listOf<Queue>(await this.call("listQueues", { signal: opts.signal }), "queues");
  }

  /** `GET /v1/queues/{queue}`; {@link QueueNotFound} when unknown. */
  async getQueue(queue: string, opts: CallOptions = {}): Promise<Queue> {
    return (await this.call("getQueue", { path: { queue }, signal: opts.signal })) as Queue;
  }

  /** `PUT /v1/queues/{queue}`: creates the queue or merges `config` into
   * its current one (`push: null` / `flow: null` remove them). */
  async putQueue(queue: string, config: QueueConfigInput = {}, opts: CallOptions = {}): Promise<Queue> {
    const body = buildBody("putQueue", { ...config });
    return (await this.call("putQueue", { path: { queue }, body, signal: opts.signal })) as Queue;
  }

  /** `DELETE /v1/queues/{queue}`: the queue, its messages and schedules. */
  async deleteQueue(queue: string, opts: CallOptions = {}): Promise<void> {
    await this.call("deleteQueue", { path: { queue }, signal: opts.signal });
  }

  /** `POST .../pause`: no leases, no pushes; enqueues still accepted. */
  async pauseQueue(queue: string, opts: CallOptions = {}): Promise<Queue> {
    return (await this.call("pauseQueue", { path: { queue }, signal: opts.signal })) as Queue;
  }

  async resumeQueue(queue: string, opts: CallOptions = {}): Promise<Queue> {
    return (await this.call("resumeQueue", { path: { queue }, signal: opts.signal })) as Queue;
  }

  /** `GET .../histogram`: scheduled messages counted by due time (the
   * dashboard's endpoint). */
  async histogram(queue: string, options: HistogramOptions = {}, opts: CallOptions = {}): Promise<Histogram> {
    const { from, to, buckets } = options;
    return (await this.call("histogram", {
      path: { queue },
      query: { from, to, buckets },
      signal: opts.signal,
    })) as Histogram;
  }

  /** `GET .../keys/{key}`: a flow key's live messages by state and its
   * cool-down (servers with flow control). */
  async getKey(queue: string, key: string, opts: CallOptions = {}): Promise<KeyState> {
    return (await this.call("getKey", { path: { queue, key }, signal: opts.signal })) as KeyState;
  }

  // -------------------------------------------------------------- messages

  /** `POST .../messages`: enqueues one message (creating the queue unless
   * the server runs with `--no-auto-create`). With `options.id` the call is
   * idempotent (`created: false` when that message is live) and retried
   * after a lost answer. With `on_conflict: "replace"` or `"debounce"` it
   * changes the live message of that id instead (`replaced: true`), or
   * becomes its successor when it is leased (`after_lease: true`); see
   * {@link OnConflict}. */
  async enqueue(
    queue: string,
    payload: PayloadInput,
    options: EnqueueOptions = {},
    opts: CallOptions = {},
  ): Promise<Enqueued> {
    const body = buildBody("enqueue", { ...options, ...encodePayload(payload) });
    return (await this.call(
      "enqueue",
      { path: { queue }, body, signal: opts.signal },
      repeatable(options),
    )) as Enqueued;
  }

  /** `POST .../batch`: up to 1000 messages in one request (one durable
   * commit). Each result is the item's {@link Enqueued} or its own error
   * (an instance of the error class of its code), in input order. Retried
   * after a lost answer only when every item has an id and none replaces
   * (`on_conflict` `replace` or `debounce`). */
  async enqueueBatch(
    queue: string,
    items: readonly (BatchItem | PayloadInput)[],
    opts: CallOptions = {},
  ): Promise<(Enqueued | DelaydError)[]> {
    const messages = items.map((item) =>
      typeof item === "string" || item instanceof Uint8Array
        ? encodePayload(item)
        : { ...item, ...encodePayload(item.payload) },
    );
    const body = buildBody("enqueueBatch", { messages });
    const repeat = items.every((item) => typeof item === "object" && !(item instanceof Uint8Array) && repeatable(item));
    const answer = await this.call("enqueueBatch", { path: { queue }, body, signal: opts.signal }, repeat);
    return listOf<unknown>(answer, "results").map((r) =>
      isRecord(r) && "error" in r ? errorFromBody(r, null) : (r as Enqueued),
    );
  }

  /** `GET .../messages/{id}`: a live message, or a retained one (state
   * `acked` or `cancelled`, with `ended_at`, its payload not kept);
   * {@link MessageNotFound} otherwise. */
  async getMessage(queue: string, id: string, opts: CallOptions = {}): Promise<Message> {
    return (await this.call("getMessage", { path: { queue, id }, signal: opts.signal })) as Message;
  }

  /** `GET .../messages/{id}/events`: the history of a live or retained
   * message, oldest first (its last 32 events; `dropped` counts the older
   * ones); {@link MessageNotFound} otherwise. */
  async events(queue: string, id: string, opts: CallOptions = {}): Promise<MessageHistory> {
    const answer = await this.call("events", { path: { queue, id }, signal: opts.signal });
    listOf<HistoryEvent>(answer, "events");
    return answer as MessageHistory;
  }

  /** `GET .../messages?state=`: one live state's messages in that state's
   * order (the dashboard's endpoint); page with `after`. Retained messages
   * are never listed. */
  async listMessages(
    queue: string,
    state: LiveMessageState,
    options: ListMessagesOptions = {},
    opts: CallOptions = {},
  ): Promise<Message[]> {
    const answer = await this.call("listMessages", {
      path: { queue },
      query: { state, limit: options.limit, after: options.after },
      signal: opts.signal,
    });
    return listOf<Message>(answer, "messages");
  }

  /** `DELETE .../messages/{id}`: cancels in any state (a leased message's
   * lease becomes invalid). */
  async cancel(queue: string, id: string, opts: CallOptions = {}): Promise<void> {
    await this.call("cancel", { path: { queue, id }, signal: opts.signal });
  }

  /** `PATCH .../messages/{id}`: new time and/or priority of a scheduled or
   * ready message ({@link InvalidState} when leased or dead). */
  async reschedule(queue: string, id: string, options: RescheduleOptions, opts: CallOptions = {}): Promise<Message> {
    const body = buildBody("reschedule", { ...options });
    return (await this.call("reschedule", { path: { queue, id }, body, signal: opts.signal })) as Message;
  }

  // ------------------------------------------------------------- consuming

  /** `POST .../leases`: up to `max` ready messages, waiting up to
   * `wait_ms` for one; an empty array when none came. */
  async lease(queue: string, options: LeaseOptions = {}, opts: CallOptions = {}): Promise<LeasedMessage[]> {
    const body = buildBody("lease", { ...options });
    const answer = await this.call("lease", {
      path: { queue },
      body,
      extraTimeoutMs: options.wait_ms ?? 0,
      signal: opts.signal,
    });
    return listOf<LeasedMessage>(answer, "messages");
  }

  /** `POST .../messages/{id}/ack`: done, the message is deleted.
   * {@link LeaseMismatch} when the lease expired or was superseded. */
  async ack(queue: string, id: string, leaseId: string, opts: CallOptions = {}): Promise<void> {
    const body = buildBody("ack", { lease_id: leaseId });
    await this.call("ack", { path: { queue, id }, body, signal: opts.signal });
  }

  /** `POST .../acks`: up to 1000 acks in one request; each item succeeds
   * or fails on its own, in input order. */
  async ackBatch(queue: string, acks: readonly AckItem[], opts: CallOptions = {}): Promise<AckResult[]> {
    const body = buildBody("ackBatch", { acks: acks.map(({ id, lease_id }) => ({ id, lease_id })) });
    const answer = await this.call("ackBatch", { path: { queue }, body, signal: opts.signal });
    return listOf<unknown>(answer, "results").map((r): AckResult => {
      const id = isRecord(r) && typeof r["id"] === "string" ? r["id"] : "";
      return isRecord(r) && "error" in r ? { id, acked: false, error: errorFromBody(r, null) } : { id, acked: true };
    });
  }

  /** `POST .../messages/{id}/nack`: failed; redelivered after `delay_ms`
   * or the queue's backoff, dead at `max_attempts`. With `defer: true`
   * (queues with `flow`) it is not counted as an attempt. */
  async nack(
    queue: string,
    id: string,
    leaseId: string,
    options: NackOptions = {},
    opts: CallOptions = {},
  ): Promise<void> {
    const body = buildBody("nack", { lease_id: leaseId, ...options });
    await this.call("nack", { path: { queue, id }, body, signal: opts.signal });
  }

  /** `POST .../messages/{id}/extend`: the lease now ends `lease_ms` (default
   * the queue's) from now; resolves to the new `lease_until`. */
  async extend(
    queue: string,
    id: string,
    leaseId: string,
    options: { lease_ms?: number } = {},
    opts: CallOptions = {},
  ): Promise<number> {
    const body = buildBody("extend", { lease_id: leaseId, lease_ms: options.lease_ms });
    const answer = await this.call("extend", { path: { queue, id }, body, signal: opts.signal });
    const until = isRecord(answer) ? answer["lease_until"] : undefined;
    if (typeof until !== "number") {
      throw new DelaydError("expected {lease_until} in the answer", { code: "invalid_response", status: null });
    }
    return until;
  }

  // ---------------------------------------------------------- dead letters

  /** `GET .../dead`: dead messages, oldest death first; page with
   * `after` (the last id of the previous page). */
  async listDead(queue: string, options: ListMessagesOptions = {}, opts: CallOptions = {}): Promise<Message[]> {
    const answer = await this.call("listDead", {
      path: { queue },
      query: { limit: options.limit, after: options.after },
      signal: opts.signal,
    });
    return listOf<Message>(answer, "messages");
  }

  /** `POST .../dead/redrive`: the given dead messages (all without `ids`)
   * back to ready with attempts reset; resolves to how many. */
  async redrive(queue: string, ids?: readonly string[], opts: CallOptions = {}): Promise<number> {
    const body = buildBody("redrive", { ids });
    const answer = await this.call("redrive", { path: { queue }, body, signal: opts.signal });
    const n = isRecord(answer) ? answer["redriven"] : undefined;
    if (typeof n !== "number") {
      throw new DelaydError("expected {redriven} in the answer", { code: "invalid_response", status: null });
    }
    return n;
  }

  // ------------------------------------------------------------- schedules

  /** `PUT .../schedules/{id}`: creates or replaces a schedule (the same
   * definition again changes nothing). */
  async putSchedule(queue: string, id: string, schedule: ScheduleInput, opts: CallOptions = {}): Promise<Schedule> {
    const { message, ...rest } = schedule;
    let wireMessage: Record<string, unknown> | undefined;
    if (message !== undefined) {
      const { payload, ...others } = message;
      wireMessage = { ...others, ...(payload === undefined ? {} : encodePayload(payload)) };
    }
    const body = buildBody("putSchedule", { ...rest, message: wireMessage });
    return (await this.call("putSchedule", { path: { queue, id }, body, signal: opts.signal })) as Schedule;
  }

  async getSchedule(queue: string, id: string, opts: CallOptions = {}): Promise<Schedule> {
    return (await this.call("getSchedule", { path: { queue, id }, signal: opts.signal })) as Schedule;
  }

  /** `GET .../schedules`, ordered by id. */
  async listSchedules(queue: string, opts: CallOptions = {}): Promise<Schedule[]> {
    return listOf<Schedule>(await this.call("listSchedules", { path: { queue }, signal: opts.signal }), "schedules");
  }

  /** `DELETE .../schedules/{id}`; the messages it enqueued stay. */
  async deleteSchedule(queue: string, id: string, opts: CallOptions = {}): Promise<void> {
    await this.call("deleteSchedule", { path: { queue, id }, signal: opts.signal });
  }

  async pauseSchedule(queue: string, id: string, opts: CallOptions = {}): Promise<Schedule> {
    return (await this.call("pauseSchedule", { path: { queue, id }, signal: opts.signal })) as Schedule;
  }

  /** Resumes from now: fire times that passed while paused never fire. */
  async resumeSchedule(queue: string, id: string, opts: CallOptions = {}): Promise<Schedule> {
    return (await this.call("resumeSchedule", { path: { queue, id }, signal: opts.signal })) as Schedule;
  }

  /** `POST .../trigger`: one message now from the template (id
   * `<schedule id>:manual:<now ms>`), not counted as a fire. */
  async triggerSchedule(queue: string, id: string, opts: CallOptions = {}): Promise<Enqueued> {
    return (await this.call("triggerSchedule", { path: { queue, id }, signal: opts.signal })) as Enqueued;
  }

  /** `POST /v1/schedules/preview`: the next fire times of a cron or
   * interval, computed as a schedule would; stores nothing. */
  async previewSchedule(input: PreviewInput, opts: CallOptions = {}): Promise<number[]> {
    const body = buildBody("previewSchedule", { ...input });
    return listOf<number>(await this.call("previewSchedule", { body, signal: opts.signal }), "fires");
  }

  // --------------------------------------------------------------- workers

  /** Deliveries of `queue` one at a time, for `for await`. Moving on to the
   * next iteration acks the delivery in hand (unless you settled it);
   * leaving the loop (break, throw, return) nacks it. Leases are extended
   * while you hold them. Stops on `signal` and, in Node, on SIGTERM or
   * SIGINT. See {@link DeliveriesOptions}. */
  deliveries(queue: string, options: DeliveriesOptions = {}): AsyncGenerator<Delivery, void, undefined> {
    return deliveries(this, queue, options);
  }

  /** Runs `handler` on each delivery of `queue`, up to `concurrency` at
   * once, until `signal` aborts (or SIGTERM/SIGINT in Node): resolving
   * acks, throwing nacks, throwing {@link Defer} defers. Resolves once the
   * running handlers have finished. See {@link WorkOptions}. */
  work(queue: string, handler: Handler, options: WorkOptions = {}): Promise<void> {
    return work(this, queue, handler, options);
  }
}
