// End-to-end tests of the dashboard at $DELAYD_URL/ui in headless Chromium
// (Debian's /usr/bin/chromium driven by playwright-core). Data is seeded
// through the public HTTP API into a queue unique to this run, so the tests
// do not depend on what else the server holds. Screenshots go to
// artifacts/screenshots/ (and, with DELAYD_UPDATE_SCREENSHOT=1, the overview
// to docs/img/dashboard.png for the README).
//
// Env: DELAYD_URL (default http://127.0.0.1:7070), DELAYD_TOKEN (when the
// server requires one; also enables the token-prompt test),
// DELAYD_VIEWER_TOKEN and DELAYD_ADMIN_TOKEN (the scoped tokens run.sh puts
// in the server's --token-file: read:ui-e2e-* and *:*; they enable the
// scoped-token tests).

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';
import { mkdtempSync, mkdirSync, copyFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const BASE = (process.env.DELAYD_URL || 'http://127.0.0.1:7070').replace(/\/$/, '');
const TOKEN = process.env.DELAYD_TOKEN || '';
const VIEWER_TOKEN = process.env.DELAYD_VIEWER_TOKEN || '';
const ADMIN_TOKEN = process.env.DELAYD_ADMIN_TOKEN || '';
const NO_SCOPED_TOKENS = VIEWER_TOKEN && ADMIN_TOKEN ? false : 'server started without a --token-file';
const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SHOTS = join(ROOT, 'artifacts', 'screenshots');
const QUEUE = `ui-e2e-${Date.now()}`;
const XSS = '<script>alert(1)</script>';
const EVIL_HEADER = '<img src=x onerror=alert(2)>';
const MINUTE = 60_000;
const CHROMIUM_FLAGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync',
];

let context;
let userDataDir;
const dialogs = [];
const pageErrors = [];

async function call(method, path, body) {
  const headers = { 'content-type': 'application/json' };
  if (TOKEN) headers.authorization = `Bearer ${TOKEN}`;
  const response = await fetch(BASE + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await response.text();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const enqueue = (queue, body) => call('POST', `/v1/queues/${queue}/messages`, body);

// 3 messages due at +10 min, 1 (the XSS payload) at +20, 2 at +40, 1 at +2 h
// (outside the next hour); one ready; one dead (max_attempts 1, nacked).
async function seed() {
  await call('PUT', `/v1/queues/${QUEUE}`, { lease_ms: 60_000 });
  const t0 = Date.now();
  for (const i of [1, 2, 3]) await enqueue(QUEUE, { id: `ten-${i}`, deliver_at: t0 + 10 * MINUTE, payload: `job ${i}` });
  await enqueue(QUEUE, { id: 'xss', deliver_at: t0 + 20 * MINUTE, payload: XSS, headers: { 'x-evil': EVIL_HEADER } });
  for (const i of [1, 2]) await enqueue(QUEUE, { id: `forty-${i}`, deliver_at: t0 + 40 * MINUTE, payload: `{"n":${i}}` });
  await enqueue(QUEUE, { id: 'two-hours', deliver_at: t0 + 120 * MINUTE, payload: 'later' });
  await enqueue(QUEUE, { id: 'doomed', payload: 'fail me', priority: 0, max_attempts: 1 });
  const { messages } = await call('POST', `/v1/queues/${QUEUE}/leases`, { max: 1 });
  assert.equal(messages[0].id, 'doomed');
  await call('POST', `/v1/queues/${QUEUE}/messages/doomed/nack`, { lease_id: messages[0].lease_id });
  await enqueue(QUEUE, { id: 'ready-1', payload: 'hello' });
  const info = await call('GET', `/v1/queues/${QUEUE}`);
  const { scheduled, ready, leased, dead } = info.stats; // servers with flow control add key counts
  assert.deepEqual({ scheduled, ready, leased, dead }, { scheduled: 7, ready: 1, leased: 0, dead: 1 });
}

// Enqueue/lease/ack traffic on a side queue for a few seconds, so the
// sparklines have something to show. Bounded in rounds and time.
async function traffic(ms) {
  const queue = `${QUEUE}-traffic`;
  const until = Date.now() + ms;
  for (let round = 0; round < 300 && Date.now() < until; round++) {
    const messages = Array.from({ length: 1 + (round % 7) }, (_, i) => ({ payload: `tick ${round}.${i}` }));
    await call('POST', `/v1/queues/${queue}/batch`, { messages });
    const leased = await call('POST', `/v1/queues/${queue}/leases`, { max: 10 });
    for (const m of leased.messages) {
      await call('POST', `/v1/queues/${queue}/messages/${encodeURIComponent(m.id)}/ack`, { lease_id: m.lease_id });
    }
    await new Promise((done) => setTimeout(done, 40)); // pacing, not synchronisation
  }
}

async function newPage({ withToken = true } = {}) {
  const page = await context.newPage();
  page.setDefaultTimeout(15_000);
  page.on('dialog', (dialog) => {
    dialogs.push(dialog.message());
    dialog.dismiss().catch(() => {});
  });
  page.on('pageerror', (err) => pageErrors.push(err.message));
  if (withToken && TOKEN) {
    await page.addInitScript((token) => sessionStorage.setItem('delayd.token', token), TOKEN);
  }
  return page;
}

const shot = (page, name) => page.screenshot({ path: join(SHOTS, name), fullPage: true });

before(async () => {
  mkdirSync(SHOTS, { recursive: true });
  userDataDir = mkdtempSync(join(tmpdir(), 'delayd-chromium-'));
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: CHROMIUM_FLAGS,
    viewport: { width: 1280, height: 900 },
  });
  await seed();
});

