"""Ports for the servers a test starts on a port it names (`metalflow dev --port`, `--ui-port`,
`--sim-port`, `--metrics-port`, a worker's exporter): taken from a block of this xdist worker's own,
below the kernel's ephemeral range.

Why not a port the kernel hands out (`bind(0)`, `metalflow.runtime.ports.free_port`): such a port
lies in the ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 here), where every outgoing
connection of every process takes its local port and every `bind(0)` of the suite's servers takes
theirs. Between the test's probe and the server's bind, one of them took it: `metalflow dev`
failed "bind: address already in use" in a full run. Below the range, only a server told the port
binds it: the kernel never hands these out, the suite's other servers bind port 0 (the simulator,
Temporal's test servers, the dev server's HTTP and metrics ports), and each xdist worker has a block
of its own, handed out in turn, so two tests of a session never get the same port. The bind check
still skips a port something holds (another session on the machine, a server a test left).
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import socket

FIRST, LAST = 20000, 32000  # below the ephemeral range (checked by tests/test_ports_support.py)
BLOCK = 1500  # ports per xdist worker: 8 workers fit


def worker_block(worker: str | None = None) -> range:
    """The ports of xdist worker `worker` ("gw3"; PYTEST_XDIST_WORKER; none: the first block)."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "") if worker is None else worker
    found = re.fullmatch(r"gw(\d+)", name)
    index = int(found.group(1)) if found else 0
    start = FIRST + (index % ((LAST - FIRST) // BLOCK)) * BLOCK
    return range(start, start + BLOCK)


# Begin where this process's id says: two sessions on one machine (a developer's and CI's, say)
# then start apart in the same block.
_NEXT = itertools.cycle(worker_block())
for _ in range(os.getpid() % BLOCK):
    next(_NEXT)


def free_port(host: str = "127.0.0.1") -> int:
    """The next port of this worker's block that nothing listens on or holds."""
    for _ in range(BLOCK):
        port = next(_NEXT)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((host, port))
            except OSError as error:
                if error.errno != errno.EADDRINUSE:
                    raise
                continue
            return port
    raise RuntimeError(f"every port of {worker_block()} on {host} is in use")
