#!/bin/sh
# Container entry point: serve the data volume on every interface. Because the port is
# reachable from outside the container, API keys are required (the server refuses without).
set -eu
export CEREMEMORY_DATA_DIR="${CEREMEMORY_DATA_DIR:-/data}"
if [ -z "${CEREMEMORY_API_KEYS:-}" ]; then
  echo "cerememory: set CEREMEMORY_API_KEYS (comma-separated bearer keys); the server listens on all interfaces" >&2
  exit 2
fi
set -- serve --host "${CEREMEMORY_HTTP__HOST:-0.0.0.0}" --port "${CEREMEMORY_HTTP__PORT:-8420}" "$@"
if [ -n "${CEREMEMORY_GRPC__PORT:-}" ]; then
  # gRPC off loopback needs TLS: CEREMEMORY_GRPC__TLS_CERT and CEREMEMORY_GRPC__TLS_KEY name the PEM files
  set -- "$@" --grpc-port "$CEREMEMORY_GRPC__PORT"
fi
exec cerememory "$@"
