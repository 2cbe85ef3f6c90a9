#!/usr/bin/env bash
# Runs the whole test suite. Installs redis-server from the distribution
# first when it is missing (the tests start their own servers).
set -euo pipefail
cd "$(dirname "$0")/.."

# openssl makes the certificates of the TLS tests (tests/tls.rs).
missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
if [ -n "$missing" ]; then
  echo "not found:$missing; installing from the distribution" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # shellcheck disable=SC2086
  $sudo apt-get install -y -qq $missing >/dev/null
fi
# The distribution's package starts a server of its own on port 6379; the
# tests do not use it.

cargo test --workspace --locked "$@"
