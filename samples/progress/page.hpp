// SPDX-License-Identifier: Apache-2.0
// The browser page the sample serves at /: it starts a report (POST /v1/runs), follows its
// stream "progress" with an EventSource on GET /v1/runs/{id}/streams/progress, and polls the
// published phase (GET /v1/runs/{id}/published/phase?wait_ms=N). Served from the same origin as
// the API (PageServer relays to it), so it needs no token.
#pragma once

#include <string_view>

namespace progress {

inline constexpr std::string_view kPage = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Report progress</title>
<style>
  body { font: 15px/1.5 system-ui, sans-serif; max-width: 42rem; margin: 2rem auto; }
  progress { width: 100%; height: 1.4rem; }
  #log { font: 13px ui-monospace, monospace; background: #f5f7fa; padding: .5rem;
         min-height: 6rem; }
  .phase { font-weight: 600; }
</style>
</head>
<body>
<h1>Report progress</h1>
<p><button id="start" type="button">Start a report</button> <span id="run"></span></p>
<p>Phase: <span id="phase" class="phase">none yet</span></p>
<progress id="bar" max="100" value="0"></progress>
<p id="state"></p>
<pre id="log"></pre>
<script>
'use strict';
const $ = (id) => document.getElementById(id);

async function getJson(path, options) {
  const response = await fetch(path, options);
  const body = await response.json();
  if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
  return body;
}

// The stream, from offset `from`. The server ends the response when the stream is closed; an
// EventSource would then connect again, so on an error the list of streams says whether the
// stream is closed (done) or the connection dropped (connect again after the last value).
function follow(id, from) {
  const events = new EventSource(`v1/runs/${encodeURIComponent(id)}/streams/progress?from=${from}`);
  let next = from;
  events.onmessage = (e) => {
    const value = JSON.parse(e.data);
    next = Number(e.lastEventId) + 1;
    $('bar').value = value.percent;
    $('log').textContent += `${e.lastEventId}: ${e.data}\n`;
  };
  events.onerror = async () => {
    events.close();
    try {
      const {streams} = await getJson(`v1/runs/${encodeURIComponent(id)}/streams`);
      const progress = streams.find((s) => s.name === 'progress');
      if (progress && progress.closed && progress.length <= next) {
        $('state').textContent = `The stream is closed after ${progress.length} values.`;
        return;
      }
    } catch (e) {
      $('state').textContent = `Reconnecting (${e.message})`;
    }
    setTimeout(() => follow(id, next), 1000);
  };
}

// The phase the run published last: a long poll for the first value, then a look every half
// second, until the phase is "done".
async function watchPhase(id) {
  for (;;) {
    try {
      const answer = await getJson(
          `v1/runs/${encodeURIComponent(id)}/published/phase?wait_ms=5000`, {cache: 'no-store'});
      if (answer.published) $('phase').textContent = answer.value;
      if (answer.value === 'done') return;
    } catch (e) {
      $('phase').textContent = `unknown (${e.message})`;
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

function watch(id) {
  $('run').textContent = `run ${id}`;
  $('log').textContent = '';
  $('state').textContent = '';
  $('bar').value = 0;
  history.replaceState(null, '', '#' + id);
  follow(id, 0);
  watchPhase(id);
}

$('start').addEventListener('click', async () => {
  try {
    const started = await getJson('v1/runs', {
      method: 'POST', headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({workflow: 'report', input: {rows: 1200}})});
    watch(started.id);
  } catch (e) {
    $('state').textContent = `Could not start a report: ${e.message}`;
  }
});

if (location.hash.length > 1) watch(decodeURIComponent(location.hash.slice(1)));
</script>
</body>
</html>
)page";

}  // namespace progress
