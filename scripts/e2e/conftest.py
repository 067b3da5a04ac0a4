"""Shared helpers for the end-to-end tests: where the stack runs and how to reach its parts."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import requests

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import service_table  # noqa: E402

TABLE = service_table.load()
SERVICES = [service.name for service in TABLE]


class Stack:
    def __init__(self):
        self.dir = os.environ["STACK_DIR"]
        self.gateway = f"http://127.0.0.1:{os.environ['STACK_GATEWAY_PORT']}"
        # Each service's port and each process's internal listener (readiness, metrics), numbered as
        # scripts/stack numbers them from services.txt; up to three processes a service.
        public, admin = service_table.process_ports(TABLE, int(os.environ["STACK_SERVICE_BASE_PORT"]), int(os.environ["STACK_ADMIN_BASE_PORT"]),
                                                    replicas={name: 3 for name in SERVICES})
        self.service_urls = {name: f"http://127.0.0.1:{port}" for name, port in public.items()}
        self.gateway_admin = f"http://127.0.0.1:{admin['gateway']}"
        self.admin_urls = {process: f"http://127.0.0.1:{port}" for process, port in admin.items()}
        self.pg_port = os.environ["STACK_PG_PORT"]
        # Which PostgreSQL server holds each service's schema (STACK_PG_SERVERS=2 puts them on two).
        with open(os.path.join(self.dir, "pg-ports")) as f:
            self.pg_ports = dict(line.split() for line in f if line.strip())
        self.redis_port = os.environ["STACK_REDIS_PORT"]

    def pid(self, name):
        with open(os.path.join(self.dir, "pids", f"{name}.pid")) as f:
            return int(f.read().strip())

    def log(self, name):
        with open(os.path.join(self.dir, "logs", f"{name}.log"), errors="replace") as f:
            return f.read()

    def psql(self, role, sql):
        url = f"postgres://{role}:{role}@127.0.0.1:{self.pg_ports.get(role, self.pg_port)}/foodbackend"
        return subprocess.run(["psql", url, "-qAtX", "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True, text=True).stdout.strip()

    def pg_server(self, service):
        """The folder and port of the PostgreSQL server holding `service`'s schema, and its pid file's name."""
        if self.pg_ports[service] == self.pg_port:
            return self.dir, self.pg_port, "postgres"
        return os.path.join(self.dir, "pg-2"), self.pg_ports[service], "postgres-2"

    def pg_servers(self):
        """One service per PostgreSQL server: stopping each of them stops every server."""
        return list({port: service for service, port in self.pg_ports.items()}.values())

    def stop_postgres(self, service):
        """Fast-stops the PostgreSQL server that holds `service`'s schema."""
        folder, _, _ = self.pg_server(service)
        subprocess.run(["bash", "-c", 'source scripts/lib/infra.sh && stop_postgres "$0"', folder], check=True)

    def start_postgres(self, service):
        """Starts that server again (straight away, as a restarted database would be) and records its pid."""
        folder, port, name = self.pg_server(service)
        subprocess.run(["bash", "-c", 'source scripts/lib/infra.sh && start_postgres "$0" "$1" && head -n 1 "$0/pg/data/postmaster.pid" > "$2"',
                        folder, port, os.path.join(self.dir, "pids", f"{name}.pid")], check=True)

    def redis(self, *args):
        return subprocess.run(["redis-cli", "-p", self.redis_port, *args], check=True, capture_output=True, text=True).stdout

    def terminate(self, name, seconds=15):
        """SIGTERM to the recorded process, then wait until it has exited; returns its pid."""
        pid = self.pid(name)
        os.kill(pid, signal.SIGTERM)

        def gone():
            try:
                os.kill(pid, 0)
                return False
            except ProcessLookupError:
                return True

        self.wait_until(gone, seconds=seconds, what=f"{name} exited after SIGTERM", grace=False)
        return pid

    def up(self):
        # The stage built the stack before the tests: `up` starts what that build made.
        subprocess.run(["scripts/stack", "up"], check=True, capture_output=True, env={**os.environ, "STACK_NO_BUILD": "1"})

    def wait_until(self, condition, seconds=20, what="condition", grace=True):
        # STACK_WAIT_GRACE_SECONDS lengthens a wait by the time a stack's own retries may need
        # beyond the test's window (scripts/compose-test says when and why); not a wait whose
        # window is what the test checks (grace=False: a shutdown's).
        if grace:
            seconds += int(os.environ.get("STACK_WAIT_GRACE_SECONDS", "0"))
        deadline = time.time() + seconds
        while time.time() < deadline:
            try:
                if condition():
                    return
            except Exception:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{what} did not hold within {seconds}s")


@pytest.fixture(scope="session")
def stack():
    return Stack()


def request_id():
    return f"e2e-{uuid.uuid4()}"


def problem(response):
    assert response.headers["Content-Type"] == "application/problem+json", response.text
    return json.loads(response.text)
