// SPDX-License-Identifier: Apache-2.0
// The checks of the run page's live streams (runtime/dashboard/streams.js), for
// dashboard.test.mjs. The fixture program's --streaming run (tests/fixtures/ops_fixture.cpp)
// writes a value to its stream "report", from inside a step body, for each message the test
// sends it on topic "line", and closes the stream at the message {"close": true}: the test
// decides when each value comes, and sends the next only once the page is open.

import {spawn} from 'node:child_process';

// Starts the fixture's --streaming run on the database; resolves to {id, child}.
function startStreamingRun(fixture, db, setupError) {
  const child = spawn(fixture, ['--db', db, '--streaming'], {stdio: ['ignore', 'pipe', 'pipe']});
  let out = '';
  let err = '';
  child.stderr.on('data', (d) => { err += d; });
  return new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      out += d;
      if (!out.includes('\n')) return;
      try {
        resolve({id: JSON.parse(out.split('\n')[0]).streaming, child});
      } catch (e) {
        reject(setupError(`${fixture} --streaming printed ${out.trim()}: ${e.message}`));
      }
    });
    child.once('error', reject);
    child.once('exit', (code) => reject(setupError(
        `${fixture} --db ${db} --streaming exited (${code}) before printing its run: ` +
        err.trim())));
  });
}

// The stream "report" as the page shows it: {state, values: [text...], offsets: [n...]}.
function readStream(page) {
  return page.evaluate(() => {
    const stream = document.querySelector('[data-testid="stream"][data-stream="report"]');
    if (!stream) return null;
    const values = [...stream.querySelectorAll('[data-testid="stream-value"]')];
    return {state: stream.querySelector('[data-testid="stream-state"]').getAttribute('data-state'),
            values: values.map((v) => v.textContent.trim()),
            offsets: values.map((v) => Number(v.getAttribute('data-offset')))};
  });
}

// t: {page (on the server, its token taken, auto-refresh off), baseUrl, token, fixture, db,
//     check, waitFor, CheckFailed, setupError, json, apiGet, strayText, restartServer}
export async function checkLiveStreams(t) {
  const {page, check, waitFor, CheckFailed, json} = t;
  let run = null;
  const send = async (message) => {
    const headers = {'Content-Type': 'application/json'};
    if (t.token) headers.Authorization = `Bearer ${t.token}`;
    const path = `/v1/runs/${encodeURIComponent(run.id)}/messages/line`;
    const response = await fetch(t.baseUrl + path, {method: 'POST', headers, body: json(message)});
    if (!response.ok) {
      throw new Error(`POST ${path} answered ${response.status}: ${await response.text()}`);
    }
  };
  const shows = (expected, want) => waitFor(expected, async () => {
    const seen = await readStream(page);
    return {ok: seen !== null && want(seen), seen: json(seen)};
  }, 15000);

  try {
    await check('a run writes its stream from a step body when the test says so', async () => {
      run = await startStreamingRun(t.fixture, t.db, t.setupError);
      await send({line: 'first'});
      await waitFor('the API listing the stream with one value', async () => {
        const listed = await t.apiGet(`/v1/runs/${encodeURIComponent(run.id)}/streams`);
        const report = listed.streams.find((s) => s.name === 'report');
        return {ok: Boolean(report) && report.length === 1, seen: json(listed)};
      }, 15000);
      return run.id;
    });

    await check('the run page shows the stream\'s value so far, the stream open', async () => {
      await page.goto(`${t.baseUrl}/#/runs/${encodeURIComponent(run.id)}`);
      await shows('the value "first", open',
                  (s) => json(s.values) === json(['{"line":"first"}']) && s.state === 'open');
    });

    await check('a value written after the page opened appears on it, unreloaded', async () => {
      await send({line: 'second', n: 2});
      await shows('two values at offsets 0 and 1',
                  (s) => s.values[1] === '{"line":"second","n":2}' &&
                         json(s.offsets) === json([0, 1]));
    });

    await check('after a dropped connection the page resumes after its last value', async () => {
      const resumed = [];
      const watch = (request) => {
        if (request.url().endsWith('/streams/report')) {
          resumed.push(request.headers()['last-event-id']);
        }
      };
      page.on('request', watch);
      try {
        await t.restartServer();  // the server goes away and comes back on its port
        await waitFor('a request for the stream with Last-Event-ID 1', async () => ({
          ok: resumed.includes('1'), seen: `requests with Last-Event-ID ${json(resumed)}`}), 15000);
      } finally {
        page.off('request', watch);
      }
      await send({line: 'third'});
      await shows('three values, each once', (s) => s.values[2] === '{"line":"third"}' &&
                                                 json(s.offsets) === json([0, 1, 2]));
      return `Last-Event-ID ${json(resumed)}`;
    });

    await check('leaving the run page stops reading the stream', async () => {
      const streamUrl = `/v1/runs/${encodeURIComponent(run.id)}/streams/report`;
      const aborted = page.waitForEvent('requestfailed', {
        predicate: (r) => r.url().endsWith(streamUrl), timeout: t.waitMs});
      await page.goto(`${t.baseUrl}/#/runs`);
      const request = await aborted.catch(() => null);
      if (!request) throw new CheckFailed('the stream\'s request aborted', 'it went on');
      return request.failure().errorText;
    });

    await check('back on the run page, its values and then the close are shown', async () => {
      await page.goto(`${t.baseUrl}/#/runs/${encodeURIComponent(run.id)}`);
      await shows('the three values again', (s) => s.values.length === 3);
      await send({close: true});
      await shows('the stream closed', (s) => s.state === 'closed' && s.values.length === 3);
      const stray = await t.strayText(page);
      if (stray.length) throw new CheckFailed('no stray text', json(stray));
      return '3 values, closed';
    });
  } finally {
    if (run && run.child.exitCode === null) run.child.kill('SIGTERM');
  }
}
