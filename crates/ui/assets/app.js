// Entry point: the hash router, the token prompt, the confirmation dialog
// and the shared metrics sampler. Views are modules exporting
// `render(main, params, ctx)` which returns a stop function (polling timers
// end when the view changes).

import { setToken, getToken } from './api.js';
import * as access from './access.js';
import { clear, notify } from './dom.js';
import { Sampler } from './metrics.js';
import * as overview from './overview.js';
import * as queueView from './queue.js';
import * as messageView from './message.js';

const main = document.getElementById('main');
const sampler = new Sampler();
let stopView = () => {};

// `#/`, `#/queues/<queue>`, `#/queues/<queue>/messages/<id>`.
function resolve(hash) {
  const parts = hash.replace(/^#\/?/, '').split('/').filter(Boolean).map(decodeURIComponent);
  if (parts[0] === 'queues' && parts.length === 2) return [queueView, { queue: parts[1] }];
  if (parts[0] === 'queues' && parts[2] === 'messages' && parts.length === 4) {
    return [messageView, { queue: parts[1], id: parts[3] }];
  }
  return [overview, {}];
}

// Navigations so far: a view whose scopes arrived after a newer
// navigation began is not drawn.
let navigations = 0;

// Draws the view of the hash, after learning what the token may do (once
// per navigation, so a token changed on the server is seen on the next).
async function show() {
  const turn = ++navigations;
  stopView();
  stopView = () => {};
  await access.load();
  if (turn !== navigations) return;
  showIdentity();
  let view;
  let params;
  try {
    [view, params] = resolve(location.hash);
  } catch (_) {
    // A malformed %-escape in the hash.
    [view, params] = [overview, {}];
  }
  clear(main);
  stopView = view.render(main, params, { sampler, confirm: confirmDialog }) || (() => {});
}

// The token's name in the header (nothing for a full-access token).
function showIdentity() {
  const me = access.current();
  const box = document.getElementById('whoami');
  box.textContent = me && me.name ? `token: ${me.name}` : '';
  box.title = me ? `scopes: ${me.texts.join(', ') || 'none'}` : '';
}

// Set when the user dismissed the prompt: polling must not reopen it every
// few seconds; the Token button still does.
let promptDismissed = false;

function promptToken() {
  const dialog = document.getElementById('token-dialog');
  if (dialog.open) return;
  document.getElementById('token-input').value = getToken();
  // Escape closes without setting returnValue: clear the previous one.
  dialog.returnValue = '';
  dialog.showModal();
}

function setUpToken() {
  const dialog = document.getElementById('token-dialog');
  dialog.addEventListener('close', () => {
    promptDismissed = dialog.returnValue !== 'save';
    if (promptDismissed) return;
    setToken(document.getElementById('token-input').value.trim());
    notify('Token saved for this tab.');
    show();
  });
  document.getElementById('token-button').addEventListener('click', promptToken);
  window.addEventListener('delayd:unauthorized', () => promptDismissed || promptToken());
}

// Asks the user to type `expected` before a destructive action; resolves
// to true when confirmed.
function confirmDialog({ title, text, expected }) {
  const dialog = document.getElementById('confirm-dialog');
  const input = document.getElementById('confirm-input');
  const ok = document.getElementById('confirm-ok');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-expected').textContent = expected;
  input.value = '';
  ok.disabled = true;
  input.oninput = () => (ok.disabled = input.value !== expected);
  dialog.returnValue = '';
  dialog.showModal();
  return new Promise((done) => {
    dialog.addEventListener('close', () => done(dialog.returnValue === 'ok' && input.value === expected), {
      once: true,
    });
  });
}

// Errors the views do not handle end up here rather than silently.
window.addEventListener('unhandledrejection', (event) => {
  const err = event.reason;
  if (err && err.code === 'unauthorized') return;
  notify(err && err.message ? err.message : String(err), 'error');
});

setUpToken();
window.addEventListener('hashchange', show);
sampler.start();
show();
