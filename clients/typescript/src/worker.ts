/**
 * Workers: `for await (const d of client.deliveries(queue))` and
 * `client.work(queue, handler, {concurrency})`.
 *
 * Both long-poll the lease endpoint, keep each held lease alive (extending
 * it at half the lease, see {@link Delivery}), settle each delivery
 * exactly once, and stop gracefully: on the caller's AbortSignal and, in
 * Node, on SIGTERM or SIGINT, they stop leasing (a waiting lease call is
 * aborted at once), let the handlers in progress finish and settle them,
 * then return.
 */

import { Delivery, Defer, type LeaseOps } from "./delivery.js";
import { TransportError, Unavailable } from "./errors.js";
import type { LeasedMessage, LeaseOptions, Queue } from "./models.js";
import { sleep } from "./transport.js";

/** What the workers need of the client. */
export interface WorkerClient extends LeaseOps {
  lease(queue: string, options?: LeaseOptions, opts?: { signal?: AbortSignal }): Promise<LeasedMessage[]>;
  getQueue(queue: string): Promise<Queue>;
}

export type Handler = (delivery: Delivery) => unknown;

/** Errors a worker reports rather than throws: a handler that threw (with
 * its delivery), a failed settle or extension (with its delivery), a
 * lease call that failed and will be retried (without). */
export type ErrorReporter = (err: unknown, delivery?: Delivery) => void;

interface CommonOptions {
  /** Stops the worker: no more leases, running work finishes. */
  signal?: AbortSignal;
  /** Lease length (ms); default the queue's `lease_ms`. */
  leaseMs?: number;
  /** How long each lease call may wait for a message, default 20000 ms. */
  waitMs?: number;
  /** Stop on SIGTERM and SIGINT (Node, Deno), default true. A second
   * signal gets the runtime's default behaviour (exit). */
  handleSignals?: boolean;
  /** Default: `console.error`. */
  onError?: ErrorReporter;
}

export interface DeliveriesOptions extends CommonOptions {
  /** Messages per lease call, default 1. More saves round trips, but the
   * ones not yet handed out when the loop ends are given back (nacked with
   * no delay, which counts as an attempt). */
  max?: number;
}

export interface WorkOptions extends CommonOptions {
  /** Handlers running at once, default 1. */
  concurrency?: number;
}

const defaultReporter: ErrorReporter = (err, delivery) => {
  const where = delivery ? `message ${delivery.id} of ${delivery.queue}` : "lease";
  console.error(`delayd worker: ${where}:`, err);
};

/** The minimal shape of Node's (and Deno's Node-compatible) `process`,
 * looked up at runtime: the package must also load in a browser. */
interface SignalSource {
  on(event: string, listener: () => void): unknown;
  off(event: string, listener: () => void): unknown;
}

function signalSource(): SignalSource | undefined {
  const proc = (globalThis as { process?: Partial<SignalSource> }).process;
  return typeof proc?.on === "function" && typeof proc.off === "function" ? (proc as SignalSource) : undefined;
}

/** One stop switch from the caller's signal and the process signals. */
class Stopper {
  private readonly controller = new AbortController();
  private readonly detach: (() => void)[] = [];
  /** Resolves when stopped (for racing against running handlers). */
  readonly stopped: Promise<void>;

  constructor(signal: AbortSignal | undefined, handleSignals: boolean) {
    this.stopped = new Promise((resolve) => {
      this.controller.signal.addEventListener("abort", () => resolve(), { once: true });
    });
    if (signal) {
      const onAbort = () => this.stop(signal.reason);
      if (signal.aborted) onAbort();
      signal.addEventListener("abort", onAbort, { once: true });
      this.detach.push(() => signal.removeEventListener("abort", onAbort));
    }
    const proc = handleSignals ? signalSource() : undefined;
    if (proc) {
      const onSignal = () => {
        this.stop(new Error("stopped by a process signal"));
        // Gone after the first: a second Ctrl-C exits the default way.
        this.dispose();
      };
      for (const name of ["SIGTERM", "SIGINT"]) {
        try {
          proc.on(name, onSignal);
          this.detach.push(() => proc.off(name, onSignal));
        } catch {
          // A runtime without this signal (Windows has no SIGTERM).
        }
      }
    }
  }

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  get isStopped(): boolean {
    return this.controller.signal.aborted;
  }

  stop(reason: unknown): void {
    if (!this.isStopped) this.controller.abort(reason);
  }

  dispose(): void {
    for (const undo of this.detach.splice(0)) undo();
  }
}

/** The lease length the worker extends by: the option, else the queue's
 * `lease_ms`, read once when the first message arrives (the queue exists
 * then; leasing from an unknown queue does not create it). */
function leaseLength(client: WorkerClient, queue: string, leaseMs: number | undefined): () => Promise<number> {
  let known: Promise<number> | undefined = leaseMs === undefined ? undefined : Promise.resolve(leaseMs);
  return () => {
    known ??= client.getQueue(queue).then(
      (q) => q.config.lease_ms,
      (err: unknown) => {
        known = undefined; // try again at the next extension
        throw err;
      },
    );
    return known;
  };
}

/** Leases one batch, riding out transient failures (network, 503) with a
 * capped backoff so a worker survives a server restart; other errors (a
 * wrong token, a bad option) are the caller's and are thrown. Resolves to
 * `[]` once stopped. */
