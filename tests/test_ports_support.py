"""The ports a test names for its servers (tests/ports_support.py) are ones the kernel never hands
out, each xdist worker's its own: in a full run `metalflow dev` lost its `--port` to another
process between the test's probe and its bind ("bind: address already in use")."""

from __future__ import annotations

from pathlib import Path

from ports_support import BLOCK, FIRST, LAST, free_port, worker_block


def test_ports_lie_below_the_ephemeral_range_in_this_workers_block() -> None:
    low, _ = (int(word) for word in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    assert LAST < low  # bind(0) and every outgoing connection take their ports from low up
    ports = [free_port() for _ in range(20)]
    assert len(set(ports)) == len(ports)  # handed out in turn, none twice
    assert all(port in worker_block() and port < low for port in ports), ports


def test_each_xdist_worker_has_a_block_of_its_own() -> None:
    blocks = [worker_block(f"gw{index}") for index in range(8)]
    assert all(len(block) == BLOCK and FIRST <= block[0] and block[-1] < LAST for block in blocks)
    assert len(set().union(*map(set, blocks))) == 8 * BLOCK  # no port in two blocks
    assert worker_block("") == worker_block("gw0")  # without xdist
