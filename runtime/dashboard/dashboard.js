// SPDX-License-Identifier: Apache-2.0
// The dashboard's script, inlined into index.html at build time (CMakeLists.txt).
'use strict';

const STATUSES = ['pending', 'running', 'sleeping', 'waiting', 'paused', 'completed', 'failed',
                  'cancelled'];
const ENDED = new Set(['completed', 'failed', 'cancelled']);
const TOKEN_KEY = 'durable.token';
const AUTO_KEY = 'durable.autoRefresh';
const REFRESH_MS = 5000;
const LIST_LIMIT = 100;

const $ = (id) => document.getElementById(id);

// ---------------------------------------------------------------- DOM helpers (text only)

// el('td', {class: 'x', 'data-testid': 'y'}, child...): children are nodes or text; null/undefined
// children are skipped. Attribute values and text go through setAttribute/createTextNode only.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'text') node.textContent = String(value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function badge(status, testid) {
  return el('span', {class: 'badge ' + status, 'data-testid': testid}, String(status));
}

// ---------------------------------------------------------------- formatting

function fmtTime(iso) {
  if (!iso) return '–';
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return String(iso);
  return new Date(t).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

function fmtDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '–';
  if (ms < 1000) return Math.round(ms) + ' ms';
  const s = ms / 1000;
  if (s < 60) return (s < 10 ? s.toFixed(1) : Math.round(s)) + ' s';
  const m = Math.floor(s / 60);
  if (m < 60) return m + 'm ' + String(Math.floor(s % 60)).padStart(2, '0') + 's';
  const h = Math.floor(m / 60);
  if (h < 48) return h + 'h ' + String(m % 60).padStart(2, '0') + 'm';
  return Math.floor(h / 24) + 'd ' + (h % 24) + 'h';
}

function fmtAgo(iso) {
  const t = Date.parse(iso);
  if (Number.isNaN(t)) return '–';
  const ms = Date.now() - t;
  if (ms < 0) return 'in ' + fmtDuration(-ms);
  if (ms < 5000) return 'just now';
  return fmtDuration(ms) + ' ago';
}

function shortId(id) {
  // Ids are 12 hex digits of creation time then 16 random ones: the tail tells runs apart.
  const s = String(id);
  return s.length > 12 ? '…' + s.slice(-8) : s;
}

function prettyJson(value) {
  if (value === undefined) return '–';
  return JSON.stringify(value, null, 2);
}

function errorText(error) {
  if (!error) return '';
  return (error.type ? error.type + ': ' : '') + (error.message || '');
}

// ---------------------------------------------------------------- API

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

function token() { return sessionStorage.getItem(TOKEN_KEY) || ''; }

async function api(method, path, body) {
  const headers = {Accept: 'application/json'};
  const bearer = token();
  if (bearer) headers.Authorization = 'Bearer ' + bearer;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {method, headers, cache: 'no-store',
                                  body: body === undefined ? undefined : JSON.stringify(body)});
  } catch (e) {
    throw new ApiError(0, 'unreachable', 'cannot reach the API (' + e.message + ')');
  }
  const text = await response.text();
  let answer = null;
  try { answer = text ? JSON.parse(text) : null; } catch (e) { answer = null; }
  if (response.status === 401) {
    askForToken(bearer !== '');
    throw new ApiError(401, 'unauthorized', 'a bearer token is needed');
  }
  if (!response.ok) {
    const err = answer && answer.error;
    throw new ApiError(response.status, (err && err.code) || 'http_' + response.status,
                       (err && err.message) || (response.status + ' ' + response.statusText));
  }
  if (answer === null) throw new ApiError(response.status, 'bad_response', 'the API answered no JSON');
  return answer;
}

// ---------------------------------------------------------------- token

// A token may come in the fragment (#token=T, or #/runs/ID&token=T): kept, then stripped from
// the address so that it does not stay in the history or get copied along with a link.
function takeTokenFromFragment() {
  const fragment = location.hash.replace(/^#/, '');
  const match = fragment.match(/(^|[?&])token=([^&]*)/);
  if (!match) return;
  let value = match[2];
  try { value = decodeURIComponent(value); } catch (e) { /* keep it as it came */ }
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  let rest = fragment.slice(0, match.index) + fragment.slice(match.index + match[0].length);
  rest = rest.replace(/[?&]$/, '').replace(/\?&/, '?');
  if (!rest || rest.startsWith('&')) rest = '/runs';
  history.replaceState(null, '', location.pathname + location.search + '#' + rest);
}

function askForToken(refused) {
  if (refused) sessionStorage.removeItem(TOKEN_KEY);
  $('token-message').textContent = refused
    ? 'The token was refused. Enter another one.'
    : 'This server asks for a bearer token. It is kept in this browser tab only (sessionStorage).';
  const wasHidden = $('token-view').hidden;
  $('token-view').hidden = false;
  document.querySelector('main').hidden = true;
  if (wasHidden) $('token-input').focus();
}

$('token-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const value = $('token-input').value.trim();
  if (!value) return;
  sessionStorage.setItem(TOKEN_KEY, value);
  $('token-input').value = '';
  $('token-view').hidden = true;
  document.querySelector('main').hidden = false;
  refresh();
});

