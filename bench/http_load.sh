#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The HTTP admin API under load: wrk against `durable serve`, beside the raw SQLite figure for the
# same database work, measured on the same file system in the same run.
#
#   bench/http_load.sh [BUILD_DIR] [DIR]
#
# BUILD_DIR (default: build-bench, else build, at the top of the repository) must hold these
# targets, built beforehand (the script builds nothing), preferably in Release:
#
#   cmake -S . -B build-bench -G Ninja -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-bench --target durable_cli durable_ops_fixture durable_http_raw_sqlite
#
# DIR is where the temporary directory with the database files goes (default: $TMPDIR or /tmp);
# it is removed at the end. Needs wrk (Debian: apt-get install wrk). Settings, from the
# environment: HTTP_LOAD_SECONDS (5) per wrk run, HTTP_LOAD_REPS (3) runs per row,
# HTTP_LOAD_CONNECTIONS ("1 16"), HTTP_LOAD_RAW_SECONDS (2) per raw measurement. A full run takes
# about 2 × REPS × (RAW_SECONDS + connection counts × SECONDS) plus warm-ups: ~80 s.
#
# What it does: durable_ops_fixture makes a fresh database (4 runs; the workflows signup, checkout,
# send-reminder and approve-expense registered) and `durable serve --port 0` serves it. Then, per
# endpoint, a 1 s warm-up and REPS rounds of: the raw measurement, then one wrk run per connection
# count (2 wrk threads, 1 for a single connection).
#
# - GET /v1/runs/{id}: always the completed signup run (3 steps, 3 history rows; ~1 KiB of JSON).
# - GET /v1/unrouted, the server's floor: a path no route matches, answered 404 with a small JSON
#   error through the same path as every API request (read, the handler pool, write back) but
#   with no database work. What GET /v1/runs/{id} costs above it is its reads and its JSON.
#   Its 404s are expected, so only its socket errors count.
# - POST /v1/runs: {"workflow":"signup",...} with an idempotency key unique to each request, so
#   every request creates a run (they stay pending: no worker runs them). A Lua response hook
#   counts every answer that is not 201 Created; those are the POST errors. Once the server is
#   stopped, `durable stats` must find at least as many pending runs as 201s were counted.
#
# The table: requests/s as the median of the REPS runs (min–max in brackets), the medians of the
# runs' p50 and p99 latencies (wrk's, per request, over its connections), the errors summed over
# the runs (HTTP errors, and socket errors: connect, read, write, timeout), and the server's CPU
# time during the runs as a share of one core (200% = both cores of the development machine).
# wrk runs on the same machine, so it takes CPU from the server.
#
# The raw SQLite figure (bench/http_raw_sqlite.cpp, on a second fixture database in the same
# directory) is what the request does to the database, on one connection and one thread, with no
# HTTP and no JSON, WAL mode and synchronous=NORMAL as durable opens the file:
# - GET: the run row by primary key, its steps rows (primary-key prefix run_id, in seq order) and
#   its history rows (index history_run), every column read.
# - POST: one INSERT of a pending run row into durable's runs table (all its indexes) in its own
#   BEGIN IMMEDIATE ... COMMIT. durable's request also looks up the idempotency key, writes a
#   history row and reads the registered workflows.
# The raw figure is one connection's, so the same figure stands beside every connection count;
# "vs raw" is the median requests/s over the median raw operations/s.
#
# Not a test: nothing here is timed against a limit. Figures from a noisy machine: quote medians.

set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${HTTP_LOAD_SECONDS:-5}
reps=${HTTP_LOAD_REPS:-3}
connections=${HTTP_LOAD_CONNECTIONS:-"1 16"}
raw_seconds=${HTTP_LOAD_RAW_SECONDS:-2}

say() { echo "http_load: $*" >&2; }
die() {
  say "$*"
  exit 1
}

