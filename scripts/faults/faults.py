"""One fault under the whole app's load, then the checks (see scripts/faults/run for the stack).

    python3 scripts/faults/faults.py FAULT [FAULT ...]

with FAULT one of: redis-stop, redis-kill, redis-failover, postgres-stop, postgres-terminate[:SERVICE],
service-kill[:SERVICE] (a process of services.txt, social-2 included), gateway-kill, smtp-refuse.
The stack is the one the STACK_* variables describe (scripts/faults/run starts one). Each fault:
the load (scripts/load/run at FAULT_USERS users (50), each with an account of its own, and beside
them a few coaches of loader.py who invite clients, sign people up and edit profiles: see LOADER
below), FAULT_WARMUP seconds (10) of it, the fault, the load until every process is ready again and
FAULT_AFTER seconds (15) more; then the load stops, the checks wait up to FAULT_SETTLE seconds (120)
for events and mail to go through, and report. A line of JSON per fault goes to $FAULT_RESULTS;
exits 1 when any check failed.
"""
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import requests

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
import checks  # noqa: E402
import service_table  # noqa: E402
from loader import Loader  # noqa: E402

USERS = int(os.environ.get("FAULT_USERS", "50"))
WARMUP = float(os.environ.get("FAULT_WARMUP", "10"))
AFTER = float(os.environ.get("FAULT_AFTER", "15"))
SETTLE = float(os.environ.get("FAULT_SETTLE", "120"))
# The stack's DATABASE_STATEMENT_TIMEOUT_MS (scripts/faults/run sets it): also how long a request
# waits for a pooled connection. No answer may take longer, with this much slack for the way there.
STATEMENT_TIMEOUT = float(os.environ.get("FAULT_STATEMENT_TIMEOUT_MS", "3000")) / 1000
SLACK = 1.5
# Who makes the load: "locust" (the default), scripts/load/run's users (the apps' mix; its LOAD_RECORD
# and LOAD_REPORT), with FAULT_EXTRA_USERS (5) coaches of this folder's loader beside them making
# the writes that mix has none of (invitations, sign-ups, profile edits: mail, and the events most
# services consume); or "own", this folder's loader alone at FAULT_USERS users, all of its mix.
LOADER = os.environ.get("FAULT_LOADER", "locust")
EXTRA_USERS = int(os.environ.get("FAULT_EXTRA_USERS", "5"))
# scripts/load/run's measured window: the warm-up, the longest fault (30 s) and its recovery, and after.
LOCUST_SECONDS = int(os.environ.get("FAULT_LOCUST_SECONDS", "80"))


