"""The power-down wait as a durable timer (`workflows/host_reboot/workflow.py`, `hand_back_wait_over_seconds`
in `drivers/redfish/powercycle.py`), on a dev server of its own whose metrics count the heartbeats
that reached it, and the simulated site as its own process:

- A ForceOff+On cycle with a 20 s power-down wait sends at most 10 heartbeats (in the activity it
  sent ~1.5 a second: 90-280 for the default 120 s), waits the full 20 s Off, and cycles once.
- A worker SIGKILLed while the host is Off (the reboot in its durable wait, or the activity just
  handing it back): another worker finishes the cycle, exactly one Off and one On, the host Off
  for the whole wait.

The two runs wait their 20 s at once, on two hosts: the kill test's run starts (`killed_run`)
before the first test, in a namespace of its own on the same server, so the first test's count
of heartbeats (labelled by namespace) is its reboot's alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest
from host_operation_support import FAST_POLICY, power_cycles, start_reboot
from ports_support import free_port
from sim_support import RunningSim, running_sim, sim_http, start_dev_server
from takeover_support import takeover_seconds
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from worker_support import worker_env, worker_process

from contracts.models.host import HostRebootResult
from drivers.settings import Settings
from metalflow.operation_progress import operation_progress
from metalflow.runtime.worker import build_worker

WAIT = 20.0
HOST = "host-002"  # DEFAULT_ROTATION[1]: `no-powercycle`, cycled by ForceOff, the wait, On
KILL_HOST = "host-007"  # `no-powercycle` too (the rotation's second again): the kill test's host
KILL_NAMESPACE = "killed"  # the kill test's run's, on the module's server
POLICY = FAST_POLICY.model_copy(update={"power_down_wait_seconds": WAIT})


@pytest.fixture(scope="module")
async def metered(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[WorkflowEnvironment, str]]:
    """A dev server of this module's own, with its Prometheus metrics on a known port."""
    port = free_port()
    extra = ["--metrics-port", str(port), "--namespace", KILL_NAMESPACE]
    env = await start_dev_server(tmp_path_factory.mktemp("server"), extra)
    try:
        yield env, f"http://127.0.0.1:{port}/metrics"
    finally:
        await env.shutdown()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with running_sim(tmp_path_factory.mktemp("sim"), hosts=7, dpus_per_host=1, timings="zero") as sim:
        yield sim


def heartbeats(metrics_url: str) -> int:
    """Heartbeat requests the server's frontend served in the `default` namespace (all of them
    reached it); the kill test's run, in its own namespace, is not counted."""
    found = 0.0
    for line in sim_http().get(metrics_url).text.splitlines():
        if (
            line.startswith("service_requests{")
            and 'service_name="frontend"' in line
            and 'namespace="default"' in line
        ):
            if re.search(r'operation="RecordActivityTaskHeartbeat(ById)?"', line):
                found += float(line.rsplit(" ", 1)[1])
    return int(found)


async def power_down_said(client: Client, reboot_id: str) -> tuple[str, str]:
    """The reboot's power-down wait as its details say it (`host status`, `--wait`, the UI):
    since when the host is Off and when it is turned On, ISO 8601 Z."""
    for _ in range(600):
        seen = await operation_progress(client, reboot_id, KILL_HOST)
        found = re.search(r"is Off since (\S+Z).*, On at (\S+Z) ", seen.details if seen else "")
        if found:
            return found.group(1), found.group(2)
        await asyncio.sleep(0.1)
    raise AssertionError(f"no power-down wait said: {seen}")


def off_seconds(sim: RunningSim, since: int, host: str = HOST) -> float:
    log = sim.power_log(host)[since:]
    off = next(datetime.fromisoformat(e["time"]) for e in log if e["to"] == "Off")
    on = next(datetime.fromisoformat(e["time"]) for e in log if e["to"] == "On")
    return (on - off).total_seconds()


