/**
 * Errors: one class per error code of the HTTP API.
 *
 * Every error the server answers is `{"error": {"code", "message"}}`. The
 * client throws the class registered for `code`, so callers write
 * `catch (e) { if (e instanceof LeaseMismatch) ... }` rather than compare
 * strings. A code this client does not know (a newer server may add some)
 * throws the base {@link DelaydError}, which still carries the code.
 */

/** An error answered by the server, or the failure to get an answer
 * ({@link TransportError}). */
export class DelaydError extends Error {
  /** The API's snake_case error code (`"queue_not_found"`, ...). */
  readonly code: string;
  /** The HTTP status; `null` when no answer came. For an item of a batch
   * answer, the status the single call would have had. */
  readonly status: number | null;

  constructor(message: string, options: { code: string; status: number | null; cause?: unknown }) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.code = options.code;
    this.status = options.status;
    // `name` from the concrete class, so stack traces and console.log show
    // "LeaseMismatch: ..." rather than "Error: ...".
    this.name = new.target.name;
  }
}

/** Options of a concrete error class: its code is fixed, its status
 * defaults to the code's usual one. */
export interface ApiErrorOptions {
  status?: number | null;
  cause?: unknown;
}

/** The constructor shape every concrete class shares (for the lookup
 * table), with the class's code and usual status as statics. */
export interface ApiErrorClass {
  new (message: string, options?: ApiErrorOptions): DelaydError;
  readonly code: string;
  readonly status: number;
}

function fixed(cls: ApiErrorClass, options: ApiErrorOptions | undefined) {
  return {
    code: cls.code,
    status: options?.status === undefined ? cls.status : options.status,
    cause: options?.cause,
  };
}

// Written out class by class (not made by a factory) so that each one's
// declaration says `extends DelaydError` and its name is the class name.

/** 400: the body is not JSON. */
export class InvalidJson extends DelaydError {
  static readonly code = "invalid_json";
  static readonly status = 400;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(InvalidJson, options));
  }
}

/** 400: well-formed JSON of the wrong shape (unknown field, bad value, a
 * limit exceeded); the message names the field. */
export class InvalidArgument extends DelaydError {
  static readonly code = "invalid_argument";
  static readonly status = 400;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(InvalidArgument, options));
  }
}

/** 401: the server has tokens and the request's bearer token is missing
 * or wrong. */
export class Unauthorized extends DelaydError {
  static readonly code = "unauthorized";
  static readonly status = 401;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(Unauthorized, options));
  }
}

/** 403: the token is valid but lacks the scope (`VERB:QUEUE_GLOB`) the
 * call needs; the message names the verb and the queue. */
export class Forbidden extends DelaydError {
  static readonly code = "forbidden";
  static readonly status = 403;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(Forbidden, options));
  }
}

/** 404: no such route (an older server, or a wrong base URL). */
export class NotFound extends DelaydError {
  static readonly code = "not_found";
  static readonly status = 404;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(NotFound, options));
  }
}

/** 404: the queue does not exist. */
export class QueueNotFound extends DelaydError {
  static readonly code = "queue_not_found";
  static readonly status = 404;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(QueueNotFound, options));
  }
}

/** 404: the message does not exist (acked, cancelled, or never was). */
export class MessageNotFound extends DelaydError {
  static readonly code = "message_not_found";
  static readonly status = 404;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(MessageNotFound, options));
  }
}

/** 404: the schedule does not exist in a known queue. */
export class ScheduleNotFound extends DelaydError {
  static readonly code = "schedule_not_found";
  static readonly status = 404;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(ScheduleNotFound, options));
  }
}

/** 405: the route exists, not with this method. */
export class MethodNotAllowed extends DelaydError {
  static readonly code = "method_not_allowed";
  static readonly status = 405;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(MethodNotAllowed, options));
  }
}

/** 409: the lease expired or was superseded; another consumer may hold
 * the message now, so the work done under it must not be acked. */
export class LeaseMismatch extends DelaydError {
  static readonly code = "lease_mismatch";
  static readonly status = 409;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(LeaseMismatch, options));
  }
}

/** 409: the message's state does not allow the call (PATCH of a leased or
 * dead message). */
export class InvalidState extends DelaydError {
  static readonly code = "invalid_state";
  static readonly status = 409;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(InvalidState, options));
  }
}

/** 413: payload over the server's `--max-payload`, or body over
 * `--max-body`. */
export class PayloadTooLarge extends DelaydError {
  static readonly code = "payload_too_large";
  static readonly status = 413;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(PayloadTooLarge, options));
  }
}

/** 503: store failure or shutting down; the request changed nothing. */
export class Unavailable extends DelaydError {
  static readonly code = "unavailable";
  static readonly status = 503;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(Unavailable, options));
  }
}

/** 507: the embedded store is below its disk reserve; enqueues are refused
 * until consumers free space. */
export class InsufficientStorage extends DelaydError {
  static readonly code = "insufficient_storage";
  static readonly status = 507;
  constructor(message: string, options?: ApiErrorOptions) {
    super(message, fixed(InsufficientStorage, options));
  }
}

/** No answer: connection refused or reset, DNS failure, or the client's
 * own timeout. `status` is `null`. Whether the server acted on the request
 * is unknown (unless it was never sent). */
export class TransportError extends DelaydError {
  constructor(message: string, options: { cause?: unknown } = {}) {
    super(message, { code: "transport", status: null, cause: options.cause });
  }
}

const CLASSES: readonly ApiErrorClass[] = [
  InvalidJson,
  InvalidArgument,
  Unauthorized,
  Forbidden,
  NotFound,
  QueueNotFound,
  MessageNotFound,
  ScheduleNotFound,
  MethodNotAllowed,
  LeaseMismatch,
  InvalidState,
  PayloadTooLarge,
  Unavailable,
  InsufficientStorage,
];

const BY_CODE: ReadonlyMap<string, ApiErrorClass> = new Map(CLASSES.map((cls) => [cls.code, cls]));

/** The error class of an API code, or `undefined` for a code this client
 * does not know. */
export function errorClassOf(code: string): ApiErrorClass | undefined {
  return BY_CODE.get(code);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The error for an API error object: a whole answer `{"error": {...}}` or
 * one failed item of a batch answer. `status` is the answer's (`null` for a
 * batch item: then the class's own status is used). A body that is not an
 * API error (a proxy's HTML page) gives a base DelaydError with code
 * `http_error`.
 */
export function errorFromBody(body: unknown, status: number | null, fallbackText = ""): DelaydError {
  const detail = isRecord(body) ? body["error"] : undefined;
  if (!isRecord(detail) || typeof detail["code"] !== "string") {
    const text = fallbackText.trim().slice(0, 200);
    return new DelaydError(text || `HTTP ${status ?? "?"} without an error body`, { code: "http_error", status });
  }
  const code = detail["code"];
  const message = typeof detail["message"] === "string" ? detail["message"] : code;
  const cls = BY_CODE.get(code);
  if (cls === undefined) return new DelaydError(message, { code, status });
  return status === null ? new cls(message) : new cls(message, { status });
}
