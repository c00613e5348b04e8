#!/usr/bin/env bash
# Checks the system packages the project needs and installs those missing (Debian/Ubuntu, as
# root). Usage: install-system-deps.sh [run|all]
#   run : what `make run` (the demo) needs: python3's venv, and java 17 + maven for the local
#         Kafka broker (jars from Maven Central) -- none of them when KAFKA_BOOTSTRAP names a
#         broker you already have. No root needed when they are there.
#   all : (default; `make setup`, CI) the above, plus what the test suite and the checks use:
#         postgresql  the store contract suite runs on real PostgreSQL too
#         prometheus  promtool (alert rule unit tests) and a real scrape in integration tests
#         kcat        an independent Kafka client to cross-check what we write
#         tmux        tmux injectors
#         faketime    the chaos clock-skew scenario (libfaketime)
#         systemd     systemd-analyze verify on the shipped units (deploy/systemd/)
#         golang-go   builds the OpenTelemetry Collector the trace tests export to (tools/otelcol)
# Something missing and not root: says what, and how to get it, and exits 1.
set -euo pipefail
scope="${1:-all}"
case "$scope" in run | all) ;; *) echo "usage: $0 [run|all]" >&2; exit 2 ;; esac
need=()   # Debian packages
what=()   # what each is for, for the message
want() { need+=("$1"); what+=("$2"); }

python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || want python3-venv "python3 -m venv"
if [ "$scope" = all ] || [ -z "${KAFKA_BOOTSTRAP:-}" ]; then
  command -v java >/dev/null 2>&1 || want openjdk-17-jre-headless "java (the local Kafka broker)"
  command -v mvn >/dev/null 2>&1 || want maven "mvn (fetches the Kafka jars)"
fi
if [ "$scope" = all ]; then
  [ -x /usr/lib/postgresql/15/bin/postgres ] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 \
    || want postgresql "postgres (store tests on PostgreSQL)"
  command -v promtool >/dev/null 2>&1 || want prometheus "promtool (alert rule tests)"
  command -v kcat >/dev/null 2>&1 || want kcat "kcat (cross-checks what we write)"
  command -v tmux >/dev/null 2>&1 || want tmux "tmux (tmux injectors)"
  command -v faketime >/dev/null 2>&1 || want faketime "faketime (chaos clock skew)"
  command -v systemd-analyze >/dev/null 2>&1 || want systemd "systemd-analyze (unit file checks)"
  command -v go >/dev/null 2>&1 || [ -x /usr/local/go/bin/go ] \
    || want golang-go "go (builds the OpenTelemetry Collector for the trace tests)"
fi
if [ ${#need[@]} -eq 0 ]; then
  echo "system deps ($scope): all present"
  exit 0
fi
if [ "$(id -u)" != "0" ]; then
  {
    echo "system deps ($scope) missing:"
    for i in "${!need[@]}"; do echo "  ${what[$i]}: Debian package ${need[$i]}"; done
    echo "install them (sudo apt-get install ${need[*]}) or run this as root."
    if [ "$scope" = run ]; then
      echo "java and maven are not needed with a broker of your own: KAFKA_BOOTSTRAP=host:port make run"
    fi
  } >&2
  exit 1
fi
echo "system deps ($scope): installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
# The Debian prometheus package starts a server on :9090; we only want its binaries.
if command -v systemctl >/dev/null 2>&1; then systemctl stop prometheus >/dev/null 2>&1 || true; fi
pkill -x prometheus >/dev/null 2>&1 || true
