# SPDX-License-Identifier: Apache-2.0
"""Host lists for gradsyncrun: `-H a:2,b:2` and hostfiles."""
import socket


def parse_hosts(text):
    """'a:2,b' -> [('a', 2), ('b', 1)]."""
    hosts = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, slots = item.partition(":")
        if not name or (slots and not slots.isdigit()) or slots == "0":
            raise ValueError("bad host entry %r (expected host or host:slots)" % item)
        hosts.append((name, int(slots) if slots else 1))
    return hosts


def parse_hostfile(path):
    """Lines 'host slots=N', 'host:N' or 'host'; '#' starts a comment."""
    hosts = []
    with open(path) as f:
        for number, line in enumerate(f, start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            fields = line.split()
            slots = 1
            for field in fields[1:]:
                key, _, value = field.partition("=")
                if key not in ("slots", "max_slots") or not value.isdigit():
                    raise ValueError("%s:%d: bad field %r" % (path, number, field))
                if key == "slots":
                    slots = int(value)
            hosts.extend(parse_hosts(fields[0] if ":" in fields[0] else "%s:%d" % (fields[0], slots)))
    return hosts


def assign_ranks(hosts, np):
    """Fills hosts in order: [(host, local_rank, local_size, cross_rank)] per rank."""
    capacity = sum(slots for _, slots in hosts)
    if np > capacity:
        raise ValueError("-np %d is more than the %d slots of the hosts given" % (np, capacity))
    placement, remaining = [], np
    for cross_rank, (host, slots) in enumerate(hosts):
        take = min(slots, remaining)
        placement.extend((host, local, take, cross_rank) for local in range(take))
        remaining -= take
        if remaining == 0:
            break
    return placement


def is_local(host):
    return host in ("localhost", "127.0.0.1", "::1", socket.gethostname(), socket.getfqdn())
