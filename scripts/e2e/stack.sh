#!/usr/bin/env bash
# End-to-end checks: the whole stack on private ports (scripts/stack up), then every
# scripts/e2e/test_*.py against it through the gateway and each process (in name order, except
# test_contract.py and test_foundation.py, which come last). Stops everything it started.
# Usage: scripts/e2e/stack.sh [pytest args, e.g. -k auth]   (E2E_TESTS="FILE…": only those test files)
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/lib/infra.sh
ensure_python_tools
ensure_browser

export STACK_NATIVE=1
# The end-to-end tests run the release build, built as the Dockerfile builds it: what ships is what
# is tested (the Swift tests run the debug build, with its assertions).
export STACK_BUILD=release
# Every test signs up from 127.0.0.1, schemathesis's many sign-ups included: the per-address sign-up
# limit and the gateway's rate limits (tested on their own in the Swift tests; here counted, never
# reached) would otherwise refuse the tests that come after it.
# A shorter statement timeout than the default 10 s: it is also how long a request may wait for a
# database connection, which the outage test measures.
export STACK_ENV="${STACK_ENV:-} SIGNUP_MAX_PER_IP_PER_HOUR=1000000 DATABASE_STATEMENT_TIMEOUT_MS=3000 RATE_LIMITS=/=1000000/60s"
export STACK_DIR; STACK_DIR=$(mktemp -d /tmp/foodbackend-e2e.XXXXXX)
# The stack's ports, a second PostgreSQL server's and the vision stand-in's, chosen at once.
stack_ports 2
read -r STACK_PG2_PORT VISION_PORT <<<"$EXTRA_PORTS"
# Two PostgreSQL servers, auth and social on the first, the other services on the second: every
# test passes with the services' databases apart, as a deployment with a server per service has them.
export STACK_PG_SERVERS=2 STACK_PG2_PORT

# A local App Store issuer: the entitlements service trusts its root, the tests sign with its leaf.
"$PYTHON" scripts/e2e/appstore.py init "$STACK_DIR/appstore"
export STACK_ENV="$STACK_ENV APPLE_ROOT_CERTIFICATES=$STACK_DIR/appstore/root.pem APPLE_BUNDLE_ID=com.researchapp.app"

# A local stand-in for a vision model behind the Chat Completions API: photo analysis asks it.
"$PYTHON" scripts/e2e/vision.py "$VISION_PORT" &
VISION_PID=$!
export STACK_ENV="$STACK_ENV ANALYZER_PROVIDER=openai ANALYZER_URL=http://127.0.0.1:$VISION_PORT/v1 ANALYZER_API_KEY=e2e ANALYZER_MODEL=e2e-vision"

# The kernel's log lines from before this run are not this run's.
DMESG_LINES=$(dmesg 2>/dev/null | wc -l || echo 0)
cleanup() {
  # A process that died during the run is named with the end of its log, before its files go.
  local pidfile name
  for pidfile in "$STACK_DIR"/pids/*.pid; do
    [ -e "$pidfile" ] || continue
    name=$(basename "$pidfile" .pid)
    case "$name" in postgres | redis) continue ;; esac
    if ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
      echo "== $name exited during the run; the end of its log:" >&2
      tail -n 40 "$STACK_DIR/logs/$name.log" >&2 || true
    fi
  done
  # A Swift trap in a release build prints nothing; the kernel names the binary and the offset
  # (`addr2line -f -i -e .build/release/NAME 0xOFFSET` says where).
  dmesg 2>/dev/null | tail -n +$((DMESG_LINES + 1)) | grep -E "(traps|segfault).* in ($(awk '!/^#/ && NF { printf "%s|", $1 }' services.txt)gateway)\[" | tail -n 5 >&2 || true
  scripts/stack down >/dev/null 2>&1 || true
  kill "$VISION_PID" 2>/dev/null || true
  if [ "${KEEP_E2E:-0}" != 1 ]; then rm -rf "$STACK_DIR"; else echo "kept $STACK_DIR" >&2; fi
}
trap cleanup EXIT

scripts/stack up
# The contract run comes after the others (its sign-ups count against the per-address limit) and
# before test_foundation.py (which kills and restarts services); the event contracts come last, to
# check every event the run published.
# E2E_TESTS names the test files to run instead of all of them (scripts/release-matrix does).
tests=${E2E_TESTS:-$(ls scripts/e2e/test_*.py | grep -v -e '/test_foundation.py$' -e '/test_contract.py$' -e '/test_event_contracts.py$'
  echo scripts/e2e/test_contract.py scripts/e2e/test_foundation.py scripts/e2e/test_event_contracts.py)}
# The slowest tests are named at the end: where the run's minutes go.
# shellcheck disable=SC2086
"$PYTHON" -m pytest -q -p no:cacheprovider --durations=15 $tests "$@"