// ---------------------------------------------------------------- routing

// #/runs?status=failed&workflow=signup&tag=tenant=acme is the list; #/runs/<id> is a run.
function route() {
  const fragment = location.hash.replace(/^#/, '');
  const detail = fragment.match(/^\/runs\/([^?&/]+)/);
  if (detail) return {view: 'detail', id: decodeURIComponent(detail[1])};
  const query = new URLSearchParams(fragment.split('?')[1] || '');
  const status = STATUSES.includes(query.get('status')) ? query.get('status') : '';
  return {view: 'list', status, workflow: query.get('workflow') || '', tag: query.get('tag') || ''};
}

function listHash(status, workflow, tag) {
  const query = new URLSearchParams();
  if (status) query.set('status', status);
  if (workflow) query.set('workflow', workflow);
  if (tag) query.set('tag', tag);
  const text = query.toString();
  return '#/runs' + (text ? '?' + text : '');
}

// ---------------------------------------------------------------- loading

let loadSeq = 0;        // answers to an older load are dropped
let loading = false;
let lastDetailKey = ''; // the detail is rebuilt only when what it shows changed
let actionNotice = null; // {runId, kind: 'ok' | 'error', text}: the outcome of the last action
let lastListHash = '#/runs'; // where "All runs" goes back to: the list as last filtered
let pausedWorkflows = [];    // from /v1/stats

function banner(message) {
  $('banner').textContent = message || '';
  $('banner').hidden = !message;
}

async function refresh() {
  const seq = ++loadSeq;
  const where = route();
  loading = true;
  try {
    const results = await Promise.allSettled([
      loadStats(seq), where.view === 'list' ? loadList(seq, where) : loadDetail(seq, where.id)]);
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    if (seq === loadSeq) {
      banner('');
      $('last-updated').textContent = 'updated ' + new Date().toLocaleTimeString();
    }
  } catch (e) {
    if (seq === loadSeq && e.status !== 401) banner(e.message);
  } finally {
    if (seq === loadSeq) loading = false;
  }
}

async function loadStats(seq) {
  const stats = await api('GET', 'v1/stats');
  if (seq !== loadSeq) return;
  const set = (testid, text, alert) => {
    const node = document.querySelector('[data-testid="' + testid + '"]');
    node.textContent = text;
    node.classList.toggle('alert', Boolean(alert));
  };
  const age = stats.oldest_pending_age_seconds;
  set('stat-pending-depth', String(stats.pending_depth ?? '–'));
  set('stat-oldest-pending', age === null || age === undefined ? '–' : fmtDuration(age * 1000));
  set('stat-failed-runs', String(stats.failed_runs ?? '–'), stats.failed_runs > 0);
  set('stat-retries', String(stats.retries ?? '–'));
  set('stat-workers', String(stats.workers ?? '–'));
  pausedWorkflows = stats.paused_workflows || [];
  const where = route();
  if (where.view === 'list') renderWorkflowButton(where, pausedWorkflows);
}

async function loadList(seq, where) {
  const query = new URLSearchParams({limit: String(LIST_LIMIT)});
  if (where.status) query.set('status', where.status);
  if (where.workflow) query.set('workflow', where.workflow);
  // "tenant=acme,plan=gold": the runs with each tag (tag.KEY=VALUE in the API).
  for (const pair of where.tag.split(',')) {
    const at = pair.indexOf('=');
    if (at > 0 && at < pair.length - 1) query.set('tag.' + pair.slice(0, at).trim(), pair.slice(at + 1).trim());
  }
  const data = await api('GET', 'v1/runs?' + query.toString());
  if (seq !== loadSeq) return;
  renderList(where, data);
}

async function loadDetail(seq, id) {
  let run;
  try {
    run = await api('GET', 'v1/runs/' + encodeURIComponent(id));
  } catch (e) {
    if (seq === loadSeq && e.status === 404) {
      lastDetailKey = '';
      showView('detail');
      $('detail-view').replaceChildren(
        backLink(),
        el('div', {class: 'card empty', 'data-testid': 'not-found'}, 'No run with id ' + id + '.'));
      return;
    }
    throw e;
  }
  try {  // what the run published (Step::publish); the page goes on without them
    const published = await api('GET', 'v1/runs/' + encodeURIComponent(id) + '/published');
    run.published = published.published || [];
  } catch (e) {
    run.published = [];
  }
  if (seq !== loadSeq) return;
  renderDetail(run);
}

function showView(view) {
  $('list-view').hidden = view !== 'list';
  $('detail-view').hidden = view !== 'detail';
}

// ---------------------------------------------------------------- the list

function renderTabs(where, counts) {
  const total = STATUSES.reduce((sum, s) => sum + (Number(counts[s]) || 0), 0);
  const tabs = [['', 'All', total]].concat(STATUSES.map((s) => [s, s, Number(counts[s]) || 0]));
  $('status-tabs').replaceChildren(...tabs.map(([status, label, count]) => {
    const key = status || 'all';
    const active = status === where.status;
    return el('button', {
      type: 'button', role: 'tab', 'aria-selected': active ? 'true' : 'false',
      class: 'tab' + (active ? ' active' : '') + (status === 'failed' && count > 0 ? ' has-failed' : ''),
      'data-testid': 'status-filter-' + key, 'data-status': key,
      onclick: () => {
        location.hash = listHash(status, $('workflow-filter').value.trim(), $('tag-filter').value.trim());
      },
    }, label, el('span', {class: 'count', 'data-testid': 'count-' + key}, String(count)));
  }));
  return total;
}

function renderList(where, data) {
  showView('list');
  lastDetailKey = '';
  lastListHash = listHash(where.status, where.workflow, where.tag);
  const counts = data.counts || {};
  const total = renderTabs(where, counts);
  const filter = $('workflow-filter');
  if (document.activeElement !== filter && filter.value !== where.workflow) filter.value = where.workflow;
  const tags = $('tag-filter');
  if (document.activeElement !== tags && tags.value !== where.tag) tags.value = where.tag;

  const runs = (data.runs || []).slice().sort(
      (a, b) => (Date.parse(b.created_at) || 0) - (Date.parse(a.created_at) || 0));
  $('runs-body').replaceChildren(...runs.map(runRow));
  $('runs-empty').hidden = runs.length > 0;
  const matching = where.status ? Number(counts[where.status]) || 0 : total;
  $('runs-footnote').textContent = runs.length < matching
    ? 'Showing the newest ' + runs.length + ' of ' + matching + ' runs.'
    : runs.length + (runs.length === 1 ? ' run.' : ' runs.');
}

// A running run whose holder's lease lapsed: the holder is dead or stuck, and the next claim by
// any worker takes the run over.
function orphanedMarker(run) {
  if (!run.orphaned) return null;
  return el('span', {
    class: 'marker orphaned', 'data-testid': 'orphaned-marker',
    title: 'Orphaned: ' + (run.worker || 'its holder') + ' stopped renewing its lease' +
           (run.lease_until ? ' (lapsed ' + run.lease_until + ')' : '') +
           '; the next worker to claim runs takes it over.',
  }, 'orphaned');
}

function runRow(run) {
  const open = () => { location.hash = '#/runs/' + encodeURIComponent(run.id); };
  return el('tr', {
    'data-testid': 'run-row', 'data-run-id': run.id, 'data-status': run.status, tabindex: '0',
    onclick: (event) => { if (!event.target.closest('a')) open(); },
    onkeydown: (event) => { if (event.key === 'Enter') open(); },
  },
    el('td', {}, el('a', {class: 'mono', href: '#/runs/' + encodeURIComponent(run.id), title: run.id,
                          'data-testid': 'run-id'}, shortId(run.id))),
    el('td', {'data-testid': 'run-workflow'}, run.workflow,
       run.known === false ? el('span', {
         class: 'marker', 'data-testid': 'unknown-marker',
         title: 'No worker has registered this workflow: its runs wait until one does.',
       }, 'no worker') : null,
       run.tags ? el('span', {class: 'tags', 'data-testid': 'run-tags'},
                     Object.entries(run.tags).map(([k, v]) => k + '=' + v).join(', ')) : null),
    el('td', {}, badge(run.status, 'run-status'), orphanedMarker(run)),
    el('td', {class: 'mono', 'data-testid': 'run-worker',
              title: run.lease_until ? 'lease until ' + run.lease_until : ''}, run.worker || ''),
    el('td', {title: run.updated_at || ''}, fmtAgo(run.updated_at)),
    el('td', {class: 'num'}, String(run.invocations ?? '')),
    el('td', {class: 'err', title: errorText(run.error)}, run.error ? run.error.message || '' : ''));
}

let filterTimer = 0;
for (const input of ['workflow-filter', 'tag-filter']) {
  $(input).addEventListener('input', () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => {
      const where = route();
      const next = listHash(where.view === 'list' ? where.status : '',
                            $('workflow-filter').value.trim(), $('tag-filter').value.trim());
      if (next !== location.hash) {
        history.replaceState(null, '', next);
        refresh();
      }
    }, 300);
  });
}