find_build() {
  if [[ $# -ge 1 && -n $1 ]]; then
    echo "$1"
    return
  fi
  for candidate in "$repo/build-bench" "$repo/build"; do
    if [[ -x $candidate/durable ]]; then
      echo "$candidate"
      return
    fi
  done
  echo "$repo/build-bench"
}

build=$(find_build "${1:-}")
durable=$build/durable
fixture=$build/tests/durable_ops_fixture
raw=$build/bench/durable_http_raw_sqlite
for binary in "$durable" "$fixture" "$raw"; do
  [[ -x $binary ]] || die "$binary is missing; build it first: cmake --build $build --target \
durable_cli durable_ops_fixture durable_http_raw_sqlite"
done
command -v wrk >/dev/null || die "wrk is not installed (Debian: apt-get install wrk)"
wrk_version=$( (wrk -v 2>&1 || true) | awk 'NR == 1 {print $2}')

work=$(mktemp -d "${2:-${TMPDIR:-/tmp}}/durable-http-load-XXXXXX")
server_pid=
warm_created=0
# Stops the server: SIGTERM, then SIGKILL if it has not exited within 5 s (a TERM that reaches
# the forked shell before it has become `durable serve` can be lost).
stop_server() {
  [[ -n $server_pid ]] || return 0
  kill -TERM "$server_pid" 2>/dev/null || true
  for _ in $(seq 50); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  kill -KILL "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=
}
cleanup() {
  stop_server
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- the databases and the server --------------------------------------------------------------

"$fixture" --db "$work/server.db" >"$work/server.ids" || die "durable_ops_fixture failed"
"$fixture" --db "$work/raw.db" >"$work/raw.ids" || die "durable_ops_fixture failed"
completed_of() { sed -n 's/.*"completed":"\([^"]*\)".*/\1/p' "$1"; }
run_id=$(completed_of "$work/server.ids")
raw_run_id=$(completed_of "$work/raw.ids")
[[ -n $run_id && -n $raw_run_id ]] || die "no completed run in the fixture's output"

: >"$work/server.out"
"$durable" serve --db "$work/server.db" --port 0 >"$work/server.out" 2>"$work/server.err" &
server_pid=$!
url=
for _ in $(seq 100); do  # up to 10 s for the first line
  url=$(sed -n '1s|^durable: serving .* at \(http://[^ ]*\).*|\1|p' "$work/server.out")
  [[ -n $url ]] && break
  kill -0 "$server_pid" 2>/dev/null || die "durable serve exited: $(cat "$work/server.err")"
  sleep 0.1
done
[[ -n $url ]] || die "durable serve printed no address within 10 s"
say "serving $work/server.db at $url; GET run $run_id"

# --- wrk scripts: each prints one RESULT line --------------------------------------------------

cat >"$work/get.lua" <<'EOF'
-- wrk sends its prebuilt GET; summary.errors.status counts answers of 400 and above.
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d http_errors=%d socket_errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.status, e.connect + e.read + e.write + e.timeout))
end
EOF

cat >"$work/post.lua" <<'EOF'
-- Every request carries an idempotency key of its own (run tag, thread, request number), so
-- every request should create a run: the response hook counts the answers that are not 201.
local threads = {}
local next_id = 1

setup = function(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

init = function(args)
  tag = args[1] or tostring(os.time())
  sent = 0
  not_created = 0
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end

request = function()
  sent = sent + 1
  local key = tag .. "-" .. id .. "-" .. sent
  return wrk.format(nil, nil, nil,
    '{"workflow":"signup","input":{"email":"load@example.com"},"idempotency_key":"' .. key .. '"}')
end

response = function(status, headers, body)
  if status ~= 201 then not_created = not_created + 1 end
end

done = function(summary, latency, requests)
  local bad = 0
  for _, thread in ipairs(threads) do bad = bad + thread:get("not_created") end
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d http_errors=%d socket_errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    bad, e.connect + e.read + e.write + e.timeout))
end
EOF

# --- measuring ---------------------------------------------------------------------------------

ticks_per_second=$(getconf CLK_TCK)
server_cpu_ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
field() { sed -n "s/.*[ ]$1=\([^ ]*\).*/\1/p" <<<" $2"; }

# wrk ENDPOINT CONNECTIONS SECONDS TAG: one RESULT line, plus cpu=<server CPU %>.
run_wrk() {
  local endpoint=$1 conns=$2 duration=$3 tag=$4 threads=2 target script
  ((conns < threads)) && threads=$conns
  if [[ $endpoint == get ]]; then
    target=$url/v1/runs/$run_id
    script=$work/get.lua
  elif [[ $endpoint == floor ]]; then
    target=$url/v1/unrouted
    script=$work/get.lua
  else
    target=$url/v1/runs
    script=$work/post.lua
  fi
  local before after out
  before=$(server_cpu_ticks)
  out=$(wrk -t"$threads" -c"$conns" -d"${duration}s" --timeout 10s -s "$script" "$target" -- "$tag") ||
    die "wrk failed: $out"
  after=$(server_cpu_ticks)
  local result
  result=$(grep '^RESULT ' <<<"$out") || die "wrk printed no RESULT line: $out"
  kill -0 "$server_pid" 2>/dev/null || die "durable serve died: $(cat "$work/server.err")"
  local duration_us
  duration_us=$(field duration_us "$result")
  echo "$result cpu=$(awk -v t=$((after - before)) -v hz="$ticks_per_second" -v us="$duration_us" \
    'BEGIN {printf "%.0f", 100 * t / hz / (us / 1e6)}')"
}

