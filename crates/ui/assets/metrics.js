// Sparkline data from /metrics (Prometheus text). The dashboard polls it
// every few seconds and keeps the last POINTS samples in memory; rates and
// lateness quantiles are computed from the difference between two scrapes,
// so they describe the last interval, not the process's whole life.

import { metricsText } from './api.js';
import { mayEverywhere } from './access.js';

export const POLL_MS = 2000;
export const POINTS = 60;

const ENQUEUE_ROUTES = new Set(['/v1/queues/{queue}/messages', '/v1/queues/{queue}/batch']);
const ACK_ROUTE = '/v1/queues/{queue}/messages/{id}/ack';
const LATENESS = 'delayd_fire_lateness_seconds';

// Parses `name{label="v",...} value` lines; comments and malformed lines
// are skipped.
export function parse(text) {
  const samples = [];
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sample = parseLine(line);
    if (sample) samples.push(sample);
  }
  return samples;
}

function parseLine(line) {
  const brace = line.indexOf('{');
  const space = line.lastIndexOf(' ');
  if (space < 0) return null;
  const labels = {};
  let name;
  if (brace >= 0 && brace < space) {
    name = line.slice(0, brace);
    const close = line.lastIndexOf('}');
    const re = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;
    for (const m of line.slice(brace + 1, close).matchAll(re)) {
      labels[m[1]] = m[2].replace(/\\n/g, '\n').replace(/\\(.)/g, '$1');
    }
  } else {
    name = line.slice(0, space);
  }
  const value = Number(line.slice(space + 1));
  return Number.isNaN(value) ? null : { name, labels, value };
}

// The totals the sparklines need from one scrape.
export function summarize(samples) {
  const out = { enqueued: 0, acked: 0, lateness: new Map() };
  for (const s of samples) {
    if (s.name === 'delayd_http_requests_total') {
      const ok = s.labels.status && s.labels.status.startsWith('2');
      if (ok && s.labels.method === 'POST' && ENQUEUE_ROUTES.has(s.labels.route)) out.enqueued += s.value;
      if (ok && s.labels.route === ACK_ROUTE) out.acked += s.value;
    } else if (s.name === `${LATENESS}_bucket`) {
      const le = s.labels.le === '+Inf' ? Infinity : Number(s.labels.le);
      for (const key of ['*', s.labels.queue || '']) {
        const buckets = out.lateness.get(key) || new Map();
        buckets.set(le, (buckets.get(le) || 0) + s.value);
        out.lateness.set(key, buckets);
      }
    }
  }
  return out;
}

// Prometheus' histogram_quantile over cumulative bucket counts (Map le ->
// count), linear within a bucket. null when the interval saw no samples.
export function quantile(q, buckets) {
  const bounds = [...buckets.keys()].sort((a, b) => a - b);
  if (bounds.length === 0) return null;
  const total = buckets.get(bounds[bounds.length - 1]);
  if (!total) return null;
  const rank = q * total;
  let prevBound = 0;
  let prevCount = 0;
  for (const bound of bounds) {
    const count = buckets.get(bound);
    if (count >= rank) {
      if (bound === Infinity) return prevBound;
      const inBucket = count - prevCount;
      return inBucket > 0 ? prevBound + ((bound - prevBound) * (rank - prevCount)) / inBucket : bound;
    }
    prevBound = bound;
    prevCount = count;
  }
  return prevBound;
}

function delta(now, before) {
  const out = new Map();
  for (const [le, count] of now) out.set(le, Math.max(0, count - ((before && before.get(le)) || 0)));
  return out;
}

// Polls /metrics and keeps the series; one per page, shared by views.
export class Sampler {
  constructor() {
    this.series = { enqueueRate: [], ackRate: [], p50: [], p99: [], queueP99: new Map() };
    this.last = null;
    this.listeners = new Set();
    this.error = null;
  }

  start() {
    if (this.timer) return;
    const tick = () => this.sample().finally(() => (this.timer = setTimeout(tick, POLL_MS)));
    tick();
  }

  onUpdate(listener) {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async sample() {
    if (!mayEverywhere('read')) {
      // /metrics names every queue: it needs read:*, which this token lacks.
      this.error = new Error('this token may not read every queue (metrics need read:*)');
      for (const listener of this.listeners) listener(this);
      return;
    }
    try {
      const summary = summarize(parse(await metricsText()));
      const at = Date.now();
      if (this.last) this.record(summary, this.last, (at - this.last.at) / 1000);
      this.last = { ...summary, at };
      this.error = null;
    } catch (err) {
      this.error = err;
    }
    for (const listener of this.listeners) listener(this);
  }

  record(now, before, seconds) {
    const s = this.series;
    push(s.enqueueRate, Math.max(0, now.enqueued - before.enqueued) / seconds);
    push(s.ackRate, Math.max(0, now.acked - before.acked) / seconds);
    const all = delta(now.lateness.get('*') || new Map(), before.lateness.get('*'));
    push(s.p50, quantile(0.5, all));
    push(s.p99, quantile(0.99, all));
    for (const [queue, buckets] of now.lateness) {
      if (queue === '*') continue;
      const series = s.queueP99.get(queue) || [];
      push(series, quantile(0.99, delta(buckets, before.lateness.get(queue))));
      s.queueP99.set(queue, series);
    }
  }
}

function push(series, value) {
  series.push(value);
  if (series.length > POINTS) series.shift();
}