after(async () => {
  await context?.close();
  if (userDataDir) rmSync(userDataDir, { recursive: true, force: true });
  await call('DELETE', `/v1/queues/${QUEUE}`).catch(() => {});
  await call('DELETE', `/v1/queues/${QUEUE}-traffic`).catch(() => {});
  await call('DELETE', `/v1/queues/${FLOW_QUEUE}`).catch(() => {});
  await call('DELETE', `/v1/queues/${KEPT_QUEUE}`).catch(() => {});
});

test('overview lists the queue with counts by state', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui`);
  const row = page.locator(`tr[data-queue="${QUEUE}"]`);
  await row.waitFor();
  assert.equal(await row.locator('.count-scheduled').textContent(), '7');
  assert.equal(await row.locator('.count-ready').textContent(), '1');
  assert.equal(await row.locator('.count-dead').textContent(), '1');
  assert.equal(await row.locator('.badge').textContent(), 'active');
  // Give the sparklines a few samples of traffic for the screenshot.
  const running = traffic(12_000);
  await page.waitForFunction(() => {
    const lines = [...document.querySelectorAll('.metrics svg.sparkline polyline')];
    const values = [...document.querySelectorAll('.metric-value')].map((e) => e.textContent);
    const points = lines.map((l) => l.getAttribute('points').split(' ').length);
    return points.length >= 2 && points[0] >= 4 && values[0] !== '0.0/s' && values[1] !== '0.0/s';
  }, null, { timeout: 20_000 });
  await shot(page, 'overview.png');
  await running;
  // The README's picture is refreshed only on request, so a test run does
  // not dirty the work tree.
  if (process.env.DELAYD_UPDATE_SCREENSHOT === '1') {
    copyFileSync(join(SHOTS, 'overview.png'), join(ROOT, 'docs', 'img', 'dashboard.png'));
  }
  await page.close();
});

async function barCounts(page) {
  return page.$$eval('svg.histogram rect.bar', (bars) => bars.map((b) => Number(b.getAttribute('data-count'))));
}

test('queue page: the histogram reflects the scheduled messages', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui`);
  await page.locator(`tr[data-queue="${QUEUE}"] a`).click();
  await page.locator('h1', { hasText: QUEUE }).waitFor();
  await page.locator('svg.histogram').waitFor();
  let counts = await barCounts(page);
  assert.equal(counts.length, 60, 'one bar a minute over the next hour');
  assert.deepEqual(counts.filter((c) => c > 0), [3, 1, 2], 'due at +10, +20 and +40 minutes');
  assert.ok(counts.indexOf(3) >= 8 && counts.indexOf(3) <= 10, `+10 min bar at ${counts.indexOf(3)}`);
  await shot(page, 'queue.png');

  await page.click('button[data-range="day"]');
  await page.waitForFunction(() => document.querySelectorAll('svg.histogram rect.bar').length === 48);
  counts = await barCounts(page);
  assert.equal(counts.reduce((a, b) => a + b, 0), 7, 'the +2 h message counts in the next day');
  await page.close();
});

test('a payload containing <script> is shown as text and never runs', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
  const cell = page.locator('tr[data-id="xss"] td.payload');
  assert.equal(await cell.textContent(), XSS);
  await page.locator('tr[data-id="xss"] a').click();
  const payload = page.locator('pre[data-test="payload"]');
  await payload.waitFor();
  assert.equal(await payload.textContent(), XSS);
  assert.equal(await page.locator('table.headers td').textContent(), EVIL_HEADER);
  assert.equal(await page.locator('main script, main img').count(), 0, 'no element made from data');
  await shot(page, 'message-xss.png');
  assert.deepEqual(dialogs, [], 'no alert() fired');
  await page.close();
});

test('redrive a dead message', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
  await page.click('button[data-state="dead"]');
  const row = page.locator('tr[data-id="doomed"]');
  await row.waitFor();
  assert.equal(await page.locator('table.messages th.when').textContent(), 'died');
  assert.match(await row.locator('td.when').textContent(), /ago$/);
  await shot(page, 'dead-before-redrive.png');
  await row.locator('button[data-action="redrive"]').click();
  await page.locator('text=No dead messages.').waitFor();
  const message = await call('GET', `/v1/queues/${QUEUE}/messages/doomed`);
  assert.equal(message.state, 'ready');
  assert.equal(message.attempts, 0, 'redrive resets attempts');
  await page.close();
});

