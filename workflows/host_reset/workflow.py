"""HostResetWorkflow (`reset/<host>`): one controlled reset sequence of a host and its DPUs.

Started by the host's entity (`request_reset`, so one operation at a time and approval when an
instance is assigned); `metalflow host reset HOST --dpu ID | --all-dpus | --host | --both [--full]`.
Every reset goes through a BMC (docs/DOMAIN.md section 4.3); the order is what the hardware needs:

- **DPU, Arm only** (`--dpu`, `--all-dpus`): `ForceRestart` on each DPU's own BMC resets its Arm
  cores and nothing else (BF-BMC "Reset Control"); then wait for its OS (`OsIsRunning`). The host
  keeps running. A DPU that is `Paused` (stuck in its UEFI shell, or its Arm shut down) gets the
  same `ForceRestart`: that, not `On`, recovers it (dsx#6350; `On` is accepted and does nothing).
- **DPU, Arm and NIC** (`--full`, and `--both` for every DPU): host off, DPU `PowerCycle`, host
  on, DPU up (`state.FULL_SEQUENCE`). Why this order (simulators/redfish/BEHAVIOUR.md B5, B10,
  B12): a BlueField takes a `PowerCycle` only while the host lets go of it (PERST on BF2,
  All_STANDBY on BF3; BF-BMC "Reset Control"); sent with the host on, it is accepted and held,
  and would go off at some later host power-off nobody planned for. Turning the host off first
  makes the reset happen now, under this workflow's eye. A BlueField without separate power
  control has no running Arm while its host is off: "Following a server power cycle, both the
  DPU and Host OSes begin boot at the same moment" (BlueField BSP 4.11, "Serialized DPU and Host
  Boot Sequence",
  https://docs.nvidia.com/networking/display/bluefieldbsp4110/Serialized+DPU+and+Host+Boot+Sequence;
  BSP 4.12+ "BlueField Boot Flow Configuration"), and DOCA's system-level reset is an Arm
  shutdown followed by a reboot of the server, hosts with separate power control being a special
  case (DOCA "NVIDIA BlueField Reset and Reboot Procedures",
  https://docs.nvidia.com/doca/sdk/NVIDIA+BlueField+Reset+and+Reboot+Procedures). So the DPU's
  OS (`OsIsRunning`) is awaited after the host is powered on, not before: a wait with the host
  off would end in `DPUResetNotEffective` on such a host. The host's firmware may then enumerate
  a DPU still booting; a site that needs the host held until the Arm OS is up sets the BSP's
  serialized boot (`mlxconfig ... s DELAY_HOST_OS_INIT=1`), which the DPU enforces itself.
  `SOC.ForceReset` would not need the host off, but the vendor warns the server must be "ready
  for the reset": with the host running it is a surprise reset under its OS.
- **Host only** (`--host`): the host's reboot for the next boot generation, a child
  `HostRebootWorkflow` (the same exactly-once cycle as every reboot), started and awaited through
  the reboot-rounds part the operations share (`workflows/parts/reboot_rounds.py`). A reboot
  that ended with the host OFF (its own On attempts refused: `BMCRebootFailed` "is OFF") hands
  the host to a person, as `host reboot` does: manual-intervention-required says the host is OFF;
  `retry` runs the reboot again for the generation it did not reach, `abort` ends the reset
  saying the host is OFF.

Refused at once (`HostBusy`, nothing changed) while a DPU of the host is in an install phase
(`dpf_barrier.INSTALL_PHASES`): a reset then corrupts the install. Refused as well, before the
host is touched or anything is sent (`ResetTypeNotSupported`, naming each DPU's BMC and the types
it takes), when a chosen DPU's BMC does not take the reset type the sequence needs (`PowerCycle`
for Arm and NIC, `ForceRestart` for the Arm), as its `ResetType@Redfish.AllowableValues` or
`ResetActionInfo` lists them (`state.refusal`): one read of each DPU's System.

The host's BMC: every power action on it goes through the same lease rule as a host reboot
(`workflows/bmc_lease/workflow.py`; issue 25). A `--host` target is a reboot child, which takes it
itself. Around the DPU resets the host's ForceOff ... On is one slot of the BMC's fleet-wide
lease (`METALFLOW_BMC_MAX_IN_FLIGHT` per BMC across all workers), asked by the reboot's own step
(`BMCLeaseHolder.ask_for_host`: `lease_host_bmc`) and held from before ForceOff until after On
(the BMC's limit counts hosts away from On); the DPUs' boot is awaited after the slot is given
back, the host being on. A BMC that serves this host only takes no lease, as for a reboot: the step returns
once the host's last reboot (the entity's generation) has ended (`PreviousRebootRunning` is
retried), and the entity runs one operation at a time. Queued for a shared BMC's full lease, the
run waits for the grant signal, holding no activity slot.

The DPUs' own BMCs take no lease: no DPU BMC action of metalflow does (firmware staging neither).
The fleet-wide lease counts host power actions per host BMC (`bmc_lease.py`); a DPU's BMC serves
that one DPU, whose host's entity runs one operation at a time, and the per-worker request cap
(`METALFLOW_BMC_MAX_IN_FLIGHT`, `drivers/redfish/client.py`) still holds for it.

Exactly once: each DPU reset is one `reset_dpu` activity that records its step and the DPU's
reset mark before sending and compares the mark on a retry (`drivers/redfish/dpu_reset.py`), so
a crash of a worker or of the Temporal server never resets a DPU twice; ForceOff and On are
idempotent (`set_power_state` skips a state that holds); the host reboot is a generation's child.
The lease slot belongs to the run, not to a worker: a worker killed mid-sequence keeps it for
the retried activity; a lease request retried after a crash is the same request (its id is the
run's `workflow.uuid4`), so it is never granted twice.

Stopping: `abort` is accepted at any time and acted on at the next wait or call (the call in
flight is cancelled and awaited). Queued for the lease (or granted as the abort came), nothing
is sent: the place is given back and the run ends aborted; a cancel there does the same. A run
that may have turned the host off powers it on again before it gives its slot back, however it
ends (an On of a host that is On is skipped); a DPU reset already sent is not undone (it is a
reset). A cancel asks nobody: whatever it cut (an On backoff, a person's wait) the On attempts
start afresh, once (`PowerCustody.cancelled`; `--host`: its reboot again); a cancelled run still
leaving the host OFF ends failed `HostLeftOff` (a cancel carries no words; the entity must read
them). A `--host` reboot in flight is stopped, which powers the host back on first. Every early
end goes through the kernel's `to_the_end`: the final phase says what was done and whether the
host is on. An abort completes the run (Phase `aborted`: it was asked for, no Failed run) with a
result whose `aborted` says who, why and what was done.

Cost per run: one activity per DPU to read its System (the reset types it takes), one per DPU
reset and one per wait for its OS; the host's off and on
are two activities plus the lease step (one activity; on a shared BMC the release signal too,
and while queued the grant signal and a refresh timer). One activity slot for the lease step for
a few milliseconds, none while queued. A `--host` target costs the reboot child's (its lease its
own). Payloads are small (inputs name BMCs by reference). Measured: bench/README.md,
"workflows/host_reset/workflow.py".
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import (
    ActivityError,
    ApplicationError,
    CancelledError,
    ChildWorkflowError,
    FailureError,
)

with workflow.unsafe.imports_passed_through():
    from contracts import activity_api, names
    from contracts.errors import (
        DPUResetNotEffective,
        HostBusy,
        HostLeftOff,
        ResetTypeNotSupported,
        activity_answer_details,
        first_application_error,
    )
    from contracts.models.bmc_lease import BMC_LEASE_GRANTED_SIGNAL, LeaseGrant
    from contracts.models.control import RETRY_UPDATE, STATUS_QUERY, OperatorAnswer, OperatorRequest
    from contracts.models.dpf import HostDPFState, HostRef
    from contracts.models.host import (
        MANUAL_INTERVENTION_REQUIRED,
        RESET_OPERATION,
        HostRebootInput,
        HostResetInput,
        HostResetResult,
        HostResetStatus,
        ResetTarget,
    )
    from contracts.models.inventory import BMCAccess, HostInventory, HostLookup
    from contracts.models.redfish import (
        DPUResetInput,
        DPUResetResult,
        DPUResetType,
        DPUSystemState,
        ReadDPUInput,
        SetPowerInput,
        SetPowerResult,
        WaitDPUOSInput,
    )
    from contracts.wording import method_words
    from workflows import kernel
    from workflows.host_reset import state as sequence
    from workflows.host_reset.power_on import HostPowerOn
    from workflows.parts import dpf_barrier as barrier
    from workflows.parts.bmc_lease_holder import BMCLeaseHolder, queued_words, withdrawn_words
    from workflows.parts.host_power import HOST_IS_OFF, PowerCustody, off_may_have_been_sent
    from workflows.parts.power_cycle_options import POWER_CYCLE_HEARTBEAT
    from workflows.parts.reboot_rounds import HearsItsReboot, RebootOutcome, RebootRounds, bmc_refusal
    from workflows.parts.site_check_said import SiteCheckSaid

RESOLVING = "resolving-inventory"
CHECKING_DPF = "checking-dpf"
CHECKING_DPU_BMCS = "checking-dpu-bmcs"
HOST_OFF = "powering-host-off"
RESETTING_DPU = "resetting-dpu"
WAITING_FOR_DPU_OS = "waiting-for-dpu-os"
HOST_ON = "powering-host-on"
REBOOTING_HOST = "rebooting-host"
COMPLETED = "completed"

DPU_RESET_CALL: workflow.ActivityConfig = {
    **kernel.BMC_READ,
    "heartbeat_timeout": POWER_CYCLE_HEARTBEAT,  # a killed worker's attempt resumes soon
}


@workflow.defn(name="HostResetWorkflow")
class HostResetWorkflow(SiteCheckSaid, HearsItsReboot, HostPowerOn):
    """One reset sequence of a host and its DPUs; see the module docstring."""

    @workflow.init
    def __init__(self, request: HostResetInput) -> None:
        super().__init__()
        self._request = request
        self.site_check = request.site_check  # said by its phases (`SiteCheckSaid`)
        self._resets: list[str] = []
        # Each chosen DPU's fate, for every end's words (`sequence.not_reset`): the DPUs chosen,
        # those reset, and those whose reset call ended without an answer (and why).
        self._chosen: tuple[str, ...] = ()
        self._dpus_reset: set[str] = set()
        self._dpus_failed: dict[str, str] = {}
        # This run turned the host off: it is powered on, or handed to a person, before the end.
        self._power = PowerCustody(
            host_id=request.host_id, retry_delays=request.policy.power_on_retry_seconds
        )
        self._inventory: HostInventory | None = None
        self._generation = request.boot_generation
        # The generation this run's power cycle reached (a `--host` reboot's, or the host's own
        # ForceOff ... On around the DPU resets): `boot_generation.reached`, once the BMC took it.
        self._reached = request.boot_generation
        self._off_taken = False  # the BMC took this run's host ForceOff: On again is one power cycle
        self._cycle_said = False  # `_resets` names this run's power cycle (else `_clean_up` does)
        self._leases = BMCLeaseHolder()
        self.reboots = RebootRounds(self, request.power_before)  # a `--host` reboot compares it
        self._off_generation: int | None = None  # a `--host` reboot left the host OFF: not reached
        self.operation_kind = RESET_OPERATION

    @workflow.run
    async def run(self, request: HostResetInput) -> HostResetResult:
        """Run the sequence the target asks for; see the module docstring."""
        return await self.to_the_end(self._reset, self._clean_up)

    async def _reset(self) -> HostResetResult:
        request = self._request
        kernel.upsert_changed(  # none when the entity gave them at the start
            [names.HOST_ID.value_set(request.host_id), names.OPERATION.value_set(RESET_OPERATION)]
        )
        inventory = await self._resolve()
        dpus = sequence.chosen_dpus(request, inventory)  # every DPU: those DPF still has
        self._chosen = tuple(dpu_id for dpu_id, _ in dpus)
        await self._refuse_while_installing(inventory)
        if request.target == ResetTarget.HOST:
            await self._reboot_host()
        else:
            reset_type = sequence.dpu_reset_type(request.target, request.full)
            states = await self._refuse_what_a_bmc_cannot_do(inventory, dpus, reset_type)
            if reset_type == "PowerCycle":
                await self._full_reset(inventory, dpus)
            else:
                await self._arm_resets(dpus, states)
        left = sequence.left_out_said(request, inventory)  # DPUs DPF no longer has, not reset
        await self.finish(
            COMPLETED, "; ".join([*self._resets, *([left] if left else [])]) or "nothing to reset"
        )
        return HostResetResult(
            host_id=request.host_id,
            target=request.target.value,
            resets=tuple(self._resets),
            boot_generation=self._generation,
            finished_at=workflow.now(),
            unplanned_power=self.reboots.unplanned_power,
            last_reset_time=self.reboots.last_reset_time,
        )

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> HostResetStatus:
        """Where the sequence is (its phase and what it waits for, as `host status` and `--wait`
        show every operation) and what it did so far."""
        return HostResetStatus(
            host_id=self._request.host_id,
            target=self._request.target.value,
            phase=self.phase,
            waiting_for=(
                self.details
                if self._leases.queued_for is None
                else queued_words(self._leases.queued_for, self._request.host_id)
            ),
            resets=tuple(self._resets),
            boot_generation=self._generation,
            started_at=workflow.info().start_time,
            site_check=self._request.site_check,
        )

    @workflow.signal(name=BMC_LEASE_GRANTED_SIGNAL)
    def bmc_lease_granted(self, grant: LeaseGrant) -> None:
        """The host BMC's lease granted this run a slot."""
        self._leases.granted(grant)

    def abort_promise(self) -> str:
        if (lease := self._leases.queued_for) is not None:  # nothing sent yet: its place given back
            return f"aborting ({self.phase}: {self.details}): {withdrawn_words('reset', lease)}"
        return f"aborting at the next safe point ({self.phase}: {self.details}){self._power.abort_words()}"

    # -- the steps -----------------------------------------------------------------------------
    async def _resolve(self) -> HostInventory:
        self.enter(RESOLVING, f"the inventory's record of {self._request.host_id}")
        inventory: HostInventory = await self.call(
            activity_api.resolve_host_inventory,
            HostLookup(host_id=self._request.host_id),
            kernel.options(kernel.INVENTORY, f"resolve {self._request.host_id}"),
        )
        workflow.upsert_search_attributes([names.SITE.value_set(inventory.site or "default")])
        self._inventory = inventory
        return inventory

    async def _refuse_while_installing(self, inventory: HostInventory) -> None:
        self.enter(
            CHECKING_DPF, f"DPF's state of the DPUs of {inventory.host_id} (no reset while one installs)"
        )
        state: HostDPFState = await self.call(
            activity_api.read_host_dpf_state,
            HostRef.of(inventory),
            kernel.options(kernel.KUBE_READ, f"read the DPF state of {inventory.host_id}"),
        )
        busy = barrier.installing(state)
        if busy:
            phases = ", ".join(f"{d.name} in {d.phase}" for d in state.dpus if d.name in busy)
            raise HostBusy(
                f"reset of {inventory.host_id} refused: {phases}; a reset now would corrupt the install"
            )

    async def _refuse_what_a_bmc_cannot_do(
        self, inventory: HostInventory, dpus: list[tuple[str, BMCAccess]], reset_type: DPUResetType
    ) -> dict[str, DPUSystemState]:
        """Read each DPU's System; refuse (`ResetTypeNotSupported`, nothing sent) when a DPU's BMC
        does not take the reset type the sequence needs (`state.refusal`)."""
        left = sequence.left_out_said(self._request, inventory)  # said from the first DPU step on
        self.enter(
            CHECKING_DPU_BMCS,
            f"the reset types the BMCs of the DPUs of {inventory.host_id} take"
            + (f" ({left})" if left else ""),
        )
        states: dict[str, DPUSystemState] = {}
        for dpu_id, bmc in dpus:
            states[dpu_id] = await self.call(
                activity_api.read_dpu_system,
                ReadDPUInput(bmc=bmc),
                kernel.options(kernel.BMC_READ, f"read DPU {dpu_id}"),
            )
        why = sequence.refusal(
            inventory.host_id, reset_type, {dpu_id: s.reset_types for dpu_id, s in states.items()}
        )
        if why is not None:
            raise ResetTypeNotSupported(why)
        return states

    async def _arm_resets(self, dpus: list[tuple[str, BMCAccess]], states: dict[str, DPUSystemState]) -> None:
        """ForceRestart each DPU's Arm (a Paused DPU too: it recovers it), then wait for its OS."""
        for dpu_id, bmc in dpus:
            why = (
                " (Paused: ForceRestart recovers it; On would do nothing)"
                if states[dpu_id].power_state == "Paused"
                else ""
            )
            await self._reset_dpu(dpu_id, bmc, "ForceRestart", why)
        await self._wait_for_os(dpus)

    async def _full_reset(self, inventory: HostInventory, dpus: list[tuple[str, BMCAccess]]) -> None:
        """Host off, each DPU PowerCycle (taken at once: the host lets go), host on, DPUs up
        (`state.FULL_SEQUENCE`): the host's off and on inside one slot of its BMC's lease, as a
        reboot's cycle; the DPUs' OS awaited after, with the host on (their Arm boots with it)."""
        host = inventory.host_id
        self.enter(HOST_OFF, f"ForceOff of {host} (a BlueField takes a PowerCycle only with the host off)")
        leased, asked = await self._leases.ask_for_host(
            host,
            self._request.boot_generation + 1,  # as the host's next reboot: after the last one ended
            f"resolve the BMC of {host} and ask its lease for a slot (host off around DPU resets)",
        )
        if self.aborting:
            await self._leases.give_back(asked[1], asked[0])
            raise self.aborted("stopped before the host was turned off: nothing was reset")
        self._inventory = leased  # the power actions go to the BMC whose lease is held
        async with self._leases.hold(leased.bmc, f"ForceOff/On of {host}", asked, runbook=self):
            if self.aborting:  # granted as the abort came: still nothing sent
                raise self.aborted("stopped before the host was turned off: nothing was reset")
            try:
                # Off once ForceOff may have been sent (the activity says; `off_may_have_been_sent`):
                # a stop powers it on again (On of a host that is On is skipped), inside this slot.
                # One that failed before sending anything leaves the host untouched, and unclaimed.
                off = f"ForceOff of {host} around the DPU resets"
                try:
                    await self._set_host_power("ForceOff")
                except BaseException as err:
                    if off_may_have_been_sent(activity_answer_details(err)):
                        self._power.turned_off(f"{off}, which may have been sent before it failed")
                    raise
                self._power.turned_off(off)
                self._off_taken = True
                for dpu_id, bmc in dpus:
                    await self._reset_dpu(dpu_id, bmc, "PowerCycle", "")
                self.enter(HOST_ON, f"On of {host} (its DPUs boot with it)")
                cancel = await self._power_on(then="the reset completes")
                if cancel is not None:
                    raise cancel
            except asyncio.CancelledError as err:  # nobody to ask: On afresh, once; else words
                await self._power_on(then="the reset ends cancelled", cancel=err)
                raise
            except FailureError:  # aborted, failed
                # Never left off in silence: powered on, or handed to a person who is told so.
                await self._power_on(then="the reset ends failed, naming what it did")
                raise
        self._resets.append(f"host {host}: ForceOff, On around the DPU resets")
        self._cycle_said = True  # `_resets` names the power cycle
        await self._wait_for_os(dpus)  # the host is on: the DPUs' Arm boots with it

    async def _reset_dpu(self, dpu_id: str, bmc: BMCAccess, reset_type: DPUResetType, why: str) -> None:
        self.enter(RESETTING_DPU, f"{reset_type} of DPU {dpu_id}{why}")
        try:
            result: DPUResetResult = await self.call(
                activity_api.reset_dpu,
                DPUResetInput(bmc=bmc, reset_type=reset_type, owed_since=workflow.now()),
                kernel.options(DPU_RESET_CALL, f"{reset_type} of DPU {dpu_id}"),
            )
        except BaseException as err:  # re-raised: only named, so every end says this DPU's fate
            failed = first_application_error(err) if isinstance(err, ActivityError) else None
            in_words = (failed.type or "error") if failed is not None else None
            self._dpus_failed[dpu_id] = sequence.reset_failed(reset_type, in_words)
            raise
        self._dpus_reset.add(dpu_id)
        done = "" if result.sent else " (the DPU was already reset since it was asked: none sent)"
        self._resets.append(f"{dpu_id}: {reset_type}{done}")

    async def _wait_for_os(self, dpus: list[tuple[str, BMCAccess]]) -> None:
        seconds = self._request.dpu_boot_timeout_seconds
        for dpu_id, bmc in dpus:
            self.enter(
                WAITING_FOR_DPU_OS, f"DPU {dpu_id} to boot its OS (OsIsRunning, at most {seconds:g} s)"
            )
            state: DPUSystemState = await self.call(
                activity_api.wait_for_dpu_os,
                WaitDPUOSInput(bmc=bmc, deadline=workflow.now() + timedelta(seconds=seconds)),
                kernel.options(
                    {**kernel.BMC_READ, "start_to_close_timeout": timedelta(seconds=seconds + 120)},
                    f"wait for the OS of DPU {dpu_id}",
                ),
            )
            if not state.os_running:
                raise DPUResetNotEffective(
                    f"DPU {dpu_id} did not come back to its OS within {seconds:g} s of its reset "
                    f"(PowerState {state.power_state}, Arm {state.arm or 'unknown'})"
                )

    async def _set_host_power(self, reset_type: str, *, abortable: bool = True) -> SetPowerResult:
        inventory = self._inventory
        assert inventory is not None
        return await self.call(
            activity_api.set_power_state,
            SetPowerInput(bmc=inventory.bmc, reset_type=reset_type),
            kernel.options(kernel.BMC_READ, f"{reset_type} {inventory.host_id}"),
            abortable=abortable,
        )

    async def _reboot_host(self) -> None:
        """The host's reboot, a child of the next generation. One that ended with the host OFF
        (its own On attempts spent: `BMCRebootFailed` saying "is OFF") hands the host to a person,
        as `host reboot` does: `retry` runs it again for the generation it did not reach (which
        powers the host on), `abort` ends the reset saying the host is OFF; a cancel runs it
        again once, asking nobody (`_clean_up`). A BMC that could not reboot the host and left it
        on fails the reset with the reboot's failure."""
        while not await self._reboot_once():
            words = self._power.hand_over_words(then="the reset completes")
            kernel.report("host-left-off", words)
            await self.await_decision(MANUAL_INTERVENTION_REQUIRED, words, ("retry",), "")
            self._power.retried()

    async def _reboot_once(self, *, abortable: bool = True) -> bool:
        """One reboot child (again for the generation one left OFF did not reach); True once it
        rebooted the host, False when it ended with the host OFF (the custody says how)."""
        request = self._request
        host = request.host_id
        refused = self._off_generation
        self._generation = await self.reboots.start(
            HostRebootInput(
                host_id=host,
                boot_generation=refused or request.boot_generation + 1,
                requested_by=request.requested_by,
                reason=request.reason or "host reset",
                policy=request.policy,
                escalate_bmc_failure=True,
            ),
            summary=f"reboot {host} to generation {{generation}}",
            parent_close_policy=workflow.ParentClosePolicy.REQUEST_CANCEL,
            retry_refused=refused is not None,  # the generation it did not reach, again
        )
        self.enter(REBOOTING_HOST, f"power cycle of {host} to generation {self._generation}")
        # An abort (or a cancel) stops the reboot first: it never leaves the host off.
        try:
            outcome = await self.reboots.wait(abortable=abortable)
        except ChildWorkflowError as err:
            why = bmc_refusal(err)
            if why is None or HOST_IS_OFF not in why:
                raise
            self._off_generation = self._generation
            cause = why.split(f"; the host {host} {HOST_IS_OFF}")[0]
            self._power.left_off_by(f"the ForceOff of its reboot to generation {self._generation}", cause)
            return False
        self._power.seen_on()
        self._off_generation = None
        self._resets.append(self._rebooted(outcome))
        return True

    def _rebooted(self, reboot: RebootOutcome) -> str:
        result = reboot.result
        self._reached, self._cycle_said = max(self._reached, reboot.generation), True
        by = method_words(result.method)
        return f"host {self._request.host_id}: generation {result.boot_generation} by {by}"

    @workflow.update(name=RETRY_UPDATE)
    def retry(self, request: OperatorRequest) -> OperatorAnswer:
        """Power the host on again (only in manual-intervention-required: the host is OFF)."""
        return self.decide("retry", request)

    @retry.validator
    def _validate_retry(self, request: OperatorRequest) -> None:
        self.validate_decision("retry", asked_in=MANUAL_INTERVENTION_REQUIRED)

    async def _clean_up(self, err: BaseException) -> str:
        """What an early end leaves: a host this run turned off was powered on in its lease slot
        already (`_full_reset`), one it could not power on is named; a reboot stopped midway
        powered the host back on first (it is named with what was done). A `--host` reboot that
        left the host OFF: a cancel (nobody to ask) runs it again once, not abortable; whatever
        the end, the words say if the host is still OFF."""
        stopped = await self.reboots.stop()
        if stopped is not None:
            self._power.seen_on()  # the reboot stopped midway powered the host back on first
            self._resets.append(f"{self._rebooted(stopped)}, stopped")  # the end says the host is on
        cancelled = isinstance(err, asyncio.CancelledError | CancelledError)
        if cancelled and self._off_generation is not None and self._power.cancelled():
            try:
                await self._reboot_once(abortable=False)
            except ChildWorkflowError as failed:
                workflow.logger.warning("the reboot after the cancel failed: %s", failed.cause)
        cycled = self._reached > self._request.boot_generation and not self._cycle_said  # cut short
        cycled_to = self._reached if cycled else None  # the host's ForceOff, On: a power cycle all the same
        undone = sequence.not_reset(self._chosen, self._dpus_reset, self._dpus_failed, host_cycled=cycled)
        done = sequence.done_words(self._request.host_id, self._resets, undone, cycled_to)
        left = sequence.left_out_said(self._request, self._inventory)
        done = f"{done}; {left}" if left else done
        return f"Done: {done}; {self._power.left()}"

    def aborted_result(self, err: BaseException) -> HostResetResult:
        """An operator's abort completes the run (Phase `aborted`): the result says who aborted,
        why and what the reset had done (`_clean_up`'s words), and the generation reached."""
        return HostResetResult(
            host_id=self._request.host_id,
            target=self._request.target.value,
            resets=tuple(self._resets),
            boot_generation=self._reached,
            finished_at=workflow.now(),
            aborted=self.aborted_words(),
            unplanned_power=self.reboots.unplanned_power,
            last_reset_time=self.reboots.last_reset_time,
        )

    def ending_error(self, err: BaseException) -> BaseException | None:
        """Every early end, its own errors and an abort's included, says what the reset had done
        (`_clean_up`'s words) after its cause: the entity records it as the reset's outcome. A
        cancel that left the host OFF ends failed `HostLeftOff` with those words (a cancelled
        child reads only "aborted" to the entity)."""
        if isinstance(err, asyncio.CancelledError | CancelledError) and self._power.is_off:
            # A cancel carries no words in Temporal: the entity must read the host is OFF.
            return HostLeftOff(f"cancelled (the workflow was cancelled). {self.left_behind}")
        said = self.said_in_words(err)
        if said is None and isinstance(err, ApplicationError):
            said = ApplicationError(
                f"{err.message}. {self.left_behind}",
                *err.details,
                type=err.type,
                non_retryable=True,
                category=err.category,
            )
        if said is None or self._reached == self._request.boot_generation:
            return said
        # The host was power-cycled: the generation reached, for the entity (`generation_reported`).
        reached = {"boot_generation": self._reached}
        return ApplicationError(said.message, *said.details, reached, type=said.type, non_retryable=True,
                                category=said.category)  # fmt: skip