// ---------------------------------------------------------------- a run

function backLink() {
  return el('p', {}, el('a', {href: lastListHash, 'data-testid': 'back-link'}, '← Runs'));
}

function field(label, value, attrs) {
  return [el('dt', {}, label), el('dd', attrs || {}, value)];
}

function renderDetail(run) {
  showView('detail');
  const key = JSON.stringify([run, actionNotice]);
  if (key === lastDetailKey) return;
  lastDetailKey = key;

  const actions = el('div', {class: 'actions'});
  if (run.status === 'failed') {
    actions.append(el('button', {type: 'button', class: 'primary', 'data-testid': 'retry-button',
                                 onclick: () => act('retry', run)}, 'Retry'));
  }
  if (run.status === 'paused' || run.pausing) {
    actions.append(el('button', {type: 'button', class: 'primary', 'data-testid': 'resume-button',
                                 onclick: () => act('resume', run)}, 'Resume'));
  } else if (!ENDED.has(run.status)) {
    actions.append(el('button', {type: 'button', 'data-testid': 'pause-button',
                                 onclick: () => act('pause', run)}, 'Pause'));
  }
  if (!ENDED.has(run.status)) {
    actions.append(el('button', {type: 'button', class: 'danger', 'data-testid': 'cancel-button',
                                 onclick: () => act('cancel', run)}, 'Cancel'));
  }
  const head = el('div', {class: 'detail-head'},
    el('h1', {}, run.workflow + ' ', el('span', {class: 'mono', 'data-testid': 'detail-id'}, run.id)),
    badge(run.status, 'detail-status'),
    orphanedMarker(run),
    run.known === false ? el('span', {class: 'marker', 'data-testid': 'unknown-marker',
                                      title: 'No worker has registered this workflow.'}, 'no worker') : null,
    actions);

  const notice = actionNotice && actionNotice.runId === run.id
    ? el('div', {class: 'notice ' + actionNotice.kind, role: 'status',
                 'data-testid': actionNotice.kind === 'error' ? 'action-error' : 'action-ok'},
         actionNotice.text)
    : null;

  $('detail-view').replaceChildren(...[
    backLink(), head, notice,
    run.runbook ? renderRunbook(run.runbook) : null,
    renderSummary(run), renderPublished(run), liveStreams(run), renderSteps(run),
    renderProgress(run),
    renderHistory(run)].filter(Boolean));
}

