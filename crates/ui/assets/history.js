// A message's history (api.md, "Message history"): its events as a
// timeline, oldest first, each with its time, type, attempt and the
// type's own fields in words, and a note when older events were dropped.
//
// Every text goes in through `h` (textContent), error texts a push target
// answered included. An event type this page does not know (a newer
// server's) is drawn with its fields as they came.

import { h, fmtTime, fmtDuration } from './dom.js';

// Events often come within one second of each other: their times show
// milliseconds.
const AT = {
  year: 'numeric', month: '2-digit', day: '2-digit',
  hour: '2-digit', minute: '2-digit', second: '2-digit', fractionalSecondDigits: 3, hour12: false,
};

function fmtAt(ms) {
  return new Date(ms).toLocaleString(undefined, AT);
}

// The details of each known type; each returns a list of texts (absent
// values are left out, never drawn as "null").
const DETAILS = {
  replaced: (e) => [e.after_lease ? 'waits for the current lease to end' : 'content replaced'],
  leased: (e) => [`via ${e.via}`, `lease until ${fmtTime(e.lease_until)}`],
  nacked: (e) => [e.delay_ms === null || e.delay_ms === undefined ? 'retry after the backoff' : `retry in ${fmtDuration(e.delay_ms)}`],
  deferred: (e) => [reasonText(e.reason), `due again ${fmtTime(e.until)}`],
  push_failed: (e) => [e.status === null || e.status === undefined ? 'no answer' : `HTTP ${e.status}`, `took ${e.duration_ms} ms`],
  dead: (e) => [reasonText(e.reason)],
};
const SIMPLE = ['enqueued', 'rescheduled', 'acked', 'expired', 'redriven', 'cancelled'];
// The types whose `error` is drawn as a text of its own.
const WITH_ERROR = ['nacked', 'push_failed'];
const OWN = ['at', 'type', 'attempt'];

const REASONS = {
  nack: 'deferred by a nack',
  push_429: 'push answered 429',
  push_503: 'push answered 503',
  max_attempts: 'out of attempts',
  max_deferrals: 'deferred too many times in a row',
  buried: 'buried (beanstalkd)',
};

function reasonText(reason) {
  return REASONS[reason] || String(reason);
}

function details(e) {
  if (DETAILS[e.type]) return DETAILS[e.type](e);
  if (SIMPLE.includes(e.type)) return [];
  // A newer type: its fields as sent.
  return Object.entries(e)
    .filter(([field]) => !OWN.includes(field))
    .map(([field, value]) => `${field.replaceAll('_', ' ')}: ${typeof value === 'object' ? JSON.stringify(value) : String(value)}`);
}

function item(e) {
  const error = WITH_ERROR.includes(e.type) && typeof e.error === 'string' && e.error;
  return h('li', { class: `event event-${e.type}`, attrs: { 'data-test': 'event', 'data-type': e.type } },
    h('span', { class: 'event-type', text: e.type.replaceAll('_', ' ') }),
    h('time', { class: 'event-at', attrs: { datetime: new Date(e.at).toISOString() }, text: fmtAt(e.at) }),
    h('span', { class: 'event-attempt muted', text: `attempt ${e.attempt}` }),
    h('span', { class: 'event-details', text: details(e).join(' · ') }),
    error && h('div', { class: 'event-error', attrs: { 'data-test': 'event-error' }, text: error }),
  );
}

// The History section of the message page: `history` is the answer of
// GET .../events, or the error that call ended in (an older server has no
// such route; a scoped token may lack the scope).
export function historySection(history) {
  const title = h('h2', { text: 'History' });
  if (history instanceof Error) {
    return h('section', { class: 'history', attrs: { 'data-test': 'history' } }, title,
      h('p', { class: 'muted', text: `Not available: ${history.message}` }));
  }
  const events = Array.isArray(history.events) ? history.events : [];
  const dropped = Number(history.dropped) || 0;
  return h('section', { class: 'history', attrs: { 'data-test': 'history' } }, title,
    dropped > 0 && h('p', { class: 'muted', attrs: { 'data-test': 'history-dropped' }, text: `${dropped} older ${dropped === 1 ? 'event' : 'events'} not kept (a message keeps its last 32).` }),
    events.length
      ? h('ol', { class: 'timeline' }, events.map(item))
      : h('p', { class: 'muted', text: 'No events.' }),
  );
}
