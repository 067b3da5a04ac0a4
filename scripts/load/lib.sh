# Shared by scripts/load/run and scripts/load/capacity. Source it after scripts/lib/infra.sh.

# Every simulated user comes from 127.0.0.1, where each app user has an address of its own (or shares
# a carrier's NAT with strangers). So, through STACK_ENV:
# - the per-address sign-up limit (100 an hour) is lifted: the accounts are made from one address;
# - the gateway verifies every bearer token (RATE_LIMIT_TOKEN_CHECKS; by default 60 a minute per
#   address, past which it counts everyone at that address as one caller), so that each user's
#   requests count against that user's own limits, the shipped ones (`/` 1200 a minute);
# - /v1/auth's per-address limit is lifted: sign-in and refresh carry no bearer token, so they
#   count by address, and there every user's would count as one's.
LOAD_STACK_ENV="SIGNUP_MAX_PER_IP_PER_HOUR=1000000 RATE_LIMIT_TOKEN_CHECKS=1000000 RATE_LIMITS=/v1/auth=1000000/60s,/v1/webhooks/app-store=60/60s,/=1200/60s"

# load_stack_up: a release-built stack on private ports with LOAD_STACK_ENV, as scripts/e2e/stack.sh
# brings one up; exports its STACK_* variables. The caller brings it down (scripts/stack down).
load_stack_up() {
  export STACK_NATIVE=1 STACK_BUILD=release
  export STACK_ENV="${STACK_ENV:-} $LOAD_STACK_ENV"
  export STACK_DIR; STACK_DIR=$(mktemp -d /tmp/foodbackend-load-stack.XXXXXX)
  stack_ports
  scripts/stack up >&2
}