test('schedules: next fires in both zones, pause, resume, trigger, fired messages', async () => {
  const queue = `${QUEUE}-sched`;
  await call('PUT', `/v1/queues/${queue}/schedules/nightly`, {
    cron: '30 2 * * *', tz: 'Australia/Lord_Howe', message: { payload: 'nightly run' },
  });
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${encodeURIComponent(queue)}`);
  const row = page.locator('tr[data-schedule="nightly"]');
  await row.waitFor();
  const zoned = row.locator('td[data-test="next-zone"] li');
  assert.equal(await zoned.count(), 5, 'the next five fire times');
  assert.match(await zoned.first().textContent(), /02:30:00/, 'shown in the schedule zone');
  const schedule = await call('GET', `/v1/queues/${queue}/schedules/nightly`);
  const viewerTime = await page.evaluate((t) => new Date(t).toLocaleTimeString(undefined, { hour12: false, hour: '2-digit', minute: '2-digit', second: '2-digit' }), schedule.next_fires[0]);
  assert.ok((await row.locator('td[data-test="next-local"] li').first().textContent()).includes(viewerTime), 'and in the viewer zone');
  await shot(page, 'schedules.png');

  await row.locator('button[data-action="schedule-pause"]').click();
  await page.locator('tr[data-schedule="nightly"] [data-test="schedule-state"]', { hasText: 'paused' }).waitFor();
  assert.equal((await call('GET', `/v1/queues/${queue}/schedules/nightly`)).paused, true);
  await page.locator('tr[data-schedule="nightly"] button[data-action="schedule-resume"]').click();
  await page.locator('tr[data-schedule="nightly"] [data-test="schedule-state"]', { hasText: 'active' }).waitFor();

  await page.locator('tr[data-schedule="nightly"] button[data-action="schedule-trigger"]').click();
  await page.locator('tr[data-schedule="nightly"] button[data-action="schedule-messages"]').click();
  const fired = page.locator('[data-test="fired"] tr[data-fired^="nightly:manual:"]');
  await fired.waitFor();
  assert.equal(await fired.count(), 1, 'the triggered message is listed');
  await call('DELETE', `/v1/queues/${queue}`);
  await page.close();
});

// Text a page shows that came from a missing value: a cell, list item or
// line that reads `null` or `undefined` (the DOM's own `append(null)`
// prints "null"; a missing field formats as "undefined").
async function missingValueTexts(page) {
  return page.evaluate(() => {
    const bad = /(^|\W)(null|undefined)(\W|$)/;
    const found = [];
    for (const cell of document.querySelectorAll('main td, main th, main li, main dd, main dt, main p, main h1, main h2, main h3')) {
      if (bad.test(cell.textContent.trim())) found.push(`${cell.tagName}: ${cell.textContent.trim()}`);
    }
    for (const line of document.querySelector('main').innerText.split('\n')) {
      if (bad.test(line.trim())) found.push(`line: ${line.trim()}`);
    }
    return found;
  });
}

test('a queue page with schedules shows no null or undefined', async () => {
  const queue = `${QUEUE}-two-sched`;
  await call('PUT', `/v1/queues/${queue}/schedules/nightly`, {
    cron: '30 2 * * *', tz: 'Europe/Berlin', message: { payload: 'nightly run' },
  });
  await call('PUT', `/v1/queues/${queue}/schedules/often`, { every_ms: 3_600_000, message: { payload: 'hourly' } });
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${encodeURIComponent(queue)}`);
  await page.locator('tr[data-schedule="often"]').waitFor();
  await page.locator('tr[data-schedule="nightly"]').waitFor();
  await page.locator('[data-test="histogram-total"]').waitFor();
  assert.deepEqual(await missingValueTexts(page), [], 'queue page with two schedules');
  // With a schedule's messages open, and with none left.
  await page.locator('tr[data-schedule="often"] button[data-action="schedule-trigger"]').click();
  await page.locator('tr[data-schedule="often"] button[data-action="schedule-messages"]').click();
  await page.locator('[data-test="fired"] tr[data-fired^="often:manual:"]').waitFor();
  assert.deepEqual(await missingValueTexts(page), [], 'with fired messages shown');
  await call('DELETE', `/v1/queues/${queue}/schedules/often`);
  await call('DELETE', `/v1/queues/${queue}/schedules/nightly`);
  await page.reload();
  await page.locator('[data-test="schedules"] p', { hasText: 'No schedules.' }).waitFor();
  assert.deepEqual(await missingValueTexts(page), [], 'queue page without schedules');
  await call('DELETE', `/v1/queues/${queue}`);
  await page.close();
});

