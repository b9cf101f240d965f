// One queue: counts, retention (`retain_ms`) and actions (pause/resume,
// purge), its flow control
// (only when its config has `flow`), its schedules, the due-time histogram
// of its scheduled messages, and the per-state message lists (with each
// message's key) with paging and row actions (cancel, reschedule, redrive).

import * as api from './api.js';
import { h, route, fmtCount, fmtTime, fmtRelative, preview, notify, runAction, replace } from './dom.js';
import { dueHistogram } from './charts.js';
import { schedulesCard } from './schedules.js';
import { flowCard, fmtPeriod } from './flow.js';
import { guard } from './access.js';

const REFRESH_MS = 5000;
const PAGE = 50;
const STATES = ['scheduled', 'ready', 'leased', 'dead'];
// The time that matters in each list: [column title, message field].
const TIME_COLUMN = {
  scheduled: ['due', 'deliver_at'],
  ready: ['due', 'deliver_at'],
  leased: ['lease ends', 'lease_until'],
  dead: ['died', 'died_at'],
};
// Span and bucket count of each histogram range.
const RANGES = {
  hour: { span: 3600e3, buckets: 60, label: 'Next hour' },
  day: { span: 24 * 3600e3, buckets: 48, label: 'Next day' },
  month: { span: 30 * 24 * 3600e3, buckets: 30, label: 'Next 30 days' },
};

export function render(main, { queue }, ctx) {
  const view = {
    queue,
    ctx,
    range: 'hour',
    state: 'scheduled',
    pages: [null], // `after` cursors of the pages visited, for "previous"
    header: h('section', { class: 'card queue-header' }),
    chart: h('section', { class: 'card chart' }),
    lists: h('section', { class: 'card lists' }),
    schedules: schedulesCard(queue),
    flow: flowCard(queue),
  };
  main.append(
    h('p', { class: 'crumbs' }, h('a', { href: '#/', text: 'Queues' }), ' / ', queue),
    view.header,
    view.flow.card,
    view.schedules.card,
    view.chart,
    view.lists,
  );
  refreshAll(view);
  const timer = setInterval(() => {
    refreshHeader(view);
    refreshChart(view);
    view.schedules.refresh();
  }, REFRESH_MS);
  return () => clearInterval(timer);
}

function refreshAll(view) {
  refreshHeader(view);
  view.schedules.refresh();
  refreshChart(view);
  refreshList(view);
}

async function refreshHeader(view) {
  let info;
  try {
    info = await api.queue(view.queue);
  } catch (err) {
    replace(view.header, h('p', { class: 'error', text: err.message }));
    return;
  }
  view.flow.show(info);
  const counts = h(
    'dl',
    { class: 'counts' },
    STATES.map((s) => h('div', { class: `count count-${s}` }, h('dt', { text: s }), h('dd', { text: fmtCount(info.stats[s]) }))),
  );
  const toggle = info.paused
    ? button('Resume', 'resume', () => act(view, () => api.resume(view.queue), 'Queue resumed.'))
    : button('Pause', 'pause', () => act(view, () => api.pause(view.queue), 'Queue paused.'));
  guard(toggle, 'manage', view.queue);
  replace(view.header, 
    h(
      'div',
      { class: 'title-row' },
      h('h1', { text: info.name }),
      h('span', { class: info.paused ? 'badge paused' : 'badge', attrs: { 'data-test': 'paused-flag' }, text: info.paused ? 'paused' : 'active' }),
    ),
    counts,
    retention(info.config),
    h('div', { class: 'actions' }, toggle, guard(button('Purge…', 'purge', () => purge(view), 'danger'), 'admin', view.queue)),
  );
}

// How long the queue keeps a message that ended (acked or cancelled),
// without its payload; no line for a server older than retention, which
// does not send `retain_ms`.
function retention(config) {
  const ms = config.retain_ms;
  if (ms === undefined || ms === null) return null;
  const text = ms > 0
    ? `Ended messages (acked, cancelled) kept ${fmtPeriod(ms)} without their payload (retain_ms ${ms}).`
    : 'Ended messages are not kept (retain_ms 0).';
  return h('p', { class: 'muted retention', attrs: { 'data-test': 'retention' }, text });
}

function button(text, name, onclick, kind = '') {
  return h('button', { type: 'button', class: kind, attrs: { 'data-action': name }, text, on: { click: onclick } });
}

// Runs an action, reports its outcome and redraws everything.
function act(view, call, done) {
  return runAction(call, done, () => refreshAll(view));
}

// Purge deletes the queue with all its messages (DELETE /v1/queues/{queue}):
// one atomic call rather than cancelling page by page, which could race
// with producers. The queue comes back if anything enqueues to it again.
async function purge(view) {
  const confirmed = await view.ctx.confirm({
    title: 'Purge queue',
    text: 'This deletes the queue and every message in it, in every state. It cannot be undone.',
    expected: view.queue,
  });
  if (!confirmed) return;
  try {
    await api.purge(view.queue);
    notify(`Queue ${view.queue} purged.`);
    location.hash = '#/';
  } catch (err) {
    notify(err.message, 'error');
  }
}

