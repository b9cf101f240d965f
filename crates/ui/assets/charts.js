// Charts as plain SVG built with createElementNS: no library to vendor,
// audit or update, nothing that could turn data into markup, and the CSP
// stays `default-src 'self'` with no inline styles (SVG presentation
// attributes are not styles).

import { svg, fmtTime, fmtCount, fmtDuration } from './dom.js';

// A polyline over the last points; null points (no data in that interval)
// break the line. `format` renders the latest value for the label.
export function sparkline(points, { width = 160, height = 36, label = '', format = String } = {}) {
  const values = points.filter((v) => v !== null && Number.isFinite(v));
  const max = Math.max(1e-9, ...values);
  const step = points.length > 1 ? width / (points.length - 1) : width;
  const chart = svg('svg', {
    class: 'sparkline',
    attrs: { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': label },
  });
  chart.append(svg('line', { class: 'baseline', attrs: { x1: 0, y1: height - 1, x2: width, y2: height - 1 } }));
  let run = [];
  const flush = () => {
    if (run.length > 1) chart.append(svg('polyline', { attrs: { points: run.join(' ') } }));
    run = [];
  };
  points.forEach((v, i) => {
    if (v === null || !Number.isFinite(v)) return flush();
    const y = height - 2 - ((height - 4) * v) / max;
    run.push(`${(i * step).toFixed(1)},${y.toFixed(1)}`);
  });
  flush();
  const latest = points.length ? points[points.length - 1] : null;
  chart.append(svg('title', { text: `${label}: ${latest === null ? 'no data' : format(latest)}` }));
  return chart;
}

const PAD = { left: 36, right: 8, top: 10, bottom: 22 };

// The due-time histogram: one bar per bucket, its count in `data-count`
// (tests read it) and in a tooltip. Sized by viewBox so it shrinks to a
// phone's width.
export function dueHistogram(h, { width = 720, height = 220 } = {}) {
  const n = h.counts.length;
  const max = Math.max(1, ...h.counts);
  const plotW = width - PAD.left - PAD.right;
  const plotH = height - PAD.top - PAD.bottom;
  const barW = plotW / n;
  const chart = svg('svg', {
    class: 'histogram',
    attrs: {
      viewBox: `0 0 ${width} ${height}`,
      role: 'img',
      'aria-label': `scheduled messages by due time, ${fmtCount(h.counts.reduce((a, b) => a + b, 0))} in range`,
    },
  });
  chart.append(axes(h, max, { width, height, plotW, plotH }));
  h.counts.forEach((count, i) => {
    const barH = (plotH * count) / max;
    const start = h.from + i * h.bucket_ms;
    const bar = svg('rect', {
      class: 'bar',
      attrs: {
        x: (PAD.left + i * barW + 0.5).toFixed(2),
        y: (PAD.top + plotH - barH).toFixed(2),
        width: Math.max(0.5, barW - 1).toFixed(2),
        height: barH.toFixed(2),
        'data-count': count,
        'data-from': start,
      },
    });
    bar.append(svg('title', { text: `${fmtTime(start)} (+${fmtDuration(h.bucket_ms)}): ${fmtCount(count)}` }));
    chart.append(bar);
  });
  return chart;
}

// Short tick labels: the time of day within a day's span, else the date.
function tickLabel(ms, span) {
  const d = new Date(ms);
  return span <= 24 * 3600e3
    ? d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', hour12: false })
    : d.toLocaleDateString(undefined, { month: 'short', day: 'numeric' });
}

function axes(h, max, { width, height, plotW, plotH }) {
  const group = svg('g', { class: 'axes' });
  const baseY = PAD.top + plotH;
  group.append(
    svg('line', { attrs: { x1: PAD.left, y1: baseY, x2: width - PAD.right, y2: baseY } }),
    svg('text', { attrs: { x: PAD.left - 4, y: PAD.top + 8, 'text-anchor': 'end' }, text: fmtCount(max) }),
    svg('text', { attrs: { x: PAD.left - 4, y: baseY, 'text-anchor': 'end' }, text: '0' }),
  );
  const ticks = [0, 0.5, 1];
  for (const t of ticks) {
    const at = h.from + t * (h.to - h.from);
    const anchor = t === 0 ? 'start' : t === 1 ? 'end' : 'middle';
    group.append(
      svg('text', {
        attrs: { x: PAD.left + t * plotW, y: height - 6, 'text-anchor': anchor },
        text: tickLabel(at, h.to - h.from),
      }),
    );
  }
  return group;
}
