"""Runs a wrk command and says what each request cost in CPU, process by process.

On a shared machine requests/s and p99 move with the day (the same build has served 3,800 and
6,100 profile reads/s half an hour apart), so the benchmarks print beside them the CPU time each
process spent per request, read from /proc over the middle of the run, and how busy the cores were:
the figure that shows whether the processes or the machine changed, and whether the cores were full.

Usage: wrk_cpu.py --pid-dir DIR NAME [NAME …] -- wrk ARGS…
Each NAME is a process of the stack (DIR/NAME.pid); `postgres` counts the postmaster and every
backend under it. wrk itself is counted too. wrk's output is printed as it is, then one line:
  CPU per request: social 221 µs, postgres 154 µs, wrk 27 µs; cores 94% busy (2 cores, middle 8 s)
"""
import os
import re
import subprocess
import sys
import time

TICKS = os.sysconf("SC_CLK_TCK")


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (field 3, the state, is index 0)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_ticks(pid):
    fields = stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if fields else None  # utime, stime


def reaped_ticks(pid):
    """CPU of the children PID has reaped (a PostgreSQL backend that ended is counted there)."""
    fields = stat_fields(pid)
    return int(fields[13]) + int(fields[14]) if fields else 0  # cutime, cstime


def children(pid):
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return found


def machine():
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return sum(values[:8]), idle


def sample(groups):
    """Ticks per pid for every group; a group's pids are found again each time, so backends that
    start or end during the window are seen."""
    return {name: {pid: cpu_ticks(pid) for pid in pids()} for name, pids in groups.items()}


def seconds_of(duration):
    match = re.fullmatch(r"(\d+)([smh]?)", duration.lower())
    if not match:
        raise SystemExit(f"wrk_cpu.py: cannot read the duration {duration!r}")
    return int(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def duration_of(command):
    """wrk's -d/--duration in any of its spellings (-d10s, -d 10s, --duration 10s, --duration=10s); 10 s when absent."""
    for index, argument in enumerate(command):
        if argument in ("-d", "--duration") and index + 1 < len(command):
            return seconds_of(command[index + 1])
        if argument.startswith("--duration="):
            return seconds_of(argument.split("=", 1)[1])
        if argument.startswith("-d") and not argument.startswith("--"):
            return seconds_of(argument[2:])
    return 10


def main(argv):
    if "--" not in argv or argv[:1] != ["--pid-dir"]:
        raise SystemExit(__doc__)
    split = argv.index("--")
    pid_dir, names, command = argv[1], argv[2:split], argv[split + 1:]
    duration = duration_of(command)

    def pid_of(name):
        path = os.path.join(pid_dir, f"{name}.pid")
        try:
            with open(path) as f:
                return int(f.read().split()[0])
        except (OSError, IndexError, ValueError):
            raise SystemExit(f"wrk_cpu.py: no pid for {name} in {path}")

    groups = {}
    for name in names:
        pid = pid_of(name)
        groups[name] = (lambda pid=pid: [pid] + children(pid)) if name == "postgres" else (lambda pid=pid: [pid])
    wrk = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    groups["wrk"] = lambda: [wrk.pid]

    # The middle of the run: the first and last second hold connection set-up and the tail.
    margin = 1 if duration > 4 else 0
    postmaster = pid_of("postgres") if "postgres" in names else None

    def wait(seconds):  # returns early if wrk has ended (it could not connect, say)
        deadline = time.monotonic() + seconds
        while wrk.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)

    wait(margin)
    before, machine_before, started = sample(groups), machine(), time.monotonic()
    reaped_before = reaped_ticks(postmaster) if postmaster else 0
    wait(max(duration - 2 * margin, 1))
    after, machine_after, window = sample(groups), machine(), time.monotonic() - started
    reaped_after = reaped_ticks(postmaster) if postmaster else 0
    output, _ = wrk.communicate()
    print(output, end="")
    if wrk.returncode != 0:
        return wrk.returncode

    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if not rate or float(rate.group(1)) == 0:
        print("CPU per request: no requests were answered")
        return 0
    requests = float(rate.group(1)) * window
    parts = []
    for name in groups:
        now = {pid: ticks for pid, ticks in after[name].items() if ticks is not None}
        then = {pid: ticks for pid, ticks in before[name].items() if ticks is not None}
        if not now and not then:
            parts.append(f"{name} n/a (not running)")
            continue
        # A process that started in the window counts from 0; one that ended is counted through the
        # postmaster's reaped children (PostgreSQL backends), less what it had before the window.
        ticks = sum(now[pid] - then.get(pid, 0) for pid in now)
        if name == "postgres":
            ticks += (reaped_after - reaped_before) - sum(then[pid] for pid in then if pid not in now)
        parts.append(f"{name} {ticks / TICKS / requests * 1e6:.0f} µs")
    total, idle = machine_after[0] - machine_before[0], machine_after[1] - machine_before[1]
    busy = 100 * (total - idle) / total if total else 0
    print(f"CPU per request: {', '.join(parts)}; cores {busy:.0f}% busy ({os.cpu_count()} cores, middle {window:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