async function leaseBatch(
  client: WorkerClient,
  queue: string,
  options: LeaseOptions,
  stop: Stopper,
  report: ErrorReporter,
): Promise<LeasedMessage[]> {
  for (let failures = 0; !stop.isStopped; failures++) {
    try {
      return await client.lease(queue, options, { signal: stop.signal });
    } catch (err) {
      if (stop.isStopped) return [];
      if (!(err instanceof TransportError || err instanceof Unavailable)) throw err;
      report(err);
      try {
        await sleep(Math.min(30_000, 500 * 2 ** failures), stop.signal);
      } catch {
        return [];
      }
    }
  }
  return [];
}

/** The longest `error` a nack may carry, in bytes of UTF-8 (api.md). */
export const MAX_ERROR_BYTES = 1024;

/** What a failed handler's nack says: the error's name and message, cut to
 * {@link MAX_ERROR_BYTES} at a character boundary. */
export function errorText(error: unknown): string {
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= MAX_ERROR_BYTES) return text;
  // A cut inside a character drops that character (`fatal: false` would
  // put a replacement character there instead).
  let end = MAX_ERROR_BYTES;
  while (end > 0 && ((bytes[end] ?? 0) & 0xc0) === 0x80) end -= 1;
  return new TextDecoder().decode(bytes.subarray(0, end));
}

/** Settles `delivery` after its handler: ack on success, nack with
 * `defer` on {@link Defer}, nack on any other error (unless the handler
 * settled it itself). Failures to settle are reported, not thrown: the
 * lease then simply expires and the message is redelivered. */
async function settle(delivery: Delivery, outcome: { error: unknown } | undefined, report: ErrorReporter) {
  try {
    if (outcome === undefined) await delivery.ack();
    else if (outcome.error instanceof Defer) await delivery.defer(outcome.error.delayMs);
    else await delivery.nack({ error: errorText(outcome.error) });
  } catch (err) {
    report(err, delivery);
  }
}

export async function* deliveries(
  client: WorkerClient,
  queue: string,
  options: DeliveriesOptions = {},
): AsyncGenerator<Delivery, void, undefined> {
  const report = options.onError ?? defaultReporter;
  const stop = new Stopper(options.signal, options.handleSignals ?? true);
  const leaseMs = leaseLength(client, queue, options.leaseMs);
  const request: LeaseOptions = { max: options.max ?? 1, wait_ms: options.waitMs ?? 20_000, lease_ms: options.leaseMs };
  const buffer: Delivery[] = [];
  let current: Delivery | undefined;
  try {
    while (!stop.isStopped) {
      if (buffer.length === 0) {
        for (const message of await leaseBatch(client, queue, request, stop, report)) {
          const delivery = new Delivery(client, queue, message, leaseMs);
          delivery.keepAlive((err) => report(err, delivery));
          buffer.push(delivery);
        }
        continue;
      }
      current = buffer.shift() as Delivery;
      yield current;
      // The loop body finished without settling: that is success.
      await settle(current, undefined, report);
      current = undefined;
    }
  } finally {
    stop.dispose();
    // Left by break, throw or return: the message in hand was not done.
    if (current !== undefined) await settle(current, { error: undefined }, report);
    for (const unhandled of buffer) {
      unhandled.stopKeeping();
      try {
        await unhandled.nack({ delay_ms: 0 });
      } catch (err) {
        report(err, unhandled);
      }
    }
  }
}

export async function work(
  client: WorkerClient,
  queue: string,
  handler: Handler,
  options: WorkOptions = {},
): Promise<void> {
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError("concurrency must be an integer >= 1");
  const report = options.onError ?? defaultReporter;
  const stop = new Stopper(options.signal, options.handleSignals ?? true);
  const leaseMs = leaseLength(client, queue, options.leaseMs);
  const running = new Set<Promise<void>>();

  const run = async (delivery: Delivery) => {
    let outcome: { error: unknown } | undefined;
    try {
      await handler(delivery);
    } catch (error) {
      outcome = { error };
      if (!(error instanceof Defer)) report(error, delivery);
    }
    await settle(delivery, outcome, report);
  };

  try {
    while (!stop.isStopped) {
      if (running.size >= concurrency) {
        // Wait for a free slot (or the stop).
        await Promise.race([...running, stop.stopped]);
        continue;
      }
      // Lease only as many as there are free slots: a leased message
      // waiting for a slot would hold its lease (and its flow-control
      // slot) for nothing.
      const request: LeaseOptions = {
        max: Math.min(1000, concurrency - running.size),
        wait_ms: options.waitMs ?? 20_000,
        lease_ms: options.leaseMs,
      };
      // Messages leased are run even if the stop came meanwhile: they are
      // ours now, and finishing them beats letting their leases expire.
      for (const message of await leaseBatch(client, queue, request, stop, report)) {
        const delivery = new Delivery(client, queue, message, leaseMs);
        delivery.keepAlive((err) => report(err, delivery));
        const task: Promise<void> = run(delivery).finally(() => running.delete(task));
        running.add(task);
      }
    }
  } finally {
    stop.dispose();
    await Promise.allSettled([...running]);
  }
}