test('reschedule and cancel from the message list', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
  const row = page.locator('tr[data-id="two-hours"]');
  await row.locator('button[data-action="reschedule"]').click();
  await row.locator('[data-test="delay-seconds"]').fill('30');
  const before = Date.now();
  await row.locator('button[data-action="reschedule-save"]').click();
  await page.locator('tr[data-id="two-hours"] td.when', { hasText: /^in (2\d|30)s$/ }).waitFor();
  const moved = await call('GET', `/v1/queues/${QUEUE}/messages/two-hours`);
  assert.ok(moved.deliver_at >= before + 29_000 && moved.deliver_at <= Date.now() + 30_000, `deliver_at ${moved.deliver_at}`);

  await page.locator('tr[data-id="ten-3"] button[data-action="cancel"]').click();
  await page.locator('tr[data-id="ten-3"]').waitFor({ state: 'detached' });
  await assert.rejects(call('GET', `/v1/queues/${QUEUE}/messages/ten-3`), /404/);
  await page.close();
});

test('pause and resume the queue', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
  const flag = page.locator('[data-test="paused-flag"]');
  await flag.waitFor();
  assert.equal(await flag.textContent(), 'active');
  await page.click('button[data-action="pause"]');
  await page.locator('[data-test="paused-flag"]', { hasText: 'paused' }).waitFor();
  assert.equal((await call('GET', `/v1/queues/${QUEUE}`)).paused, true);
  await shot(page, 'paused.png');
  await page.click('button[data-action="resume"]');
  await page.locator('[data-test="paused-flag"]', { hasText: 'active' }).waitFor();
  assert.equal((await call('GET', `/v1/queues/${QUEUE}`)).paused, false);
  await page.close();
});

test('purge asks for the queue name, then deletes the queue', async () => {
  const doomed = `${QUEUE}-purge`;
  await enqueue(doomed, { payload: 'bye' });
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${doomed}`);
  await page.click('button[data-action="purge"]');
  const ok = page.locator('#confirm-ok');
  assert.equal(await ok.isDisabled(), true, 'confirm disabled until the name is typed');
  await page.fill('#confirm-input', doomed);
  await ok.click();
  await page.waitForFunction(() => location.hash === '#/');
  await assert.rejects(call('GET', `/v1/queues/${doomed}`), /404/);
  await page.close();
});

// A queue with flow limits and one key cooling down: tenant-a's first
// message deferred for 10 minutes (nack with defer), its second waiting.
const FLOW_QUEUE = `${QUEUE}-flow`;

async function seedFlow() {
  await call('PUT', `/v1/queues/${FLOW_QUEUE}`, {
    flow: { rate: { limit: 50, period_ms: 1000 }, key_concurrency: 2, max_deferrals: 7 },
  });
  await enqueue(FLOW_QUEUE, { id: 'a-1', key: 'tenant-a', payload: 'first', priority: 0 });
  await enqueue(FLOW_QUEUE, { id: 'a-2', key: 'tenant-a', payload: 'second' });
  await enqueue(FLOW_QUEUE, { id: 'b-1', key: 'tenant-b', payload: 'other', deliver_at: Date.now() + 10 * MINUTE });
  const { messages } = await call('POST', `/v1/queues/${FLOW_QUEUE}/leases`, { max: 1 });
  assert.equal(messages[0].id, 'a-1');
  await call('POST', `/v1/queues/${FLOW_QUEUE}/messages/a-1/nack`, { lease_id: messages[0].lease_id, defer: true, delay_ms: 10 * MINUTE });
}

test('queue page: flow limits, keys cooling down and a key lookup', async () => {
  await seedFlow();
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${encodeURIComponent(FLOW_QUEUE)}`);
  const limits = page.locator('[data-test="flow-limits"]');
  await limits.locator('[data-limit="rate"] dd').waitFor();
  assert.equal(await page.locator('[data-test="flow"]').isVisible(), true, 'the flow card shows on a queue with flow');
  const { burst } = (await call('GET', `/v1/queues/${FLOW_QUEUE}`)).config.flow.rate;
  assert.equal(await limits.locator('[data-limit="rate"] dd').textContent(), `50 / 1s, burst ${burst}`);
  assert.equal(await limits.locator('[data-limit="key rate"] dd').textContent(), 'none');
  assert.equal(await limits.locator('[data-limit="key concurrency"] dd').textContent(), '2');
  assert.equal(await limits.locator('[data-limit="max deferrals"] dd').textContent(), '7');
  assert.match(await page.locator('[data-test="flow-keys"]').textContent(), /^Keys cooling down: 1 \(of \d+ keys with state\)$/);

  await page.fill('[data-test="key-input"]', 'tenant-a');
  await page.click('button[data-action="key-lookup"]');
  const result = page.locator('[data-test="key-result"]');
  await result.locator('[data-test="key-cooling"]').waitFor();
  const count = (state) => result.locator(`[data-count="${state}"] dd`).textContent();
  assert.deepEqual([await count('scheduled'), await count('ready'), await count('leased'), await count('dead')], ['1', '1', '0', '0']);
  assert.match(await result.locator('[data-test="key-cooling"]').textContent(), /^Cooling down until .+ \(in (9m|10m) \d+s\)\.$/);
  await shot(page, 'queue-flow.png');

  // A key with no live message answers zeros and does not cool down.
  await page.fill('[data-test="key-input"]', 'tenant-b/?#');
  await page.click('button[data-action="key-lookup"]');
  await result.locator('h3', { hasText: 'tenant-b/?#' }).waitFor();
  assert.equal(await count('scheduled'), '0');
  assert.equal(await result.locator('[data-test="key-cooling"]').textContent(), 'Not cooling down.');
  await page.close();
});