def log(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


class Stack:
    def __init__(self):
        self.dir = os.environ["STACK_DIR"]
        self.gateway = f"http://127.0.0.1:{os.environ['STACK_GATEWAY_PORT']}"
        table = service_table.load()
        self.services = [service.name for service in table]
        self.replicas = {service.name: service.replicas for service in table}
        _, admin = service_table.process_ports(table, int(os.environ["STACK_SERVICE_BASE_PORT"]), int(os.environ["STACK_ADMIN_BASE_PORT"]),
                                               replicas={name: 3 for name in self.services})
        self.admin = {process: f"http://127.0.0.1:{port}" for process, port in admin.items()}
        self.pg_port = os.environ["STACK_PG_PORT"]
        self.db = checks.Database(self.pg_port)
        # Redis as a Sentinel-managed pair (scripts/stack's STACK_REDIS_SENTINELS): the primary moves.
        self.sentinel_ports = os.environ.get("STACK_SENTINEL_PORTS", "").split() if os.environ.get("STACK_REDIS_SENTINELS") == "1" else []
        self.redis_ports = {os.environ["STACK_REDIS_PORT"]: self.dir}
        if self.sentinel_ports:
            self.redis_ports[os.environ["STACK_REDIS_REPLICA_PORT"]] = os.path.join(self.dir, "redis-replica")

    @property
    def redis_port(self):
        """The port of Redis's primary: the one the first sentinel that answers names."""
        for port in self.sentinel_ports:
            named = subprocess.run(["redis-cli", "-p", port, "SENTINEL", "get-master-addr-by-name", "foodbackend"],
                                   capture_output=True, text=True).stdout.split()
            if len(named) == 2:
                return named[1]
        return os.environ["STACK_REDIS_PORT"]

    def processes(self):
        """The recorded service processes and the gateway (social-2 included)."""
        names = sorted(os.path.basename(path)[:-4] for path in os.listdir(os.path.join(self.dir, "pids")) if path.endswith(".pid"))
        return [name for name in names if name in self.admin]

    def pid(self, name):
        with open(os.path.join(self.dir, "pids", f"{name}.pid")) as f:
            return int(f.read().strip())

    def pids(self):
        return {name: self.pid(name) for name in self.processes()}

    def alive(self, pid):
        try:
            os.kill(pid, 0)
            return True
        except ProcessLookupError:
            return False

    def ready(self, name):
        try:
            return requests.get(f"{self.admin[name]}/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    def all_ready(self):
        return all(self.ready(name) for name in self.processes())

    def bash(self, script):
        subprocess.run(["bash", "-c", f"source scripts/lib/infra.sh && {script}"], cwd=ROOT, check=True)

    def restart(self, name, command):
        """Starts a killed process again as scripts/stack up's start_process does (in a session of its
        own, at the event loops' nice value, its log appended), from the command line and environment
        it ran with: `scripts/stack up` would first check the build, and a tree others are editing
        may need one."""
        argv, environ = command
        nice = subprocess.run(["bash", "-c", "source scripts/lib/infra.sh && event_loop_nice"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.split()
        with open(os.path.join(self.dir, "logs", f"{name}.log"), "ab") as out:
            process = subprocess.Popen(nice + argv, env=dict(item.split("=", 1) for item in environ), stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        with open(os.path.join(self.dir, "pids", f"{name}.pid"), "w") as f:
            f.write(f"{process.pid}\n")
        self.bash(f"raise_session {process.pid}")

    def command_of(self, pid):
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [part.decode() for part in f.read().split(b"\0") if part]
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = [part.decode() for part in f.read().split(b"\0") if part]
        return argv, environ


class Run:
    """One fault: the load, the fault in the middle of it, and what the checks found."""

    def __init__(self, stack, fault):
        self.stack = stack
        self.fault = fault
        self.kind, _, self.target = fault.partition(":")
        self.out = os.environ.get("FAULT_OUT", os.path.join(stack.dir, "faults"))
        os.makedirs(self.out, exist_ok=True)
        self.record = os.path.join(self.out, f"{fault.replace(':', '-')}.record.jsonl")
        if os.path.exists(self.record):
            os.remove(self.record)
        self.notes = []
        self.failures = []

    def fail(self, text):
        log(f"FAIL {text}")
        self.failures.append(text)

    def execute(self):
        stack = self.stack
        checks.install_audit(stack.db, stack.services)
        # Counted from here: the events and mail of this run's set-up and load.
        event_mark = checks.published_marker(stack.db)
        mail_mark = checks.mail_marker(stack.db)
        locust = None
        if LOADER == "locust":
            loader = Loader(stack.gateway, os.path.join(stack.dir, "mail"), self.record, users=EXTRA_USERS,
                            only={"invitation", "signup", "profile"})
            log(f"{self.fault}: setting up {EXTRA_USERS} users of our own")
            loader.setup()
            locust = self.start_locust()
        else:
            loader = Loader(stack.gateway, os.path.join(stack.dir, "mail"), self.record, users=USERS)
            log(f"{self.fault}: setting up {USERS} users")
            loader.setup()
        pids = stack.pids()
        log(f"{self.fault}: load on; the fault in {WARMUP:.0f}s")
        loader.start()
        time.sleep(WARMUP)
        fault_started = time.time()
        restarted = getattr(self, "fault_" + self.kind.replace("-", "_"))()
        undone = time.time()
        log(f"{self.fault}: fault over after {undone - fault_started:.1f}s; waiting for every process to be ready")
        recovered = None
        deadline = undone + 120
        while time.time() < deadline:
            if stack.all_ready():
                recovered = time.time()
                break
            time.sleep(0.2)
        if recovered is None:
            self.fail("not every process was ready again within 120 s")
        time.sleep(AFTER)
        report = self.stop_locust(locust) if locust else None
        loader.stop()
        load_ended = time.time()
        log(f"{self.fault}: load off; checking")

        # Answers: 2xx, or 503 (while the fault lasts); never a 500, never a hang.
        results = list(loader.results)
        statuses = Counter(str(status) for _, _, status, _ in results if not (isinstance(status, int) and 200 <= status < 300))
        slowest = max(results, key=lambda r: r[1]) if results else (0, 0, None, "")
        requests_made = len(results)
        if report:
            requests_made += report["requests"]
            for error in report["errors"]:
                # Status 0: no answer (the connection refused or broken).
                statuses["ConnectionError" if error["status"] == 0 else str(error["status"])] += error["count"]
            for route, figures in report["routes"].items():
                if not route.startswith("GET /v1/events") and figures["max"] / 1000 > slowest[1]:
                    slowest = (0, figures["max"] / 1000, None, route)
        errors = dict(statuses)
        allowed = {"503"}
        if self.kind == "gateway-kill":
            allowed |= {"ConnectionError"}
        if self.kind == "service-kill" and "502" in errors:
            # The requests in flight in the killed process: the gateway cannot know whether they took
            # effect, so it says the exchange broke (502) rather than that the service was not
            # reached (503, which tells a client it may simply send it again).
            allowed |= {"502"}
            self.notes.append(f"{errors['502']} answers 502: requests in flight in the killed process")
        for status, count in errors.items():
            if status not in allowed:
                self.fail(f"{count} answers {status}")
        if slowest[1] > STATEMENT_TIMEOUT + SLACK:
            self.fail(f"{slowest[3]} took {slowest[1]:.1f}s (statement timeout {STATEMENT_TIMEOUT:.0f}s)")
        last_error = max((start + seconds for start, seconds, status, _ in results
                          if not (isinstance(status, int) and 200 <= status < 300)), default=None)
        # Time to recover: from the fault's end until every process was ready and the last failed
        # answer had come, whichever is later.
        recover = max(0.0, max(recovered or load_ended, last_error or 0) - undone)

        # The processes: a fault of PostgreSQL, Redis or the mail server restarts no service.
        after = stack.pids()
        for name, pid in pids.items():
            if name in restarted:
                continue
            if after.get(name) != pid or not stack.alive(pid):
                self.fail(f"{name} restarted or died (pid {pid} -> {after.get(name)})")

        # Events, mail: wait until they went through (or the time is up), then count.
        settle_deadline = time.time() + SETTLE
        while True:
            published, unsent, missing = checks.event_state(stack.db, stack.services, CONSUMERS, event_mark)
            queued, pending, failed, not_received, duplicates = checks.mail_state(stack.db, mail_mark, os.path.join(stack.dir, "mail"))
            if (unsent == 0 and not missing and pending == 0) or time.time() > settle_deadline:
                break
            time.sleep(1)
        settled = time.time() - load_ended
        dead = {}
        for name in stack.services:
            length = subprocess.run(["redis-cli", "-p", stack.redis_port, "XLEN", f"events:dead:{name}"], capture_output=True, text=True).stdout.strip()
            if length not in ("", "0"):
                dead[name] = length
        lost_writes, acknowledged = checks.check_writes(stack.db, self.record)
        if locust:
            more_lost, more = checks.check_writes(stack.db, self.locust_record)
            lost_writes += more_lost
            acknowledged = dict(Counter(acknowledged) + Counter(more))
        for kind, record_id, why in lost_writes[:20]:
            self.fail(f"acknowledged {kind} {record_id}: {why}")
        if unsent:
            self.fail(f"{unsent} events still in an outbox after {SETTLE:.0f}s")
        for producer, event_id, event_type, consumer in missing[:20]:
            self.fail(f"{event_type} {event_id} from {producer} never handled by {consumer}")
        if dead:
            self.fail(f"dead-lettered events: {dead}")
        if pending or failed:
            self.fail(f"mail: {pending} still pending, {failed} failed")
        if not_received:
            self.fail(f"mail: {len(not_received)} marked sent but not received, e.g. {not_received[:3]}")
        if duplicates:
            self.fail(f"mail: {len(duplicates)} received more than once, e.g. {duplicates[:3]}")
        lost = len(lost_writes) + len(missing) + unsent + pending + failed + len(not_received)
        summary = {
            "fault": self.fault, "loader": LOADER, "requests": requests_made, "errors": errors,
            "longest_s": round(slowest[1], 2), "longest_route": slowest[3],
            "recover_s": round(recover, 1), "settled_s": round(settled, 1),
            "writes_acknowledged": sum(acknowledged.values()), "writes_by_kind": acknowledged, "writes_lost": len(lost_writes),
            "events_published": published, "event_deliveries_missing": len(missing), "events_unsent": unsent,
            "events_lost": len({event_id for _, event_id, _, _ in missing}) + unsent,
            "mail_queued": queued, "mail_lost": pending + failed + len(not_received), "mail_duplicates": len(duplicates),
            "lost": lost, "notes": self.notes, "failures": self.failures, "ok": not self.failures,
        }
        log(f"{self.fault}: {json.dumps(summary)}")
        return summary

    def start_locust(self):
        """scripts/load/run at USERS users on this stack, in the background; returns once its users
        are all started (its first writes are recorded, and its ramp is over)."""
        self.locust_record = self.record.replace(".record.", ".locust-record.")
        self.locust_report = self.record.replace(".record.jsonl", ".locust-report.json")
        for path in (self.locust_record, self.locust_report):
            if os.path.exists(path):
                os.remove(path)
        open(self.locust_record, "w").close()
        self.locust_log = open(self.record.replace(".record.jsonl", ".locust.log"), "w")
        log(f"{self.fault}: scripts/load/run --users {USERS} --seconds {LOCUST_SECONDS}")
        process = subprocess.Popen(["scripts/load/run", "--users", str(USERS), "--seconds", str(LOCUST_SECONDS)], cwd=ROOT,
                                   env={**os.environ, "LOAD_RECORD": self.locust_record, "LOAD_REPORT": self.locust_report},
                                   stdout=self.locust_log, stderr=subprocess.STDOUT)
        deadline = time.time() + 600  # its accounts are made (the first time) before its users start
        while os.path.getsize(self.locust_record) == 0:
            if process.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"scripts/load/run wrote no record (exit {process.poll()}); see {self.locust_log.name}")
            time.sleep(0.5)
        time.sleep(max(10, USERS / max(5, USERS // 10)))  # its ramp: every user started
        return process

    def stop_locust(self, process):
        """Waits for scripts/load/run's window to end; its report."""
        process.wait(timeout=LOCUST_SECONDS + 300)
        self.locust_log.close()
        if not os.path.exists(self.locust_report):
            raise RuntimeError(f"scripts/load/run left no report; see {self.locust_log.name}")
        with open(self.locust_report) as f:
            return json.load(f)

    # -- the faults -------------------------------------------------------------------------------
    # Each returns the processes it restarted on purpose.

    def fault_redis_stop(self):
        log("redis: stopped (SIGTERM) for 10 s")
        self.stack.bash('stop_redis "$STACK_DIR"')
        time.sleep(10)
        self.stack.bash('start_redis "$STACK_DIR" "$STACK_REDIS_PORT" && cp "$STACK_DIR/redis/redis.pid" "$STACK_DIR/pids/redis.pid"')
        return set()

    def fault_redis_kill(self):
        pid = int(open(os.path.join(self.stack.dir, "redis", "redis.pid")).read())
        log(f"redis: kill -9 {pid}, its data removed, started again empty")
        os.kill(pid, signal.SIGKILL)
        while self.stack.alive(pid):
            time.sleep(0.05)
        subprocess.run(["rm", "-rf", os.path.join(self.stack.dir, "redis", "appendonlydir"), os.path.join(self.stack.dir, "redis", "dump.rdb"),
                        os.path.join(self.stack.dir, "redis", "appendonly.aof")], check=True)
        time.sleep(2)
        self.stack.bash('start_redis "$STACK_DIR" "$STACK_REDIS_PORT" && cp "$STACK_DIR/redis/redis.pid" "$STACK_DIR/pids/redis.pid"')
        return set()

    def fault_redis_failover(self):
        """Redis's primary killed (`kill -9`): the sentinels promote its replica, and the old primary,
        started again 5 s later, follows the new one. Needs the stack's STACK_REDIS_SENTINELS=1."""
        stack = self.stack
        if not stack.sentinel_ports:
            raise RuntimeError("redis-failover needs a stack with STACK_REDIS_SENTINELS=1 (scripts/faults/run starts one)")
        old = stack.redis_port
        folder = stack.redis_ports[old]
        pid = int(open(os.path.join(folder, "redis", "redis.pid")).read())
        log(f"redis: the primary (port {old}) killed with kill -9")
        killed = time.time()
        os.kill(pid, signal.SIGKILL)
        while stack.redis_port == old and time.time() < killed + 60:
            time.sleep(0.05)
        new = stack.redis_port
        if new == old:
            self.fail("the sentinels promoted no replica within 60 s")
            return set()
        promoted = time.time() - killed
        log(f"redis: the sentinels named port {new} the primary {promoted:.1f}s after the kill")
        self.notes.append(f"primary promoted {promoted:.1f} s after the kill")
        time.sleep(max(0.0, 5 - promoted))
        stack.bash(f'start_redis "{folder}" {old} --replicaof 127.0.0.1 {new}')
        name = "redis" if folder == stack.dir else "redis-replica"
        subprocess.run(["cp", os.path.join(folder, "redis", "redis.pid"), os.path.join(stack.dir, "pids", f"{name}.pid")], check=True)
        return set()

    def fault_postgres_stop(self):
        log("postgresql: fast stop for 10 s")
        self.stack.bash('stop_postgres "$STACK_DIR"')
        time.sleep(10)
        self.stack.bash('start_postgres "$STACK_DIR" "$STACK_PG_PORT" && head -n 1 "$STACK_DIR/pg/data/postmaster.pid" > "$STACK_DIR/pids/postgres.pid"')
        return set()

    def fault_postgres_terminate(self):
        role = self.target or "nutrition"
        # Rounds 50 ms apart, each ending every connection of the role, those in a transaction (open
        # or running a statement) among them: at least ten, and on until one was caught in a
        # transaction (a release build's transactions are short, and the load leaves the database
        # idle most of the time), at most a hundred.
        in_transaction = ended = 0
        for round in range(100):
            rows = self.stack.db.rows(f"""SELECT (xact_start IS NOT NULL)::text, pg_terminate_backend(pid)::text FROM pg_stat_activity
                                          WHERE usename = '{role}' AND pid <> pg_backend_pid()""")
            ended += sum(1 for _, done in rows if done == "true")
            in_transaction += sum(1 for xact, done in rows if xact == "true" and done == "true")
            if round >= 9 and in_transaction:
                break
            time.sleep(0.05)
        log(f"postgresql: ended {ended} connections of {role}, {in_transaction} of them in a transaction")
        self.notes.append(f"{ended} connections of {role} ended, {in_transaction} in a transaction")
        if in_transaction == 0:
            self.fail(f"no connection of {role} was caught in a transaction")
        return set()

    def fault_service_kill(self):
        return self.kill_and_start(self.target or "nutrition")

    def fault_gateway_kill(self):
        return self.kill_and_start("gateway")

    def kill_and_start(self, name):
        pid = self.stack.pid(name)
        command = self.stack.command_of(pid)
        log(f"{name}: kill -9 {pid}, started again")
        os.kill(pid, signal.SIGKILL)
        while self.stack.alive(pid):
            time.sleep(0.05)
        time.sleep(1)
        self.stack.restart(name, command)
        return {name}

    def fault_smtp_refuse(self):
        pid = self.stack.pid("mail")
        log("smtp sink: refusing every mail (451) for 30 s")
        os.kill(pid, signal.SIGUSR1)
        try:
            time.sleep(30)
        finally:
            os.kill(pid, signal.SIGUSR1)
        return set()


FAULTS = ["redis-stop", "redis-kill", "redis-failover", "postgres-stop", "postgres-terminate", "service-kill", "gateway-kill", "smtp-refuse"]


def table(path):
    """The summary of a results file, as a Markdown table."""
    lines = ["| fault | requests | errors by status | longest answer | time to recover | writes lost | events lost | mails lost | result |",
             "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |"]
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if "requests" not in r:
                lines.append(f"| {r['fault']} | | | | | | | | did not run: {r['failures'][0]} |")
                continue
            errors = ", ".join(f"{status}: {count}" for status, count in sorted(r["errors"].items())) or "none"
            verdict = ("pass" if r["ok"] else "FAIL: " + "; ".join(r["failures"][:3])) + "".join(f"; {note}" for note in r.get("notes", []))
            lines.append(f"| {r['fault']} | {r['requests']} | {errors} | {r['longest_s']:.2f} s | {r['recover_s']:.1f} s "
                         f"| {r['writes_lost']} of {r['writes_acknowledged']} | {r['events_lost']} of {r['events_published']} "
                         f"| {r['mail_lost']} of {r['mail_queued']} | {verdict} |")
    return "\n".join(lines)


def main(argv):
    global CONSUMERS
    if argv[:1] == ["--cleanup"]:
        stack = Stack()
        checks.remove_audit(stack.db, stack.services)
        return 0
    if argv[:1] == ["--table"]:
        print(table(argv[1]))
        return 0
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    stack = Stack()
    CONSUMERS = checks.consumers_by_type(stack.services)
    results_path = os.environ.get("FAULT_RESULTS")
    ok = True
    for fault in argv:
        if fault.partition(":")[0] not in FAULTS:
            print(f"unknown fault {fault}; one of {', '.join(FAULTS)}", file=sys.stderr)
            return 2
    for fault in argv:
        try:
            summary = Run(stack, fault).execute()
        except Exception as error:
            log(f"{fault}: the run itself failed: {error!r}")
            summary = {"fault": fault, "ok": False, "failures": [f"run failed: {error!r}"], "lost": None}
        ok = ok and summary["ok"]
        if results_path:
            with open(results_path, "a") as f:
                f.write(json.dumps(summary) + "\n")
    return 0 if ok else 1


CONSUMERS = {}

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