results=$work/results  # endpoint conns rep rps p50_us p99_us http_errors socket_errors requests cpu
raw_results=$work/raw  # endpoint rep ops_per_s p50_us p99_us
: >"$results"
: >"$raw_results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%MZ')
tag=$(date +%s)

for endpoint in get floor post; do
  say "$endpoint: warm-up"
  warm=$(run_wrk "$endpoint" 2 1 "$tag-warm")
  [[ $endpoint == post ]] && warm_created=$(($(field requests "$warm") - $(field http_errors "$warm")))
  for rep in $(seq "$reps"); do
    # The floor does no database work: it stands beside the GET's raw figure.
    if [[ $endpoint != floor ]]; then
      raw_args=(--db "$work/raw.db" --op "$endpoint" --seconds "$raw_seconds")
      [[ $endpoint == get ]] && raw_args+=(--run "$raw_run_id")
      line=$("$raw" "${raw_args[@]}") || die "durable_http_raw_sqlite failed"
      fs=$(field fs "$line")
      echo "$endpoint $rep $(field ops_per_s "$line") $(field p50_us "$line") $(field p99_us "$line")" \
        >>"$raw_results"
    fi
    for conns in $connections; do
      result=$(run_wrk "$endpoint" "$conns" "$seconds" "$tag-$rep-$conns")
      requests=$(field requests "$result")
      rps=$(awk -v n="$requests" -v us="$(field duration_us "$result")" 'BEGIN {printf "%.0f", n / (us / 1e6)}')
      say "$endpoint c=$conns round $rep: $rps req/s, p50 $(field p50_us "$result") us, p99 \
$(field p99_us "$result") us, server CPU $(field cpu "$result")%"
      echo "$endpoint $conns $rep $rps $(field p50_us "$result") $(field p99_us "$result") \
$(field http_errors "$result") $(field socket_errors "$result") $requests $(field cpu "$result")" >>"$results"
    done
  done
done

stop_server
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

# Every 201 counted must be a run in the file (pending: no worker runs them). wrk does not count
# the requests still in flight when a run ends, so the file may hold a few more.
pending=$("$durable" --db "$work/server.db" --json stats | sed -n 's/.*"pending": *\([0-9]*\).*/\1/p' | head -n1)
created=$(awk -v w="$warm_created" '$1 == "post" {s += $9 - $7} END {print s + w}' "$results")
if [[ -z $pending ]] || ((pending < created)); then
  die "the POSTs were answered 201 $created times, but the file holds ${pending:-no} pending runs"
fi

# --- the table ---------------------------------------------------------------------------------

# stats: the median, min and max of the numbers on stdin, as "median min max".
stats() { sort -g | awk '{v[NR] = $1} END {m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; print m, v[1], v[NR]}'; }
column_of() { awk -v e="$1" -v c="$2" -v k="$3" '$1 == e && $2 == c {print $k}' "$results"; }
raw_column() { awk -v e="$1" -v k="$2" '$1 == e {print $k}' "$raw_results"; }
us() { awk -v u="$1" 'BEGIN {if (u >= 1000) printf "%.2f ms", u / 1000; else printf "%.0f us", u}'; }
count() {  # 12345.6 -> 12,346
  awk -v v="$1" 'BEGIN {
    s = sprintf("%.0f", v); out = ""
    while (length(s) > 3) { out = "," substr(s, length(s) - 2) out; s = substr(s, 1, length(s) - 3) }
    print s out
  }'
}

echo
echo "durable HTTP API under wrk $wrk_version, $started; $reps runs of ${seconds} s per row; $fs;" \
  "$(nproc) cores, load average $load_before before, $load_after after"
