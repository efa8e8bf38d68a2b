# SPDX-License-Identifier: Apache-2.0
# shellcheck shell=bash
# Sourced by scripts/demo and scripts/test: installs the Debian 12 packages durable builds with,
# when any is missing. Needs root, or sudo.
durable_packages=(g++ cmake ninja-build pkg-config libsqlite3-dev libsqlitecpp-dev
  nlohmann-json3-dev libboost-dev libboost-context-dev doctest-dev libpq-dev libssl-dev)
# Only for tests: Chromium for the dashboard's browser test (tests/browser), wrk for the HTTP
# load test, clang and clang-16 for the build with clang and the check that the public headers
# and samples compile with Debian's clang 14 and 16, libclang-rt-14-dev for clang's sanitizers
# and libFuzzer (only a recommendation of clang's, which apt leaves out here), llvm-14 for
# llvm-symbolizer, without which their reports name no function or line, prometheus
# for promtool, which checks the /metrics output, postgresql for the server the PostgreSQL
# tests start a private cluster of (tests/pg/cluster.sh), iproute2 for the network namespaces
# of the tests of workers on several hosts (ip netns), procps for the pgrep with which the
# cluster script finds a server's processes to kill, eatmydata, under which scripts/test runs the
# suite: its processes' fsync calls return at once (why that proves as much:
# docs/getting-started.md, "What scripts/test runs"). Node and npm are used as found; Debian's
# are installed when there are none.
durable_test_packages=(chromium wrk clang clang-16 libclang-rt-14-dev llvm-14 prometheus postgresql
  iproute2 procps eatmydata)

# Installs the named Debian packages that are not installed yet.
durable_apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing ${missing[*]}"
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

durable_install_deps() {
  durable_apt_install "${durable_packages[@]}"
}

# The test-only packages, and tests/browser/node_modules from its package-lock.json (npm ci,
# again only when the lock file changed since the last install).
durable_install_test_deps() {
  local node=()
  command -v node >/dev/null || node+=(nodejs)
  command -v npm >/dev/null || node+=(npm)
  durable_apt_install "${durable_test_packages[@]}" "${node[@]}"
  local browser
  browser="$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/browser" && pwd)"
  cmp -s "$browser/package-lock.json" "$browser/node_modules/.durable-installed-lock" && return 0
  echo "== npm ci in tests/browser"
  (cd "$browser" && npm ci --no-audit --no-fund --loglevel=error >/dev/null &&
    cp package-lock.json node_modules/.durable-installed-lock)
}
