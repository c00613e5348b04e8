#!/usr/bin/env bash
# Installs the system packages the project needs, only those missing. Debian/Ubuntu, as root.
#   java 17 + maven : the local Kafka broker (jars from Maven Central)
#   postgresql      : the store contract suite runs on real PostgreSQL too
#   prometheus      : promtool (alert rule unit tests) and a real scrape in integration tests
#   kcat            : an independent Kafka client to cross-check what we write
#   tmux, faketime  : tmux injectors; the chaos clock-skew scenario (libfaketime)
set -euo pipefail
need=()
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
[ -x /usr/lib/postgresql/15/bin/postgres ] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need+=(postgresql)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v tmux >/dev/null 2>&1 || need+=(tmux)
command -v faketime >/dev/null 2>&1 || need+=(faketime)  # chaos clock-skew (make chaos)
if [ ${#need[@]} -eq 0 ]; then
  echo "system deps: all present"
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  echo "system deps missing (${need[*]}); run as root or install them: apt-get install ${need[*]}" >&2
  exit 1
fi
echo "system deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
# The Debian prometheus package starts a server on :9090; we only want its binaries.
if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus >/dev/null 2>&1 || true; fi
pkill -x prometheus >/dev/null 2>&1 || true
