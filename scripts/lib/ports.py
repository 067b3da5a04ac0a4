"""A free loopback port below the kernel's ephemeral range (20000 up to its start), so that no
outgoing connection (the services open their PostgreSQL pools at start) takes it before the process
it is meant for listens on it. Run, it prints one; scripts/lib/infra.sh's free_port and
scripts/bench/idle.py use it."""
import random
import socket


def free_port():
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    except OSError:
        low = 32768
    for _ in range(500):
        port = random.randint(20000, low - 1) if low > 20100 else 0
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            return s.getsockname()[1]
        except OSError:
            continue
        finally:
            s.close()
    raise SystemExit("free_port: no free port below the ephemeral range")


if __name__ == "__main__":
    print(free_port())
