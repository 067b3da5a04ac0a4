"""The gateway's event streams under load. Called by scripts/bench/gateway.

  idle:    opens --streams streams (GET /v1/events) with the tokens in --idle-tokens, each token for
           as many streams as it takes, and holds them past a heartbeat; prints the gateway's
           resident memory before and after, per stream, and how many streams saw a heartbeat.
  latency: with the idle streams still open, one more stream for each user in --active (id and token
           a line); starts the command after `--` (EventBench sending notifications live to those
           users at a fixed rate) and meanwhile makes --probes real follows a second through the
           gateway, each follower (--followers, id and token a line) following each active user at
           most once; prints p50/p99 from each event's `occurred_at` (set as its transaction commits)
           to its arrival on a stream, for the follows and for the load, and the load's lost and
           duplicated events.
"""
import argparse
import asyncio
import datetime
import http.client
import itertools
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for process {pid}")


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] if values else float("nan")


class Stream:
    """One `GET /v1/events`: the response's chunked body de-chunked and cut into SSE messages."""

    def __init__(self, host, port, token, on_event):
        self.host, self.port, self.token, self.on_event = host, port, token, on_event
        self.pings = 0
        self.ended = False
        self.task = None

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(
            f"GET /v1/events HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.token}\r\n"
            "Accept: text/event-stream\r\n\r\n".encode())
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = head.split(b"\r\n", 1)[0]
        if b" 200 " not in status + b" ":
            body = await asyncio.wait_for(self.reader.read(2000), 2)
            raise RuntimeError(f"GET /v1/events answered {status.decode()}: {body[-300:]!r}")
        self.chunked = b"transfer-encoding: chunked" in head.lower()
        self.task = asyncio.create_task(self.read())

    async def body(self):
        """The body's bytes as they arrive."""
        if not self.chunked:
            while data := await self.reader.read(65536):
                yield data
            return
        while True:
            size = int((await self.reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                return
            yield await self.reader.readexactly(size)
            await self.reader.readexactly(2)

    async def read(self):
        pending = b""
        try:
            async for data in self.body():
                arrived = time.time()
                pending += data
                *messages, pending = pending.split(b"\n\n")
                for message in messages:
                    fields = {}
                    for line in message.decode().split("\n"):
                        if line.startswith(":"):
                            self.pings += 1
                        elif ":" in line:
                            name, value = line.split(":", 1)
                            fields[name] = value[1:] if value.startswith(" ") else value
                    if "event" in fields:
                        self.on_event(fields["event"], fields.get("data", ""), arrived)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.ended = True

    def close(self):
        if self.task:
            self.task.cancel()
        self.writer.close()


async def open_streams(url, tokens, count, on_event, concurrency=100):
    parsed = urllib.parse.urlsplit(url)
    gate = asyncio.Semaphore(concurrency)
    streams = [Stream(parsed.hostname, parsed.port, token, on_event) for token, _ in zip(itertools.cycle(tokens), range(count))]

    async def open_one(stream):
        async with gate:
            await stream.open()

    await asyncio.gather(*(open_one(stream) for stream in streams))
    return streams


def lines(path):
    with open(path) as f:
        return [line.split() for line in f if line.strip()]


def follow(url, follower_token, followee):
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        connection.request("POST", f"/v1/profiles/{followee}/follow", headers={"Authorization": f"Bearer {follower_token}"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


async def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gateway", required=True)
    parser.add_argument("--gateway-pid", type=int, required=True)
    parser.add_argument("--idle-tokens", required=True)
    parser.add_argument("--streams", type=int, default=5000)
    parser.add_argument("--hold", type=float, default=20, help="seconds the idle streams are held before memory is read")
    parser.add_argument("--active", required=True)
    parser.add_argument("--followers", required=True)
    parser.add_argument("--probes", type=float, default=10, help="follows a second during the load")
    parser.add_argument("load", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    load = args.load[1:] if args.load[:1] == ["--"] else args.load

    received = []  # (kind, notification id, occurred_at, arrived)

    def on_event(name, data, arrived):
        if name != "notification":
            return
        event = json.loads(data)
        occurred = datetime.datetime.fromisoformat(event["occurred_at"].replace("Z", "+00:00")).timestamp()
        received.append((event["kind"], event["notification_id"], occurred, arrived))

    # Idle streams and the memory they take.
    before = rss_kib(args.gateway_pid)
    started = time.perf_counter()
    idle_tokens = [fields[0] for fields in lines(args.idle_tokens)]
    idle = await open_streams(args.gateway, idle_tokens, args.streams, on_event)
    opened_in = time.perf_counter() - started
    await asyncio.sleep(args.hold)
    after = rss_kib(args.gateway_pid)
    open_now = sum(1 for stream in idle if not stream.ended)
    beating = sum(1 for stream in idle if stream.pings > 0)
    print(f"idle streams: {len(idle)} opened in {opened_in:.1f} s over {len(idle_tokens)} accounts; after {args.hold:.0f} s "
          f"{open_now} still open, {beating} had a heartbeat")
    print(f"gateway resident memory: {before / 1024:.1f} MiB before, {after / 1024:.1f} MiB with the streams open: "
          f"{(after - before) / len(idle):.1f} KiB per stream")

    # Follows and load, with the idle streams still open.
    active = lines(args.active)
    followers = lines(args.followers)
    active_streams = await open_streams(args.gateway, [token for _, token in active], len(active), on_event)
    await asyncio.sleep(1)
    received.clear()
    producer = await asyncio.create_subprocess_exec(*load, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    pairs = iter([(follower, followee) for followee, _ in active for follower in followers])
    statuses = {}
    loop = asyncio.get_running_loop()
    probes = 0
    output = b""

    async def drive_probes():
        nonlocal probes
        tick = time.perf_counter()
        while producer.returncode is None:
            tick += 1 / args.probes
            await asyncio.sleep(max(0, tick - time.perf_counter()))
            pair = next(pairs, None)
            if pair is None:
                return
            (_, follower_token), followee = pair
            probes += 1
            status = await loop.run_in_executor(None, follow, args.gateway, follower_token, followee)
            statuses[status] = statuses.get(status, 0) + 1

    probing = asyncio.create_task(drive_probes())
    client_cpu = time.process_time()
    output = (await producer.communicate())[0].decode()
    client_cpu = time.process_time() - client_cpu
    await probing
    await asyncio.sleep(5)  # what is still on its way
    sys.stdout.write("".join(f"  load: {line}\n" for line in output.splitlines()))
    if producer.returncode != 0:
        sys.exit(f"the load's command failed ({producer.returncode})")
    produced = int(re.search(r"produced (\d+) events", output).group(1))
    follows = [arrived - occurred for kind, _, occurred, arrived in received if kind == "follow"]
    bench = [(notification, arrived - occurred) for kind, notification, occurred, arrived in received if kind == "bench"]
    unique = len({notification for notification, _ in bench})
    print(f"follows made: {probes} ({', '.join(f'{n} x {s}' for s, n in sorted(statuses.items()))}); "
          f"their notifications on a stream: {len(follows)}")
    print(f"load: {produced} produced, {unique} arrived, {produced - unique} lost, {len(bench) - unique} duplicated")
    for name, values in (("follow commit->stream", follows), ("load commit->stream", [ms for _, ms in bench])):
        values = [v * 1000 for v in values]
        print(f"  {name:22} ms: p50 {percentile(values, 0.5):.1f}  p99 {percentile(values, 0.99):.1f}  max {max(values, default=float('nan')):.1f}  ({len(values)} events)")
    if follows:
        print(f"follow p99 ms: {percentile([v * 1000 for v in follows], 0.99):.2f}")
    # An event for a stream that ended is not delivered (a real client would resume): it shows as lost.
    active_ended = sum(1 for stream in active_streams if stream.ended)
    idle_ended = sum(1 for stream in idle if stream.ended)
    print(f"streams that ended during the run: {active_ended} of {len(active_streams)} receiving, {idle_ended} of {len(idle)} idle")
    # The arrival times are this client's: one Python thread reading every stream on the same cores.
    print(f"this client's CPU while the load ran: {client_cpu:.1f} s")
    for stream in idle + active_streams:
        stream.close()


if __name__ == "__main__":
    asyncio.run(main())
