"""`FirmwareWorkflow` (`firmware/<id>`): stage DPU firmware on every DPU, activate it with one
host power cycle, verify (docs/DOMAIN.md section 1: `stage_dpu_firmware`, `activate_dpu_firmware`).

Runbook:
1. Resolve the host; read each DPU's running and staged versions from its own BMC.
2. A target already running on every DPU: done, no reboot.
3. Stage the image on each DPU that neither runs nor holds it (in parallel, at most
   `MAX_PARALLEL_STAGES`; each stage follows the BMC's task to its end). Barrier: every DPU
   staged. A stage that fails ends the run with the DPU and the BMC's words; nothing rebooted.
4. Never cut an install short: wait until no DPU of the host is in `Config FW Parameters`,
   `Prepare BFB` or `OS Installing` (the watcher's signals). A DPU DPF has no object of (never
   provisioned, or removed) would never be Ready after the power cycle: the run ends here,
   `DPUsNotInDPF` naming it and what it left staged, nothing rebooted (state.py).
5. One host power cycle: the child `HostRebootWorkflow` of the next boot generation.
6. Wait for the host `On` and every DPU `Ready`; verify each DPU runs the target.

Abort (update `abort`) is accepted in every phase where the run waits but one (state.py,
`PHASES`): the run completes (Phase `aborted`, an abort is asked for: no Failed run) with a
result whose `aborted` says who, why, what is staged and whether the host was power-cycled.
Before the power cycle nothing is rebooted. Images already staged stay staged: harmless, they
are the version asked for and become running at the host's next power cycle, whoever causes it
(a later firmware run finds them `already_staged` and does not stage again). While the power
cycle runs (`power-cycling`) this run refuses the abort: its reboot takes it (the child is
abandoned, never cancelled halfway by this run, so a host is never left Off; `metalflow host
abort HOST` passes the abort to that reboot, which stops safely, the host powered back on or,
when it cannot be, its end saying the host is OFF; `host retry` reaches it too), and this run
completes `aborted` too. After the power cycle (`waiting-for-host`, `waiting-for-dpus`,
`verifying`) an abort stops the wait: the cycle has activated the images, unverified. Stages in
flight at an abort or a cancel are cancelled and waited for (until their next heartbeat: at most
a third of their 60 s heartbeat timeout), so the ended run shows no pending activity.

The power cycle is a `HostRebootWorkflow` child started through the reboot-rounds part the
operations share (`workflows/parts/reboot_rounds.py`), abandoned rather than cancelled with this
run's close; a cancel of this run asks the reboot to cancel (the reboot's own cancel path powers
a host it turned off on afresh, or says it is OFF) and waits for it (`_cancel_the_reboot`), so
no reboot is left waiting for a person nobody can reach; a host left OFF ends this run failed
`HostLeftOff`, saying so. Every early end goes through the kernel's `to_the_end`: the cleanup
stops the stages and says what is left (`Left behind: ...`).

Cost per host and worst-case history: up to `MAX_PARALLEL_STAGES` activity slots while
staging, none while waiting for DPF (the site watch signals each change); about 80 events in
the run plus 9 per DPU (two version reads and a stage) plus 4 per DPF change signalled, and the
reboot child's, whatever the BMC's pace: the stage follows the BMC's task and the wait for the
host's `On` polls inside one heartbeating activity (`wait_for_power_state`), not an activity and
a timer per poll. `worst_case_events` is that bound (tests/test_firmware.py; bench/README.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError, ChildWorkflowError

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import (
        DPUFailed,
        DPUsNotInDPF,
        FirmwareNotActivated,
        FirmwareStageFailed,
        HostLeftOff,
        InvalidInput,
        OperationAborted,
        PhaseTimeout,
        WorkflowError,
        cause_in_words,
    )
    from contracts.models.control import STATUS_QUERY
    from contracts.models.dpf import (
        DPF_STATE_CHANGED_SIGNAL,
        HostDPFState,
        HostRef,
    )
    from contracts.models.firmware import DPUFirmwareProgress, FirmwareStatus
    from contracts.models.host import (
        DPUProgress,
        FirmwareInput,
        FirmwareResult,
        HostOperationStatus,
        HostRebootInput,
    )
    from contracts.models.inventory import DPUInventory, HostInventory, HostLookup
    from contracts.models.redfish import (
        FirmwareVersions,
        ReadFirmwareInput,
        StageFirmwareInput,
        StageFirmwareResult,
        SystemPower,
        WaitPowerInput,
    )
    from contracts.wording import plural
    from workflows import kernel
    from workflows.firmware import state as rules
    from workflows.firmware.options import (
        INSTALL_PHASES,
        MAX_PARALLEL_STAGES,
        STAGE_OPTIONS,
        STAGE_TIMEOUT_SECONDS,
        power_wait_options,
    )
    from workflows.kernel import BMC_READ, INVENTORY, KUBE_READ, bounded, options
    from workflows.parts import reboot_rounds
    from workflows.parts.dpf_watch import DPFWatch
    from workflows.parts.host_power import HOST_IS_OFF, ended_off
    from workflows.parts.reboot_rounds import ABANDON, RebootChild, RebootRounds, reached_by_abort
    from workflows.parts.site_check_said import SiteCheckSaid


@workflow.defn(name="FirmwareWorkflow")
class FirmwareWorkflow(SiteCheckSaid, reboot_rounds.HearsItsReboot, kernel.Abortable):
    """Stage a DPU firmware image on a host's DPUs, activate it with one power cycle, verify."""

    ENDED: ClassVar = ("done", "failed", "aborted", "cancelled")

    @workflow.init
    def __init__(self, request: FirmwareInput) -> None:
        super().__init__()
        self._request = request
        self.site_check = request.site_check  # said by its phases (`SiteCheckSaid`)
        self._started_at = workflow.now()
        self.details = "the host's inventory"
        self._dpus: dict[str, DPUFirmwareProgress] = {}
        self._watch = DPFWatch()
        self._dpu_failure: str | None = None
        self._power_cycle_started = False
        self._cycled_to: int | None = None  # the generation the power cycle reached, once it ended
        self._reboot: RebootChild | None = None  # the power cycle's reboot, while it runs
        self._left_off = ""  # a cancel's: the words of the reboot it stopped that left the host OFF
        self._power_cycles = 0
        self._generation = request.boot_generation  # the host's, after this run's power cycle
        self._stage_tasks: list[asyncio.Task[StageFirmwareResult]] = []
        self.reboots = RebootRounds(self, request.power_before)  # its reboot compares it
        self.operation_kind = names.FIRMWARE

    @workflow.run
    async def run(self, request: FirmwareInput) -> FirmwareResult:
        """Stage, barrier, one power cycle, verify; see the module docstring."""
        return await self.to_the_end(self._runbook, self._clean_up)

    async def _clean_up(self, err: BaseException) -> str:
        """Every early end: stop stages still in flight (a BMC task already running finishes on
        the BMC; the image is then staged, harmless), and say what the run leaves behind."""
        for task in self._stage_tasks:
            task.cancel()
        await asyncio.gather(*self._stage_tasks, return_exceptions=True)
        staged = sorted(d for d, p in self._dpus.items() if p.outcome in ("staged", "already_staged"))
        version = self._request.target_version
        left = rules.staged_words(staged, version, cycled=self._power_cycle_started)
        if isinstance(err, asyncio.CancelledError | CancelledError):
            await self._cancel_the_reboot()
        aborted = self._power_cycle_started and isinstance(err, OperationAborted)  # its reboot, maybe
        reached = self._cycled_to if self._cycled_to is not None or not aborted else reached_by_abort(err)
        if self._left_off:
            left += f"; {ended_off(f'its power cycle to generation {self._generation}', self._left_off)}"
        elif self._power_cycle_started and HOST_IS_OFF in cause_in_words(err):
            left += f"; its power cycle to generation {self._generation} ended with the host OFF"
        elif reached is not None:  # that cycle activated what was staged
            left = rules.cycled_words(staged, version, reached, reboot_aborted=self._cycled_to is None)
        elif aborted:  # its reboot was aborted before it reset the host
            left += f"; its power cycle to generation {self._generation} was aborted before it reset the host"
        elif self._power_cycle_started:
            left += f"; the power cycle to generation {self._generation} completes on its own"
        return f"Left behind: {left}"

    async def _cancel_the_reboot(self) -> None:
        """A cancel of this run reaches its power cycle's reboot (abandoned on purpose: a reboot is
        never stopped halfway by its parent's end) only if it still runs: asked to cancel, it
        powers a host it left OFF on afresh (or says it is OFF), and is waited for, so it is never
        left waiting for a person nobody can reach (`host retry`/`abort` go through this run)."""
        reboot, self._reboot = self._reboot, None
        if reboot is None or reboot.done():
            return
        await workflow.get_external_workflow_handle(reboot.id).cancel()
        try:
            result = await reboot
        except ChildWorkflowError as failed:  # cancelled: HostLeftOff when the host stayed OFF
            words, off = cause_in_words(failed), f"the host {self._request.host_id} {HOST_IS_OFF}"
            if off in words:
                self._left_off = words[words.index(off) :]
            return
        if result.boot_generation >= self._generation:
            self._cycled_to = self._generation

    def ending_error(self, err: BaseException) -> BaseException | None:
        """A cancel whose reboot left the host OFF ends failed `HostLeftOff` with those words: a
        cancelled child reads only "aborted" to the entity, which must read the host is OFF. The
        run's own early end (`DPUsNotInDPF` after staging) says what it left, as the outcome."""
        if isinstance(err, asyncio.CancelledError | CancelledError) and self._left_off:
            return HostLeftOff(f"cancelled (the workflow was cancelled). {self.left_behind}")
        if isinstance(err, ApplicationError) and self.left_behind not in err.message:  # its own, in words
            said = f"{err.message}. {self.left_behind}"
            return ApplicationError(
                said, *err.details, type=err.type, non_retryable=True, category=err.category
            )
        return super().ending_error(err)

    async def _runbook(self) -> FirmwareResult:
        request = self._request
        kernel.upsert_changed(  # none when the entity gave them at the start
            [names.HOST_ID.value_set(request.host_id), names.OPERATION.value_set(names.FIRMWARE)]
        )
        inventory = await self._resolve_inventory()
        dpus = self._dpus_under_operation(inventory)
        versions = await self._read_versions(dpus, "reading-versions")
        if self.aborting:
            raise self.aborted()
        already_running = tuple(d.id for d in dpus if versions[d.id].running == request.target_version)
        if len(already_running) == len(dpus):
            self.enter("done", f"every DPU already runs {request.target_version}: no reboot")
            return self._result(staged=(), already_running=already_running, reboots=0)
        staged = await self._stage_everywhere([d for d in dpus if d.id not in already_running], versions)
        self._watch.start(HostRef.of(inventory), tuple(self._dpus))
        try:
            await self._wait_until_no_dpu_installs()
            await self._power_cycle_host()
            await self._wait_for_host_on(inventory)
            await self._wait_for_every_dpu_ready(inventory)
        finally:
            await self._watch.stop()
        await self._verify(dpus)
        await self.finish("done", f"every DPU runs {request.target_version}")
        return self._result(staged=staged, already_running=already_running, reboots=1)

    # -- steps -------------------------------------------------------------------------------------
    async def _resolve_inventory(self) -> HostInventory:
        self.enter("resolving-inventory", f"the inventory's record of {self._request.host_id}")
        inventory: HostInventory = await self.call(
            activity_api.resolve_host_inventory,
            HostLookup(host_id=self._request.host_id),
            options(INVENTORY, f"resolve {self._request.host_id}"),
            abortable=False,  # a short read; the abort is acted on after the versions are read
        )
        workflow.upsert_search_attributes([names.SITE.value_set(inventory.site)])
        return inventory

    def _dpus_under_operation(self, inventory: HostInventory) -> list[DPUInventory]:
        wanted = self._request.dpu_ids
        known = {d.id: d for d in inventory.dpus}
        unknown = sorted(set(wanted or ()) - set(known))
        if unknown:
            raise InvalidInput(f"host {inventory.host_id} has no DPU {', '.join(unknown)}")
        dpus = [known[i] for i in wanted] if wanted else list(inventory.dpus)
        if not dpus:
            raise InvalidInput(f"host {inventory.host_id} has no DPUs")
        without_bmc = [d.id for d in dpus if d.bmc is None]
        if without_bmc:
            raise InvalidInput(
                f"DPUs {', '.join(without_bmc)} of host {inventory.host_id} have no BMC in the inventory: "
                "their firmware cannot be staged"
            )
        for dpu in dpus:
            self._dpus[dpu.id] = DPUFirmwareProgress(dpu_id=dpu.id)
        return dpus

    async def _read_versions(self, dpus: list[DPUInventory], phase: str) -> dict[str, FirmwareVersions]:
        self.enter(phase, f"firmware versions of {len(dpus)} DPU BMCs")

        async def read(dpu: DPUInventory) -> FirmwareVersions:
            assert dpu.bmc is not None
            versions: FirmwareVersions = await self.call(
                activity_api.read_dpu_firmware_versions,
                ReadFirmwareInput(bmc=dpu.bmc),
                options(BMC_READ, f"read firmware of {dpu.id}"),
                abortable=False,  # short reads, all of them: the abort is acted on after them
            )
            self._dpus[dpu.id] = self._dpus[dpu.id].model_copy(
                update={"running": versions.running, "staged": versions.staged}
            )
            return versions

        found = await asyncio.gather(*(read(d) for d in dpus))
        return {d.id: v for d, v in zip(dpus, found, strict=True)}

    async def _stage_everywhere(
        self, dpus: list[DPUInventory], versions: dict[str, FirmwareVersions]
    ) -> tuple[str, ...]:
        target = self._request.target_version
        todo = [d for d in dpus if versions[d.id].staged != target]
        for dpu in dpus:
            if dpu not in todo:
                self._set_outcome(dpu.id, "already_staged")
        on = plural(len(todo), "DPU")
        self.enter("staging", f"{target} on {on} ({len(dpus) - len(todo)} already staged)")
        limit = asyncio.Semaphore(MAX_PARALLEL_STAGES)

        async def stage(dpu: DPUInventory) -> StageFirmwareResult:
            assert dpu.bmc is not None
            async with limit:
                request = StageFirmwareInput(
                    bmc=dpu.bmc,
                    image_uri=self._request.image_uri,
                    version=target,
                    timeout_seconds=STAGE_TIMEOUT_SECONDS,
                )
                # Not abortable itself: an abort ends the wait below, and the cleanup cancels
                # every stage task, which cancels its call and waits for it.
                result: StageFirmwareResult = await self.call(
                    activity_api.stage_dpu_firmware,
                    request,
                    options(STAGE_OPTIONS, f"stage {target} on {dpu.id}"),
                    abortable=False,
                )
            self._set_outcome(dpu.id, result.outcome, running=result.running, staged=result.staged)
            return result

        tasks = [asyncio.ensure_future(stage(d)) for d in todo]
        self._stage_tasks = tasks
        await self.wait(lambda: all(t.done() for t in tasks))  # an abort raises: the cleanup stops them
        failures: list[str] = []
        for dpu, task in zip(todo, tasks, strict=True):
            error = task.exception()
            if error is not None:
                cause = error.cause if isinstance(error, ActivityError) and error.cause else error
                self._set_outcome(dpu.id, f"failed: {cause}")
                failures.append(f"{dpu.id}: {cause}")
        if failures:
            raise FirmwareStageFailed(
                f"staging {target} failed on {len(failures)} of {plural(len(todo), 'DPU')} of host "
                f"{self._request.host_id} (no reboot was done): " + "; ".join(failures)
            )
        return tuple(d.id for d, t in zip(todo, tasks, strict=True) if t.result().outcome == "staged")

    async def _wait_until_no_dpu_installs(self) -> None:
        self.enter("waiting-for-dpf-idle", "no DPU installing (a power cycle would cut it short)")
        await self._await_dpf(lambda s: not any(d.phase in INSTALL_PHASES for d in s.dpus), abortable=True)
        assert self._watch.state is not None  # the wait above holds only with a state
        missing = rules.not_in_dpf(self._watch.state, self._dpus)
        if missing:  # nothing rebooted yet: a wait for Ready after the cycle could never end
            raise DPUsNotInDPF(rules.not_in_dpf_words(self._request.host_id, missing, self._watch.state))

    async def _power_cycle_host(self) -> None:
        if self.aborting:
            raise self.aborted()
        generation = self._request.boot_generation + 1
        self.enter(
            "power-cycling", f"one host power cycle (boot generation {generation}) to activate the images"
        )
        self._power_cycle_started = True
        self._power_cycles = 1
        reboot = HostRebootInput(
            host_id=self._request.host_id,
            boot_generation=generation,
            requested_by=self._request.requested_by,
            reason=f"activate DPU firmware {self._request.target_version}"
            + (f": {self._request.reason}" if self._request.reason else ""),
            policy=self._request.policy,
        )
        # A generation already used means the request's count is behind the host's; the staged
        # images still need their power cycle, so the next unused generation is taken.
        self._generation = await self.reboots.start(
            reboot,
            summary=f"power cycle {self._request.host_id}: firmware",
            # A reboot is never stopped halfway: it finishes even if this run is cancelled.
            cancellation_type=ABANDON,
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
        )
        self._reboot = self.reboots.child
        await self.reboots.wait(abortable=False)  # the reboot takes an abort while it runs
        self._reboot, self._cycled_to = None, self._generation

    async def _wait_for_host_on(self, inventory: HostInventory) -> None:
        self.enter("waiting-for-host", "the host's PowerState On")
        deadline = workflow.now() + timedelta(seconds=self._request.policy.phase_timeout_seconds)
        # One activity polls the BMC and heartbeats: no activity and timer per poll here.
        power: SystemPower = await self.call(
            activity_api.wait_for_power_state,
            WaitPowerInput(bmc=inventory.bmc, target="On", deadline=deadline),
            options(power_wait_options(self._request.policy.phase_timeout_seconds),
                    f"wait until {inventory.host_id} is On"),
        )  # fmt: skip
        if power.power_state != "On":
            self._timed_out(f"host {inventory.host_id} is {power.power_state} after the power cycle")

    async def _wait_for_every_dpu_ready(self, inventory: HostInventory) -> None:
        self.enter("waiting-for-dpus", "every DPU Ready after the power cycle")
        # A fresh read: the watcher's last state may predate the cycle.
        self._watch.adopt_read(
            await self.call(
                activity_api.read_host_dpf_state,
                HostRef.of(inventory),
                options(
                    bounded(KUBE_READ, self._request.policy.kube_call_timeout_seconds),
                    "DPF state after the power cycle",
                ),
            )
        )
        wanted = set(self._dpus)

        def ready(state: HostDPFState) -> bool:
            failed = [d for d in state.dpus if d.dpu_id in wanted and d.failed]
            if failed:  # raised below: a condition must not raise
                self._dpu_failure = f"DPU {failed[0].dpu_id} is in Error: {failed[0].failure_message()}"
                return True
            return all((s := state.dpu(i)) is not None and s.ready for i in wanted)

        await self._await_dpf(ready, abortable=True)
        if self._dpu_failure is not None:
            raise DPUFailed(f"after the firmware power cycle of {self._request.host_id}: {self._dpu_failure}")

    async def _verify(self, dpus: list[DPUInventory]) -> None:
        versions = await self._read_versions(dpus, "verifying")
        if self.aborting:  # taken while the reads ran (they are short, and not cut short)
            raise self.aborted()
        target = self._request.target_version
        wrong = [f"{d.id} runs {versions[d.id].running}" for d in dpus if versions[d.id].running != target]
        for dpu in dpus:
            if versions[dpu.id].running == target:
                self._set_outcome(dpu.id, "verified")
        if wrong:
            raise FirmwareNotActivated(
                f"after the power cycle not every DPU of host {self._request.host_id} runs {target}: "
                + ", ".join(wrong)
            )

    # -- the DPF watcher -----------------------------------------------------------------------------
    async def _await_dpf(self, predicate: Callable[[HostDPFState], bool], *, abortable: bool) -> None:
        seconds = self._request.policy.phase_timeout_seconds
        if not await self.wait(
            lambda: self._watch.state is not None and bool(predicate(self._watch.state)),
            timeout=seconds,
            timeout_summary=f"deadline: {self.details}",
            abortable=abortable,
        ):
            self._timed_out(f"{self.details} not reached in {timedelta(seconds=seconds)}")

    @workflow.signal(name=DPF_STATE_CHANGED_SIGNAL)
    def _on_dpf_state(self, state: HostDPFState) -> None:
        self._watch.accept(state)

    # -- operator messages and visibility ------------------------------------------------------------
    def abort_promise(self) -> str:
        """An abort stops the run's wait; before the power cycle nothing is rebooted (staged images
        stay, harmless), after it the images are activated, unverified."""
        return f"aborting ({self.phase}: {self.details}): {rules.abort_outcome(self._cycled_to)}"

    def abort_refusal(self) -> str | None:
        child = self.reboots.child
        return rules.abort_refusal(self._request.host_id, self.phase, None if child is None else child.id)

    def aborted_result(self, err: BaseException) -> FirmwareResult:
        """An operator's abort completes the run (Phase `aborted`): the result says who aborted,
        why and what was staged; a reboot an operator aborted after it cycled the host counts."""
        reached = reached_by_abort(err)
        staged = tuple(sorted(d for d, p in self._dpus.items() if p.outcome == "staged"))
        target = self._request.target_version
        running = tuple(sorted(d for d, p in self._dpus.items() if p.running == target))
        if reached is None:
            reached = self._cycled_to
        result = self._result(staged=staged, already_running=running, reboots=0 if reached is None else 1)
        return result.model_copy(
            update={
                "boot_generation": self._request.boot_generation if reached is None else reached,
                "aborted": self.aborted_words(),
            }
        )

    def aborted(self, outcome: str = "", *details: Any) -> WorkflowError:
        """The kernel's words (`aborted by WHO: WHY; ...`, as every operation's abort reads), then
        the phase it stopped in and that no reboot was done before the power cycle (after it, the
        cleanup's words say it). Before attack 40f: "aborted: firmware update of H aborted by ..."."""
        said = f"stopped in phase {self.phase}" + ("; no reboot was done" if self._cycled_to is None else "")
        return super().aborted(f"{said}; {outcome}" if outcome else said, *details)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostOperationStatus:
        """Where the run is (the same shape as every host operation's status)."""
        attempts, cycled = rules.power_cycle_counts(self._power_cycle_started, self._cycled_to)
        progress = []
        for dpu_id in self._dpus:
            phase, since = self._watch.clock.phases.get(dpu_id, ("", self._started_at))
            progress.append(DPUProgress(dpu_id=dpu_id, phase=phase, since=since))
        return HostOperationStatus(
            host_id=self._request.host_id,
            operation=names.FIRMWARE,
            phase=self.phase,
            waiting_for=self.details,
            dpus=tuple(progress),
            reboots_requested=self._power_cycles,
            reboot_attempts=attempts,
            power_cycles_issued=cycled,
            boot_generation=self._generation,
            started_at=self._started_at,
            site_check=self._request.site_check,
        )

    @workflow.query(name="firmware_status")
    def firmware_status(self) -> FirmwareStatus:
        """Per DPU: running and staged versions, and what this run did."""
        return FirmwareStatus(
            host_id=self._request.host_id,
            target_version=self._request.target_version,
            phase=self.phase,
            dpus=tuple(self._dpus.values()),
            power_cycle_started=self._power_cycle_started,
        )

    def _set_outcome(self, dpu_id: str, outcome: str, **versions: str | None) -> None:
        self._dpus[dpu_id] = self._dpus[dpu_id].model_copy(update={"outcome": outcome, **versions})

    def _timed_out(self, what: str) -> None:
        raise PhaseTimeout(f"host {self._request.host_id}: {what}")

    def _result(
        self, *, staged: tuple[str, ...], already_running: tuple[str, ...], reboots: int
    ) -> FirmwareResult:
        return FirmwareResult(
            host_id=self._request.host_id,
            target_version=self._request.target_version,
            staged=staged,
            already_running=already_running,
            reboots=reboots,
            boot_generation=self._generation,
            finished_at=workflow.now(),
            unplanned_power=self.reboots.unplanned_power,
            last_reset_time=self.reboots.last_reset_time,
        )
