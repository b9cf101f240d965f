// The dashboard's only way to the server: api.md's /v1 endpoints and
// /metrics, with the bearer token kept in sessionStorage (typed once per
// browser tab session, gone when the tab closes; never in localStorage or
// a cookie, so it is not sent anywhere implicitly).

const TOKEN_KEY = 'delayd.token';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function authHeaders() {
  const token = getToken();
  return token ? { Authorization: `Bearer ${token}` } : {};
}

async function request(method, path, body) {
  const init = { method, headers: authHeaders() };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, 'network', `cannot reach the server: ${err.message}`);
  }
  if (response.status === 401) {
    // app.js shows the token prompt.
    window.dispatchEvent(new CustomEvent('delayd:unauthorized'));
  }
  return response;
}

async function failure(response) {
  try {
    const body = await response.json();
    if (body && body.error) return new ApiError(response.status, body.error.code, body.error.message);
  } catch (_) {
    // Not JSON: fall through.
  }
  return new ApiError(response.status, 'http_' + response.status, response.statusText || 'request failed');
}

export async function api(method, path, body) {
  const response = await request(method, path, body);
  if (!response.ok) throw await failure(response);
  if (response.status === 204) return null;
  return response.json();
}

export async function metricsText() {
  const response = await request('GET', '/metrics');
  if (!response.ok) throw await failure(response);
  return response.text();
}

const seg = encodeURIComponent;

export const queues = () => api('GET', '/v1/queues');
export const queue = (name) => api('GET', `/v1/queues/${seg(name)}`);
export const pause = (name) => api('POST', `/v1/queues/${seg(name)}/pause`);
export const resume = (name) => api('POST', `/v1/queues/${seg(name)}/resume`);
export const purge = (name) => api('DELETE', `/v1/queues/${seg(name)}`);
export const message = (name, id) => api('GET', `/v1/queues/${seg(name)}/messages/${seg(id)}`);
// The message's history, oldest first (api.md, "Message history").
export const events = (name, id) => api('GET', `/v1/queues/${seg(name)}/messages/${seg(id)}/events`);
export const cancel = (name, id) => api('DELETE', `/v1/queues/${seg(name)}/messages/${seg(id)}`);
export const reschedule = (name, id, delayMs) =>
  api('PATCH', `/v1/queues/${seg(name)}/messages/${seg(id)}`, { delay_ms: delayMs });
// A flow key's live messages by state and its cool-down (api.md, "Flow control").
export const key = (name, flowKey) => api('GET', `/v1/queues/${seg(name)}/keys/${seg(flowKey)}`);
export const redrive = (name, ids) =>
  api('POST', `/v1/queues/${seg(name)}/dead/redrive`, ids ? { ids } : {});

export function list(name, state, limit, after) {
  const params = new URLSearchParams({ state, limit: String(limit) });
  if (after) params.set('after', after);
  return api('GET', `/v1/queues/${seg(name)}/messages?${params}`);
}

export function histogram(name, from, to, buckets) {
  const params = new URLSearchParams({ from: String(from), to: String(to), buckets: String(buckets) });
  return api('GET', `/v1/queues/${seg(name)}/histogram?${params}`);
}

// Recurring schedules of a queue (api.md, "Schedules").
export const schedules = (name) => api('GET', `/v1/queues/${seg(name)}/schedules`);
export const pauseSchedule = (name, id) => api('POST', `/v1/queues/${seg(name)}/schedules/${seg(id)}/pause`);
export const resumeSchedule = (name, id) => api('POST', `/v1/queues/${seg(name)}/schedules/${seg(id)}/resume`);
export const triggerSchedule = (name, id) => api('POST', `/v1/queues/${seg(name)}/schedules/${seg(id)}/trigger`);
