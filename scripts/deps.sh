# Sourced by scripts/demo and scripts/test: installs the Debian 12 packages durable builds with,
# when any is missing. Needs root, or sudo.
durable_packages=(g++ cmake ninja-build pkg-config libsqlite3-dev libsqlitecpp-dev
  nlohmann-json3-dev libboost-dev libboost-context-dev doctest-dev)

durable_install_deps() {
  local missing=()
  for p in "${durable_packages[@]}"; do
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
