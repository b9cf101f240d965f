// DOM helpers. Every string that came from the server (payloads, ids,
// headers, queue names) goes into the page through textContent or
// setAttribute on a non-script attribute: never as HTML to parse, so attacker-
// controlled data cannot become markup. The CSP header is the second wall.

const SVG_NS = 'http://www.w3.org/2000/svg';

// h('tr', {class: 'row', on: {click: f}, attrs: {'data-id': id}}, child, 'text')
export function h(tag, props = {}, ...children) {
  return fill(document.createElement(tag), props, children);
}

export function svg(tag, props = {}, ...children) {
  return fill(document.createElementNS(SVG_NS, tag), props, children);
}

function fill(node, props, children) {
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.setAttribute('class', value);
    else if (key === 'text') node.textContent = String(value);
    else if (key === 'on') {
      for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
    } else if (key === 'attrs') {
      for (const [name, v] of Object.entries(value)) {
        if (v !== undefined && v !== null && v !== false) node.setAttribute(name, String(v));
      }
    } else {
      node[key] = value;
    }
  }
  append(node, children);
  return node;
}

export function append(node, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

// Replaces `node`'s children, skipping absent ones (undefined, null,
// false) as `h` does. The DOM's own `append` would print them as text
// ("null" under a table whose optional part is absent).
export function replace(node, ...children) {
  return append(clear(node), children);
}

// A link inside the single-page app. Path segments are URI-encoded, so an
// id cannot break out of its segment.
export function route(...segments) {
  return '#/' + segments.map(encodeURIComponent).join('/');
}

export function fmtTime(ms) {
  if (ms === undefined || ms === null) return '';
  const d = new Date(ms);
  return d.toLocaleString(undefined, { hour12: false });
}

// "in 5m 3s", "12s ago": deliver times are easier to read relative to now.
export function fmtRelative(ms, now = Date.now()) {
  if (ms === undefined || ms === null) return '';
  const delta = ms - now;
  const text = fmtDuration(Math.abs(delta));
  return delta >= 0 ? `in ${text}` : `${text} ago`;
}

export function fmtDuration(ms) {
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${s % 60}s`;
  const hours = Math.floor(m / 60);
  if (hours < 48) return `${hours}h ${m % 60}m`;
  return `${Math.floor(hours / 24)}d ${hours % 24}h`;
}

export function fmtCount(n) {
  return Number(n).toLocaleString('en-US');
}

// The first characters of a payload for tables (shown as text).
export function preview(message, max = 80) {
  if (message.payload !== undefined) {
    const text = message.payload.replace(/\s+/g, ' ');
    return text.length > max ? text.slice(0, max) + '…' : text;
  }
  return `(binary, ${Math.floor((message.payload_base64.length * 3) / 4)} bytes base64)`;
}

// A transient message at the top of the page.
export function notify(text, kind = 'info') {
  const box = document.getElementById('notice');
  if (!box) return;
  clear(box).append(h('span', { class: `notice ${kind}`, text }));
  clearTimeout(notify.timer);
  notify.timer = setTimeout(() => clear(box), 5000);
}

// Runs a user's action: reports its outcome (`done` or the error) and then
// calls `after` (a redraw) either way.
export async function runAction(call, done, after) {
  try {
    await call();
    notify(done);
  } catch (err) {
    notify(err.message, 'error');
  }
  after();
}
