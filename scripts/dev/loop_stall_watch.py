#!/usr/bin/env python3
"""Catches an event loop that stops in the Swift test process, and shows where it stopped.

Run it beside the test suite, as root (gdb attaches to the process):
    python3 scripts/dev/loop_stall_watch.py > stalls.log &
    for i in $(seq 10); do scripts/test --no-e2e > run-$i.log 2>&1; done

Every 100 ms it reads the test process's NIO loop threads (NIO-SGLTN-*) from /proc. A loop thread
that makes no voluntary context switch for 1.5 s is either running one long job or blocked, so it
prints the thread's state, wchan and CPU ticks and then its backtrace (gdb, all threads, only the
stalled one kept), at most 8 times. Written for the rare test timeouts where a loop seemed to stop
for 5-20 s under the full parallel suite (README, Tests).
"""
import os
import subprocess
import time

STALL_SECONDS = 1.5
MAX_REPORTS = 8


def test_processes():
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            command = open(f"/proc/{entry}/cmdline", "rb").read().decode(errors="ignore")
        except OSError:
            continue
        if "PackageTests.xctest" in command or "swiftpm-testing-helper" in command:
            found.append(int(entry))
    return found


def loop_thread(pid, tid):
    """(name, voluntary switches, state, cpu ticks, wchan) of an NIO loop thread, or None."""
    base = f"/proc/{pid}/task/{tid}"
    try:
        name = open(f"{base}/comm").read().strip()
        if not name.startswith("NIO-SGLTN"):
            return None
        status = open(f"{base}/status").read().splitlines()
        switches = int(next(line for line in status if line.startswith("voluntary_ctxt_switches")).split()[1])
        stat = open(f"{base}/stat").read().split()
        wchan = open(f"{base}/wchan").read().strip()
        return name, switches, stat[2], int(stat[13]) + int(stat[14]), wchan
    except (OSError, StopIteration, IndexError):
        return None


def backtrace(pid, tid):
    out = subprocess.run(["gdb", "-batch", "-p", str(pid), "-ex", "thread apply all bt 30"],
                         capture_output=True, text=True, timeout=90).stdout
    for block in out.split("\nThread "):
        if f"LWP {tid})" in block.split("\n")[0]:
            return "Thread " + block[:8000]
    return "(thread not found in gdb's output)"


def main():
    seen = {}  # (pid, tid) -> (switches, since, cpu)
    reports = 0
    while True:
        now = time.time()
        for pid in test_processes():
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            for tid in tids:
                thread = loop_thread(pid, tid)
                if thread is None:
                    continue
                name, switches, state, cpu, wchan = thread
                previous = seen.get((pid, tid))
                if previous is None or previous[0] != switches:
                    seen[(pid, tid)] = (switches, now, cpu)
                elif now - previous[1] > STALL_SECONDS and reports < MAX_REPORTS:
                    reports += 1
                    print(f"{time.strftime('%H:%M:%S')} STALL pid {pid} {name} tid {tid} state {state} wchan {wchan} "
                          f"cpu +{cpu - previous[2]} ticks over {now - previous[1]:.1f} s", flush=True)
                    print(backtrace(pid, tid), flush=True)
                    seen[(pid, tid)] = (switches, time.time(), cpu)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
