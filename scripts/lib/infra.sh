# Shared by scripts/stack and scripts/test: install what is missing, start and stop a throwaway
# PostgreSQL cluster and Redis server on loopback. Source it; every function is idempotent.

PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}

log() { printf '%s\n' "$*" >&2; }

# Release builds link the Swift runtime and Foundation statically, as the Dockerfile ships them, so
# that benchmarks measure the shipped binaries. Every release build uses these flags: SwiftPM
# rebuilds everything when compiler flags change between two builds (linker flags only relink).
# `--static-swift-stdlib` links with `-export-dynamic`, which puts ~50,000 Swift symbols in the
# dynamic symbol table; nothing looks them up, and binding them at start cost each process about
# 4.5 MiB of resident memory (auth 42.8 -> 38.2 MiB idle), so `--no-export-dynamic` takes it back.
# Swift's run-time safety checks (exclusivity included) stay on: the benchmarks measure the build that ships.
RELEASE_BUILD=(-c release --static-swift-stdlib -Xlinker --no-export-dynamic)

# The event loops' share of a busy CPU. Each service and the gateway is one event-loop thread that
# every request to it passes through, while PostgreSQL serves each connection with a process of
# its own. Linux shares a busy CPU out fairly between sessions (autogroups: scripts/stack starts
# each process in a session of its own), or between threads where autogroups are off or the
# cgroup-v2 cpu controller governs instead. Either way the thread every request waits for got no
# more than the database's backends or the load generator did, and requests queued behind it while
# it waited for its turn (docs/BENCHMARKS.md has the figures). STACK_NICE (-5, a weight three
# times another process's) is the nice value their processes start at and their sessions get.
# Lowering a nice value takes root's CAP_SYS_NICE (or a raised RLIMIT_NICE); without it they run at
# their parent's.
EVENT_LOOP_NICE=${STACK_NICE:--5}

# event_loop_nice: the command words that start an event-loop process at EVENT_LOOP_NICE (nice -n
# is relative to this shell's own), or none where this user may not lower a nice value that far.
event_loop_nice() {
  local delta=$((EVENT_LOOP_NICE - $(nice)))
  [ "$delta" = 0 ] && return 0
  # nice warns and runs the command anyway when it may not; asked beforehand, it tells.
  if [ "$delta" -gt 0 ] || [ -z "$(nice -n "$delta" true 2>&1)" ]; then echo nice -n "$delta"; fi
}

# raise_session PID: gives PID's session (its autogroup) EVENT_LOOP_NICE, once PID has left the
# session of this script, which holds the scripts and the load generator.
raise_session() {
  local pid=$1 ours theirs
  [ -w "/proc/$pid/autogroup" ] || return 0
  [ -n "$(event_loop_nice)" ] || [ "$EVENT_LOOP_NICE" = "$(nice)" ] || return 0
  ours=$(session_of $$) || return 0
  for _ in $(seq 1 50); do
    theirs=$(session_of "$pid") || return 0
    [ "$theirs" != "$ours" ] && break
    sleep 0.1
  done
  [ "$theirs" != "$ours" ] || { log "raise_session: $pid did not start a session of its own"; return 0; }
  # Without CAP_SYS_ADMIN the kernel takes one such write every 100 ms, machine-wide (EAGAIN).
  for _ in $(seq 1 20); do
    [ "$(autogroup_nice "$pid")" = "$EVENT_LOOP_NICE" ] && return 0
    { echo "$EVENT_LOOP_NICE" >"/proc/$pid/autogroup"; } 2>/dev/null || sleep 0.1
  done
  [ "$(autogroup_nice "$pid")" = "$EVENT_LOOP_NICE" ] || log "raise_session: $pid's session stays at nice $(autogroup_nice "$pid")"
}

# autogroup_nice PID: the nice value of PID's autogroup ("/autogroup-N nice V").
autogroup_nice() {
  local line
  read -r line 2>/dev/null <"/proc/$1/autogroup" || return 0
  echo "${line##* }"
}

# stat_field PID N: field N of /proc/PID/stat counted after the command name (0 state, 1 parent,
# 2 process group, 3 session), which may itself hold spaces and parentheses. From /proc because
# procps may not be installed.
stat_field() {
  local line fields
  read -r line 2>/dev/null <"/proc/$1/stat" || return 1
  read -r -a fields <<<"${line##*) }"
  echo "${fields[$2]:-}"
}

