// SPDX-License-Identifier: Apache-2.0
// The run page's live streams (Step::write_stream), inlined into index.html before dashboard.js
// (CMakeLists.txt); it uses dashboard.js's el(), token() and askForToken() once the page runs.
//
// Each stream of the run (GET /v1/runs/{id}/streams) is read as Server-Sent Events from
// GET /v1/runs/{id}/streams/{name}. EventSource cannot send the Authorization header the page's
// token needs, so the response is read with fetch and a stream reader, and its `id:`/`data:`
// lines parsed here. A dropped connection is opened again with Last-Event-ID, the offset of the
// last value shown, so no value is shown twice or missed. Leaving the run page aborts every read.
//
// The section is built once per run and kept across the page's re-renders of the run (which
// replace the detail view's children): renderDetail puts the same node back each time.
'use strict';

const STREAM_RETRY_MS = 1000;      // before opening a dropped stream again
const STREAM_RETRY_MAX_MS = 15000;  // the longest wait after failures in a row
const STREAM_LIST_MS = 3000;       // how often the run's list of streams is read for new ones
const STREAM_VALUES_SHOWN = 200;   // the newest values kept on the page, per stream

let streamTail = null;  // {runId, ended, controller, node, list, streams: Map(name -> entry)}

// The section of the run's streams, tailing them from the first call for this run on.
function liveStreams(run) {
  if (!streamTail || streamTail.runId !== run.id) {
    stopStreams();
    streamTail = startStreams(run.id);
  }
  streamTail.ended = ENDED.has(run.status);
  return streamTail.node;
}

function stopStreams() {
  if (!streamTail) return;
  streamTail.controller.abort();
  streamTail = null;
}

function startStreams(runId) {
  const list = el('div', {class: 'streams'});
  const tail = {
    runId, ended: false, controller: new AbortController(), list, streams: new Map(),
    node: el('section', {class: 'card block', 'data-testid': 'streams', hidden: true},
             el('h2', {}, 'Streams'), list),
  };
  watchStreamList(tail).catch(() => {});  // ends when aborted
  return tail;
}

function streamUrl(runId, name) {
  const base = 'v1/runs/' + encodeURIComponent(runId) + '/streams';
  return name === undefined ? base : base + '/' + encodeURIComponent(name);
}

function streamHeaders(accept) {
  const headers = {Accept: accept};
  const bearer = token();
  if (bearer) headers.Authorization = 'Bearer ' + bearer;
  return headers;
}

// Resolves after `ms`, or at once when the tail is aborted.
function pause(ms, signal) {
  return new Promise((resolve) => {
    const aborted = () => { clearTimeout(timer); resolve(); };
    const timer = setTimeout(() => { signal.removeEventListener('abort', aborted); resolve(); }, ms);
    signal.addEventListener('abort', aborted, {once: true});
  });
}

// The run's streams as the API lists them: [{name, length, closed, updated_at}].
async function readStreamList(tail) {
  const response = await fetch(streamUrl(tail.runId), {
    headers: streamHeaders('application/json'), cache: 'no-store', signal: tail.controller.signal});
  if (response.status === 401) askForToken(token() !== '');
  if (!response.ok) throw new Error('the list of streams answered ' + response.status);
  return (await response.json()).streams || [];
}