test('message lists show each message\'s key', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${encodeURIComponent(FLOW_QUEUE)}`);
  // Scheduled: a-1 (deferred for 10 minutes) and b-1; ready: a-2.
  await page.locator('tr[data-id="b-1"]').waitFor();
  const headings = await page.locator('table.messages th').allTextContents();
  assert.equal(headings[1], 'key', `columns: ${headings}`);
  assert.equal(await page.locator('tr[data-id="a-1"] td.key').textContent(), 'tenant-a');
  assert.equal(await page.locator('tr[data-id="b-1"] td.key').textContent(), 'tenant-b');
  await page.click('button[data-state="ready"]');
  await page.locator('tr[data-id="a-2"]').waitFor();
  assert.equal(await page.locator('tr[data-id="a-2"] td.key').textContent(), 'tenant-a');
  // A message without a key has an empty cell.
  await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
  await page.locator('tr[data-id="forty-1"]').waitFor();
  assert.equal(await page.locator('tr[data-id="forty-1"] td.key').textContent(), '');
  await page.close();
});

test('a queue without flow has no flow card', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
  // The header is drawn from the same queue object as the flow card.
  await page.locator('[data-test="paused-flag"]').waitFor();
  assert.equal((await call('GET', `/v1/queues/${QUEUE}`)).config.flow ?? null, null);
  assert.equal(await page.locator('[data-test="flow"]').isVisible(), false, 'no flow card');
  assert.equal(await page.getByText('Keys cooling down').isVisible(), false);
  assert.equal(await page.locator('[data-action="key-lookup"]').isVisible(), false, 'no key lookup');
  await page.close();
});

// The message page's fields: { field: text } of each `[data-field]` row.
async function messageFields(page) {
  return page.$$eval('[data-field]', (rows) => Object.fromEntries(rows.map((r) => [r.dataset.field, r.querySelector('dd').textContent])));
}

// Loads the page afresh: going to the URL the page is at (a change of the
// hash only) would not load it again.
async function openMessage(page, queue, id) {
  const url = `${BASE}/ui/#/queues/${encodeURIComponent(queue)}/messages/${encodeURIComponent(id)}`;
  if (page.url() === url) await page.reload();
  else await page.goto(url);
  // The title and the fields are drawn together, once the message came.
  await page.locator('h1.id', { hasText: id }).waitFor();
  await page.locator('[data-test="payload"]').waitFor();
  return messageFields(page);
}

// Sections of the page, not rows of its field list.
const MESSAGE_SECTIONS = ['headers', 'payload', 'payload_base64', 'max_attempts'];

test('message page: every field of the message object, the key and deferrals among them', async () => {
  const page = await newPage();
  const sent = await call('GET', `/v1/queues/${FLOW_QUEUE}/messages/a-1`);
  const fields = await openMessage(page, FLOW_QUEUE, 'a-1');
  assert.deepEqual(
    Object.keys(fields).sort(),
    Object.keys(sent).filter((f) => !MESSAGE_SECTIONS.includes(f)).sort(),
    'one row for each field the server sent',
  );
  assert.equal(fields.key, 'tenant-a');
  assert.equal(fields.queue, FLOW_QUEUE);
  assert.equal(fields.state, 'scheduled');
  assert.equal(fields.seq, String(sent.seq));
  assert.equal(fields.attempts, '0', 'a deferral spends no attempt');
  assert.equal(fields.deferrals, '1', 'a-1 was deferred once');
  assert.equal(await page.locator('[data-test="payload"]').textContent(), 'first');
  await shot(page, 'message-flow.png');

  // No key: the row says none (muted), never "null".
  const plain = await openMessage(page, QUEUE, 'forty-2');
  assert.equal(plain.key, 'none');
  assert.equal(await page.locator('[data-field="key"] dd.muted').count(), 1);
  assert.deepEqual(await missingValueTexts(page), [], 'message page of a message without a key');
  await page.close();
});

// Answers GET .../messages/{id} with the real answer changed by `edit`.
async function editMessageAnswer(page, id, edit) {
  await page.unrouteAll();
  await page.route((url) => url.pathname.startsWith('/v1/') && url.pathname.endsWith(`/messages/${id}`), async (route) => {
    const response = await route.fetch();
    await route.fulfill({ response, json: edit(await response.json()) });
  });
}