# session_of PID: the session PID belongs to.
session_of() { stat_field "$1" 3; }

# ensure_packages: Debian packages and Python tools the stack and the tests need.
# kubectl renders deploy/kubernetes's overlays (`kubectl kustomize`) for
# scripts/deploy/check-manifests, and nothing else needs it: installed on its own, since Debian's own
# archive has no kubectl (Kubernetes' or a cloud SDK's package source does), and the stack must start
# without it.
ensure_kubectl() {
  command -v kubectl >/dev/null && return 0
  log "installing kubectl"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null
  if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq kubectl >/dev/null; then
    log "kubectl is in none of this machine's package sources: add Kubernetes' (pkgs.k8s.io) to check the manifests"
    return 1
  fi
}

ensure_packages() {
  local missing=()
  [ -x "${PGBIN:-/nonexistent}/initdb" ] || missing+=(postgresql)
  command -v psql >/dev/null || missing+=(postgresql-client)
  command -v redis-server >/dev/null || missing+=(redis-server)
  [ -f /usr/include/hiredis/hiredis.h ] || missing+=(libhiredis-dev)
  [ -f /usr/include/x86_64-linux-gnu/curl/curl.h ] || [ -f /usr/include/curl/curl.h ] || missing+=(libcurl4-openssl-dev)
  [ -f /usr/include/idn2.h ] || missing+=(libidn2-dev)
  command -v curl >/dev/null || missing+=(curl)
  command -v openssl >/dev/null || missing+=(openssl)
  command -v python3 >/dev/null || missing+=(python3 python3-pip)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  fi
  # Without their recommends (GUI tools, docs): libvips decodes and re-encodes avatars (social);
  # Cairo and Pango draw share cards (nutrition), in DejaVu Sans (without it, letters are boxes).
  local images=()
  [ -f /usr/include/vips/vips.h ] || images+=(libvips-dev)
  [ -f /usr/include/cairo/cairo.h ] || images+=(libcairo2-dev)
  [ -f /usr/include/pango-1.0/pango/pangocairo.h ] || images+=(libpango1.0-dev)
  [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || images+=(fonts-dejavu-core)
  if [ ${#images[@]} -gt 0 ]; then
    log "installing Debian packages: ${images[*]}"
    local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${images[@]}" >/dev/null
  fi
  ensure_python_tools
}

# ensure_python_tools: sets PYTHON to an interpreter that has aiosmtpd, pytest, requests, PyJWT (the
# end-to-end tests check tokens with a third-party JWT library), PyYAML (scripts/openapi), Selenium
# (the pages are driven in Chromium), jsonschema (the events against their schemas, docs/EVENTS.md),
# kubernetes-validate (scripts/deploy/check-manifests; pinned: its
# version is the newest Kubernetes whose schemas it holds) and schemathesis (the contract run,
# pinned: its configuration format is the one scripts/e2e/schemathesis.toml is written in): the one on
# PATH (installing with pip when it may), else Debian's python3 with Debian's packages and pip.
SCHEMATHESIS_VERSION=4.32.5
KUBERNETES_VALIDATE_VERSION=1.37.0
ensure_python_tools() {
  local tools="import aiosmtpd, pytest, requests, jwt, cryptography, yaml, selenium, jsonschema, schemathesis, kubernetes_validate; assert schemathesis.__version__ == '$SCHEMATHESIS_VERSION'; assert kubernetes_validate.__version__ == '$KUBERNETES_VALIDATE_VERSION'"
  local packages=(aiosmtpd pytest requests 'pyjwt[crypto]' pyyaml selenium jsonschema "schemathesis==$SCHEMATHESIS_VERSION" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION")
  PYTHON=python3
  "$PYTHON" -c "$tools" 2>/dev/null && return 0
  log "installing Python tools: ${packages[*]}"
  "$PYTHON" -m pip install -q "${packages[@]}" >/dev/null 2>&1 \
    || "$PYTHON" -m pip install -q --break-system-packages "${packages[@]}" >/dev/null 2>&1 || true
  "$PYTHON" -c "$tools" 2>/dev/null && return 0
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-pip python3-aiosmtpd python3-pytest python3-requests python3-jwt python3-cryptography python3-yaml python3-selenium python3-jsonschema >/dev/null
  PYTHON=/usr/bin/python3
  "$PYTHON" -m pip install -q --break-system-packages "schemathesis==$SCHEMATHESIS_VERSION" "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION" >/dev/null 2>&1 || true
  "$PYTHON" -c "$tools"
}

# ensure_locust: sets PYTHON (as ensure_python_tools does) to an interpreter that has Locust, the load
# generator of scripts/load (pinned: the scenario uses its event hooks and FastHttpUser as they are in it).
LOCUST_VERSION=2.47.0
ensure_locust() {
  ensure_python_tools
  local check="import locust; assert locust.__version__ == '$LOCUST_VERSION'"
  "$PYTHON" -c "$check" 2>/dev/null && return 0
  log "installing Python tools: locust==$LOCUST_VERSION"
  "$PYTHON" -m pip install -q "locust==$LOCUST_VERSION" >/dev/null 2>&1 \
    || "$PYTHON" -m pip install -q --break-system-packages "locust==$LOCUST_VERSION" >/dev/null 2>&1 || true
  "$PYTHON" -c "$check"
}

# ensure_browser: headless Chromium and its driver from Debian's packages, for the page tests
# (Selenium drives them; nothing is downloaded at run time).
ensure_browser() {
  command -v chromium >/dev/null && command -v chromedriver >/dev/null && return 0
  log "installing chromium and chromium-driver"
  local sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium chromium-driver >/dev/null
}

# free_ports SIZE…: the first port of a block of SIZE consecutive free loopback ports per argument,
# below the kernel's ephemeral range, no two blocks overlapping (scripts/lib/ports.py says why).
# Every port a script needs is chosen in one call: ports chosen one call at a time may collide.
free_ports() {
  "${PYTHON:-python3}" "$(dirname "${BASH_SOURCE[0]}")/ports.py" "$@"
}

# free_port: one free port, for a script that needs no other.
free_port() { free_ports 1; }

# stack_ports [EXTRA]: sets and exports the ports scripts/stack reads (PostgreSQL, Redis, SMTP, the
# gateway, the services' block as services.txt spaces them, and the internal listeners' block: the
# gateway, then every service with up to three processes each), and sets EXTRA_PORTS to EXTRA more,
# all chosen at once.
stack_ports() {
  local extra=${1:-0} service_count port_span ports i
  read -r service_count port_span < <(awk '!/^#/ && NF { n++; if (!lo || $2 < lo) lo = $2; if ($2 > hi) hi = $2 } END { print n, hi - lo + 1 }' \
    "$(dirname "${BASH_SOURCE[0]}")/../../services.txt")
  local sizes=(1 1 1 1 "$port_span" $((1 + 3 * service_count)))
  for ((i = 0; i < extra; i++)); do sizes+=(1); done
  ports=$(free_ports "${sizes[@]}") || return 1
  read -r STACK_PG_PORT STACK_REDIS_PORT STACK_SMTP_PORT STACK_GATEWAY_PORT STACK_SERVICE_BASE_PORT STACK_ADMIN_BASE_PORT EXTRA_PORTS <<<"$ports"
  export STACK_PG_PORT STACK_REDIS_PORT STACK_SMTP_PORT STACK_GATEWAY_PORT STACK_SERVICE_BASE_PORT STACK_ADMIN_BASE_PORT
}

# pg_as_postgres CMD…: PostgreSQL refuses to run as root, so run its tools as the postgres user.
pg_as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# start_postgres DIR PORT [test]: a cluster in DIR/pg listening on 127.0.0.1:PORT; "test" turns off
# durability for speed. The superuser is postgres, trusted on loopback only.
start_postgres() {
  local dir=$1 port=$2 mode=${3:-}
  mkdir -p "$dir/pg"
  if [ "$(id -u)" = 0 ]; then
    chown postgres: "$dir/pg"
    # The postgres user must be able to reach DIR.
    local p=$dir; while [ "$p" != / ]; do chmod o+x "$p" 2>/dev/null || true; p=$(dirname "$p"); done
  fi
  if [ ! -f "$dir/pg/data/PG_VERSION" ]; then
    pg_as_postgres "$PGBIN/initdb" -D "$dir/pg/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$dir/pg/initdb.log" 2>&1 \
      || { cat "$dir/pg/initdb.log" >&2; return 1; }
  fi
  local opts="-p $port -c listen_addresses=127.0.0.1 -k $dir/pg -c max_connections=300"
  [ "$mode" = test ] && opts="$opts -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  pg_as_postgres "$PGBIN/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/server.log" -w -t 30 start -o "$opts" >/dev/null \
    || { tail -n 20 "$dir/pg/server.log" >&2; return 1; }
  psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAtc "SELECT 1 FROM pg_database WHERE datname='foodbackend'" | grep -q 1 \
    || psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qc "CREATE DATABASE foodbackend" >/dev/null
}

stop_postgres() {
  local dir=$1
  [ -f "$dir/pg/data/postmaster.pid" ] || return 0
  pg_as_postgres "$PGBIN/pg_ctl" -D "$dir/pg/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
}

# start_redis DIR PORT: a Redis server with append-only persistence in DIR/redis.
# start_redis DIR PORT [ARGUMENT…]: redis-server on 127.0.0.1:PORT, its files under DIR/redis; the
# arguments are added to its command line (`--replicaof 127.0.0.1 6379` makes it a replica).
start_redis() {
  local dir=$1 port=$2
  shift 2
  mkdir -p "$dir/redis"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$dir/redis" --appendonly yes --save "" \
    --daemonize yes --pidfile "$dir/redis/redis.pid" --logfile "$dir/redis/redis.log" "$@"
  wait_redis "$port" "$dir/redis/redis.log"
}

# wait_redis PORT LOG: until the Redis server or sentinel on PORT answers, at most 5 s.
wait_redis() {
  for _ in $(seq 1 50); do
    redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  log "nothing answers on port $1; see $2"; return 1
}

# start_sentinel DIR PORT PRIMARY_PORT: a Redis Sentinel on 127.0.0.1:PORT watching the primary at
# PRIMARY_PORT as `foodbackend` (REDIS_SENTINEL_PRIMARY's default), with a quorum of two of three,
# failing it over after a second without an answer. Its files under DIR/sentinel-PORT. A sentinel
# rewrites its configuration as it learns: one already there (a restart) is kept.
start_sentinel() {
  local dir=$1/sentinel-$2 port=$2 primary=$3
  mkdir -p "$dir"
  [ -s "$dir/sentinel.conf" ] || printf '%s\n' "port $port" "bind 127.0.0.1" "dir $dir" "daemonize yes" \
    "pidfile $dir/sentinel.pid" "logfile $dir/sentinel.log" "sentinel monitor foodbackend 127.0.0.1 $primary 2" \
    "sentinel down-after-milliseconds foodbackend 1000" "sentinel failover-timeout foodbackend 10000" \
    "sentinel parallel-syncs foodbackend 1" >"$dir/sentinel.conf"
  redis-server "$dir/sentinel.conf" --sentinel
  wait_redis "$port" "$dir/sentinel.log"
}

# redis_primary SENTINEL_PORT: the port of the primary the sentinel names now.
redis_primary() {
  redis-cli -p "$1" SENTINEL get-master-addr-by-name foodbackend | sed -n 2p
}

# recorded_pid FILE: the pid FILE records, if that process still runs: not a zombie, and started
# no later than FILE was written. A pid file left from before a reboot or a crash may name a
# process of someone else's that has the number now, which `down` must not stop.
recorded_pid() {
  local file=$1 pid age
  [ -f "$file" ] || return 1
  pid=$(head -n 1 "$file" | tr -dc 0-9)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  case "$(ps -o stat= -p "$pid" 2>/dev/null)" in Z* | "") return 1 ;; esac
  age=$(ps -o etimes= -p "$pid" 2>/dev/null | tr -dc 0-9)
  [ -n "$age" ] || return 1
  # Whole seconds on both sides, and a clock NTP may have stepped: a few seconds of slack.
  [ $(($(date +%s) - age)) -le $(($(stat -c %Y "$file") + 5)) ] || return 1
  echo "$pid"
}

stop_redis() {
  local dir=$1 pid
  pid=$(recorded_pid "$dir/redis/redis.pid") || { rm -f "$dir/redis/redis.pid"; return 0; }
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$dir/redis/redis.pid"
}

# pgbench_select_tps PORT CLIENTS SECONDS DIR: `pgbench -S` (select-only, scale 10, 2 threads) TPS
# on the cluster at PORT (superuser trusted on loopback), in a database of its own that goes again
# afterwards. The benchmarks print it as the measure of how fast this machine is at the moment of
# the run. A benchmark that measures it more than once, between its own figures, calls the three
# steps itself: pgbench_prepare PORT DIR, pgbench_run PORT CLIENTS SECONDS DIR (prints the TPS) as
# often as it likes, pgbench_drop PORT; its pages (scale 10, some 160 MB) then crowd the services'
# out of shared buffers after each run, so such a benchmark warms its own reads up again before it
# measures them.
pgbench_select_tps() {
  local port=$1 clients=$2 seconds=$3 dir=$4 tps
  pgbench_prepare "$port" "$dir" || return 1
  tps=$(pgbench_run "$port" "$clients" "$seconds" "$dir") || return 1
  pgbench_drop "$port" || return 1
  echo "$tps"
}

pgbench_prepare() {
  local port=$1 dir=$2 sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  # pgbench ships with the server package (postgresql-NN); postgresql-contrib pulls it in otherwise.
  if [ ! -x "$PGBIN/pgbench" ]; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq postgresql-contrib >/dev/null
    PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
  fi
  psql -h 127.0.0.1 -p "$port" -U postgres -d postgres -qAtX -c "CREATE DATABASE pgbench" >/dev/null || return 1
  "$PGBIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -i -s 10 -q pgbench >"$dir/pgbench-init.log" 2>&1 \
    || { tail -n 20 "$dir/pgbench-init.log" >&2; return 1; }
}

pgbench_run() {
  local port=$1 clients=$2 seconds=$3 dir=$4 out
  out=$("$PGBIN/pgbench" -h 127.0.0.1 -p "$port" -U postgres -S -c "$clients" -j 2 -T "$seconds" pgbench 2>"$dir/pgbench.log") \
    || { tail -n 20 "$dir/pgbench.log" >&2; return 1; }
  echo "$out" | awk '/^tps = / {printf "%.0f\n", $3; exit}'
}

pgbench_drop() {
  psql -h 127.0.0.1 -p "$1" -U postgres -d postgres -qAtX -c "DROP DATABASE IF EXISTS pgbench" >/dev/null
}

# start_reference_proxy UPSTREAM_PORT DIR: nginx (Debian's nginx-light) with one worker on a free
# loopback port, proxying everything to 127.0.0.1:UPSTREAM_PORT over keep-alive HTTP/1.1 connections,
# as the gateway does; prints the port. The benchmarks run the same load through it beside the gateway:
# a well-worn C proxy in the gateway's place, on the same machine in the same minute, shows how much
# of a p99 is the machine's and how much the gateway's. Its worker's pid goes to DIR/pids/nginx.pid
# (for scripts/lib/wrk_cpu.py); stop_reference_proxy DIR stops it.
start_reference_proxy() {
  local upstream=$1 dir=$2 port sudo="" master worker=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  if ! command -v nginx >/dev/null; then
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nginx-light >/dev/null 2>&1 \
      || { $sudo apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nginx-light >/dev/null; }
  fi
  port=$(free_port)
  mkdir -p "$dir/nginx" "$dir/pids"
  cat >"$dir/nginx/nginx.conf" <<CONF
worker_processes 1;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $dir/nginx/body;
  proxy_temp_path $dir/nginx/proxy;
  fastcgi_temp_path $dir/nginx/fastcgi;
  uwsgi_temp_path $dir/nginx/uwsgi;
  scgi_temp_path $dir/nginx/scgi;
  upstream service { server 127.0.0.1:$upstream; keepalive 128; }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://service;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
CONF
  # At the gateway's priority (EVENT_LOOP_NICE), in whose place it runs.
  $sudo $(event_loop_nice) nginx -c "$dir/nginx/nginx.conf" || return 1
  for _ in $(seq 1 50); do
    master=$(cat "$dir/nginx/nginx.pid" 2>/dev/null || true)
    [ -n "$master" ] && worker=$(child_pid "$master" || true)
    [ -n "$worker" ] && break
    sleep 0.1
  done
  [ -n "$worker" ] || { log "nginx did not start; see $dir/nginx/error.log"; return 1; }
  raise_session "$worker"
  echo "$worker" >"$dir/pids/nginx.pid"
  echo "$port"
}

# child_pid PID: a process whose parent is PID.
child_pid() {
  local stat pid
  for stat in /proc/[0-9]*/stat; do
    pid=${stat#/proc/}; pid=${pid%/stat}
    if [ "$(stat_field "$pid" 1)" = "$1" ]; then echo "$pid"; return 0; fi
  done
  return 1
}

stop_reference_proxy() {
  local dir=$1 sudo="" master
  [ "$(id -u)" = 0 ] || sudo=sudo
  master=$(recorded_pid "$dir/nginx/nginx.pid") || return 0
  $sudo kill "$master" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$master" 2>/dev/null || break; sleep 0.1; done
}
