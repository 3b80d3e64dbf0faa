"""A DPU's own reset through its BMC (BlueField: `Systems/Bluefield`, docs/DOMAIN.md section 4.3).

- `read_dpu(connection)`: PowerState, `BootProgress.OemLastState` (the Arm's stage: `OsIsRunning`
  once booted), the reset marks (`LastResetTime`, else `BootProgress.LastStateTime`) and the
  reset types the System takes (as `find_system` reads them: AllowableValues, else its
  ResetActionInfo, else the assumed set, minus any refused before).
- `DPUReset`: one reset exactly once across retried attempts, as the host power cycle
  (`drivers.redfish.powercycle`): before sending, the step `reset_requested` with the mark read
  just before is recorded and read back from Temporal (`confirm`); a retry that finds the mark
  moved knows the reset happened and sends nothing; one that finds it unchanged sends it again
  after a short settle (a reset not taken). A first attempt that finds a reset after
  `owed_since` (someone reset the DPU meanwhile) sends nothing either (`sent=False`). A DPU BMC
  that shows no mark at all gives no proof: then a recorded step is never sent again, and a
  reset that did not happen shows as a DPU that does not come back (`DPUResetNotEffective`).
  The marks are written to the second (as a BlueField BMC writes them): a reset landing in the
  second its mark was written in would leave the mark unchanged and look not taken, so a reset
  is sent at least a second after the mark before it was read.
  Types: `ForceRestart` (Arm cores only; also what recovers a Paused DPU, dsx#6350),
  `PowerCycle` (Arm and NIC; takes effect only while the host is off: the workflow turns it off
  first), `SOC.ForceReset` (Arm and NIC at once; `Oem/Nvidia/SOC.ForceReset`, no body).
- `wait_for_os(connection, deadline)`: poll until the Arm OS runs (`OsIsRunning`, not Paused).

Cost: 1 request to read; a reset 3-5 (read, send, read until the mark moves) plus the read-back
of its step, and at most 1 s before the send (the mark's second); a wait one request per poll
(default 1 s).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from contracts.errors import BMCRequestRejected, BMCUnavailable, DPUResetNotEffective
from contracts.models.redfish import DPUResetInput, DPUResetProgress, DPUResetResult, DPUSystemState
from drivers.redfish.connection import BMCConnection
from drivers.redfish.system import find_system, reset_since, send_reset
from drivers.redfish.tasks import follow_task

SOC_FORCE_RESET = "SOC.ForceReset"
_SETTLE_SECONDS = 3.0
_MARK_RESOLUTION_SECONDS = 1.0  # LastResetTime and LastStateTime are written to the second


def _now() -> datetime:
    return datetime.now(UTC)


async def read_dpu(connection: BMCConnection) -> DPUSystemState:
    """The DPU's Arm system as its BMC shows it now."""
    system = await find_system(connection)
    body = await connection.get(system.uri)
    found = body.get("BootProgress")
    progress: dict[str, object] = found if isinstance(found, dict) else {}
    return DPUSystemState(
        bmc_id=connection.bmc_id,
        power_state=str(body.get("PowerState") or "Unknown"),
        arm=str(progress.get("OemLastState")) if progress.get("OemLastState") else None,
        last_reset_time=str(body["LastResetTime"]) if body.get("LastResetTime") else None,
        arm_since=str(progress.get("LastStateTime")) if progress.get("LastStateTime") else None,
        reset_types=system.allowed,
        observed_at=_now(),
    )