function runLink(id, testid) {
  return el('a', {class: 'mono', href: '#/runs/' + encodeURIComponent(id), 'data-testid': testid}, id);
}

function renderSummary(run) {
  const fields = el('dl', {class: 'fields'},
    field('Status', run.status, {'data-testid': 'detail-status-text'}),
    field('Workflow', run.workflow, {'data-testid': 'detail-workflow'}),
    field('Correlation id', run.correlation_id || '–', {class: 'mono', 'data-testid': 'detail-correlation'}),
    field('Created', fmtTime(run.created_at)),
    field('Updated', fmtTime(run.updated_at)),
    run.wake_at ? field('Wakes', fmtTime(run.wake_at)) : null,
    field('Invocations', String(run.invocations ?? '–')),
    run.worker ? field('Held by', run.worker, {class: 'mono', 'data-testid': 'detail-worker'}) : null,
    run.lease_until ? field('Lease until', fmtTime(run.lease_until) + (run.orphaned ? ' (lapsed: orphaned)' : ''),
                            {title: run.lease_until, 'data-testid': 'detail-lease-until'}) : null,
    run.parent_id ? field('Parent run', runLink(run.parent_id)) : null,
    run.version ? field('Version', run.version, {class: 'mono', 'data-testid': 'detail-version'}) : null,
    run.forked_from ? field('Forked from', runLink(run.forked_from, 'detail-forked-from')) : null,
    run.continued_as ? field('Continued as', runLink(run.continued_as, 'detail-continued-as')) : null,
    run.pausing ? field('Pausing', 'pauses once the steps running now are journaled',
                        {'data-testid': 'detail-pausing'}) : null,
    run.priority ? field('Priority', String(run.priority), {'data-testid': 'detail-priority'}) : null,
    run.deadline ? field('Deadline', fmtTime(run.deadline), {'data-testid': 'detail-deadline'}) : null,
    run.tags && Object.keys(run.tags).length
      ? field('Tags', Object.entries(run.tags).map(([k, v]) => k + '=' + v).join(', '),
              {class: 'mono', 'data-testid': 'detail-tags'}) : null,
    run.error ? field('Error', errorText(run.error) +
                      (run.error.step_id ? ' (step ' + run.error.step_id + ', ' + run.error.attempts +
                       ' attempts)' : ''), {class: 'error-text', 'data-testid': 'detail-error'}) : null);
  return el('section', {class: 'card block', 'data-testid': 'summary'},
    el('h2', {}, 'Run'), fields,
    el('div', {class: 'io', style: 'margin-top:14px'},
      el('div', {}, el('h3', {}, 'Input'), el('pre', {'data-testid': 'detail-input'}, prettyJson(run.input))),
      el('div', {}, el('h3', {}, 'Output'), el('pre', {'data-testid': 'detail-output'}, prettyJson(run.output)))));
}

