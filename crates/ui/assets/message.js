// One message: every field of api.md's message object, its headers and
// payload (as text, or base64 when not UTF-8), and its actions.

import * as api from './api.js';
import { h, route, fmtTime, fmtRelative, replace } from './dom.js';
import { rowActions } from './queue.js';

export function render(main, { queue, id }) {
  const box = h('section', { class: 'card message' });
  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/', text: 'Queues' }), ' / ', h('a', { href: route('queues', queue), text: queue }), ' / ', id),
    box,
  );
  const load = async () => {
    let m;
    try {
      m = await api.message(queue, id);
    } catch (err) {
      replace(box, h('p', { class: err.status === 404 ? 'muted' : 'error', text: err.message }));
      return;
    }
    draw(box, m, load);
  };
  load();
  return () => {};
}

function draw(box, m, reload) {
  const fields = [
    ['id', m.id],
    ['state', m.state],
    ['seq', m.seq],
    ['deliver at', `${fmtTime(m.deliver_at)} (${fmtRelative(m.deliver_at)})`],
    ['enqueued at', fmtTime(m.enqueued_at)],
    ['attempts', m.max_attempts ? `${m.attempts} of ${m.max_attempts}` : m.attempts],
    ['priority', m.priority],
  ];
  if (m.lease_until) fields.push(['lease until', `${fmtTime(m.lease_until)} (${fmtRelative(m.lease_until)})`]);
  if (m.died_at) fields.push(['died at', fmtTime(m.died_at)]);
  const headers = Object.entries(m.headers || {});
  const payload = m.payload !== undefined ? m.payload : m.payload_base64;
  replace(box, 
    h('h1', { class: 'id', text: m.id }),
    h('dl', { class: 'fields' }, fields.map(([k, v]) => h('div', {}, h('dt', { text: k }), h('dd', { text: v })))),
    h('div', { class: 'actions' }, rowActions({ queue: m.queue }, m, reload)),
    h('h2', { text: 'Headers' }),
    headers.length
      ? h('div', { class: 'scroll' }, h('table', { class: 'headers' }, h('tbody', {}, headers.map(([k, v]) => h('tr', {}, h('th', { text: k }), h('td', { text: v }))))))
      : h('p', { class: 'muted', text: 'No headers.' }),
    h('h2', { text: m.payload !== undefined ? 'Payload' : 'Payload (base64, not UTF-8)' }),
    h('pre', { class: 'payload', attrs: { 'data-test': 'payload' }, text: payload }),
  );
}
