#!/usr/bin/env bash
# Runs the whole test suite. Installs redis-server from the distribution
# first when it is missing (the tests start their own servers).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v redis-server >/dev/null 2>&1; then
  echo "redis-server not found: installing it from the distribution" >&2
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq redis-server >/dev/null
fi
# The distribution's package starts a server of its own on port 6379; the
# tests do not use it.

cargo test --workspace --locked "$@"
