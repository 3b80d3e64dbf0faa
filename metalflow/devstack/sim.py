"""The simulated site as a process of the dev stack (or of `metalflow sim up` alone).

The simulator is a separate program (`python -m simulators serve`); metalflow starts it, waits
until it has written `<state-dir>/sim.json` and answers `/sim/health`, and reads it over HTTP.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metalflow.devstack.private import private_state_dir
from metalflow.devstack.process import ManagedProcess

SIM_READY_TIMEOUT = 120.0
DEFAULT_SIM_PORT = 8280
FAULT_PROFILES = ("none", "flaky", "slow")
TIMING_PROFILES = ("demo", "zero", "slow")


@dataclass(frozen=True)
class SiteOptions:
    """What site to simulate: the options `metalflow sim up` and `metalflow dev` share."""

    hosts: int = 3
    dpus_per_host: int = 2
    site_file: Path | None = None
    faults: str = "none"
    seed: int = 0
    timings: str | None = None  # None: slow with the slow fault profile, else demo
    initialised: bool = False
    port: int = DEFAULT_SIM_PORT
    persist: bool = False  # keep the site's objects across restarts (`metalflow dev` does)
    dpu_bmcs: bool = True  # False: the generated site's DPUs have no BMC (10,000-host benchmarks)

    def serve_args(self, state_dir: Path) -> list[str]:
        args = [sys.executable, "-m", "simulators", "serve", "--state-dir", str(state_dir)]
        args += ["--port", str(self.port), "--faults", self.faults, "--seed", str(self.seed)]
        if self.site_file is not None:
            args += ["--site", str(self.site_file)]
        else:
            args += ["--hosts", str(self.hosts), "--dpus-per-host", str(self.dpus_per_host)]
            if not self.dpu_bmcs:
                args.append("--no-dpu-bmcs")
        if self.timings is not None:
            args += ["--timings", self.timings]
        if self.initialised:
            args.append("--initialised")
        if self.persist:
            args.append("--persist")
        return args


def read_sim_info(state_dir: Path) -> dict[str, Any]:
    """What a running simulator wrote to `sim.json`; FileNotFoundError when none runs there."""
    info: dict[str, Any] = json.loads((state_dir / "sim.json").read_text())
    return info


def simulator_process(state_dir: Path, options: SiteOptions, *, detached: bool = False) -> ManagedProcess:
    """The simulator as a `ManagedProcess`, ready once `sim.json` exists and `/sim/health` answers.

    It stops by itself when its parent dies (a lifeline), unless `detached` (`sim up --detach`:
    it outlives its parent on purpose, until `sim down`).
    """
    private_state_dir(state_dir)
    # A sim.json left by a simulator that was killed would make a new one look ready at once.
    (state_dir / "sim.json").unlink(missing_ok=True)

    async def ready(process: ManagedProcess) -> bool:
        info = read_sim_info(state_dir)
        if info.get("pid") != process.pid:
            return False
        import httpx  # here, not at the top: `metalflow --help` imports this module

        async with httpx.AsyncClient(timeout=2.0) as client:
            response = await client.get(f"{info['url']}/sim/health")
        return response.status_code == 200

    return ManagedProcess(
        name="simulated site",
        argv=options.serve_args(state_dir),
        log_path=state_dir / "simulator.log",
        ready=ready,
        lifeline=None if detached else "argument",
    )
