"""`metalflow host versions` against a site that does not answer (issue 38, an attack on main):
with the simulated site frozen (`kill -STOP` of the simulator: its sockets accept connections and
never answer) it took 238 s to exit 3 and printed nothing until then. Each read is bounded now
(`metalflow.cli.host_versions`: a BMC request, a BMC's whole read, DPF's DPU list of a host), so
it says within seconds which BMCs and that DPF could not be reached."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from cli_support import metalflow_env, run_console_script
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment

from metalflow.cli import exits

PREFIX = "frz"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), PREFIX, hosts=1, dpus_per_host=1) as running:
        yield running


async def test_a_frozen_site_is_said_within_seconds(local_env: WorkflowEnvironment, sim: RunningSim) -> None:
    host = f"{PREFIX}-001"
    env = metalflow_env(local_env, site_file=sim.site_file)
    os.kill(sim.process.pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        status, out, err = await run_console_script(["host", "versions", host], env)
        took = time.monotonic() - began
    finally:
        os.kill(sim.process.pid, signal.SIGCONT)
    assert status == exits.UNREACHABLE, (status, out, err)
    assert took < 40, f"took {took:.0f} s: {err}"
    assert "no BMC could be reached" in err and host in err, err
    assert f"DPF could not be reached (asked for 1 host: {host})" in err, err
    assert "Traceback" not in err, err
