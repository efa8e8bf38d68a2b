#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// End-to-end test of the dashboard page (runtime/dashboard/index.html) in Debian's Chromium,
// driven by playwright-core, against a server of the admin API holding runs in known states.
//
// Against a server already running, with the ids of a failed and a completed run:
//
//   node dashboard.test.mjs --url http://127.0.0.1:PORT --failed-run ID --completed-run ID \
//       --screenshot run.png [--token T]
//
// Or on its own: make a fresh database with the fixture program (tests/fixtures/ops_fixture.cpp,
// run with --extended: it prints {"completed": id, "failed": id, "fan_out": id, ...}; the fan-out
// run's timeline is checked only then), start the server on a free port, test, and
// stop the server. In the --serve command (run by /bin/sh), {port}, {db} and {token} are replaced,
// the last two quoted for the shell:
//
//   node dashboard.test.mjs --fixture build/tests/durable_ops_fixture --db /tmp/x/dash.db \
//       --serve "build/durable serve --db {db} --port {port}" --screenshot run.png
//
// The CTest test intended for it (tests/CMakeLists.txt; the target names are the lead's to pick,
// the --serve options are whatever `durable serve` takes for its port and token):
//
//   add_executable(durable_ops_fixture fixtures/ops_fixture.cpp)
//   target_link_libraries(durable_ops_fixture PRIVATE durable::durable)
//   find_program(DURABLE_NODE node)
//   add_test(NAME dashboard_browser
//     COMMAND ${DURABLE_NODE} ${CMAKE_CURRENT_SOURCE_DIR}/browser/dashboard.test.mjs
//       --fixture $<TARGET_FILE:durable_ops_fixture> --db ${CMAKE_CURRENT_BINARY_DIR}/dashboard.db
//       --serve "$<TARGET_FILE:durable_cli> serve --db {db} --port {port}"
//       --screenshot ${CMAKE_CURRENT_BINARY_DIR}/dashboard-failed-run.png)
//   set_tests_properties(dashboard_browser PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 180)
//   (and dashboard_browser_token: another --db, --token T, and the server's token option in
//   --serve, e.g. "... --token {token}")
//
// It needs `npm ci` in tests/browser and /usr/bin/chromium (scripts/deps.sh installs both).
// Each check prints one line; the first failure prints what was expected and what was seen,
// and exits 1. Usage errors exit 2. Without playwright-core or Chromium it exits 77 (for CTest's
// SKIP_RETURN_CODE), saying what to install.

import {spawn} from 'node:child_process';
import {createServer} from 'node:net';
import {existsSync, rmSync, statSync} from 'node:fs';
import {parseArgs} from 'node:util';

import {checkLiveStreams} from './live_streams.mjs';

const WAIT_MS = 5000;   // the longest wait for the page or the API to show a change
const TOTAL_MS = 120000; // the whole test

// ------------------------------------------------------------------------------ arguments

function usage(message) {
  console.error(`dashboard.test.mjs: ${message}
usage: node dashboard.test.mjs --url URL --failed-run ID --completed-run ID --screenshot PATH [--token T]
       node dashboard.test.mjs --fixture BIN --db FILE --serve "CMD {db} {port} {token}" --screenshot PATH [--token T]
options: --chromium PATH (default /usr/bin/chromium)`);
  process.exit(2);
}

let args;
try {
  args = parseArgs({options: {
    'url': {type: 'string'}, 'failed-run': {type: 'string'}, 'completed-run': {type: 'string'},
    'screenshot': {type: 'string'}, 'token': {type: 'string'},
    'fixture': {type: 'string'}, 'db': {type: 'string'}, 'serve': {type: 'string'},
    'chromium': {type: 'string', default: '/usr/bin/chromium'},
  }}).values;
} catch (e) {
  usage(e.message);
}
if (!args.screenshot) usage('--screenshot is required');
if (args.serve && args.url) usage('give --url or --serve, not both');
if (!args.serve && !args.url) usage('give --url (a running server) or --serve (a command to start one)');
if (args.fixture && !args.db) usage('--fixture needs --db');
if (!args.fixture && (!args['failed-run'] || !args['completed-run'])) {
  usage('give --failed-run and --completed-run, or --fixture to make them');
}

// Imported here rather than at the top, so that a machine without it is told what to do.
let chromium;
try {
  ({chromium} = await import('playwright-core'));
} catch (e) {
  console.error(`SKIP: playwright-core is not installed (${e.code || e.message}): run \`npm ci\` in ` +
                'tests/browser, or source scripts/deps.sh and run durable_install_test_deps');
  process.exit(77);
}
if (!existsSync(args.chromium)) {
  console.error(`SKIP: no Chromium at ${args.chromium}: apt-get install chromium, or give --chromium PATH`);
  process.exit(77);
}