test('message page: a field is drawn only when the server sends it', async () => {
  const page = await newPage();
  // A server that sends last_error, ended_at and a field this page does not know.
  await editMessageAnswer(page, 'a-2', (m) => ({ ...m, last_error: 'push answered 500: <b>boom</b>', ended_at: null, retained_until: 1700000000000 }));
  let fields = await openMessage(page, FLOW_QUEUE, 'a-2');
  assert.equal(fields['last_error'], 'push answered 500: <b>boom</b>');
  assert.equal(fields['ended_at'], 'not ended');
  assert.equal(fields['retained_until'], '1700000000000', 'an unknown field is shown as sent');
  assert.equal(await page.locator('main b').count(), 0, 'an error text is shown as text');

  // An older server: no key, deferrals, last_error or ended_at.
  await editMessageAnswer(page, 'a-2', ({ key, deferrals, last_error, ended_at, ...m }) => m);
  fields = await openMessage(page, FLOW_QUEUE, 'a-2');
  for (const gone of ['key', 'deferrals', 'last_error', 'ended_at']) assert.equal(fields[gone], undefined, `no ${gone} row`);
  assert.equal(fields.id, 'a-2');
  assert.deepEqual(await missingValueTexts(page), [], 'older server');

  // A retained message: ended, no payload, no actions.
  const ended = Date.now() - 5000;
  await editMessageAnswer(page, 'a-2', ({ payload, ...m }) => ({ ...m, state: 'acked', ended_at: ended, last_error: null }));
  fields = await openMessage(page, FLOW_QUEUE, 'a-2');
  assert.equal(fields.state, 'acked');
  assert.equal(fields['last_error'], 'none');
  assert.match(fields['ended_at'], /\d/);
  assert.match(await page.locator('[data-test="payload"]').textContent(), /^None kept/);
  assert.equal(await page.locator('main button[data-action="cancel"]').count(), 0, 'no actions on an ended message');
  assert.deepEqual(await missingValueTexts(page), [], 'retained message');
  await page.close();
});

// A queue keeping ended messages for a day (retain_ms).
const KEPT_QUEUE = `${QUEUE}-kept`;

test('retention: the queue page shows retain_ms, a retained message its end and no payload', async () => {
  await call('PUT', `/v1/queues/${KEPT_QUEUE}`, { retain_ms: 24 * 60 * MINUTE });
  await enqueue(KEPT_QUEUE, { id: 'done-1', payload: 'gone after the ack' });
  const { messages } = await call('POST', `/v1/queues/${KEPT_QUEUE}/leases`, { max: 1 });
  await call('POST', `/v1/queues/${KEPT_QUEUE}/messages/done-1/ack`, { lease_id: messages[0].lease_id });
  const page = await newPage();

  // Waited for by their text: a hash change keeps the page, so the line of
  // the queue shown before may still be there for a moment.
  await page.goto(`${BASE}/ui/#/queues/${KEPT_QUEUE}`);
  await page.locator('[data-test="retention"]', { hasText: /kept 1d .*retain_ms 86400000/ }).waitFor();
  await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
  await page.locator('[data-test="retention"]', { hasText: 'not kept (retain_ms 0)' }).waitFor();

  // The real answer of a retained message: state acked, ended_at, "payload": "".
  const fields = await openMessage(page, KEPT_QUEUE, 'done-1');
  assert.equal(fields.state, 'acked');
  assert.match(fields['ended_at'], /\d/);
  assert.match(await page.locator('[data-test="payload"]').textContent(), /^None kept/);
  assert.equal(await page.getByText('gone after the ack').count(), 0);
  assert.equal(await page.locator('main button[data-action="cancel"]').count(), 0, 'no actions on an ended message');
  assert.deepEqual(await missingValueTexts(page), [], 'retained message');
  await shot(page, 'message-retained.png');
  await page.close();
});

// Answers GET .../messages/{id}/events with the real answer changed by `edit`.
async function editEventsAnswer(page, edit) {
  await page.unrouteAll();
  await page.route((url) => url.pathname.startsWith('/v1/') && url.pathname.endsWith('/events'), async (route) => {
    const response = await route.fetch();
    await route.fulfill({ response, json: edit(await response.json()) });
  });
}