function renderRunbook(book) {
  const copyable = (text, testid) => el('div', {class: 'cmd'},
    el('code', {'data-testid': testid}, text),
    el('button', {type: 'button', onclick: (event) => copy(text, event.target)}, 'Copy'));
  const error = book.error || {};
  return el('section', {class: 'card block runbook', 'data-testid': 'runbook', role: 'region',
                        'aria-label': 'Runbook'},
    el('h2', {}, 'Runbook'),
    el('p', {class: 'summary', 'data-testid': 'runbook-summary'}, book.summary || 'The run failed.'),
    el('dl', {class: 'fields'},
      field('Failed step', (book.failed_step || '–') + (book.step_kind ? ' (' + book.step_kind + ')' : ''),
            {class: 'mono', 'data-testid': 'runbook-step'}),
      field('Attempts', String(book.attempts ?? '–')),
      field('Error', errorText(error) || '–', {class: 'error-text', 'data-testid': 'runbook-error'}),
      field('Failed at', fmtTime(book.failed_at)),
      field('Similar failures', String(book.similar_failures ?? 0), {'data-testid': 'runbook-similar'})),
    (book.checks && book.checks.length)
      ? [el('h3', {}, 'What to check'),
         el('ol', {}, book.checks.map((c) => el('li', {'data-testid': 'runbook-check'}, c)))]
      : null,
    el('h3', {}, 'Then retry it'),
    book.retry_command ? copyable(book.retry_command, 'runbook-retry-command') : null,
    book.retry_http ? copyable(book.retry_http, 'runbook-retry-http') : null);
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = 'Copied';
  } catch (e) {
    button.textContent = 'Select it';
  }
  setTimeout(() => { button.textContent = 'Copy'; }, 1500);
}

// One row per journal entry. The bar places each step's last attempt on the run's time axis:
// from its started_at, for duration_ms. Parallel bodies are journaled some time after they end,
// so updated_at places only an entry without started_at (journaled by an older durable): it ends
// there. A sleep, wait or child run has a started_at and no duration_ms: it ends at updated_at.
function stepSpan(s) {
  const took = Number(s.duration_ms) || 0;
  const start = Date.parse(s.started_at);
  if (!Number.isNaN(start)) {
    const updated = Date.parse(s.updated_at);
    const over = s.duration_ms == null && !Number.isNaN(updated) && updated > start;
    return {start, end: over ? updated : start + took};
  }
  const end = Date.parse(s.updated_at);
  return Number.isNaN(end) ? null : {start: end - took, end};
}

