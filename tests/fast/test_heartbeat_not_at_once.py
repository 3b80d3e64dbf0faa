"""`activities.heartbeat.heartbeating` sends nothing for a block that ends within one beat
interval (issue 37): a beat at once reached the server (the SDK sends an activity's first
heartbeat unthrottled) and was one billable Action per short BMC activity (`read_power_state`,
every 30 s of the watched power-down wait; `read_host_versions_brief`), buying nothing: the
heartbeat timeout counts from the attempt's start, so a dead worker is noticed as soon without
it. A block that outlasts the interval still beats, the guarantee a heartbeat buys.

Without a server: the SDK's `ActivityEnvironment` runs the activity function in this process and
hands each `activity.heartbeat` to `on_heartbeat`."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta
from typing import Any

from temporalio.testing import ActivityEnvironment

from activities.heartbeat import beat_interval, heartbeating

TIMEOUT = timedelta(seconds=0.6)  # a beat every 0.2 s


def environment(beats: list[tuple[Any, ...]]) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=TIMEOUT)
    env.on_heartbeat = lambda *details: beats.append(details)
    return env


async def block(seconds: float) -> str:
    async with heartbeating(lambda: ("progress",)):
        await asyncio.sleep(seconds)
    return "done"


async def test_a_block_shorter_than_the_beat_interval_sends_no_heartbeat() -> None:
    beats: list[tuple[Any, ...]] = []
    assert await environment(beats).run(block, 0.02) == "done"
    assert beats == []


async def test_a_block_longer_than_the_interval_beats_within_the_timeout() -> None:
    beats: list[tuple[Any, ...]] = []
    interval = beat_interval(TIMEOUT.total_seconds())
    await environment(beats).run(block, 3.5 * interval)
    assert 2 <= len(beats) <= 4, beats  # one per interval, the first one interval in
    assert beats[0] == ("progress",)