class DPUReset:
    """One attempt at one DPU reset; `run` is safe to call again with the recorded `resume`."""

    def __init__(
        self,
        connection: BMCConnection,
        request: DPUResetInput,
        resume: DPUResetProgress | None,
        *,
        persist: Callable[[DPUResetProgress], None],
        confirm: Callable[[DPUResetProgress, float], Awaitable[None]] | None,
    ) -> None:
        self._connection = connection
        self._request = request
        self._resumed = resume is not None
        self.progress = resume or DPUResetProgress()
        self._persist = persist
        self._confirm = confirm

    async def run(self) -> DPUResetResult:
        request = self._request
        state = await read_dpu(self._connection)
        if self.progress.step == "done":
            return self._result(state, sent=True)
        if self.progress.step == "reset_requested":
            if self._moved(state) or await self._moves_within(_SETTLE_SECONDS):
                return await self._done(sent=True)
            if self.progress.mark_before is None:
                return await self._done(sent=True)  # no proof either way: never sent twice
        elif not self._resumed and self._reset_since_owed(state):
            return await self._done(sent=False)
        state = await read_dpu(self._connection)
        read_at = time.monotonic()
        if self._moved(state):  # taken between the last look and this read: never a second one
            return await self._done(sent=True)
        self.progress = DPUResetProgress(step="reset_requested", mark_before=state.reset_mark)
        self._persist(self.progress)
        if self._confirm is not None:
            await self._confirm(self.progress, request.timeout_seconds)
        if self.progress.mark_before is not None:
            # The marks are to the second: a reset landing in the second its mark was written in
            # would leave the mark as it was. Read at `read_at`, the mark is that old at least.
            await self._connection.sleep(read_at + _MARK_RESOLUTION_SECONDS - time.monotonic())
        await self._send()
        if self.progress.mark_before is not None and not await self._moves_within(request.timeout_seconds):
            raise DPUResetNotEffective(
                f"BMC {self._connection.bmc_id}: {request.reset_type} was accepted but the DPU showed no "
                f"reset within {request.timeout_seconds:g} s (LastResetTime/BootProgress unchanged; a "
                "PowerCycle takes effect only while the host is off)"
            )
        return await self._done(sent=True)

    async def _send(self) -> None:
        connection, reset_type = self._connection, self._request.reset_type
        deadline = time.monotonic() + self._request.timeout_seconds
        if reset_type == SOC_FORCE_RESET:
            system = await find_system(connection)
            oem = await connection.get(f"{system.uri}/Oem/Nvidia")
            action = (oem.get("Actions") or {}).get(f"#{SOC_FORCE_RESET}") or {}
            target = action.get("target")
            if not isinstance(target, str):
                raise BMCRequestRejected(
                    f"BMC {connection.bmc_id}: no #{SOC_FORCE_RESET} action at {system.uri}"
                )
            response = await connection.post(target, {})
            await follow_task(connection, response, deadline)
            return
        await send_reset(connection, await find_system(connection), reset_type, deadline)

    def _moved(self, state: DPUSystemState) -> bool:
        before = self.progress.mark_before
        return before is not None and state.reset_mark is not None and state.reset_mark != before

    async def _moves_within(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while True:
            self._connection.heartbeat()
            try:
                if self._moved(await read_dpu(self._connection)):
                    return True
            except BMCUnavailable as err:
                self._connection.note_problem(err)
            if time.monotonic() >= deadline:
                return False
            await self._connection.sleep(0.25)

    def _reset_since_owed(self, state: DPUSystemState) -> bool:
        return reset_since(state.last_reset_time, self._request.owed_since)

    async def _done(self, *, sent: bool) -> DPUResetResult:
        self.progress = self.progress.model_copy(update={"step": "done"})
        self._persist(self.progress)
        return self._result(await read_dpu(self._connection), sent=sent)

    def _result(self, state: DPUSystemState, *, sent: bool) -> DPUResetResult:
        return DPUResetResult(
            bmc_id=self._connection.bmc_id, reset_type=self._request.reset_type, sent=sent, state=state
        )


async def wait_for_os(connection: BMCConnection, deadline: datetime, poll_seconds: float) -> DPUSystemState:
    """The DPU once its Arm OS runs, or as it is at `deadline` (the caller decides)."""
    while True:
        connection.heartbeat()
        try:
            state = await read_dpu(connection)
        except BMCUnavailable as err:
            connection.note_problem(err)
        else:
            if state.os_running or _now() >= deadline:
                return state
        await connection.sleep(poll_seconds)
