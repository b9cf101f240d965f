// A queue's flow control (docs/flow.md): its limits, how many keys the
// server keeps state for and how many of them cool down after a deferral,
// and a lookup of one key's counts and cool-down
// (GET /v1/queues/{queue}/keys/{key}).
//
// The card shows only while the queue's config has `flow`: without it
// there are no limits, no key state and nothing to look up. It is redrawn
// from the queue object the page already fetches (`show(info)`), hidden
// until that first answer; the lookup form is built once, so a refresh
// never takes the focus or the typed key away, and its answer stays until
// the next lookup.

import * as api from './api.js';
import { h, clear, fmtCount, fmtTime, fmtRelative } from './dom.js';

export function flowCard(queue) {
  const limits = h('div', { attrs: { 'data-test': 'flow-limits' } });
  const keys = h('p', { class: 'muted', attrs: { 'data-test': 'flow-keys' } });
  const result = h('div', { class: 'key-result', attrs: { 'data-test': 'key-result', 'aria-live': 'polite' } });
  const input = h('input', { type: 'text', maxLength: 256, placeholder: 'key', attrs: { 'aria-label': 'flow key', 'data-test': 'key-input' } });
  const form = h(
    'form',
    { class: 'inline-form key-lookup', on: { submit: (event) => (event.preventDefault(), lookup(queue, input.value, result)) } },
    h('label', {}, 'Look up a key ', input),
    h('button', { type: 'submit', text: 'Look up', attrs: { 'data-action': 'key-lookup' } }),
  );
  const card = h('section', { class: 'card flow', hidden: true, attrs: { 'data-test': 'flow' } }, h('h2', { text: 'Flow control' }), limits, keys, form, result);
  return { card, show: (info) => show(info, card, limits, keys) };
}

function show(info, card, limits, keys) {
  const flow = info.config.flow;
  card.hidden = flow === undefined || flow === null;
  if (card.hidden) return;
  clear(limits).append(h('dl', { class: 'fields' }, limitFields(flow).map(([name, value]) => h('div', { attrs: { 'data-limit': name } }, h('dt', { text: name }), h('dd', { text: value })))));
  clear(keys).append(keyCounts(info.stats));
}

// [label, text] of each limit, "none" for one that is not set.
function limitFields(flow) {
  const none = 'none';
  return [
    ['rate', flow.rate ? fmtRate(flow.rate) : none],
    ['key rate', flow.key_rate ? fmtRate(flow.key_rate) : none],
    ['concurrency', flow.concurrency ?? none],
    ['key concurrency', flow.ordered ? '1 (ordered)' : flow.key_concurrency ?? none],
    ['ordered', flow.ordered ? 'yes' : 'no'],
    ['max deferrals', flow.max_deferrals ?? 100],
  ].map(([name, value]) => [name, String(value)]);
}

// "50 / 1s, burst 2"; a server answers `burst` filled in, so without it
// the page names none rather than guess the default.
export function fmtRate(rate) {
  const burst = rate.burst === undefined || rate.burst === null ? '' : `, burst ${rate.burst}`;
  return `${fmtCount(rate.limit)} / ${fmtPeriod(rate.period_ms)}${burst}`;
}

// The largest unit that divides the period exactly: 1s, 1m, 250ms, 1d.
export function fmtPeriod(ms) {
  const units = [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1000]];
  for (const [unit, size] of units) if (ms % size === 0) return `${ms / size}${unit}`;
  return `${ms}ms`;
}

function keyCounts(stats) {
  if (stats.cooling_keys === undefined && stats.flow_keys === undefined) {
    return 'Keys cooling down: not reported by this server.';
  }
  const cooling = `Keys cooling down: ${fmtCount(stats.cooling_keys ?? 0)}`;
  return stats.flow_keys === undefined ? cooling : `${cooling} (of ${fmtCount(stats.flow_keys)} keys with state)`;
}

async function lookup(queue, key, result) {
  if (!key) {
    clear(result).append(h('p', { class: 'error', text: 'Type a key first.' }));
    return;
  }
  clear(result).append(h('p', { class: 'muted', text: 'Loading…' }));
  let info;
  try {
    info = await api.key(queue, key);
  } catch (err) {
    clear(result).append(h('p', { class: 'error', text: err.message }));
    return;
  }
  const counts = h(
    'dl',
    { class: 'counts' },
    ['scheduled', 'ready', 'leased', 'dead'].map((s) => h('div', { class: `count count-${s}`, attrs: { 'data-count': s } }, h('dt', { text: s }), h('dd', { text: fmtCount(info[s]) }))),
  );
  const cooling =
    info.cooling_until === null || info.cooling_until === undefined
      ? 'Not cooling down.'
      : `Cooling down until ${fmtTime(info.cooling_until)} (${fmtRelative(info.cooling_until)}).`;
  clear(result).append(
    h('h3', { text: `Key ${info.key}` }),
    counts,
    h('p', { attrs: { 'data-test': 'key-cooling' }, text: cooling }),
  );
}
