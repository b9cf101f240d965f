/**
 * Payload encoding. The API carries text as `payload` and other bytes as
 * `payload_base64`; these helpers convert with the ES/Web globals only
 * (`btoa`, `atob`, `TextEncoder`, `TextDecoder`), which Node >= 16, Deno
 * and browsers all have, so no Buffer and no dependency.
 */

import type { PayloadInput, ReceivedPayload } from "./models.js";

const encoder = new TextEncoder();
// fatal: a payload the server sent as text is UTF-8 by the API's rule; a
// decoding failure means a caller asked for text of binary bytes.
const decoder = new TextDecoder("utf-8", { fatal: true });

/** Standard base64 (padded) of `bytes`. */
export function toBase64(bytes: Uint8Array): string {
  // btoa takes a "binary string"; build it in chunks, because spreading a
  // large array into String.fromCharCode overflows the call stack.
  let binary = "";
  const chunk = 0x8000;
  for (let i = 0; i < bytes.length; i += chunk) {
    binary += String.fromCharCode(...bytes.subarray(i, i + chunk));
  }
  return btoa(binary);
}

export function fromBase64(text: string): Uint8Array {
  const binary = atob(text);
  const out = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
  return out;
}

/** The wire fields of a payload to send. */
export function encodePayload(payload: PayloadInput): { payload: string } | { payload_base64: string } {
  if (typeof payload === "string") return { payload };
  if (payload instanceof Uint8Array) return { payload_base64: toBase64(payload) };
  throw new TypeError("payload must be a string or a Uint8Array");
}

/** The bytes of a received payload. */
export function payloadBytes(message: ReceivedPayload): Uint8Array {
  if (typeof message.payload === "string") return encoder.encode(message.payload);
  return fromBase64(message.payload_base64 ?? "");
}

/** The text of a received payload (UTF-8). Throws a TypeError for a
 * payload that is not UTF-8 (the server sent it as `payload_base64`). */
export function payloadText(message: ReceivedPayload): string {
  if (typeof message.payload === "string") return message.payload;
  return decoder.decode(fromBase64(message.payload_base64 ?? ""));
}

/** The payload parsed as JSON. */
export function payloadJson<T = unknown>(message: ReceivedPayload): T {
  return JSON.parse(payloadText(message)) as T;
}