function renderSteps(run) {
  const steps = run.steps || [];
  const spans = steps.map(stepSpan);
  const known = spans.filter(Boolean);
  const created = Date.parse(run.created_at);
  const t0 = Math.min(...known.map((x) => x.start), Number.isNaN(created) ? Infinity : created);
  const t1 = Math.max(...known.map((x) => x.end), t0 + 1);
  const span = t1 - t0;

  const rows = steps.map((s, i) => {
    const marked = s.status === 'failed' || s.status === 'retrying';
    const note = el('td', {class: 'note', 'data-testid': 'step-note'},
      s.error ? el('div', {class: 'error-text', 'data-testid': 'step-error'},
                   s.error.message || '', ' ',
                   s.error.type ? el('span', {class: 'error-type'}, '(' + s.error.type + ')') : null) : null,
      s.wake_at ? el('div', {class: 'wake'},
                     (s.status === 'retrying' ? 'next attempt ' : 'wakes ') + fmtTime(s.wake_at)) : null,
      s.resolved ? el('div', {'data-testid': 'step-resolved'}, 'resolved by hand: ' + s.resolved) : null,
      stepActions(run, s));
    let bar = null;
    if (spans[i] && Number.isFinite(t0)) {
      const left = (spans[i].start - t0) / span * 100;
      const width = (spans[i].end - spans[i].start) / span * 100;
      const clock = (t) => new Date(t).toISOString().slice(11, 23);
      bar = el('div', {class: 'track'}, el('div', {
        class: 'bar ' + s.status, 'data-testid': 'step-bar',
        title: clock(spans[i].start) + ' to ' + clock(spans[i].end) + ' UTC',
        style: 'left:' + Math.min(left, 99).toFixed(2) + '%;width:' + Math.max(width, 0.8).toFixed(2) + '%',
      }));
    }
    return el('tr', {'data-testid': 'step-row', 'data-step-id': s.id, 'data-status': s.status,
                     class: marked ? 'step-' + s.status : null},
      el('td', {class: 'mono', 'data-testid': 'step-id'}, s.id),
      el('td', {'data-testid': 'step-kind'}, s.kind),
      el('td', {}, badge(s.status, 'step-status'),
         s.status === 'failed' ? ' ✕' : s.status === 'retrying' ? ' ↻' : null),
      el('td', {class: 'num', 'data-testid': 'step-attempts'}, String(s.attempts ?? '')),
      el('td', {class: 'num', 'data-testid': 'step-duration'},
         s.duration_ms === undefined || s.duration_ms === null ? '–' : fmtDuration(s.duration_ms)),
      el('td', {title: s.updated_at || ''}, fmtTime(s.updated_at)),
      el('td', {class: 'bar-cell'}, bar),
      note);
  });
  return el('section', {class: 'card block', 'data-testid': 'steps'},
    el('h2', {}, 'Steps'),
    steps.length === 0
      ? el('div', {class: 'empty', 'data-testid': 'steps-empty'}, 'No step journaled yet.')
      : el('table', {class: 'steps'},
          el('thead', {}, el('tr', {},
            el('th', {}, 'Step'), el('th', {}, 'Kind'), el('th', {}, 'Status'),
            el('th', {class: 'num'}, 'Attempts'), el('th', {class: 'num'}, 'Duration'),
            el('th', {}, 'Updated'),
            el('th', {class: 'bar-cell'}, 'Timeline' + (known.length ? ' (' + fmtDuration(span) + ')' : '')),
            el('th', {}, 'Error / wakes'))),
          el('tbody', {}, rows)));
}

// The latest value of each key the run published (Step::publish; GET /v1/runs/{id}/published).
function renderPublished(run) {
  const published = run.published || [];
  if (!published.length) return null;
  return el('section', {class: 'card block', 'data-testid': 'published'},
    el('h2', {}, 'Published values'),
    el('table', {},
      el('thead', {}, el('tr', {}, el('th', {}, 'Key'), el('th', {}, 'Value'),
                                  el('th', {class: 'num'}, 'Writes'), el('th', {}, 'Updated'))),
      el('tbody', {}, published.map((p) => el('tr', {'data-testid': 'published-row'},
        el('td', {class: 'mono'}, p.key), el('td', {class: 'mono'}, JSON.stringify(p.value)),
        el('td', {class: 'num'}, String(p.version)),
        el('td', {title: p.updated_at || ''}, fmtTime(p.updated_at)))))));
}

// What the bodies of steps not completed last reported by heartbeat (StepContext::heartbeat).
function renderProgress(run) {
  const progress = run.progress || [];
  if (!progress.length) return null;
  return el('section', {class: 'card block', 'data-testid': 'progress'},
    el('h2', {}, 'Progress'),
    el('table', {},
      el('thead', {}, el('tr', {}, el('th', {}, 'Step'), el('th', {class: 'num'}, 'Attempt'),
                                  el('th', {}, 'At'), el('th', {}, 'Last heartbeat'))),
      el('tbody', {}, progress.map((p) => el('tr', {'data-testid': 'progress-row'},
        el('td', {class: 'mono'}, p.step), el('td', {class: 'num'}, String(p.attempt)),
        el('td', {title: p.at || ''}, fmtTime(p.at)),
        el('td', {class: 'mono'}, JSON.stringify(p.progress)))))));
}

