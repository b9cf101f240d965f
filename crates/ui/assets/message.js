// One message: every field of api.md's message object (`last_error`
// among them), its actions, its history as a timeline (history.js), its
// headers and payload (as text, or base64 when not UTF-8).
//
// A field is drawn only when the server sent it: an older server that does
// not send `deferrals`, `last_error` or `ended_at` gets no row for them
// (rather than a row reading "undefined"), and a field a newer server adds
// is drawn as it came, so the page keeps showing every field.

import * as api from './api.js';
import { h, route, fmtTime, fmtRelative, replace } from './dom.js';
import { rowActions } from './queue.js';
import { historySection } from './history.js';

// The states whose message lives; a retained `acked` or `cancelled` one is
// history only (no payload, no actions).
const LIVE = ['scheduled', 'ready', 'leased', 'dead'];
const ENDED = ['acked', 'cancelled'];

// [field, label, text of its value]; `null` values read "none" unless the
// field says otherwise. `max_attempts` is drawn with `attempts`.
const FIELDS = [
  ['id', 'id', String],
  ['queue', 'queue', String],
  ['state', 'state', String],
  ['seq', 'seq', String],
  ['key', 'key', String],
  ['deliver_at', 'deliver at', at],
  ['enqueued_at', 'enqueued at', fmtTime],
  ['attempts', 'attempts', null],
  ['priority', 'priority', String],
  ['deferrals', 'deferrals in a row', String],
  ['last_error', 'last error', String],
  ['lease_until', 'lease until', at],
  ['died_at', 'died at', fmtTime],
  ['ended_at', 'ended at', fmtTime, 'not ended'],
];
// Drawn in their own sections below the fields.
const SECTIONS = ['headers', 'payload', 'payload_base64', 'max_attempts'];

export function render(main, { queue, id }) {
  const box = h('section', { class: 'card message' });
  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/', text: 'Queues' }), ' / ', h('a', { href: route('queues', queue), text: queue }), ' / ', id),
    box,
  );
  const load = async () => {
    // Both at once; a history that cannot be read leaves the rest.
    const history = api.events(queue, id).catch((err) => err);
    let m;
    try {
      m = await api.message(queue, id);
    } catch (err) {
      replace(box, h('p', { class: err.status === 404 ? 'muted' : 'error', text: err.message }));
      return;
    }
    draw(box, m, await history, load);
  };
  load();
  return () => {};
}

function at(ms) {
  return `${fmtTime(ms)} (${fmtRelative(ms)})`;
}

// {field, label, text, none} of every field the message object has;
// `none`: the value is null (drawn muted, so a key named "none" is told
// apart from no key).
function fieldRows(m) {
  const rows = [];
  for (const [field, label, format, none = 'none'] of FIELDS) {
    if (!(field in m)) continue;
    const value = m[field];
    if (value === null) rows.push({ field, label, text: none, none: true });
    else if (field === 'attempts') rows.push({ field, label, text: m.max_attempts ? `${value} of ${m.max_attempts}` : String(value) });
    else rows.push({ field, label, text: format(value) });
  }
  const known = new Set([...FIELDS.map(([field]) => field), ...SECTIONS]);
  for (const [field, value] of Object.entries(m)) {
    if (known.has(field)) continue;
    const label = field.replaceAll('_', ' ');
    if (value === null) rows.push({ field, label, text: 'none', none: true });
    else rows.push({ field, label, text: typeof value === 'object' ? JSON.stringify(value) : String(value) });
  }
  return rows;
}

function fieldItem({ field, label, text, none }) {
  return h('div', { attrs: { 'data-field': field } }, h('dt', { text: label }), h('dd', { class: none && 'muted', text }));
}

function draw(box, m, history, reload) {
  const headers = Object.entries(m.headers || {});
  replace(box,
    h('h1', { class: 'id', text: m.id }),
    h('dl', { class: 'fields' }, fieldRows(m).map(fieldItem)),
    LIVE.includes(m.state) && h('div', { class: 'actions' }, rowActions({ queue: m.queue }, m, reload)),
    historySection(history),
    h('h2', { text: 'Headers' }),
    headers.length
      ? h('div', { class: 'scroll' }, h('table', { class: 'headers' }, h('tbody', {}, headers.map(([k, v]) => h('tr', {}, h('th', { text: k }), h('td', { text: v }))))))
      : h('p', { class: 'muted', text: 'No headers.' }),
    payload(m),
  );
}

function payload(m) {
  // A retained message's payload is not kept (the server sends `""`).
  if (ENDED.includes(m.state)) return noPayload();
  if (m.payload !== undefined) return [h('h2', { text: 'Payload' }), h('pre', { class: 'payload', attrs: { 'data-test': 'payload' }, text: m.payload })];
  if (m.payload_base64 !== undefined) {
    return [h('h2', { text: 'Payload (base64, not UTF-8)' }), h('pre', { class: 'payload', attrs: { 'data-test': 'payload' }, text: m.payload_base64 })];
  }
  return noPayload();
}

function noPayload() {
  return [h('h2', { text: 'Payload' }), h('p', { class: 'muted', attrs: { 'data-test': 'payload' }, text: 'None kept: the message ended, and only its record is retained.' })];
}
