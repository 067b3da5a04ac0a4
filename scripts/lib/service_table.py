"""services.txt, the one list of the services behind the gateway, read and checked.

Each line that is not blank or a comment is `name port replicas resources prefixes libraries`,
separated by spaces; lists are comma-separated and `-` is an empty one. scripts/stack reads the same
lines with bash's `read` (the first three words), so the columns stay plain words.
"""
import os
import re
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PATH = os.path.join(ROOT, "services.txt")
COLUMNS = ["name", "port", "replicas", "resources", "prefixes", "libraries"]


class TableError(Exception):
    pass


@dataclass(frozen=True)
class Service:
    name: str
    port: int
    replicas: int
    resources: tuple
    prefixes: tuple
    libraries: tuple

    @property
    def target(self):
        """The SwiftPM target and the folders Services/<target>, Tests/<target>Tests."""
        return self.name[0].upper() + self.name[1:]


def _words(text):
    return () if text == "-" else tuple(text.split(","))


def parse(text, where="services.txt"):
    services = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        at = f"{where}:{number}"
        if len(words) != len(COLUMNS):
            raise TableError(f"{at}: {len(words)} columns, expected {len(COLUMNS)} ({' '.join(COLUMNS)})")
        name, port, replicas, resources, prefixes, libraries = words
        # The name becomes a Swift identifier, an environment variable's stem and a schema.
        if not re.fullmatch(r"[a-z][a-z0-9]*", name):
            raise TableError(f"{at}: the name {name!r} must be lower-case letters and digits")
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise TableError(f"{at}: the port {port!r} is not a port number")
        if not replicas.isdigit() or int(replicas) < 1:
            raise TableError(f"{at}: replicas {replicas!r} must be 1 or more")
        for prefix in _words(prefixes):
            if not re.fullmatch(r"(/[A-Za-z0-9._~-]+)+", prefix):
                raise TableError(f"{at}: the prefix {prefix!r} must be whole path segments, without a trailing /")
        for library in _words(libraries):
            if not re.fullmatch(r"([A-Za-z0-9._-]+/)?[A-Za-z_][A-Za-z0-9_]*", library):
                raise TableError(f"{at}: the library {library!r} must be a target or package/Product")
        for folder in _words(resources):
            if not re.fullmatch(r"[A-Za-z0-9_-]+", folder):
                raise TableError(f"{at}: the resource {folder!r} must be a folder name")
        services.append(Service(name, int(port), int(replicas), _words(resources), _words(prefixes), _words(libraries)))
    if not services:
        raise TableError(f"{where}: no services")
    for attribute in ("name", "port"):
        seen = {}
        for service in services:
            value = getattr(service, attribute)
            if value in seen:
                raise TableError(f"{where}: {seen[value]} and {service.name} have the same {attribute} {value}")
            seen[value] = service.name
    owners = {}
    for service in services:
        for prefix in service.prefixes:
            if prefix in owners:
                raise TableError(f"{where}: the prefix {prefix} is both {owners[prefix]}'s and {service.name}'s")
            owners[prefix] = service.name
    return services


def load(path=PATH):
    with open(path, encoding="utf-8") as f:
        return parse(f.read(), os.path.relpath(path, ROOT))


def process_ports(services, base_port=None, admin_base_port=9080, replicas=None):
    """The ports scripts/stack gives: each service its table port, all moved so that the lowest is
    base_port; and each process's internal port from admin_base_port (the gateway's): the Nth
    service's first process (from 1) at base + N, its replica R at base + N + count × (R − 1)."""
    lowest = min(service.port for service in services)
    shift = 0 if base_port is None else base_port - lowest
    public = {service.name: service.port + shift for service in services}
    admin = {"gateway": admin_base_port}
    for index, service in enumerate(services, 1):
        count = (replicas or {}).get(service.name, service.replicas)
        for replica in range(1, count + 1):
            process = service.name if replica == 1 else f"{service.name}-{replica}"
            admin[process] = admin_base_port + index + len(services) * (replica - 1)
    return public, admin
