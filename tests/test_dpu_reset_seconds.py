"""The DPU reset's proof at the BMC's one-second resolution (drivers/redfish/dpu_reset.py).

A BlueField BMC writes `LastResetTime` (and `BootProgress.LastStateTime`) to the second. When the
mark read before the reset was written in the same second as the reset lands, the reset leaves
the mark as it was, and a taken reset looked like one not taken (`DPUResetNotEffective` after
the whole timeout). Both ways this happened are pinned here against a served BMC, with the
change that sets the mark put at the start of a second so that the reset follows within it:
a Paused DPU (the mark is `LastStateTime`, then `LastResetTime` of the same second) and a DPU
reset just before (the mark is that reset's `LastResetTime`, as a retry reads it).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contracts.models.inventory import BMCAccess, CredentialRef
from contracts.models.redfish import DPUResetInput, DPUResetProgress
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.dpu_reset import DPUReset
from simulators.redfish.standalone import serve_bmcs
from simulators.site import default_site
from simulators.timings import timings_for

DPU0 = "host-001-dpu-0"


async def _at_the_start_of_a_second() -> None:
    await asyncio.sleep(1.0 - datetime.now(UTC).microsecond / 1e6 + 0.01)


@pytest.mark.parametrize("fault", ["paused", "reset"])
async def test_a_reset_in_the_same_second_as_the_mark_before_it_is_seen(tmp_path: Path, fault: str) -> None:
    """Deliberate break: send without waiting out the mark's second (the DPU is reset, the
    driver waits the whole timeout and raises `DPUResetNotEffective`)."""
    site = default_site(1, 1)
    async with serve_bmcs(site, timings=timings_for("zero", dpu_boot_seconds=0.1)) as bmcs:
        user, password = bmcs.credentials[DPU0]
        secret = tmp_path / "dpu.json"
        secret.write_text(f'{{"username": "{user}", "password": "{password}"}}')
        access = BMCAccess(bmc_id=DPU0, endpoint=bmcs.base(DPU0), credentials=CredentialRef(file=str(secret)))
        redfish = RedfishClient(CredentialResolver(None))
        try:
            async with redfish.connect(access) as connection:
                await connection.get("/redfish/v1/Systems")  # log in before the second starts
                await _at_the_start_of_a_second()
                bmcs.bmcs.dpu_fault(DPU0, fault)  # the mark: LastStateTime (paused), LastResetTime
                request = DPUResetInput(
                    bmc=access, reset_type="ForceRestart", owed_since=datetime.now(UTC), timeout_seconds=5
                )
                recorded: list[DPUResetProgress] = []
                began = time.monotonic()
                reset = DPUReset(connection, request, None, persist=recorded.append, confirm=None)
                result = await reset.run()
                took = time.monotonic() - began
        finally:
            await redfish.aclose()
        assert result.sent
        assert bmcs.bmcs.reset_counts(DPU0) == {"ForceRestart": 1}  # sent once
        assert [p.step for p in recorded] == ["reset_requested", "done"]
        assert took < 3  # seen moving, not waited out