function renderHistory(run) {
  const history = run.history || [];
  return el('section', {class: 'card block', 'data-testid': 'history'},
    el('h2', {}, 'State history'),
    el('table', {},
      el('thead', {}, el('tr', {}, el('th', {}, 'Status'), el('th', {}, 'At'), el('th', {}, 'Reason'))),
      el('tbody', {}, history.map((h) => el('tr', {'data-testid': 'history-row', 'data-status': h.status},
        el('td', {}, badge(h.status)), el('td', {title: h.at || ''}, fmtTime(h.at)),
        el('td', {}, h.reason || ''))))));
}

// ---------------------------------------------------------------- actions

// A step's repairs: resolve a failed step by hand (a step.run that failed for good in a failed
// run, or waits out a backoff), and fork an ended run from a step of its own.
function stepActions(run, s) {
  const resolvable = s.kind === 'run' && !s.id.includes('/') &&
    ((s.status === 'failed' && run.status === 'failed') ||
     (s.status === 'retrying' && (run.status === 'pending' || run.status === 'sleeping')));
  const forkable = ENDED.has(run.status) && !s.id.includes('/');
  if (!resolvable && !forkable) return null;
  return el('div', {class: 'actions'},
    resolvable ? el('button', {type: 'button', 'data-testid': 'resolve-button',
                               onclick: () => resolveStep(run, s)}, 'Resolve…') : null,
    forkable ? el('button', {type: 'button', 'data-testid': 'fork-button',
                             onclick: () => forkFrom(run, s)}, 'Fork from here') : null);
}

async function repair(run, what, path, body, done) {
  try {
    const answer = await api('POST', 'v1/runs/' + encodeURIComponent(run.id) + '/' + path, body);
    actionNotice = {runId: run.id, kind: 'ok', text: done(answer)};
  } catch (e) {
    actionNotice = {runId: run.id, kind: 'error',
                    text: what + ' failed: ' + e.message + (e.status ? ' (' + e.status + ' ' + e.code + ')' : '')};
  }
  lastDetailKey = '';
  await refresh();
}

async function resolveStep(run, s) {
  const text = window.prompt('Resolve step ' + s.id + ' of run ' + run.id + ' by hand.\n' +
                             'The output it should have returned, as JSON:', '');
  if (text === null) return;
  let output;
  try {
    output = JSON.parse(text);
  } catch (e) {
    actionNotice = {runId: run.id, kind: 'error', text: 'Resolve failed: the output is not JSON (' + e.message + ')'};
    lastDetailKey = '';
    return refresh();
  }
  const reason = window.prompt('Why (kept in the run\'s history)?', '');
  if (reason === null) return;
  await repair(run, 'Resolve', 'resolve', {step: s.id, output, reason},
               (a) => 'Resolved step ' + s.id + ': the run is now ' + a.status + '.');
}

async function forkFrom(run, s) {
  if (!window.confirm('Fork run ' + run.id + ' from step ' + s.id + '?\nA new run copies the ' +
                      'steps before it and runs the rest again on the deployed code.')) return;
  await repair(run, 'Fork', 'fork', {from_step: s.id}, (a) => 'Forked: new run ' + a.id + '.');
}

// What each action on a run asks first, and how its outcome reads.
const ACTIONS = {
  retry: {label: 'Retry', done: 'Retried',
          question: 'Completed steps stay journaled; failed ones run again.'},
  cancel: {label: 'Cancel', done: 'Cancelled', question: 'No further step starts.'},
  pause: {label: 'Pause', done: 'Paused',
          question: 'A step running now finishes and is journaled; no further step starts ' +
                    'until it is resumed.'},
  resume: {label: 'Resume', done: 'Resumed', question: 'It goes on where it was.'},
};

async function act(kind, run) {
  const action = ACTIONS[kind];
  if (!window.confirm(action.label + ' run ' + run.id + ' of ' + run.workflow + '?\n' +
                      action.question)) return;
  for (const b of document.querySelectorAll('#detail-view .actions button')) b.disabled = true;
  try {
    const answer = await api('POST', 'v1/runs/' + encodeURIComponent(run.id) + '/' + kind);
    actionNotice = {runId: run.id, kind: 'ok',
                    text: action.done + ': the run is now ' + answer.status + '.'};
  } catch (e) {
    actionNotice = {runId: run.id, kind: 'error',
                    text: action.label + ' failed: ' + e.message +
                          (e.status ? ' (' + e.status + ' ' + e.code + ')' : '')};
  }
  lastDetailKey = '';
  await refresh();
}