// ------------------------------------------------------------------------------ reporting

let checkNumber = 0;

class CheckFailed extends Error {
  constructor(expected, seen) {
    super(`expected ${expected}; saw ${seen}`);
    this.expected = expected;
    this.seen = seen;
  }
}

// Runs one check; prints "ok N - what" or throws with what was expected and seen.
async function check(what, body) {
  checkNumber += 1;
  try {
    const detail = await body();
    console.log(`ok ${checkNumber} - ${what}${detail ? ` (${detail})` : ''}`);
  } catch (e) {
    e.check = `${checkNumber} - ${what}`;
    throw e;
  }
}

// Calls probe() until it returns {ok: true}, or WAIT_MS passes; then fails with its last `seen`.
async function waitFor(expected, probe, timeoutMs = WAIT_MS) {
  const deadline = Date.now() + timeoutMs;
  let last = {ok: false, seen: 'nothing yet'};
  for (;;) {
    try {
      last = await probe();
    } catch (e) {
      last = {ok: false, seen: `an error: ${e.message.split('\n')[0]}`};
    }
    if (last.ok) return last;
    if (Date.now() > deadline) throw new CheckFailed(expected, `${last.seen} (after ${timeoutMs} ms)`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

const json = (value) => JSON.stringify(value);

// A failure to set up (fixture, server) whose message says it all: printed without a stack.
function setupError(message) {
  const error = new Error(message);
  error.plain = true;
  return error;
}

// ------------------------------------------------------------------------------ the API, from Node

let baseUrl = args.url ? args.url.replace(/\/+$/, '') : '';

async function apiGet(path) {
  const headers = args.token ? {Authorization: `Bearer ${args.token}`} : {};
  const response = await fetch(baseUrl + path, {headers});
  const text = await response.text();
  if (!response.ok) throw new Error(`GET ${path} answered ${response.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

// ------------------------------------------------------------------------------ fixture and server

let server = null;
let serverOutput = '';

function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const {port} = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

function runFixture() {
  for (const suffix of ['', '-wal', '-shm']) rmSync(args.db + suffix, {force: true});
  return new Promise((resolve, reject) => {
    const child = spawn(args.fixture, ['--db', args.db, '--extended'], {stdio: ['ignore', 'pipe', 'pipe']});
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => { out += d; });
    child.stderr.on('data', (d) => { err += d; });
    child.once('error', reject);
    child.once('close', (code) => {
      const line = out.trim().split('\n').pop() || '';
      try {
        if (code !== 0) throw new Error(`exit code ${code}`);
        resolve(JSON.parse(line));
      } catch (e) {
        reject(setupError(`${args.fixture} --db ${args.db} --extended: ${e.message}; stdout: ${out.trim()}; ` +
                          `stderr: ${err.trim()}`));
      }
    });
  });
}

async function startServer(port) {
  port = port || await freePort();  // a port given: the server started again where it was
  const quote = (text) => `'${String(text).replaceAll("'", "'\\''")}'`;
  const command = args.serve.replaceAll('{port}', String(port)).replaceAll('{db}', quote(args.db || ''))
                            .replaceAll('{token}', quote(args.token || ''));
  // exec: the shell becomes the server, so that the signal at the end reaches it.
  server = spawn('/bin/sh', ['-c', `exec ${command}`], {stdio: ['ignore', 'pipe', 'pipe']});
  server.stdout.on('data', (d) => { serverOutput += d; });
  server.stderr.on('data', (d) => { serverOutput += d; });
  const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({code, signal})));
  server.exitedPromise = exited;
  baseUrl = `http://127.0.0.1:${port}`;
  // Any HTTP answer (401 included) means it listens.
  const deadline = Date.now() + 15000;
  for (;;) {
    const gone = await Promise.race([exited, new Promise((r) => setTimeout(() => r(null), 100))]);
    if (gone) throw setupError(`the server exited (${json(gone)}) before answering: ${command}`);
    try {
      await fetch(`${baseUrl}/v1/stats`);
      return command;
    } catch (e) {
      if (Date.now() > deadline) throw setupError(`the server did not answer on ${baseUrl} within 15 s: ${command}`);
    }
  }
}

async function stopServer() {
  if (!server || server.exitCode !== null || server.signalCode !== null) return;
  server.kill('SIGTERM');
  const done = await Promise.race([server.exitedPromise, new Promise((r) => setTimeout(() => r(null), 5000))]);
  if (!done) server.kill('SIGKILL');
}

// ------------------------------------------------------------------------------ the page

const pageErrors = [];

async function newPage(context) {
  const page = await context.newPage();
  page.setDefaultTimeout(WAIT_MS * 2);
  page.on('pageerror', (error) => pageErrors.push(error.message));
  return page;
}

// The rows of the runs list, read in one go (the page may re-render between two reads).
function readRows(page) {
  return page.$$eval('[data-testid="run-row"]', (rows) => rows.map((row) => ({
    id: row.getAttribute('data-run-id'),
    status: row.getAttribute('data-status'),
    unknown: row.querySelector('[data-testid="unknown-marker"]') !== null,
  })));
}

function readCounts(page) {
  return page.$$eval('[data-testid^="count-"]', (nodes) => Object.fromEntries(nodes.map(
      (n) => [n.getAttribute('data-testid').slice('count-'.length), n.textContent.trim()])));
}

// Where each step's timeline bar is drawn, as fractions of its track: {id, left, right}.
function readBars(page) {
  return page.$$eval('[data-testid="step-row"]', (rows) => rows.map((row) => {
    const bar = row.querySelector('[data-testid="step-bar"]');
    if (!bar) return {id: row.getAttribute('data-step-id'), left: null, right: null};
    const track = bar.parentElement.getBoundingClientRect();
    const box = bar.getBoundingClientRect();
    return {id: row.getAttribute('data-step-id'), left: (box.left - track.left) / track.width,
            right: (box.right - track.left) / track.width};
  }));
}

// Where the API says each step's last attempt ran, as fractions of the run's time axis (the
// page's: from the run's creation, or the first start, to the last end).
function expectedBars(run) {
  const spans = run.steps.map((s) => {
    const took = Number(s.duration_ms) || 0;
    const start = Date.parse(s.started_at);
    if (!Number.isNaN(start)) return {id: s.id, start, end: start + took};
    const end = Date.parse(s.updated_at);
    return {id: s.id, start: end - took, end};
  });
  const t0 = Math.min(...spans.map((x) => x.start), Date.parse(run.created_at));
  const t1 = Math.max(...spans.map((x) => x.end), t0 + 1);
  return spans.map((x) => ({id: x.id, left: (x.start - t0) / (t1 - t0), right: (x.end - t0) / (t1 - t0)}));
}

function readSteps(page) {
  return page.$$eval('[data-testid="step-row"]', (rows) => rows.map((row) => ({
    id: row.getAttribute('data-step-id'),
    status: row.getAttribute('data-status'),
    error: (row.querySelector('[data-testid="step-error"]') || {textContent: ''}).textContent,
  })));
}

// Text nodes that show null, undefined or NaN (or an object) in place of a value.
function strayText(page) {
  return page.evaluate(() => {
    const found = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent.trim();
      if (node.parentElement.closest('pre, script, style')) continue;
      if (/^(null|undefined|NaN|\[object Object\])$/.test(text) || /\b(undefined|NaN)\b/.test(text)) {
        found.push(`${node.parentElement.tagName}: ${text.slice(0, 80)}`);
      }
    }
    return found;
  });
}

async function textOf(page, testid) {
  const node = page.locator(`[data-testid="${testid}"]`).first();
  return (await node.count()) ? (await node.textContent()).trim() : null;
}

// ------------------------------------------------------------------------------ the checks

async function main(ids) {
  const failedId = ids.failed;
  const completedId = ids.completed;
  const browser = await chromium.launch({executablePath: args.chromium, args: ['--no-sandbox']});
  try {
    const context = await browser.newContext({viewport: {width: 1360, height: 1000}});
    const page = await newPage(context);

    let failedRun;
    await check('the API holds the failed and the completed run', async () => {
      failedRun = await apiGet(`/v1/runs/${encodeURIComponent(failedId)}`);
      const completedRun = await apiGet(`/v1/runs/${encodeURIComponent(completedId)}`);
      if (failedRun.status !== 'failed' || completedRun.status !== 'completed') {
        throw new CheckFailed('statuses failed and completed',
                              `${failedRun.status} and ${completedRun.status}`);
      }
      return `${failedId} failed, ${completedId} completed`;
    });

    if (args.token) {
      await check('without a token the page asks for one', async () => {
        await page.goto(baseUrl + '/');
        await page.locator('[data-testid="token-form"]').waitFor({state: 'visible', timeout: WAIT_MS});
        const rows = await readRows(page);
        if (rows.length) throw new CheckFailed('no run rows before the token', `${rows.length}`);
      });
      await check('answering the token form shows the runs', async () => {
        await page.fill('[data-testid="token-input"]', args.token);
        await page.click('[data-testid="token-submit"]');
        await waitFor('run rows after the token', async () => {
          const rows = await readRows(page);
          return {ok: rows.length > 0, seen: `${rows.length} rows`};
        });
        if (await page.locator('[data-testid="token-form"]').isVisible()) {
          throw new CheckFailed('the token form hidden', 'it is still shown');
        }
      });
    } else {
      await page.goto(baseUrl + '/');
    }

    await check('the list shows the runs, newest first', async () => {
      const seen = await waitFor('both runs in the list', async () => {
        const rows = await readRows(page);
        const has = (id) => rows.some((r) => r.id === id);
        return {ok: has(failedId) && has(completedId), rows,
                seen: `rows ${json(rows.map((r) => `${r.id}:${r.status}`))}`};
      });
      const api = await apiGet('/v1/runs?limit=100');
      const order = api.runs.map((r) => r.id);
      const shown = seen.rows.map((r) => r.id);
      if (json(shown) !== json(order)) throw new CheckFailed(`the API's order ${json(order)}`, json(shown));
      return `${seen.rows.length} rows`;
    });

    await check('the status filters show the counts of the API', async () => {
      const api = await apiGet('/v1/runs?limit=1');
      const expected = Object.fromEntries(Object.entries(api.counts).map(([s, n]) => [s, String(n)]));
      await waitFor(`counts ${json(expected)}`, async () => {
        const shown = await readCounts(page);
        const ok = Object.entries(expected).every(([s, n]) => shown[s] === n);
        return {ok, seen: `counts ${json(shown)}`};
      });
      return `failed ${expected.failed}, completed ${expected.completed}`;
    });

    await check('runs of a workflow no worker knows are marked, and only those', async () => {
      const api = await apiGet('/v1/runs?limit=100');
      const unknown = new Set(api.runs.filter((r) => r.known === false).map((r) => r.id));
      const rows = await readRows(page);
      const wrong = rows.filter((r) => r.unknown !== unknown.has(r.id));
      if (wrong.length) {
        throw new CheckFailed(`markers on ${json([...unknown])}`,
                              `markers on ${json(rows.filter((r) => r.unknown).map((r) => r.id))}`);
      }
      return `${unknown.size} marked`;
    });

    await check('filtering by failed shows the failed run and not the completed one', async () => {
      await page.click('[data-testid="status-filter-failed"]');
      await waitFor('only failed rows, the failed run among them', async () => {
        const rows = await readRows(page);
        const ok = rows.some((r) => r.id === failedId) && !rows.some((r) => r.id === completedId) &&
                   rows.every((r) => r.status === 'failed');
        return {ok, seen: `rows ${json(rows.map((r) => `${r.id}:${r.status}`))}`};
      });
    });

    await check('clicking the failed run opens its detail', async () => {
      await page.click(`[data-testid="run-row"][data-run-id="${failedId}"]`);
      await waitFor(`the detail of ${failedId}, failed`, async () => {
        const id = await textOf(page, 'detail-id');
        const status = await textOf(page, 'detail-status');
        return {ok: id === failedId && status === 'failed', seen: `id ${id}, status ${status}`};
      });
      const hash = await page.evaluate(() => location.hash);
      if (hash !== `#/runs/${failedId}`) throw new CheckFailed(`#/runs/${failedId}`, hash);
    });

    await check('the step timeline shows the failed step and its error', async () => {
      const failedStep = failedRun.steps.find((s) => s.status === 'failed');
      if (!failedStep) throw new CheckFailed('a failed step in the API', json(failedRun.steps));
      const message = failedStep.error && failedStep.error.message;
      const steps = await readSteps(page);
      if (steps.length !== failedRun.steps.length) {
        throw new CheckFailed(`${failedRun.steps.length} step rows`, `${steps.length}: ${json(steps)}`);
      }
      const row = steps.find((s) => s.id === failedStep.id);
      if (!row || row.status !== 'failed' || !message || !row.error.includes(message)) {
        throw new CheckFailed(`step ${failedStep.id} failed with "${message}"`, json(row));
      }
      const marked = await page.locator(`[data-testid="step-row"][data-step-id="${failedStep.id}"]`)
          .evaluate((tr) => getComputedStyle(tr.cells[0]).backgroundColor);
      const plain = await page.locator('[data-testid="step-row"][data-status="completed"]').first()
          .evaluate((tr) => getComputedStyle(tr.cells[0]).backgroundColor).catch(() => null);
      if (marked === plain) throw new CheckFailed('the failed step marked apart', `the same background ${marked}`);
      return `${steps.length} steps; ${failedStep.id}: ${message}`;
    });

    await check('the state history is shown', async () => {
      const rows = await page.locator('[data-testid="history-row"]').count();
      if (rows !== failedRun.history.length || rows === 0) {
        throw new CheckFailed(`${failedRun.history.length} history rows`, `${rows}`);
      }
      return `${rows} rows`;
    });

    await check('the progress the failing step last reported is shown', async () => {
      const progress = failedRun.progress || [];
      if (progress.length !== 1) throw new CheckFailed('1 progress entry from the API', `${progress.length}`);
      const rows = page.locator('[data-testid="progress-row"]');
      if ((await rows.count()) !== 1) throw new CheckFailed('1 progress row', `${await rows.count()}`);
      const text = await rows.first().innerText();
      const shown = JSON.stringify(progress[0].progress);
      if (!text.includes(progress[0].step) || !text.includes(shown)) {
        throw new CheckFailed(`a row with ${progress[0].step} and ${shown}`, json(text));
      }
      return text.replace(/\s+/g, ' ');
    });

    await check('the runbook is shown', async () => {
      if (!failedRun.runbook) throw new CheckFailed('a runbook from the API', 'null');
      if (!(await page.locator('[data-testid="runbook"]').isVisible())) {
        throw new CheckFailed('a visible runbook', 'none');
      }
      const summary = await textOf(page, 'runbook-summary');
      if (summary !== failedRun.runbook.summary) throw new CheckFailed(json(failedRun.runbook.summary), json(summary));
      const command = await textOf(page, 'runbook-retry-command');
      if (failedRun.runbook.retry_command && command !== failedRun.runbook.retry_command) {
        throw new CheckFailed(json(failedRun.runbook.retry_command), json(command));
      }
      return summary;
    });

    await check('no field shows null, undefined or NaN in place of a value', async () => {
      const stray = await strayText(page);
      if (stray.length) throw new CheckFailed('no stray text', json(stray));
    });

    await check(`a screenshot of the failed run is saved to ${args.screenshot}`, async () => {
      await page.screenshot({path: args.screenshot, fullPage: true});
      const size = statSync(args.screenshot).size;
      if (size < 1000) throw new CheckFailed('a PNG of some size', `${size} bytes`);
      return `${size} bytes`;
    });

    // A second tab on the same run, deep-linked (with the token in the fragment), its refresh
    // paused so that it keeps offering Retry after the first tab retried.
    const stale = await newPage(context);
    await check('a deep link opens the run (a token in the fragment is taken and removed)', async () => {
      const fragment = `#/runs/${encodeURIComponent(failedId)}` +
                       (args.token ? `&token=${encodeURIComponent(args.token)}` : '');
      await stale.goto(`${baseUrl}/${fragment}`);
      await stale.locator('[data-testid="retry-button"]').waitFor({state: 'visible', timeout: WAIT_MS});
      await stale.uncheck('[data-testid="auto-refresh"]');
      const url = stale.url();
      if (url.includes('token=')) throw new CheckFailed('no token in the address', url);
      return new URL(url).hash;
    });

    // A server whose runtime knows the workflow may run it again at once and fail it again:
    // then the retry shows as new entries in the history rather than as a status.
    await check('Retry, confirmed, makes the API report the run no longer failed', async () => {
      const before = (await apiGet(`/v1/runs/${encodeURIComponent(failedId)}`)).history.length;
      const rowsBefore = await page.locator('[data-testid="history-row"]').count();
      page.once('dialog', (dialog) => dialog.accept());
      const answer = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/retry'));
      await page.click('[data-testid="retry-button"]');
      const response = await answer;
      if (response.status() !== 200) throw new CheckFailed('200 from POST retry', `${response.status()}`);
      const seen = await waitFor('a status other than failed', async () => {
        const run = await apiGet(`/v1/runs/${encodeURIComponent(failedId)}`);
        const requeued = run.status !== 'failed' || run.history.length > before;
        return {ok: requeued, seen: `status ${run.status}, ${run.history.length} history entries`,
                what: run.status !== 'failed' ? `now ${run.status}` :
                    `retried and failed again: ${before} -> ${run.history.length} history entries`};
      });
      await waitFor('the page refreshed: the retry in its history, the outcome shown', async () => {
        const rows = await page.locator('[data-testid="history-row"]').count();
        const notice = await textOf(page, 'action-ok');
        return {ok: rows > rowsBefore && notice !== null, seen: `${rows} history rows, notice ${json(notice)}`};
      });
      return seen.what;
    });

    await check('a second Retry from a stale tab shows the 409 error', async () => {
      const now = await apiGet(`/v1/runs/${encodeURIComponent(failedId)}`);
      if (now.status === 'failed') return 'skipped: the run failed again, so a retry is no conflict';
      stale.once('dialog', (dialog) => dialog.accept());
      const answer = stale.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/retry'));
      await stale.click('[data-testid="retry-button"]');
      const response = await answer;
      if (response.status() !== 409) throw new CheckFailed('409 from POST retry', `${response.status()}`);
      const body = await response.json().catch(() => ({}));
      const message = body.error && body.error.message;
      const shown = await waitFor('the error message on the page', async () => {
        const text = await textOf(stale, 'action-error');
        return {ok: text !== null && (!message || text.includes(message)), seen: json(text), text};
      });
      return shown.text;
    });

    await check('a deep link to the completed run shows it without Retry or Cancel', async () => {
      await stale.goto(`${baseUrl}/#/runs/${encodeURIComponent(completedId)}`);
      const api = await apiGet(`/v1/runs/${encodeURIComponent(completedId)}`);
      await waitFor(`completed, with ${api.steps.length} step rows`, async () => {
        const status = await textOf(stale, 'detail-status');
        const steps = await readSteps(stale);
        return {ok: status === 'completed' && steps.length === api.steps.length,
                seen: `status ${status}, ${steps.length} step rows`};
      });
      const buttons = await stale.locator('[data-testid="retry-button"], [data-testid="cancel-button"]').count();
      if (buttons) throw new CheckFailed('no Retry or Cancel button', `${buttons}`);
    });

    await check('Fork from here on the completed run\'s first step makes a new run forked from it', async () => {
      stale.once('dialog', (dialog) => dialog.accept());
      const answer = stale.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/fork'));
      await stale.locator('[data-testid="fork-button"]').first().click();
      const response = await answer;
      if (response.status() !== 201) throw new CheckFailed('201 from POST fork', `${response.status()}`);
      const fork = (await response.json()).id;
      const notice = await waitFor('the new run named on the page', async () => {
        const text = await textOf(stale, 'action-ok');
        return {ok: text !== null && text.includes(fork), seen: json(text), text};
      });
      const run = await apiGet(`/v1/runs/${encodeURIComponent(fork)}`);
      if (run.forked_from !== completedId) throw new CheckFailed(`forked_from ${completedId}`, json(run.forked_from));
      return notice.text;
    });

    await check('Resolve on a step waiting out its retry completes it by hand, the reason kept', async () => {
      const before = await apiGet(`/v1/runs/${encodeURIComponent(failedId)}`);
      const step = before.steps.find((s) => s.kind === 'run' && s.status === 'retrying');
      if (!['pending', 'sleeping'].includes(before.status) || !step) {
        return `skipped: the run is ${before.status}, with no step waiting for its next attempt`;
      }
      await page.goto(`${baseUrl}/#/runs/${encodeURIComponent(failedId)}`);
      const answers = ['{"charged": "by hand"}', 'charged by phone'];
      const onDialog = (dialog) => dialog.accept(answers.shift());
      page.on('dialog', onDialog);
      const answer = page.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/resolve'));
      await page.locator(`[data-testid="step-row"][data-step-id="${step.id}"] [data-testid="resolve-button"]`).click();
      const response = await answer;
      page.off('dialog', onDialog);
      if (response.status() !== 200) throw new CheckFailed('200 from POST resolve', `${response.status()}`);
      const shown = await waitFor('the reason on the step', async () => {
        const text = await textOf(page, 'step-resolved');
        return {ok: text !== null && text.includes('charged by phone'), seen: json(text), text};
      });
      const after = await apiGet(`/v1/runs/${encodeURIComponent(failedId)}`);
      const resolved = after.steps.find((s) => s.id === step.id);
      if (resolved.status !== 'completed' || resolved.resolved !== 'charged by phone') {
        throw new CheckFailed('the step completed, resolved', json(resolved));
      }
      return shown.text;
    });

    await check('the timeline draws each parallel item from its own start to its own end', async () => {
      if (!ids.fan_out) return 'skipped: no fan-out run (the fixture makes one)';
      const run = await apiGet(`/v1/runs/${encodeURIComponent(ids.fan_out)}`);
      const items = run.steps.filter((s) => /^resize\[\d+\]$/.test(s.id));
      if (items.length < 6 || !items.every((s) => s.started_at && Number.isFinite(s.duration_ms))) {
        throw new CheckFailed('map items with started_at and duration_ms in the API', json(run.steps));
      }
      // The page is given every entry as written at one moment, the last one's: as when a
      // batch's entries are committed together. The bars must still come from started_at.
      await stale.route((url) => url.pathname === `/v1/runs/${ids.fan_out}`, async (route) => {
        const response = await route.fetch();
        const body = await response.json();
        const last = body.steps.map((s) => s.updated_at).sort().pop();
        for (const s of body.steps) s.updated_at = last;
        await route.fulfill({response, json: body});
      });
      await stale.goto(`${baseUrl}/#/runs/${encodeURIComponent(ids.fan_out)}`);
      const seen = await waitFor(`${run.steps.length} bars`, async () => {
        const bars = await readBars(stale);
        return {ok: bars.length === run.steps.length && bars.every((b) => b.left !== null), bars,
                seen: json(bars)};
      });
      const drawn = new Map(seen.bars.map((b) => [b.id, b]));
      const tolerance = 0.01;  // of the track; a bar is at least 0.8% wide
      for (const want of expectedBars(run).filter((b) => items.some((s) => s.id === b.id))) {
        const got = drawn.get(want.id);
        const right = Math.max(want.right, want.left + 0.008);
        if (Math.abs(got.left - want.left) > tolerance || Math.abs(got.right - right) > tolerance) {
          throw new CheckFailed(`${want.id} from ${want.left.toFixed(3)} to ${right.toFixed(3)}`,
                                `from ${got.left.toFixed(3)} to ${got.right.toFixed(3)}`);
        }
      }
      // They ran a few at a time: the first to end ended before the last began.
      const mine = items.map((s) => drawn.get(s.id));
      const firstEnd = Math.min(...mine.map((b) => b.right));
      const lastStart = Math.max(...mine.map((b) => b.left));
      if (firstEnd > lastStart + tolerance) {
        throw new CheckFailed('the first item to end drawn ending before the last one begins',
                              `ends at ${firstEnd.toFixed(3)}, the last begins at ${lastStart.toFixed(3)}`);
      }
      return `${items.length} items; the first ends at ${firstEnd.toFixed(2)}, the last begins at ${lastStart.toFixed(2)}`;
    });

    await check('the tag filter shows only the runs with the tag, which show it', async () => {
      const api = await apiGet('/v1/runs?tag.tenant=acme');
      if (api.runs.length !== 1 || api.runs[0].id !== failedId) {
        throw new CheckFailed('the API lists the failed run alone under tenant=acme', json(api.runs.map((r) => r.id)));
      }
      await stale.goto(`${baseUrl}/#/runs`);
      await stale.locator('[data-testid="tag-filter"]').waitFor({state: 'visible', timeout: WAIT_MS});
      await stale.fill('[data-testid="tag-filter"]', 'tenant=acme');
      const seen = await waitFor('one row, the failed run, showing tenant=acme', async () => {
        const rows = await readRows(stale);
        const tags = await stale.locator('[data-testid="run-tags"]').allTextContents();
        return {ok: rows.length === 1 && rows[0].id === failedId && tags.join() === 'tenant=acme',
                seen: `${json(rows.map((r) => r.id))}, tags ${json(tags)}`, rows};
      });
      await stale.fill('[data-testid="tag-filter"]', '');
      await waitFor('every run listed again', async () => {
        const rows = await readRows(stale);
        return {ok: rows.length > 1, seen: `${rows.length} rows`};
      });
      return `${seen.rows.length} row under tenant=acme`;
    });

    await check('Pause on the sleeping run pauses it, and Resume puts it back to sleep', async () => {
      if (!ids.sleeping) return 'skipped: no sleeping run (the fixture makes one)';
      const path = `/v1/runs/${encodeURIComponent(ids.sleeping)}`;
      const before = await apiGet(path);
      if (before.status !== 'sleeping') return `skipped: the run is ${before.status}`;
      await stale.goto(`${baseUrl}/#/runs/${encodeURIComponent(ids.sleeping)}`);
      const click = async (button, action, status) => {
        await stale.locator(`[data-testid="${button}"]`).waitFor({state: 'visible', timeout: WAIT_MS});
        stale.once('dialog', (dialog) => dialog.accept());
        const answer = stale.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/' + action));
        await stale.click(`[data-testid="${button}"]`);
        const response = await answer;
        if (response.status() !== 200) throw new CheckFailed(`200 from POST ${action}`, `${response.status()}`);
        await waitFor(`the API and the page say ${status}`, async () => {
          const run = await apiGet(path);
          const shown = await textOf(stale, 'detail-status');
          return {ok: run.status === status && shown === status, seen: `API ${run.status}, page ${shown}`};
        });
      };
      await click('pause-button', 'pause', 'paused');
      const paused = await apiGet('/v1/runs?status=paused');
      if (!paused.runs.some((r) => r.id === ids.sleeping)) {
        throw new CheckFailed('the run listed under paused', json(paused.runs.map((r) => r.id)));
      }
      await click('resume-button', 'resume', 'sleeping');
      return 'paused, then sleeping again';
    });

    await check('Pause workflow on a list filtered by workflow pauses its runs, and Resume resumes them', async () => {
      if (!ids.sleeping) return 'skipped: no sleeping run (the fixture makes one)';
      const name = 'send-reminder';
      await stale.goto(`${baseUrl}/#/runs?workflow=${name}`);
      const press = async (label, want) => {
        const button = stale.locator('[data-testid="workflow-pause"]');
        await waitFor(`the button reads "${label}"`, async () => {
          const text = (await button.isVisible()) ? await button.innerText() : '(hidden)';
          return {ok: text === label, seen: json(text)};
        });
        stale.once('dialog', (dialog) => dialog.accept());
        await button.click();
        await waitFor(`the workflow ${want}`, async () => {
          const stats = await apiGet('/v1/stats');
          const run = await apiGet(`/v1/runs/${encodeURIComponent(ids.sleeping)}`);
          const held = stats.paused_workflows.includes(name);
          const ok = want === 'paused' ? held && run.status === 'paused' : !held && run.status === 'sleeping';
          return {ok, seen: `paused_workflows ${json(stats.paused_workflows)}, run ${run.status}`};
        });
      };
      await press(`Pause workflow ${name}`, 'paused');
      await press(`Resume workflow ${name}`, 'resumed');
      return `${name} paused, then resumed`;
    });

    await check('Cancel matching counts the runs a filter matches first, then cancels them', async () => {
      if (!ids.waiting) return 'skipped: no waiting run (the fixture makes one)';
      const name = 'approve-expense';
      await stale.goto(`${baseUrl}/#/runs?workflow=${name}`);
      await stale.locator('[data-testid="bulk-cancel"]').waitFor({state: 'visible', timeout: WAIT_MS});
      let asked = '';
      stale.once('dialog', (dialog) => { asked = dialog.message(); dialog.accept(); });
      const counted = stale.waitForResponse((r) => r.request().method() === 'POST' && r.url().endsWith('/v1/runs/cancel'));
      await stale.click('[data-testid="bulk-cancel"]');
      const dry = await counted;
      if (dry.status() !== 200) throw new CheckFailed('200 from the dry run', `${dry.status()}`);
      await waitFor('the waiting run cancelled, and the page saying so', async () => {
        const run = await apiGet(`/v1/runs/${encodeURIComponent(ids.waiting)}`);
        const notice = await stale.locator('[data-testid="bulk-notice"]').innerText().catch(() => '');
        return {ok: run.status === 'cancelled' && notice.includes('Cancelled 1 run'),
                seen: `run ${run.status}, notice ${json(notice)}`};
      });
      if (!asked.startsWith('Cancel 1 run(s) matching')) {
        throw new CheckFailed('a question with the dry run\'s count', json(asked));
      }
      return asked.split('\n')[0];
    });

    if (args.fixture) {  // a run of the fixture's writes its stream while the page is open
      const restartServer = async () => {
        await stopServer();
        await startServer(Number(new URL(baseUrl).port));
      };
      await checkLiveStreams({page: stale, baseUrl, token: args.token, fixture: args.fixture,
                              db: args.db, waitMs: WAIT_MS, check, waitFor, CheckFailed,
                              setupError, json, apiGet, strayText, restartServer});
    }

    await check('the page threw no error', async () => {
      if (pageErrors.length) throw new CheckFailed('no uncaught error', json(pageErrors));
    });
  } finally {
    await browser.close();
  }
}

// ------------------------------------------------------------------------------ run

const overall = setTimeout(() => {
  console.error(`FAIL: the test did not finish within ${TOTAL_MS / 1000} s`);
  stopServer().finally(() => process.exit(1));
}, TOTAL_MS);

let code = 0;
try {
  let ids = {failed: args['failed-run'], completed: args['completed-run']};
  if (args.fixture) {
    await check('the fixture made its runs', async () => {
      const made = await runFixture();
      if (!made.failed || !made.completed) throw new CheckFailed('{"failed", "completed"} ids', json(made));
      ids = made;
      return json(made);
    });
  }
  if (args.serve) {
    await check('the server answers', async () => `${await startServer()} on ${baseUrl}`);
  }
  await main(ids);
  console.log(`all ${checkNumber} checks passed`);
} catch (e) {
  code = 1;
  console.error(`FAIL ${e.check || '(setup)'}`);
  if (e instanceof CheckFailed) {
    console.error(`  expected: ${e.expected}`);
    console.error(`  seen:     ${e.seen}`);
  } else {
    console.error(`  ${e.plain ? e.message : e.stack || e.message}`);
  }
  if (serverOutput) console.error(`server output (the end):\n${serverOutput.trimEnd().slice(-4000)}`);
} finally {
  clearTimeout(overall);
  await stopServer();
}
process.exit(code);