// Starts a tail for each stream that appears, until the run has ended and every stream is
// closed (nothing more can come).
async function watchStreamList(tail) {
  const signal = tail.controller.signal;
  while (!signal.aborted) {
    try {
      for (const s of await readStreamList(tail)) {
        if (tail.streams.has(s.name)) continue;
        const entry = streamEntry(tail, s.name);
        tail.streams.set(s.name, entry);
        tailStream(tail, entry).catch(() => {});  // ends when aborted
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    const all = [...tail.streams.values()];
    if (tail.ended && all.every((entry) => entry.closed)) return;
    await pause(STREAM_LIST_MS, signal);
  }
}

// One stream's part of the section: its name, open or closed, and its newest values.
function streamEntry(tail, name) {
  const entry = {
    name, next: 0, closed: false,
    state: el('span', {class: 'badge running', 'data-testid': 'stream-state', 'data-state': 'open'},
              'open'),
    count: el('span', {class: 'footnote', 'data-testid': 'stream-count'}, '0 values'),
    problem: el('span', {class: 'footnote', 'data-testid': 'stream-problem', hidden: true}),
    values: el('ol', {class: 'mono stream-values', start: '0'}),
  };
  tail.list.append(el('div', {class: 'stream', 'data-testid': 'stream', 'data-stream': name},
    el('h3', {}, el('span', {class: 'mono'}, name), ' ', entry.state, ' ', entry.count, ' ',
       entry.problem),
    entry.values));
  tail.node.hidden = false;
  return entry;
}

function showStreamValue(entry, offset, value) {
  entry.values.append(el('li', {'data-testid': 'stream-value', 'data-offset': offset,
                                value: String(offset)}, JSON.stringify(value)));
  while (entry.values.childElementCount > STREAM_VALUES_SHOWN) entry.values.firstChild.remove();
  entry.next = offset + 1;
  entry.count.textContent = entry.next === 1 ? '1 value' : entry.next + ' values';
}

function showStreamClosed(entry) {
  entry.closed = true;
  entry.state.textContent = 'closed';
  entry.state.className = 'badge completed';
  entry.state.setAttribute('data-state', 'closed');
  entry.problem.hidden = true;
}

function showStreamProblem(entry, message) {
  entry.problem.textContent = message ? '(' + message + ')' : '';
  entry.problem.hidden = !message;
}

// Reads the stream's events until its close, opening the connection again after a drop: a
// second after a response that ended, later and later after failures in a row. A run that is
// gone (404: purged) is not asked again.
async function tailStream(tail, entry) {
  const signal = tail.controller.signal;
  let delay = STREAM_RETRY_MS;
  while (!signal.aborted && !entry.closed) {
    try {
      await readEvents(tail, entry);
      // The server ends the response at the close, and also when a read of its own failed:
      // the list says which.
      const listed = (await readStreamList(tail)).find((s) => s.name === entry.name);
      if (listed && listed.closed && listed.length <= entry.next) {
        showStreamClosed(entry);
        return;
      }
      delay = STREAM_RETRY_MS;
      await pause(delay, signal);
    } catch (e) {
      if (signal.aborted) return;
      if (e.status === 404) return showStreamProblem(entry, 'the run is gone');
      showStreamProblem(entry, 'reconnecting: ' + e.message);
      await pause(delay, signal);
      delay = Math.min(delay * 2, STREAM_RETRY_MAX_MS);
    }
  }
}

// One response: its events shown as they arrive.
async function readEvents(tail, entry) {
  const headers = streamHeaders('text/event-stream');
  if (entry.next > 0) headers['Last-Event-ID'] = String(entry.next - 1);
  const response = await fetch(streamUrl(tail.runId, entry.name),
                               {headers, cache: 'no-store', signal: tail.controller.signal});
  if (response.status === 401) askForToken(token() !== '');
  if (!response.ok) {
    throw Object.assign(new Error('the server answered ' + response.status),
                        {status: response.status});
  }
  showStreamProblem(entry, '');
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let event = {id: null, data: []};
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, '');
      buffer = buffer.slice(end + 1);
      if (line === '') {  // the event is complete
        if (event.data.length) {
          const offset = event.id === null ? entry.next : Number(event.id);
          const value = JSON.parse(event.data.join('\n'));
          if (offset >= entry.next) showStreamValue(entry, offset, value);
        }
        event = {id: null, data: []};
        continue;
      }
      if (line.startsWith(':')) continue;  // a comment: the keep-alive
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      const text = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
      if (field === 'id') event.id = text;
      else if (field === 'data') event.data.push(text);
    }
  }
}

window.addEventListener('hashchange', () => {
  const detail = location.hash.match(/^#\/runs\/([^?&/]+)/);
  if (!streamTail || !detail || decodeURIComponent(detail[1]) !== streamTail.runId) stopStreams();
});
window.addEventListener('pagehide', stopStreams);