test('message page: the history as a timeline, and last_error', async () => {
  const queue = `${QUEUE}-history`;
  const error = '<b>upstream</b> answered 503';
  await call('PUT', `/v1/queues/${queue}`, { max_attempts: 2 });
  await enqueue(queue, { id: 'h-1', payload: 'x' });
  for (const nack of [{ delay_ms: 0, error }, { delay_ms: 0 }]) {
    const { messages } = await call('POST', `/v1/queues/${queue}/leases`, { max: 1, wait_ms: 5000 });
    assert.equal(messages[0]?.id, 'h-1');
    await call('POST', `/v1/queues/${queue}/messages/h-1/nack`, { lease_id: messages[0].lease_id, ...nack });
  }
  const page = await newPage();
  const fields = await openMessage(page, queue, 'h-1');
  assert.equal(fields.state, 'dead');
  assert.equal(fields['last_error'], error, 'a nack without error keeps the last one');

  const events = page.locator('[data-test="history"] [data-test="event"]');
  await events.first().waitFor();
  const types = await events.evaluateAll((nodes) => nodes.map((n) => n.dataset.type));
  assert.deepEqual(types, ['enqueued', 'leased', 'nacked', 'leased', 'nacked', 'dead'], 'oldest first');
  const texts = await events.allTextContents();
  assert.match(texts[1], /leased.*attempt 1.*via http.*lease until/);
  assert.match(texts[2], /nacked.*attempt 1.*retry in 0s/);
  assert.match(texts[5], /dead.*attempt 2.*out of attempts/);
  assert.deepEqual(await page.locator('[data-test="event-error"]').allTextContents(), [error], 'the nack error, once');
  assert.equal(await page.locator('main b').count(), 0, 'an error text is shown as text');
  assert.equal(await page.locator('[data-test="history-dropped"]').count(), 0);
  assert.deepEqual(await missingValueTexts(page), [], 'history');
  await shot(page, 'message-history.png');

  // A long history (older events dropped) and a type a newer server adds.
  await editEventsAnswer(page, (h) => ({
    dropped: 7,
    events: [...h.events, { at: Date.now(), type: 'teleported', attempt: 2, to: 'mars' },
      { at: Date.now(), type: 'push_failed', attempt: 2, status: null, error: 'connect failed: refused', duration_ms: 3 }],
  }));
  await openMessage(page, queue, 'h-1');
  await page.locator('[data-test="event"][data-type="teleported"]').waitFor();
  assert.match(await page.locator('[data-test="history-dropped"]').textContent(), /^7 older events not kept/);
  assert.match(await page.locator('[data-type="teleported"]').textContent(), /teleported.*attempt 2.*to: mars/);
  assert.match(await page.locator('[data-type="push_failed"]').textContent(), /no answer.*took 3 ms.*connect failed: refused/);
  assert.deepEqual(await missingValueTexts(page), [], 'dropped events and a newer type');

  // A server without the route: the rest of the page still shows.
  await page.unrouteAll();
  await page.route((url) => url.pathname.endsWith('/events'), (route) =>
    route.fulfill({ status: 404, json: { error: { code: 'not_found', message: 'no such route' } } }));
  await openMessage(page, queue, 'h-1');
  await page.locator('[data-test="history"]', { hasText: 'Not available: no such route' }).waitFor();
  await page.close();
  await call('DELETE', `/v1/queues/${queue}`);
});

test('fits a phone-sized screen', async () => {
  const page = await newPage();
  await page.setViewportSize({ width: 390, height: 844 });
  await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
  await page.locator('svg.histogram').waitFor();
  await page.locator('tr[data-id]').first().waitFor();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  assert.ok(overflow <= 1, `page scrolls sideways by ${overflow}px`);
  await shot(page, 'phone-queue.png');
  await page.close();
});

test('asks for the token once and keeps it for the tab', { skip: TOKEN ? false : 'server started without a token' }, async () => {
  const page = await newPage({ withToken: false });
  await page.goto(`${BASE}/ui`);
  const dialog = page.locator('#token-dialog');
  await dialog.waitFor({ state: 'visible' });
  await shot(page, 'token-prompt.png');
  await page.fill('#token-input', TOKEN);
  await page.click('#token-save');
  await page.locator(`tr[data-queue="${QUEUE}"]`).waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.getItem('delayd.token')), TOKEN);
  await page.reload();
  await page.locator(`tr[data-queue="${QUEUE}"]`).waitFor();
  assert.equal(await dialog.isVisible(), false, 'no second prompt after a reload');
  await page.close();
});

// A page whose tab holds `token` (as if typed into the prompt).
async function pageWithToken(token) {
  const page = await newPage({ withToken: false });
  await page.addInitScript((t) => sessionStorage.setItem('delayd.token', t), token);
  return page;
}

