"""Launch-to-ready time and resident memory of each process. Called by scripts/bench/idle."""
import argparse
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from ports import free_ports  # noqa: E402
import service_table  # noqa: E402

SERVICES = [service.name for service in service_table.load()]




def ready(url):
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return response.status == 200
    except Exception:
        return False


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def launch(binary, env, log_dir, name):
    log = open(os.path.join(log_dir, f"{name}.log"), "wb")
    started = time.perf_counter()
    process = subprocess.Popen([binary], env={**os.environ, **env}, stdout=log, stderr=log)
    return process, started


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True)
    parser.add_argument("--pg-port", required=True)
    parser.add_argument("--redis-port", required=True)
    parser.add_argument("--log-dir", required=True)
    args = parser.parse_args()
    admin = f"postgres://postgres@127.0.0.1:{args.pg_port}/foodbackend"
    names = SERVICES + ["gateway"]
    # Each process's public port and internal listener (readiness, metrics), chosen at once.
    chosen = free_ports(*[1] * (2 * len(names)))
    ports = dict(zip(names, chosen))
    admin_ports = dict(zip(names, chosen[len(names):]))
    processes, rows = [], []
    try:
        for name in SERVICES:
            env = {"DATABASE_URL": f"postgres://{name}:{name}@127.0.0.1:{args.pg_port}/foodbackend",
                   "REDIS_URL": f"redis://127.0.0.1:{args.redis_port}", "HTTP_PORT": str(ports[name]),
                   "ADMIN_HTTP_PORT": str(admin_ports[name]), "LOG_LEVEL": "warning"}
            subprocess.run([os.path.join(args.bin, name), "provision"], env={**os.environ, **env, "DATABASE_ADMIN_URL": admin},
                           check=True, capture_output=True)
            process, started = launch(os.path.join(args.bin, name), env, args.log_dir, name)
            processes.append(process)
            rows.append((name, process, started, f"http://127.0.0.1:{admin_ports[name]}/readyz"))
        gateway_env = {"HTTP_PORT": str(ports["gateway"]), "ADMIN_HTTP_PORT": str(admin_ports["gateway"]), "LOG_LEVEL": "warning",
                       **{f"{name.upper()}_URL": f"http://127.0.0.1:{ports[name]}" for name in SERVICES}}
        # The gateway's readiness needs its upstreams: wait for them first so its own time is its own.
        results = {}
        for name, process, started, url in rows:
            while not ready(url):
                if process.poll() is not None:
                    raise SystemExit(f"{name} exited; see {args.log_dir}/{name}.log")
                time.sleep(0.002)
            results[name] = (time.perf_counter() - started) * 1000
        process, started = launch(os.path.join(args.bin, "gateway"), gateway_env, args.log_dir, "gateway")
        processes.append(process)
        while not ready(f"http://127.0.0.1:{admin_ports['gateway']}/readyz"):
            time.sleep(0.002)
        results["gateway"] = (time.perf_counter() - started) * 1000
        rows.append(("gateway", process, started, ""))
        time.sleep(2)  # settle: pools connected, consumers blocking
        print(f"{'process':<14}{'launch→ready ms':>17}{'RSS MiB':>10}")
        for name, process, _, _ in rows:
            print(f"{name:<14}{results[name]:>17.0f}{rss_mib(process.pid):>10.1f}")
        print("targets: ready < 1000 ms (services started together on 2 cores), RSS < 40 MiB")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=15)


if __name__ == "__main__":
    main()
