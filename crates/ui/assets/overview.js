// The queues overview: counts by state, paused flag, per-queue lateness
// sparkline, and the server-wide throughput and lateness sparklines.

import * as api from './api.js';
import { h, route, fmtCount, replace } from './dom.js';
import { sparkline } from './charts.js';

const REFRESH_MS = 2000;
const STATES = ['scheduled', 'ready', 'leased', 'dead'];

export function render(main, _params, { sampler }) {
  const metricsBox = h('section', { class: 'card metrics' });
  const tableBox = h('section', { class: 'card' });
  main.append(h('h1', { text: 'Queues' }), metricsBox, tableBox);
  let lastQueues = [];

  const drawMetrics = () => {
    replace(metricsBox, ...metricCells(sampler));
    if (lastQueues.length) drawTable(tableBox, lastQueues, sampler);
  };
  const refresh = async () => {
    try {
      lastQueues = (await api.queues()).queues;
      drawTable(tableBox, lastQueues, sampler);
    } catch (err) {
      replace(tableBox, h('p', { class: 'error', text: `Cannot list queues: ${err.message}` }));
    }
  };
  drawMetrics();
  refresh();
  const timer = setInterval(refresh, REFRESH_MS);
  const unsubscribe = sampler.onUpdate(drawMetrics);
  return () => {
    clearInterval(timer);
    unsubscribe();
  };
}

const rate = (v) => `${v.toFixed(1)}/s`;
const seconds = (v) => (v < 1 ? `${(v * 1000).toFixed(1)} ms` : `${v.toFixed(2)} s`);

function metricCells(sampler) {
  const s = sampler.series;
  const cell = (title, points, format) => {
    const latest = points.length ? points[points.length - 1] : null;
    return h(
      'div',
      { class: 'metric' },
      h('div', { class: 'metric-title', text: title }),
      h('div', { class: 'metric-value', text: latest === null ? '–' : format(latest) }),
      sparkline(points, { label: title, format }),
    );
  };
  const cells = [
    cell('Enqueue requests', s.enqueueRate, rate),
    cell('Acks', s.ackRate, rate),
    cell('Lateness p50', s.p50, seconds),
    cell('Lateness p99', s.p99, seconds),
  ];
  if (sampler.error) {
    cells.push(h('p', { class: 'muted', text: `Metrics unavailable: ${sampler.error.message}` }));
  }
  return cells;
}

function queueLateness(points) {
  const known = points.filter((v) => v !== null);
  if (known.length === 0) return h('span', { class: 'muted', attrs: { title: 'nothing fired recently' }, text: '–' });
  return h('span', { class: 'inline-spark' }, sparkline(points, { width: 100, height: 24, label: 'p99 lateness', format: seconds }), ` ${seconds(known[known.length - 1])}`);
}

function drawTable(box, queues, sampler) {
  if (queues.length === 0) {
    replace(box, h('p', { class: 'muted', text: 'No queues yet. Enqueue a message to create one.' }));
    return;
  }
  const head = h(
    'tr',
    {},
    h('th', { text: 'Queue' }),
    STATES.map((s) => h('th', { class: 'num', text: s })),
    h('th', { text: 'State' }),
    h('th', { text: 'Lateness p99' }),
  );
  const rows = queues.map((q) =>
    h(
      'tr',
      { attrs: { 'data-queue': q.name } },
      h('td', {}, h('a', { href: route('queues', q.name), text: q.name })),
      STATES.map((s) => h('td', { class: `num count-${s}`, text: fmtCount(q.stats[s]) })),
      h('td', {}, q.paused ? h('span', { class: 'badge paused', text: 'paused' }) : h('span', { class: 'badge', text: 'active' })),
      h('td', {}, queueLateness(sampler.series.queueP99.get(q.name) || [])),
    ),
  );
  const table = h('table', { class: 'queues' }, h('thead', {}, head), h('tbody', {}, rows));
  replace(box, h('div', { class: 'scroll' }, table));
}