async function refreshChart(view) {
  const range = RANGES[view.range];
  const from = Date.now();
  const tabs = h(
    'div',
    { class: 'tabs', attrs: { role: 'tablist' } },
    Object.entries(RANGES).map(([key, r]) =>
      h('button', {
        type: 'button',
        class: key === view.range ? 'tab active' : 'tab',
        attrs: { 'data-range': key, 'aria-selected': key === view.range },
        text: r.label,
        on: { click: () => ((view.range = key), refreshChart(view)) },
      }),
    ),
  );
  let body;
  try {
    const hist = await api.histogram(view.queue, from, from + range.span, range.buckets);
    const total = hist.counts.reduce((a, b) => a + b, 0);
    body = [
      h('p', { class: 'muted', attrs: { 'data-test': 'histogram-total' }, text: `${fmtCount(total)} scheduled in range${hist.truncated ? ' (at least; the count stopped early)' : ''}` }),
      // Drawn at the card's pixel width so labels keep their size on a phone.
      dueHistogram(hist, { width: Math.max(300, Math.min(1100, view.chart.clientWidth - 32)) }),
    ];
  } catch (err) {
    body = [h('p', { class: err.status === 404 ? 'muted' : 'error', text: err.message })];
  }
  replace(view.chart, h('h2', { text: 'Due times of scheduled messages' }), tabs, ...body);
}

async function refreshList(view) {
  const after = view.pages[view.pages.length - 1];
  const tabs = h(
    'div',
    { class: 'tabs' },
    STATES.map((s) =>
      h('button', {
        type: 'button',
        class: s === view.state ? 'tab active' : 'tab',
        attrs: { 'data-state': s },
        text: s,
        on: { click: () => ((view.state = s), (view.pages = [null]), refreshList(view)) },
      }),
    ),
  );
  let messages = [];
  let problem = null;
  try {
    messages = (await api.list(view.queue, view.state, PAGE, after)).messages;
  } catch (err) {
    problem = h('p', { class: err.status === 404 ? 'muted' : 'error', text: err.message });
  }
  const tools = [];
  if (view.state === 'dead' && messages.length) {
    tools.push(guard(button('Redrive all', 'redrive-all', () => act(view, () => api.redrive(view.queue), 'All dead messages redriven.')), 'manage', view.queue));
  }
  replace(view.lists, 
    h('h2', { text: 'Messages' }),
    tabs,
    h('div', { class: 'actions' }, tools),
    problem || messageTable(view, messages),
    pager(view, messages.length),
  );
}

function pager(view, count) {
  const previous = button('← Previous', 'prev-page', () => (view.pages.pop(), refreshList(view)));
  previous.disabled = view.pages.length < 2;
  const next = button('Next →', 'next-page', () => {
    const rows = view.lists.querySelectorAll('tr[data-id]');
    view.pages.push(rows[rows.length - 1].dataset.id);
    refreshList(view);
  });
  next.disabled = count < PAGE;
  return h('div', { class: 'pager' }, previous, h('span', { class: 'muted', text: `page ${view.pages.length}` }), next);
}

function messageTable(view, messages) {
  if (messages.length === 0) return h('p', { class: 'muted', text: `No ${view.state} messages.` });
  const head = h(
    'tr',
    {},
    h('th', { text: 'id' }),
    h('th', { text: 'key' }),
    h('th', { class: 'when', text: TIME_COLUMN[view.state][0] }),
    h('th', { class: 'num wide-only', text: 'attempts' }),
    h('th', { class: 'num wide-only', text: 'priority' }),
    h('th', { text: 'payload' }),
    h('th', {}),
  );
  const rows = messages.map((m) =>
    h(
      'tr',
      { attrs: { 'data-id': m.id } },
      h('td', { class: 'id' }, h('a', { href: route('queues', view.queue, 'messages', m.id), text: m.id })),
      // Empty without a key (`null`, or a server that does not send it).
      h('td', { class: 'key', attrs: { title: m.key ?? undefined }, text: m.key ?? '' }),
      h('td', { class: 'when', attrs: { title: fmtTime(m[TIME_COLUMN[view.state][1]]) }, text: fmtRelative(m[TIME_COLUMN[view.state][1]]) }),
      h('td', { class: 'num wide-only', text: m.attempts }),
      h('td', { class: 'num wide-only', text: m.priority }),
      h('td', { class: 'payload', text: preview(m) }),
      h('td', {}, h('div', { class: 'row-actions' }, rowActions(view, m))),
    ),
  );
  return h('div', { class: 'scroll' }, h('table', { class: 'messages' }, h('thead', {}, head), h('tbody', {}, rows)));
}

export function rowActions(view, m, after = () => refreshAll(view)) {
  const run = (call, done) => runAction(call, done, after);
  const actions = [];
  if (m.state === 'dead') {
    actions.push(button('Redrive', 'redrive', () => run(() => api.redrive(view.queue, [m.id]), `Redrove ${m.id}.`)));
  }
  if (m.state === 'scheduled' || m.state === 'ready') {
    actions.push(button('Reschedule', 'reschedule', () => reschedule(view, m, run)));
  }
  actions.push(button('Cancel', 'cancel', () => run(() => api.cancel(view.queue, m.id), `Cancelled ${m.id}.`), 'danger'));
  // Redrive, reschedule and cancel are all `manage`.
  return actions.map((b) => guard(b, 'manage', view.queue));
}

// Asks for a new delay inline (no window.prompt: it blocks the page and
// cannot be styled or tested reliably).
function reschedule(view, m, run) {
  const input = h('input', { type: 'number', min: 0, step: 1, value: 60, attrs: { 'aria-label': 'delay in seconds', 'data-test': 'delay-seconds' } });
  const form = h(
    'form',
    {
      class: 'inline-form',
      on: {
        submit: (event) => {
          event.preventDefault();
          const seconds = Math.max(0, Math.round(Number(input.value) || 0));
          run(() => api.reschedule(view.queue, m.id, seconds * 1000), `Rescheduled ${m.id} in ${seconds}s.`);
        },
      },
    },
    h('label', {}, 'deliver in (s) ', input),
    h('button', { type: 'submit', text: 'Save', attrs: { 'data-action': 'reschedule-save' } }),
  );
  const cell = document.activeElement && document.activeElement.closest('.row-actions, .actions');
  if (cell) replace(cell, form);
  input.focus();
}