printf '%-18s %5s  %-26s %9s %9s  %-22s %8s %9s  %-28s %-18s %6s\n' endpoint conns \
  "req/s median (min-max)" "p50" "p99" errors "srv CPU" "CPU/req" "raw SQLite ops/s (min-max)" \
  "raw p50 / p99" "vs raw"
printf '%s\n' "$(printf '%.0s-' $(seq 180))"
for endpoint in get floor post; do
  raw_endpoint=$endpoint
  case $endpoint in
    get) name="GET /v1/runs/{id}" ;;
    floor) name="GET /v1/unrouted" raw_endpoint=get ;;
    *) name="POST /v1/runs" ;;
  esac
  read -r raw_med raw_min raw_max < <(raw_column "$raw_endpoint" 3 | stats)
  read -r raw_p50 _ _ < <(raw_column "$raw_endpoint" 4 | stats)
  read -r raw_p99 _ _ < <(raw_column "$raw_endpoint" 5 | stats)
  for conns in $connections; do
    read -r med min max < <(column_of "$endpoint" "$conns" 4 | stats)
    read -r p50 _ _ < <(column_of "$endpoint" "$conns" 5 | stats)
    read -r p99 _ _ < <(column_of "$endpoint" "$conns" 6 | stats)
    read -r cpu _ _ < <(column_of "$endpoint" "$conns" 10 | stats)
    http=$(column_of "$endpoint" "$conns" 7 | awk '{s += $1} END {print s + 0}')
    [[ $endpoint == floor ]] && http=0  # its answers are 404 by design
    socket=$(column_of "$endpoint" "$conns" 8 | awk '{s += $1} END {print s + 0}')
    total=$(column_of "$endpoint" "$conns" 9 | awk '{s += $1} END {print s + 0}')
    if ((http + socket == 0)); then
      errors="0 of $(count "$total")"
    else
      errors="$((http + socket)) of $(count "$total") ($http http, $socket socket)"
    fi
    printf '%-18s %5s  %-26s %9s %9s  %-22s %7s%% %9s  %-28s %-18s %5s%%\n' "$name" "$conns" \
      "$(count "$med") ($(count "$min")-$(count "$max"))" "$(us "$p50")" "$(us "$p99")" "$errors" \
      "$cpu" "$(us "$(awk -v c="$cpu" -v r="$med" 'BEGIN {print 1e4 * c / r}')")" "$(count "$raw_med") ($(count "$raw_min")-$(count "$raw_max"))" \
      "$(us "$raw_p50") / $(us "$raw_p99")" "$(awk -v a="$med" -v b="$raw_med" 'BEGIN {printf "%.0f", 100 * a / b}')"
  done
done
echo "errors: for GET, answers of 400 and above; for POST, answers other than 201; plus socket errors"
echo "  (the unrouted GET: socket errors only). Its raw figure is the GET's: the floor does no database work."
echo "CPU/req: srv CPU over req/s, the server's CPU time per request, kernel time included."
# Issue 13's target, and the most the GET could reach through this server were its JSON free and
# its reads as cheap as the raw ones: the floor's rate scaled by the floor's CPU per request over
# that CPU plus the raw reads' time (docs/performance.md, "Issue 13's targets").
if [[ " $connections " == *" 16 "* ]]; then
  read -r get_med _ _ < <(column_of get 16 4 | stats)
  read -r floor_med _ _ < <(column_of floor 16 4 | stats)
  read -r floor_cpu _ _ < <(column_of floor 16 10 | stats)
  read -r raw_med _ _ < <(raw_column get 3 | stats)
  awk -v g="$get_med" -v f="$floor_med" -v c="$floor_cpu" -v r="$raw_med" 'BEGIN {
    share = 100 * g / r; floor_us = 1e4 * c / f; reads_us = 1e6 / r
    printf "target: GET /v1/runs/{id} at 16 connections >= 35%% of raw point reads: %.0f%%, %s;", share, (share >= 35) ? "met" : "missed"
    printf " bound with free JSON and raw-cost reads: %.0f%% (floor %.0f us + reads %.0f us of CPU)\n",
      100 * (f / r) * floor_us / (floor_us + reads_us), floor_us, reads_us
  }'
fi
echo "POST check: $created answers 201 counted (with the warm-up), $pending pending runs in the file."
echo "srv CPU: durable serve's CPU time during the wrk runs (median), 100% = one core; wrk shares the cores."
