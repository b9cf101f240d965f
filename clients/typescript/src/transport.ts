/**
 * Sending one API call over `fetch`: URL, auth, timeout, error mapping and
 * retries.
 *
 * Retry rules (bounded, with jittered exponential backoff):
 * - what is retried: a 503 (`unavailable`: by the API's promise the
 *   request changed nothing) and a failure to get any answer (connection
 *   refused or reset, DNS failure, the client's timeout);
 * - which calls: those whose repeat is harmless ({@link RetryRule}: reads,
 *   calls idempotent by the contract, an enqueue that carries a client
 *   id). Any other call is retried only after "connection refused", which
 *   proves the request was never sent.
 * Nothing else is retried: a 4xx is the caller's to handle, and repeating
 * an ack or a lease whose answer was lost would not be the same call.
 */

import { DelaydError, TransportError, Unavailable, errorFromBody } from "./errors.js";
import { ROUTES, type Route, type RouteName } from "./routes.js";

export interface RetryOptions {
  /** Total tries, the first included (1: no retry). Default 4. */
  attempts?: number;
  /** Pause before the first retry, default 100 ms; doubles each retry. */
  initialMs?: number;
  /** Longest pause, default 2000 ms. */
  maxMs?: number;
}

export interface ClientOptions {
  /** Base URL of the server, e.g. `http://127.0.0.1:7070`. */
  url: string;
  /** Bearer token, for a server started with `--token`. */
  token?: string;
  /** Per request, default 30000 ms; a lease call adds its `wait_ms`. */
  timeoutMs?: number;
  /** Retry policy; `false` turns retries off. */
  retry?: RetryOptions | false;
  /** A `fetch` to use instead of the global one (tests, proxies, custom
   * agents). */
  fetch?: typeof fetch;
  /** Extra headers sent with every request. */
  headers?: Readonly<Record<string, string>>;
}

/** One call, as the client methods describe it. */
export interface CallSpec {
  /** Values of the path template's `{...}` segments. */
  path?: Readonly<Record<string, string>>;
  query?: Readonly<Record<string, string | number | undefined>>;
  /** The JSON body, already checked against the route table. */
  body?: unknown;
  /** Whether a repeat is harmless for this call (see the module doc). */
  retrySafe: boolean;
  /** Added to the timeout: the server holds a lease call up to its wait. */
  extraTimeoutMs?: number;
  /** The answer is text (`/metrics`), not JSON. */
  text?: boolean;
  signal?: AbortSignal | undefined;
}

/** The error `fetch` rejects with when its cause says the request was
 * never sent (Node's undici puts the system error in `cause`). */
function neverSent(err: unknown): boolean {
  const cause = (err as { cause?: { code?: unknown } } | null)?.cause;
  return cause?.code === "ECONNREFUSED";
}

function describe(err: unknown): string {
  const base = err instanceof Error ? err.message : String(err);
  const cause = (err as { cause?: { code?: unknown; message?: unknown } } | null)?.cause;
  const detail = cause?.code ?? cause?.message;
  return typeof detail === "string" && !base.includes(detail) ? `${base} (${detail})` : base;
}