test('a read-only token sees only what it may read and cannot act', { skip: NO_SCOPED_TOKENS }, async () => {
  const hidden = `hidden-${Date.now()}`;
  await call('PUT', `/v1/queues/${hidden}`, {});
  const page = await pageWithToken(VIEWER_TOKEN);
  try {
    await page.goto(`${BASE}/ui`);
    await page.locator(`tr[data-queue="${QUEUE}"]`).waitFor();
    assert.equal(await page.locator('[data-test="whoami"]').textContent(), 'token: viewer');
    assert.equal(await page.locator(`tr[data-queue="${hidden}"]`).count(), 0, 'a queue it may not read is not listed');
    await page.locator('.metrics', { hasText: 'read:*' }).waitFor();
    await shot(page, 'viewer-overview.png');

    await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
    await page.locator('[data-test="paused-flag"]').waitFor();
    for (const action of ['pause', 'purge']) {
      const button = page.locator(`button[data-action="${action}"]`);
      assert.equal(await button.isDisabled(), true, `${action} is disabled`);
    }
    assert.equal(await page.locator('button[data-action="pause"]').getAttribute('title'), `This token may not manage on queue ${QUEUE}`);
    assert.equal(await page.locator('button[data-action="purge"]').getAttribute('data-denied'), 'admin');
    const row = page.locator('tr[data-id="ten-1"]');
    await row.waitFor();
    assert.equal(await row.locator('button[data-action="cancel"]').isDisabled(), true);
    assert.equal(await row.locator('button[data-action="reschedule"]').isDisabled(), true);
    // It still reads what it may: the message page with its payload.
    await page.goto(`${BASE}/ui/#/queues/${QUEUE}/messages/ten-1`);
    await page.locator('pre[data-test="payload"]', { hasText: 'job 1' }).waitFor();
    await shot(page, 'viewer-message.png');
    assert.equal((await call('GET', `/v1/queues/${QUEUE}`)).paused, false, 'nothing changed');
  } finally {
    await page.close();
    await call('DELETE', `/v1/queues/${hidden}`).catch(() => {});
  }
});

test('an admin token sees every queue and may act', { skip: NO_SCOPED_TOKENS }, async () => {
  const hidden = `hidden-${Date.now()}`;
  await call('PUT', `/v1/queues/${hidden}`, {});
  const page = await pageWithToken(ADMIN_TOKEN);
  try {
    await page.goto(`${BASE}/ui`);
    await page.locator(`tr[data-queue="${hidden}"]`).waitFor();
    assert.equal(await page.locator('[data-test="whoami"]').textContent(), 'token: admin');
    await page.goto(`${BASE}/ui/#/queues/${QUEUE}`);
    await page.locator('[data-test="paused-flag"]', { hasText: 'active' }).waitFor();
    for (const action of ['pause', 'purge']) {
      assert.equal(await page.locator(`button[data-action="${action}"]`).isDisabled(), false, `${action} is enabled`);
    }
    await page.click('button[data-action="pause"]');
    await page.locator('[data-test="paused-flag"]', { hasText: 'paused' }).waitFor();
    await page.click('button[data-action="resume"]');
    await page.locator('[data-test="paused-flag"]', { hasText: 'active' }).waitFor();
  } finally {
    await page.close();
    await call('DELETE', `/v1/queues/${hidden}`).catch(() => {});
  }
});

test('sparkline maths: /metrics parsing, rates and lateness quantiles', async () => {
  const page = await newPage();
  await page.goto(`${BASE}/ui`);
  const result = await page.evaluate(async () => {
    const m = await import('/ui/metrics.js');
    const scrape = (enqueued, acked, buckets) => [
      '# TYPE delayd_http_requests_total counter',
      `delayd_http_requests_total{method="POST",route="/v1/queues/{queue}/messages",status="201"} ${enqueued}`,
      'delayd_http_requests_total{method="POST",route="/v1/queues/{queue}/messages",status="400"} 99',
      `delayd_http_requests_total{method="POST",route="/v1/queues/{queue}/messages/{id}/ack",status="204"} ${acked}`,
      ...buckets.map(([le, n]) => `delayd_fire_lateness_seconds_bucket{queue="a \\"q\\"",le="${le}"} ${n}`),
      'delayd_fire_lateness_seconds_sum{queue="a"} 1.5',
    ].join('\n');
    const before = m.summarize(m.parse(scrape(10, 4, [['0.001', 0], ['0.01', 0], ['+Inf', 0]])));
    // 100 fired in the interval: 50 within 1 ms, 40 more within 10 ms, 10 beyond.
    const now = m.summarize(m.parse(scrape(30, 8, [['0.001', 50], ['0.01', 90], ['+Inf', 100]])));
    const sampler = new m.Sampler();
    sampler.record(now, before, 2);
    const s = sampler.series;
    return {
      queues: [...now.lateness.keys()],
      enqueue: s.enqueueRate, ack: s.ackRate, p50: s.p50, p99: s.p99,
      p90: m.quantile(0.9, now.lateness.get('*')),
    };
  });
  assert.deepEqual(result.queues.sort(), ['*', 'a "q"'], 'label values unescaped');
  assert.deepEqual(result.enqueue, [10], '20 successful enqueues in 2 s; the 400s do not count');
  assert.deepEqual(result.ack, [2]);
  assert.ok(Math.abs(result.p50[0] - 0.001) < 1e-9, `p50 ${result.p50}`);
  assert.ok(Math.abs(result.p90 - 0.01) < 1e-9, `p90 ${result.p90}`);
  assert.equal(result.p99[0], 0.01, 'beyond the last finite bound: that bound');
  await page.close();
});

test('no script errors on any page', () => {
  assert.deepEqual(pageErrors, []);
});
