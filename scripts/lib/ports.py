"""Free loopback ports below the kernel's ephemeral range (20000 up to its start), so that no
outgoing connection (the services open their PostgreSQL pools at start) takes one before the
process it is meant for listens on it.

Run as `ports.py [SIZE…]`, it prints the first port of one block of SIZE consecutive free ports per
argument (one port when none is given). Every port of every block is held bound until all are
chosen, so no two blocks overlap: ports chosen one call at a time could be the same, or fall inside
a block chosen before, as nothing listens on them yet. scripts/lib/infra.sh's free_ports and
stack_ports, and scripts/bench/idle.py, use it."""
import random
import socket
import sys


def ephemeral_low():
    try:
        return int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except OSError:
        return 32768


def free_ports(*sizes):
    """The first port of each block of `sizes[i]` consecutive free ports, no two blocks sharing one."""
    low = ephemeral_low()
    if low - 20000 < 2 * sum(sizes):
        raise SystemExit(f"free_ports: the ports below the ephemeral range ({low}) are too few")
    held, firsts = [], []
    try:
        for size in sizes:
            for _ in range(500):
                first = random.randint(20000, low - size)
                block = []
                try:
                    for port in range(first, first + size):
                        s = socket.socket()
                        block.append(s)
                        s.bind(("127.0.0.1", port))
                except OSError:
                    for s in block:
                        s.close()
                    continue
                held.extend(block)
                firsts.append(first)
                break
            else:
                raise SystemExit(f"free_ports: no {size} consecutive free ports below {low}")
    finally:
        for s in held:
            s.close()
    return firsts


def free_port():
    return free_ports(1)[0]


if __name__ == "__main__":
    print(*free_ports(*(int(size) for size in sys.argv[1:] or ["1"])))
