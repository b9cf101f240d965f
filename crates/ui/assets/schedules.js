// A queue's recurring schedules: each with its rule, its next fire times
// in the schedule's own zone and in the viewer's, its fire count, the
// pause/resume/trigger actions, and on demand the messages it enqueued
// (found by their `delayd-schedule` header).

import * as api from './api.js';
import { h, route, fmtRelative, runAction, replace } from './dom.js';
import { guard } from './access.js';

// How many messages per state are searched for a schedule's fired messages.
const SEARCH_LIMIT = 1000;
const STATES = ['scheduled', 'ready', 'leased', 'dead'];

// A card the queue page refreshes with its own timer.
export function schedulesCard(queue) {
  const card = h('section', { class: 'card schedules', attrs: { 'data-test': 'schedules' } });
  const view = { queue, card, open: null };
  return { card, refresh: () => refresh(view) };
}

async function refresh(view) {
  let list;
  try {
    list = (await api.schedules(view.queue)).schedules;
  } catch (err) {
    // A queue without schedules may not exist yet (404): nothing to show.
    replace(view.card, h('h2', { text: 'Schedules' }), h('p', { class: err.status === 404 ? 'muted' : 'error', text: err.message }));
    return;
  }
  const body = list.length === 0 ? h('p', { class: 'muted', text: 'No schedules.' }) : table(view, list);
  const fired = view.open ? h('div', { class: 'fired', attrs: { 'data-test': 'fired' } }, h('p', { class: 'muted', text: 'Loading…' })) : null;
  replace(view.card, h('h2', { text: 'Schedules' }), body, fired);
  if (fired) showFired(view, fired);
}

function table(view, list) {
  const head = h(
    'tr',
    {},
    ['id', 'rule', 'next fires (schedule zone)', 'next fires (yours)', 'fires', ''].map((t) => h('th', { text: t })),
  );
  const rows = list.map((s) =>
    h(
      'tr',
      { attrs: { 'data-schedule': s.id } },
      h('td', { class: 'id' }, s.id, ' ', h('span', { class: s.paused ? 'badge paused' : 'badge', attrs: { 'data-test': 'schedule-state' }, text: s.paused ? 'paused' : 'active' })),
      h('td', { text: rule(s) }),
      h('td', { attrs: { 'data-test': 'next-zone' } }, times(s.next_fires, zoneOf(s))),
      h('td', { attrs: { 'data-test': 'next-local' } }, times(s.next_fires, undefined)),
      h('td', { class: 'num', text: s.fires }),
      h('td', {}, h('div', { class: 'row-actions' }, actions(view, s))),
    ),
  );
  return h('div', { class: 'scroll' }, h('table', { class: 'schedule-table' }, h('thead', {}, head), h('tbody', {}, rows)));
}

function rule(s) {
  if (s.cron !== undefined && s.cron !== null) return `cron ${s.cron} (${zoneOf(s)})`;
  return `every ${s.every_ms / 1000}s`;
}

function zoneOf(s) {
  return s.tz || 'UTC';
}

// One line per fire time, formatted in `zone` (undefined: the viewer's).
function times(fires, zone) {
  if (!fires || fires.length === 0) return h('span', { class: 'muted', text: '—' });
  const format = new Intl.DateTimeFormat(undefined, {
    timeZone: zone,
    year: 'numeric', month: '2-digit', day: '2-digit',
    hour: '2-digit', minute: '2-digit', second: '2-digit',
    hour12: false, timeZoneName: 'short',
  });
  return h('ol', { class: 'fires' }, fires.map((t) => h('li', { attrs: { title: fmtRelative(t) }, text: format.format(new Date(t)) })));
}

function actions(view, s) {
  const run = (call, done) => runAction(call, done, () => refresh(view));
  const button = (text, name, onclick) => h('button', { type: 'button', attrs: { 'data-action': name }, text, on: { click: onclick } });
  const toggle = s.paused
    ? button('Resume', 'schedule-resume', () => run(() => api.resumeSchedule(view.queue, s.id), `Schedule ${s.id} resumed.`))
    : button('Pause', 'schedule-pause', () => run(() => api.pauseSchedule(view.queue, s.id), `Schedule ${s.id} paused.`));
  return [
    guard(toggle, 'manage', view.queue),
    guard(button('Trigger', 'schedule-trigger', () => run(() => api.triggerSchedule(view.queue, s.id), `Schedule ${s.id} triggered.`)), 'publish', view.queue),
    button(view.open === s.id ? 'Hide messages' : 'Messages', 'schedule-messages', () => {
      view.open = view.open === s.id ? null : s.id;
      refresh(view);
    }),
  ];
}

// The open schedule's messages that are still live, newest fire first.
async function showFired(view, box) {
  const id = view.open;
  const found = [];
  try {
    for (const state of STATES) {
      const { messages } = await api.list(view.queue, state, SEARCH_LIMIT);
      for (const m of messages) {
        if (m.headers && m.headers['delayd-schedule'] === id) found.push(m);
      }
    }
  } catch (err) {
    replace(box, h('p', { class: 'error', text: err.message }));
    return;
  }
  found.sort((a, b) => b.deliver_at - a.deliver_at);
  const rows = found.map((m) =>
    h(
      'tr',
      { attrs: { 'data-fired': m.id } },
      h('td', { class: 'id' }, h('a', { href: route('queues', view.queue, 'messages', m.id), text: m.id })),
      h('td', { text: m.state }),
      h('td', { class: 'when', text: fmtRelative(m.deliver_at) }),
    ),
  );
  const title = h('h3', { text: `Messages of ${id}` });
  const list = rows.length
    ? h('table', { class: 'fired-table' }, h('tbody', {}, rows))
    : h('p', { class: 'muted', text: 'None live (acked messages are gone).' });
  replace(box, title, list);
}
