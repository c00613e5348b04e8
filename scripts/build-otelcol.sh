#!/usr/bin/env bash
# Builds tools/otelcol (a real OpenTelemetry Collector: OTLP receiver + file exporter) into
# $1 (default .venv/bin/fleet-otelcol), for the trace tests. Needs the Go toolchain and the Go
# module proxy; skipped with a message when there is no `go` (the trace tests then say so).
set -euo pipefail
cd "$(dirname "$0")/.."
out="$(realpath -m "${1:-.venv/bin/fleet-otelcol}")"
GO="$(command -v go || echo /usr/local/go/bin/go)"
if [ ! -x "$GO" ]; then
  echo "otelcol: no Go toolchain, not built (the trace tests against a collector will skip)" >&2
  exit 0
fi
if [ -x "$out" ] && [ "$out" -nt tools/otelcol/go.sum ] && [ "$out" -nt tools/otelcol/main.go ]; then
  echo "otelcol: $out is up to date"
  exit 0
fi
cd tools/otelcol
GOFLAGS=-buildvcs=false "$GO" build -trimpath -o "$out" .
echo "otelcol: built $out"