/** Resolves after `ms`, or rejects with the signal's reason when it is
 * aborted first. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const done = () => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    };
    const timer = setTimeout(done, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

export function expandPath(template: string, values: Readonly<Record<string, string>> = {}): string {
  return template.replace(/\{(\w+)\}/g, (_, name: string) => {
    const value = values[name];
    if (value === undefined) throw new TypeError(`${template}: no value for {${name}}`);
    // A "." or ".." segment would be resolved away by the URL parser
    // (%2E too), silently reaching another route.
    if (value === "" || value === "." || value === "..") {
      throw new TypeError(`${name} ${JSON.stringify(value)} cannot be sent in a URL path`);
    }
    // encodeURIComponent also encodes "/" (a queue "jobs/nightly" is the
    // single segment "jobs%2Fnightly", as the API requires).
    return encodeURIComponent(value);
  });
}

export class Transport {
  readonly baseUrl: string;
  private readonly token: string | undefined;
  private readonly timeoutMs: number;
  private readonly attempts: number;
  private readonly initialMs: number;
  private readonly maxMs: number;
  private readonly fetchImpl: typeof fetch;
  private readonly extraHeaders: Readonly<Record<string, string>>;

  constructor(options: ClientOptions) {
    if (typeof options.url !== "string" || options.url === "") throw new TypeError("url is required");
    this.baseUrl = options.url.replace(/\/+$/, "");
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    const retry = options.retry === false ? { attempts: 1 } : (options.retry ?? {});
    this.attempts = Math.max(1, retry.attempts ?? 4);
    this.initialMs = retry.initialMs ?? 100;
    this.maxMs = retry.maxMs ?? 2_000;
    // Bind: some runtimes' fetch throws "Illegal invocation" when called
    // as a method of another object.
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
    this.extraHeaders = options.headers ?? {};
  }

  /** Sends the call of route `name`; resolves to the parsed answer
   * (`undefined` for 204, a string for text answers). */
  async call(name: RouteName, spec: CallSpec): Promise<unknown> {
    const route: Route = ROUTES[name];
    const url = this.url(route, spec);
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.once(route, url, spec);
      } catch (err) {
        if (!this.shouldRetry(err, spec, attempt)) throw err;
      }
      await sleep(this.backoff(attempt), spec.signal);
    }
  }

  private shouldRetry(err: unknown, spec: CallSpec, attempt: number): boolean {
    if (attempt >= this.attempts || spec.signal?.aborted) return false;
    if (err instanceof Unavailable) return spec.retrySafe;
    if (err instanceof TransportError) return spec.retrySafe || neverSent(err.cause);
    return false;
  }

  /** "Full jitter" between half and all of the capped exponential step,
   * so many clients that failed together do not retry in step. */
  private backoff(attempt: number): number {
    const cap = Math.min(this.maxMs, this.initialMs * 2 ** (attempt - 1));
    return cap / 2 + Math.random() * (cap / 2);
  }

  private url(route: Route, spec: CallSpec): string {
    let url = this.baseUrl + expandPath(route.path, spec.path);
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(spec.query ?? {})) {
      if (v !== undefined) params.set(k, String(v));
    }
    const qs = params.toString();
    if (qs) url += `?${qs}`;
    return url;
  }

  private headers(hasBody: boolean): Record<string, string> {
    // Only what is needed: in a browser every non-simple header costs a
    // CORS preflight.
    const h: Record<string, string> = { accept: "application/json", ...this.extraHeaders };
    if (hasBody) h["content-type"] = "application/json";
    if (this.token) h["authorization"] = `Bearer ${this.token}`;
    return h;
  }

  private async once(route: Route, url: string, spec: CallSpec): Promise<unknown> {
    const hasBody = spec.body !== undefined;
    const timeoutMs = this.timeoutMs + (spec.extraTimeoutMs ?? 0);
    const timeout = new AbortController();
    const timer = setTimeout(
      () => timeout.abort(new TransportError(`${route.method} ${url}: no answer within ${timeoutMs} ms`)),
      timeoutMs,
    );
    // The caller's signal aborts the request too; AbortSignal.any is not in
    // every runtime this package supports, so link the two by hand.
    const onAbort = () => timeout.abort(spec.signal?.reason);
    spec.signal?.addEventListener("abort", onAbort, { once: true });
    if (spec.signal?.aborted) onAbort();
    try {
      let res: Response;
      try {
        res = await this.fetchImpl(url, {
          method: route.method,
          headers: this.headers(hasBody),
          body: hasBody ? JSON.stringify(spec.body) : null,
          signal: timeout.signal,
        });
      } catch (err) {
        throw this.failure(err, route, url, spec, timeout.signal);
      }
      let text: string;
      try {
        text = await res.text();
      } catch (err) {
        throw this.failure(err, route, url, spec, timeout.signal);
      }
      if (!res.ok) {
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          body = undefined;
        }
        throw errorFromBody(body, res.status, text);
      }
      if (spec.text) return text;
      if (res.status === 204 || text === "") return undefined;
      try {
        return JSON.parse(text);
      } catch (err) {
        throw new DelaydError(`${route.method} ${url}: the answer is not JSON`, {
          code: "invalid_response",
          status: res.status,
          cause: err,
        });
      }
    } finally {
      clearTimeout(timer);
      spec.signal?.removeEventListener("abort", onAbort);
    }
  }

  /** What to throw for a failed fetch: the caller's own abort reason when
   * it aborted (so `signal` behaves as everywhere else in JS), the
   * timeout's TransportError, or a TransportError wrapping the cause. */
  private failure(err: unknown, route: Route, url: string, spec: CallSpec, signal: AbortSignal): unknown {
    if (spec.signal?.aborted) return spec.signal.reason;
    if (signal.aborted && signal.reason instanceof TransportError) return signal.reason;
    return new TransportError(`${route.method} ${url}: ${describe(err)}`, { cause: err });
  }
}
