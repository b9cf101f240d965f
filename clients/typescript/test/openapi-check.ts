/**
 * Comparing the client's route table (`ROUTES`) with an OpenAPI document:
 * operations, query parameters and request-body fields, nested objects
 * included (the same checks as clients/python/tests/openapi_check.py).
 */

import { ROUTES, type FieldTable, type Route } from "delayd";

type Json = Record<string, unknown>;
const METHODS = ["get", "put", "post", "delete", "patch"] as const;

const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** "METHOD path" -> operation object. */
export function operations(doc: Json): Map<string, Json> {
  const out = new Map<string, Json>();
  for (const [path, item] of Object.entries((doc["paths"] as Json) ?? {})) {
    if (!isObj(item)) continue;
    for (const m of METHODS) {
      const op = item[m];
      if (isObj(op)) out.set(`${m.toUpperCase()} ${path}`, op);
    }
  }
  return out;
}

function resolveRef(doc: Json, schema: Json): Json {
  let s = schema;
  for (let depth = 0; typeof s["$ref"] === "string" && depth < 32; depth++) {
    const name = (s["$ref"] as string).split("/").pop() ?? "";
    s = ((doc["components"] as Json)["schemas"] as Json)[name] as Json;
  }
  return s;
}

/** Every property an object schema allows, through $ref, allOf/oneOf/anyOf
 * (a nullable wrapper is a oneOf with null), and array items. */
export function properties(doc: Json, schema: unknown): Map<string, unknown> {
  const props = new Map<string, unknown>();
  if (!isObj(schema)) return props;
  const s = resolveRef(doc, schema);
  if (s["type"] === "array" || "items" in s) return properties(doc, s["items"]);
  for (const key of ["allOf", "oneOf", "anyOf"]) {
    const parts = s[key];
    if (Array.isArray(parts)) for (const part of parts) for (const [k, v] of properties(doc, part)) props.set(k, v);
  }
  if (isObj(s["properties"])) for (const [k, v] of Object.entries(s["properties"])) props.set(k, v);
  return props;
}

function bodySchema(op: Json): unknown {
  const rb = op["requestBody"];
  if (!isObj(rb)) return undefined;
  const content = rb["content"];
  if (!isObj(content)) return undefined;
  const json = content["application/json"];
  return isObj(json) ? json["schema"] : undefined;
}

/** The route's body table without the dotted fields in `drop`. */
export function withoutFields(table: FieldTable, drop: readonly string[], prefix = ""): FieldTable {
  const out: Record<string, true | FieldTable> = {};
  for (const [k, v] of Object.entries(table)) {
    const path = prefix ? `${prefix}.${k}` : k;
    if (drop.includes(path)) continue;
    out[k] = v === true ? true : withoutFields(v, drop, path);
  }
  return out;
}

/** Differences between a body table and the document's request schema,
 * both ways: a field the client sends that the document lacks (the server
 * would refuse it), and a document field the client cannot send. */
function compareFields(doc: Json, where: string, table: FieldTable, schema: unknown): string[] {
  const problems: string[] = [];
  const props = properties(doc, schema);
  for (const [field, sub] of Object.entries(table)) {
    if (!props.has(field)) problems.push(`${where}.${field}: sent by the client, not in the document`);
    else if (sub !== true) problems.push(...compareFields(doc, `${where}.${field}`, sub, props.get(field)));
  }
  for (const field of props.keys()) {
    if (!(field in table)) problems.push(`${where}.${field}: in the document, the client cannot send it`);
  }
  return problems;
}

export interface Comparison {
  /** Operations of the document with no client route. */
  uncovered: string[];
  /** Client routes the document does not have. */
  unknown: string[];
  /** Body-field and query-parameter differences. */
  fields: string[];
}

/** Compares `routes` with `doc`. Without flow control on the server
 * (`flow: false`), the client's flow-only routes and fields are left out. */
export function compare(doc: Json, flow: boolean, routes: Readonly<Record<string, Route>> = ROUTES): Comparison {
  const ops = operations(doc);
  const mine = new Map<string, [string, Route]>();
  for (const [name, route] of Object.entries(routes)) {
    if (route.flow && !flow) continue;
    mine.set(`${route.method} ${route.path}`, [name, route]);
  }
  const uncovered = [...ops.keys()].filter((k) => !mine.has(k)).sort();
  const unknown = [...mine.keys()].filter((k) => !ops.has(k)).sort();
  const fields: string[] = [];
  for (const [key, [name, route]] of mine) {
    const op = ops.get(key);
    if (op === undefined) continue;
    const query = (Array.isArray(op["parameters"]) ? op["parameters"] : [])
      .filter((p): p is Json => isObj(p) && p["in"] === "query")
      .map((p) => String(p["name"]))
      .sort();
    const ours = [...(route.query ?? [])].sort();
    if (query.join() !== ours.join()) fields.push(`${name}: query [${ours}] != document [${query}]`);
    const table = route.body === undefined ? {} : flow ? route.body : withoutFields(route.body, route.flowFields ?? []);
    fields.push(...compareFields(doc, name, table, bodySchema(op)));
  }
  return { uncovered, unknown, fields };
}
