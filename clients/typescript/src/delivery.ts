/**
 * {@link Delivery}: a leased message in a worker's hands, which keeps its
 * own lease alive and can be settled (ack, nack, defer) exactly once.
 */

import { LeaseMismatch, MessageNotFound } from "./errors.js";
import type { LeasedMessage, MessageHeaders, NackOptions } from "./models.js";
import { payloadBytes, payloadJson, payloadText } from "./payload.js";

/** What a delivery needs of the client (an interface, so this module does
 * not import the client and the two do not form a cycle). */
export interface LeaseOps {
  ack(queue: string, id: string, leaseId: string): Promise<void>;
  nack(queue: string, id: string, leaseId: string, options?: NackOptions): Promise<void>;
  extend(queue: string, id: string, leaseId: string, options?: { lease_ms?: number }): Promise<number>;
}

/** Thrown by a handler of {@link DelaydClient.work} (or passed to
 * {@link Delivery.defer}) to defer the message rather than fail it: it is
 * nacked with `defer: true`, so it is not counted as an attempt, and comes
 * back after `delayMs` (without it, after the queue's deferral backoff).
 * Deferral is part of flow control: the queue needs a `flow` config. */
export class Defer extends Error {
  readonly delayMs: number | undefined;

  constructor(delayMs?: number, message = "deferred") {
    super(message);
    this.name = "Defer";
    this.delayMs = delayMs;
  }
}

/** The lease length (ms) to extend by: the worker's `leaseMs`, else the
 * queue's `lease_ms`, fetched once and shared by all its deliveries. */
type LeaseMs = () => Promise<number>;

export class Delivery {
  readonly queue: string;
  /** The message as the lease call returned it. */
  readonly message: LeasedMessage;
  /** The end of the lease as last extended (server time, epoch ms). */
  leaseUntil: number;
  private readonly ops: LeaseOps;
  private readonly lost = new AbortController();
  private readonly leaseMs: LeaseMs;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private settledAs: "ack" | "nack" | undefined;

  /** Workers create deliveries; user code receives them. */
  constructor(ops: LeaseOps, queue: string, message: LeasedMessage, leaseMs: LeaseMs) {
    this.ops = ops;
    this.queue = queue;
    this.message = message;
    this.leaseUntil = message.lease_until;
    this.leaseMs = leaseMs;
  }

  get id(): string {
    return this.message.id;
  }
  get leaseId(): string {
    return this.message.lease_id;
  }
  /** 1 for the first delivery. */
  get attempt(): number {
    return this.message.attempt;
  }
  get headers(): MessageHeaders {
    return this.message.headers;
  }
  /** The flow-control key, `null` when none. */
  get key(): string | null {
    return this.message.key ?? null;
  }
  get text(): string {
    return payloadText(this.message);
  }
  get bytes(): Uint8Array {
    return payloadBytes(this.message);
  }
  json<T = unknown>(): T {
    return payloadJson<T>(this.message);
  }

  /** Aborted when the lease is lost (it expired, or the message was
   * cancelled): another consumer may get the message, so long work should
   * stop. Its reason is the {@link LeaseMismatch} or
   * {@link MessageNotFound} the extension got. */
  get signal(): AbortSignal {
    return this.lost.signal;
  }

  /** Whether it was acked or nacked (by you or by the worker). */
  get settled(): boolean {
    return this.settledAs !== undefined;
  }

  /** Done: the message is deleted. Does nothing when already settled. */
  async ack(): Promise<void> {
    if (!this.take("ack")) return;
    await this.ops.ack(this.queue, this.id, this.leaseId);
  }

  /** Failed: redelivered after `delay_ms` (default: the queue's backoff),
   * or dead at `max_attempts`. Does nothing when already settled. */
  async nack(options: NackOptions = {}): Promise<void> {
    if (!this.take("nack")) return;
    await this.ops.nack(this.queue, this.id, this.leaseId, options);
  }

  /** Not now, and not a failure (flow control; see {@link Defer}). */
  async defer(delayMs?: number): Promise<void> {
    await this.nack({ defer: true, delay_ms: delayMs });
  }

  /** Extends the lease now (`leaseMs` default: the worker's lease length);
   * the worker also does this by itself at half the lease. */
  async extend(leaseMs?: number): Promise<number> {
    const lease_ms = leaseMs ?? (await this.leaseMs());
    this.leaseUntil = await this.ops.extend(this.queue, this.id, this.leaseId, { lease_ms });
    return this.leaseUntil;
  }

  private take(as: "ack" | "nack"): boolean {
    if (this.settledAs !== undefined) return false;
    this.settledAs = as;
    this.stopKeeping();
    return true;
  }

  /** @internal Extends the lease every half lease until settled or lost:
   * at half, a failed extension still has half a lease to succeed in. */
  keepAlive(onError: (err: unknown) => void): void {
    const schedule = (ms: number) => {
      if (this.settled || this.lost.signal.aborted) return;
      this.timer = setTimeout(run, ms);
    };
    let lease = 0;
    const run = async () => {
      this.timer = undefined;
      if (this.settled) return;
      try {
        lease = await this.leaseMs();
        await this.extend(lease);
      } catch (err) {
        if (this.settled) return;
        if (err instanceof LeaseMismatch || err instanceof MessageNotFound) {
          this.lost.abort(err);
          onError(err);
          return;
        }
        // Transient (network, 503): try again soon, while the lease lasts.
        onError(err);
        schedule(Math.min(1_000, Math.max(lease / 8, 50)));
        return;
      }
      schedule(lease / 2);
    };
    void this.leaseMs().then(
      (ms) => schedule(ms / 2),
      (err: unknown) => onError(err),
    );
  }

  /** @internal */
  stopKeeping(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
  }
}
