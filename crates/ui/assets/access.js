// What the token in use may do (api.md "Scoped tokens"), from
// `GET /v1/whoami`: the views ask `may(verb, queue)` while they draw, and
// `guard` disables the buttons of actions the token may not take. Loaded
// before each view is drawn (app.js), so the answer is at hand; the server
// still checks every request (a 403 is shown like any error).

import { api } from './api.js';

// `null` until loaded. A server older than /v1/whoami (404) gets full
// access here: it has no scoped tokens.
let identity = null;

function globRegExp(glob) {
  const escaped = glob.split('*').map((part) => part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  return new RegExp(`^${escaped.join('.*')}$`, 's');
}

function parse(scope) {
  const at = scope.indexOf(':');
  if (at < 0) return null;
  return { verb: scope.slice(0, at), glob: globRegExp(scope.slice(at + 1)), all: /^\*+$/.test(scope.slice(at + 1)) };
}

export async function load() {
  try {
    const me = await api('GET', '/v1/whoami');
    identity = { name: me.name, texts: me.scopes, scopes: me.scopes.map(parse).filter(Boolean), auth: me.auth };
  } catch (err) {
    identity =
      err.status === 404
        ? { name: null, texts: ['*:*'], scopes: [parse('*:*')], auth: false }
        : { name: null, texts: [], scopes: [], auth: true };
  }
  return identity;
}

export function current() {
  return identity;
}

const hasVerb = (scope, verb) => scope.verb === '*' || scope.verb === verb;

// Whether the token may `verb` (publish, consume, read, manage, admin) on
// `queue`.
export function may(verb, queue) {
  if (!identity) return true;
  return identity.scopes.some((s) => hasVerb(s, verb) && s.glob.test(queue));
}

// Whether the token may `verb` on every queue (`/metrics` needs `read:*`).
export function mayEverywhere(verb) {
  if (!identity) return true;
  return identity.scopes.some((s) => hasVerb(s, verb) && s.all);
}

// Disables `button` when the token may not `verb` on `queue`, saying why.
export function guard(button, verb, queue) {
  if (!may(verb, queue)) {
    button.disabled = true;
    button.title = `This token may not ${verb} on queue ${queue}`;
    button.dataset.denied = verb;
  }
  return button;
}