async def test_a_long_power_down_wait_is_a_durable_timer_with_few_heartbeats(
    metered: tuple[WorkflowEnvironment, str], site: RunningSim, killed_run: asyncio.Task[KilledRun]
) -> None:
    # `killed_run`: the next test's run, started first so that its wait runs beside this one's.
    env, metrics = metered
    queue = f"wait-{uuid.uuid4().hex[:8]}"
    since = len(site.power_log(HOST))
    settings = Settings(
        site_file=site.site_file, kubeconfig=site.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    async with build_worker(env.client, queue, settings):
        before = heartbeats(metrics)
        reboot = await start_reboot(env.client, queue, HOST, 1, POLICY)
        result = await asyncio.wait_for(reboot.result(), 120)
        sent = heartbeats(metrics) - before
        history = await reboot.fetch_history()
    timers = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED]
    cycles = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        and e.activity_task_scheduled_event_attributes.activity_type.name == "power_cycle_host"
    ]
    assert result.method == "bmc:ForceOff+On" and result.reset_types == ("ForceOff", "On")
    assert power_cycles(site.power_log(HOST)[since:]) == 1
    assert off_seconds(site, since) >= WAIT - 1  # the full wait, on the timer (less the hand-back)
    assert len(timers) == 1 and len(cycles) == 2  # Off, the durable wait, then On
    print(f"heartbeats that reached the server: {sent}")
    assert sent <= 10, sent
    assert site.violations() == []


@dataclass
class KilledRun:
    """What the kill test's run saw: the power log since it began, its result, the wait it said."""

    log: list[dict[str, str]]
    method: str
    said: tuple[str, str]
    off_seconds: float


async def _kill_while_off(client: Client, site: RunningSim, worker_log: Path) -> KilledRun:
    """A reboot of `KILL_HOST` whose worker is SIGKILLed once the host is Off, finished by another."""
    queue = f"wait-kill-{uuid.uuid4().hex[:8]}"
    since = len(site.power_log(KILL_HOST))
    environ = worker_env(client, site)
    with worker_process(queue, environ, worker_log) as first:
        reboot = await start_reboot(client, queue, KILL_HOST, 2, POLICY)
        for _ in range(2400):  # generous: a fresh worker process starts slowly on a loaded machine
            # In a thread: the first test's worker shares this event loop.
            if any(e["to"] == "Off" for e in (await asyncio.to_thread(site.power_log, KILL_HOST))[since:]):
                break
            await asyncio.sleep(0.05)
        assert any(e["to"] == "Off" for e in site.power_log(KILL_HOST)[since:]), "never powered off"
        # ... and until the run itself has the Off on record (its durable wait has begun, as its
        # details say): killed between the BMC's Off and that record, the next attempt reads the
        # host Off anew and its wait, words and method start from that reading, another case (full
        # runs hit it: "Off since" 6 s late, "bmc:On", On 30 s after the Off for a 20 s wait).
        await power_down_said(client, reboot.id)
        first.kill()  # SIGKILL: no cleanup, no last heartbeat
    with worker_process(queue, environ, worker_log):
        said = await power_down_said(client, reboot.id)
        result: HostRebootResult = await asyncio.wait_for(reboot.result(), 180)
    return KilledRun(
        site.power_log(KILL_HOST)[since:], result.method, said, off_seconds(site, since, KILL_HOST)
    )


@pytest.fixture(scope="module")
async def killed_run(
    metered: tuple[WorkflowEnvironment, str], site: RunningSim, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[asyncio.Task[KilledRun]]:
    """The kill test's run, in the background, in its own namespace (its heartbeats are not the
    first test's to count); the kill test awaits it."""
    env, _ = metered
    client = await Client.connect(
        env.client.service_client.config.target_host,
        namespace=KILL_NAMESPACE,
        data_converter=pydantic_data_converter,
    )
    worker_log = tmp_path_factory.mktemp("killed") / "worker.log"
    run = asyncio.create_task(_kill_while_off(client, site, worker_log))
    yield run
    run.cancel()
    with contextlib.suppress(BaseException):
        await run


async def test_a_worker_killed_while_the_host_is_off_still_cycles_once(
    site: RunningSim, killed_run: asyncio.Task[KilledRun]
) -> None:
    run = await killed_run
    log = [(e["from"], e["to"]) for e in run.log]
    assert log == [("On", "Off"), ("Off", "On")], log
    assert run.method == "bmc:ForceOff+On"
    assert run.off_seconds >= WAIT - 1
    # Issue 38: after a restart `--wait` read "On in 20 s", as if the wait began anew. It did
    # not (a durable timer from the Off), and the words now say so: since when Off, when On.
    off, on = (datetime.fromisoformat(t.replace("Z", "+00:00")) for t in run.said)
    logged = {e["to"]: datetime.fromisoformat(e["time"]) for e in run.log}
    assert abs((off - logged["Off"]).total_seconds()) <= 2, (run.said, logged)
    assert abs((on - off).total_seconds() - WAIT) <= 2, run.said
    assert (logged["On"] - on).total_seconds() <= 5, (run.said, logged)  # On when it said: not later
    assert site.violations() == []