// ---------------------------------------------------------------- bulk actions

// The list's filter as a bulk action's body (POST /v1/runs/retry|cancel): status, workflow and
// tags; null when nothing narrows it (the API would refuse it without "all").
function bulkFilter(where) {
  const filter = {};
  if (where.status) filter.status = where.status;
  if (where.workflow) filter.workflow = where.workflow;
  const tags = {};
  for (const pair of where.tag.split(',')) {
    const at = pair.indexOf('=');
    if (at > 0 && at < pair.length - 1) tags[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
  }
  if (Object.keys(tags).length) filter.tags = tags;
  return Object.keys(filter).length ? filter : null;
}

function bulkNotice(kind, text) {
  const notice = $('bulk-notice');
  notice.className = 'notice ' + kind;
  notice.textContent = text;
  notice.hidden = false;
}

// Counts first (a dry run), asks, then acts.
async function bulk(kind) {
  const where = route();
  const filter = bulkFilter(where);
  if (!filter) {
    bulkNotice('error', 'Choose a status, a workflow or a tag first: a bulk action needs a filter.');
    return;
  }
  try {
    const counted = await api('POST', 'v1/runs/' + kind, {...filter, dry_run: true});
    if (!window.confirm(ACTIONS[kind].label + ' ' + counted.matched + ' run(s) matching ' +
                        JSON.stringify(filter) + '?\n' + ACTIONS[kind].question)) return;
    const done = await api('POST', 'v1/runs/' + kind, filter);
    bulkNotice('ok', ACTIONS[kind].done + ' ' + done.changed + ' run(s).');
  } catch (e) {
    bulkNotice('error', ACTIONS[kind].label + ' failed: ' + e.message +
                        (e.status ? ' (' + e.status + ' ' + e.code + ')' : ''));
  }
  await refresh();
}

// Pause or resume the workflow the list is filtered by (POST /v1/workflows/{name}/...).
async function toggleWorkflow() {
  const button = $('workflow-pause');
  const name = button.dataset.workflow;
  const kind = button.dataset.action;
  if (!name || !window.confirm(ACTIONS[kind].label + ' workflow ' + name + '?\n' +
                               (kind === 'pause' ? 'Its runs, and those started until it is ' +
                                'resumed, are held.' : 'Its runs go on where they were.'))) return;
  try {
    await api('POST', 'v1/workflows/' + encodeURIComponent(name) + '/' + kind);
    bulkNotice('ok', ACTIONS[kind].done + ' workflow ' + name + '.');
  } catch (e) {
    bulkNotice('error', ACTIONS[kind].label + ' failed: ' + e.message);
  }
  await refresh();
}

// The workflow button says what it would do: pause, or resume a paused workflow.
function renderWorkflowButton(where, paused) {
  const button = $('workflow-pause');
  button.hidden = !where.workflow;
  if (!where.workflow) return;
  const kind = (paused || []).includes(where.workflow) ? 'resume' : 'pause';
  button.dataset.workflow = where.workflow;
  button.dataset.action = kind;
  button.textContent = ACTIONS[kind].label + ' workflow ' + where.workflow;
}

$('bulk-retry').addEventListener('click', () => bulk('retry'));
$('bulk-cancel').addEventListener('click', () => bulk('cancel'));
$('workflow-pause').addEventListener('click', toggleWorkflow);

// ---------------------------------------------------------------- start-up and auto-refresh

$('refresh').addEventListener('click', () => { lastDetailKey = ''; refresh(); });

$('auto-refresh').checked = localStorage.getItem(AUTO_KEY) !== 'off';
$('auto-refresh').addEventListener('change', () => {
  localStorage.setItem(AUTO_KEY, $('auto-refresh').checked ? 'on' : 'off');
});

setInterval(() => {
  if (!$('auto-refresh').checked || document.hidden || loading || !$('token-view').hidden) return;
  refresh();
}, REFRESH_MS);

window.addEventListener('hashchange', () => {
  const where = route();
  if (where.view !== 'detail' || !actionNotice || actionNotice.runId !== where.id) actionNotice = null;
  refresh();
});

takeTokenFromFragment();
if (!location.hash || location.hash === '#' || location.hash === '#/') {
  history.replaceState(null, '', location.pathname + location.search + '#/runs');
}
refresh();
