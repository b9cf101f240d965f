/**
 * Receiving push deliveries: checking `delayd-signature`.
 *
 * For a queue with `push.secret`, delayd signs each push request with
 * `delayd-signature: v1=<hex HMAC-SHA256(secret, timestamp + "." + body)>`,
 * where `timestamp` is the `delayd-timestamp` header (Unix seconds) and
 * `body` the raw request bytes. Verify before trusting the request, on the
 * raw body (a re-serialized JSON body has other bytes), then answer 2xx to
 * ack; anything else makes delayd retry with the queue's backoff.
 *
 * Web Crypto (`crypto.subtle`) only, so this runs in Node >= 20, Deno,
 * Bun, Cloudflare Workers and browsers alike.
 */

/** Header shapes accepted: a Fetch `Headers`, Node's `IncomingMessage.headers`
 * (values may be arrays or undefined), a plain object, or name/value pairs. */
export type HeaderInput =
  | { forEach(callback: (value: string, name: string) => void): void }
  | Readonly<Record<string, string | readonly string[] | undefined>>
  | Iterable<readonly [string, string]>;

export type BodyInput = Uint8Array | ArrayBuffer | string;

export interface VerifyPushOptions {
  /** The queue's `push.secret`. */
  secret: string | Uint8Array;
  /** The raw request body, exactly as received (a string is taken as its
   * UTF-8 bytes). */
  body: BodyInput;
  headers: HeaderInput;
  /** How far (seconds) `delayd-timestamp` may be from now, default 300:
   * bounds the replay of a captured request (delayd signs each attempt
   * anew). */
  toleranceSec?: number;
  /** The current time as epoch milliseconds (as `Date.now()`) or a Date;
   * default now. For tests. */
  now?: number | Date;
}

/** A verified push request. */
export interface PushDelivery {
  readonly id: string;
  readonly queue: string;
  readonly attempt: number;
  readonly deliverAt: number;
  /** `delayd-timestamp`, Unix seconds. */
  readonly timestamp: number;
  /** `delayd-key`, when the message has a flow key. */
  readonly key: string | null;
  /** Every header, names lowercased (the message's own headers too). */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Uint8Array;
  /** The body as UTF-8 text. */
  readonly text: string;
}

/** The request is not a valid, fresh delivery signed with the secret. */
export class SignatureError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SignatureError";
  }
}

const encoder = new TextEncoder();

function bytesOf(input: BodyInput | string): Uint8Array {
  if (typeof input === "string") return encoder.encode(input);
  return input instanceof Uint8Array ? input : new Uint8Array(input);
}

function isPairs(h: HeaderInput): h is Iterable<readonly [string, string]> {
  return typeof (h as Iterable<unknown>)[Symbol.iterator] === "function" && typeof (h as Headers).get !== "function";
}

/** Lowercased name -> value. Repeated headers are joined with ", ", as
 * HTTP folds them (so several `delayd-signature` lines still verify). */
export function normalizeHeaders(headers: HeaderInput): Record<string, string> {
  const out: Record<string, string> = {};
  const add = (name: string, value: string) => {
    const key = name.toLowerCase();
    out[key] = key in out ? `${out[key]}, ${value}` : value;
  };
  if (isPairs(headers)) {
    for (const [name, value] of headers) add(name, value);
  } else if (typeof (headers as { forEach?: unknown }).forEach === "function" && !Array.isArray(headers)) {
    (headers as { forEach(cb: (value: string, name: string) => void): void }).forEach((v, n) => add(n, v));
  } else {
    for (const [name, value] of Object.entries(headers as Record<string, string | readonly string[] | undefined>)) {
      if (value === undefined) continue;
      if (typeof value === "string") add(name, value);
      else for (const v of value) add(name, v);
    }
  }
  return out;
}

function hex(bytes: ArrayBuffer): string {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Equal strings, in time that depends only on their lengths (the length
 * of a hex HMAC-SHA256 is public), so the comparison leaks nothing about
 * how much of a forged signature was right. */
function constantTimeEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** The `delayd-signature` value delayd sends for `body` at `timestamp`
 * (Unix seconds): `v1=<lowercase hex>`. For tests and for relaying. */
export async function signPush(secret: string | Uint8Array, timestamp: number, body: BodyInput): Promise<string> {
  const key = await crypto.subtle.importKey("raw", Uint8Array.from(bytesOf(secret)), { name: "HMAC", hash: "SHA-256" }, false, [
    "sign",
  ]);
  const prefix = encoder.encode(`${timestamp}.`);
  const payload = bytesOf(body);
  const message = new Uint8Array(prefix.length + payload.length);
  message.set(prefix, 0);
  message.set(payload, prefix.length);
  return `v1=${hex(await crypto.subtle.sign("HMAC", key, message))}`;
}

function intHeader(h: Record<string, string>, name: string, fallback?: number): number {
  const raw = h[name];
  if (raw === undefined) {
    if (fallback !== undefined) return fallback;
    throw new SignatureError(`missing ${name}`);
  }
  if (!/^\d+$/.test(raw.trim())) throw new SignatureError(`${name} is not an integer`);
  return Number(raw.trim());
}

/**
 * Checks a push request: `delayd-timestamp` within `toleranceSec` of now,
 * and one of the `v1=` signatures of `delayd-signature` (several may be
 * given, comma or space separated, e.g. while a secret is rotated) equal
 * to the HMAC of the body (constant-time). Resolves to the delivery, or
 * rejects with {@link SignatureError}.
 */
export async function verifyPush(options: VerifyPushOptions): Promise<PushDelivery> {
  const h = normalizeHeaders(options.headers);
  const signature = h["delayd-signature"];
  if (!signature) throw new SignatureError("missing delayd-signature");
  const timestamp = intHeader(h, "delayd-timestamp");
  const now = options.now === undefined ? Date.now() : Number(options.now);
  const tolerance = options.toleranceSec ?? 300;
  if (Math.abs(now / 1000 - timestamp) > tolerance) {
    throw new SignatureError("delayd-timestamp is outside the tolerance");
  }
  const body = bytesOf(options.body);
  const expected = await signPush(options.secret, timestamp, body);
  const candidates = signature.split(/[\s,]+/).filter((s) => s.startsWith("v1="));
  // Compare with every candidate (no early exit) so the time does not
  // tell which one matched.
  let ok = false;
  for (const candidate of candidates) ok = constantTimeEqual(expected, candidate.toLowerCase()) || ok;
  if (!ok) throw new SignatureError("signature mismatch");
  const id = h["delayd-id"];
  const queue = h["delayd-queue"];
  if (id === undefined || queue === undefined) throw new SignatureError("missing delayd-id or delayd-queue");
  return {
    id,
    queue,
    attempt: intHeader(h, "delayd-attempt", 1),
    deliverAt: intHeader(h, "delayd-deliver-at", 0),
    timestamp,
    key: h["delayd-key"] ?? null,
    headers: h,
    body,
    text: new TextDecoder().decode(body),
  };
}
