"""A scripted DPF and BMC for the time-skipping tests: activities registered under the real
names, so HostOperationWorkflow runs unchanged while the test decides how DPF behaves (for
example: never moves on after a reboot). Each change is signalled to the workflow the way the
site's DPF watch does (unordered: no `as_of`, so the workflow takes each)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from temporalio import activity
from temporalio.client import Client

from activities.bmc_lease import BMCLeaseActivities
from contracts.models.dpf import (
    DPF_STATE_CHANGED_SIGNAL,
    ChangeResult,
    Condition,
    DPUNodeState,
    DPUState,
    HoldState,
    HostDPFState,
    HostRef,
    JoinSiteWatchInput,
    ReprovisionInput,
)
from contracts.models.inventory import BMCAccess, CredentialRef, DPUInventory, HostInventory, HostLookup
from contracts.models.redfish import (
    PowerCycleInput,
    PowerCycleResult,
    ReadPowerStateInput,
    SetPowerInput,
    SetPowerResult,
    SystemPower,
)
from drivers.settings import Settings

HOST = "host-900"
DPUS = ("host-900-dpu-0", "host-900-dpu-1")

# DPF's stamp on a Rebooting DPU of a build without rebootStatus (BEHAVIOUR.md R7): the barrier
# waits for it, so a fake DPU in Rebooting carries it, as DPF writes it with the annotation.
STAMP = Condition(type="Rebooted", status="False", reason="WaitingForManualPowerCycleOrReboot")


@dataclass
class FakeSite:
    client: Client
    workflow_id: str
    moves_after_reboot: bool = True  # False: DPF never leaves Rebooting (escalation)
    bmc_fails: bool = False  # power_cycle_host raises BMCUnavailable
    phases: dict[str, str] = field(default_factory=lambda: dict.fromkeys(DPUS, "Ready"))
    uids: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DPUS, 1))
    annotation: bool = False
    holding: bool = False
    sequence: int = 0
    power: list[str] = field(default_factory=list)  # "cycle:<generation>", "ForceOff", "On"
    annotation_removals: int = 0
    # What `read_power_state` says the BMC allows: a ForceOff+On BMC (a subclass may say otherwise).
    allowed_reset_types: ClassVar[tuple[str, ...]] = ("On", "ForceOff")
    power_cycle_method: ClassVar[str] = "ForceOff+On"

    def state(self) -> HostDPFState:
        dpus = tuple(
            DPUState(
                name=f"node-{HOST}-device-{d}", uid=f"{d}-uid-{self.uids[d]}", dpu_id=d, phase=p,
                conditions=(Condition(type="Ready", status="True" if p == "Ready" else "False"),
                            *((STAMP,) if p == "Rebooting" else ())),
            )
            for d, p in sorted(self.phases.items())
        )  # fmt: skip
        node = DPUNodeState(
            name=f"node-{HOST}", uid="n1", reboot_required="true" if self.annotation else None
        )
        hold = HoldState(name=f"node-{HOST}-hold", hold="true" if self.holding else "false")
        return HostDPFState(host_id=HOST, node=node, dpus=dpus, hold=hold, sequence=self.sequence)

    async def changed(self) -> None:
        self.sequence += 1
        await self.client.get_workflow_handle(self.workflow_id).signal(DPF_STATE_CHANGED_SIGNAL, self.state())

    async def cycled(self, request: PowerCycleInput) -> None:
        """What the BMC does for `power_cycle_host`: recorded at once as `cycle:<generation>` (a
        subclass may record it otherwise, or hold it between Off and On)."""
        self.power.append(f"cycle:{request.boot_generation}")

    async def power_set(self, reset_type: str) -> None:
        """What the BMC does for `set_power_state`: the reset type, recorded at once."""
        self.power.append(reset_type)

    def reads_off(self) -> bool:
        """What `read_power_state` reads: Off after our ForceOff (the last ForceOff or On), else On."""
        return [p for p in self.power if p in ("ForceOff", "On")][-1:] == ["ForceOff"]

    def activities(self) -> list[Callable[..., Any]]:
        """The fakes a worker registers (`activity_table`'s)."""
        return list(self.activity_table().values())

    def activity_table(self) -> dict[str, Callable[..., Any]]:
        """The fakes by the name each is registered under: a test replaces one by its name."""
        site = self

        class FakeInventory:
            async def resolve(self, host_id: str, source: object = None) -> HostInventory:
                bmc = BMCAccess(
                    bmc_id=HOST, endpoint="http://127.0.0.1:9", credentials=CredentialRef(file="/none")
                )
                dpus = tuple(DPUInventory(id=d, model="BF3") for d in DPUS)
                return HostInventory(host_id=HOST, site="fake", bmc=bmc, dpus=dpus)

            async def serves_one_host(self, bmc: BMCAccess) -> bool:
                return False  # these tests keep the BMC's fleet-wide lease workflow

        @activity.defn(name="resolve_host_inventory")
        async def resolve(lookup: HostLookup) -> HostInventory:
            return await FakeInventory().resolve(lookup.host_id)

        @activity.defn(name="read_host_dpf_state")
        async def read(host: HostRef) -> HostDPFState:
            return site.state()

        @activity.defn(name="join_site_dpf_watch")
        async def join(request: JoinSiteWatchInput) -> HostDPFState:
            # The site watch is this fake: it signals every change itself (unordered: no as_of).
            return site.state()

        @activity.defn(name="reprovision_dpu")
        async def reprovision(request: ReprovisionInput) -> ChangeResult:
            dpu = request.dpu.dpu_id
            site.uids[dpu] += 1
            site.phases[dpu] = "Node Effect"
            site.holding = True
            await site.changed()
            return ChangeResult(name=dpu, changed=True, detail="deleted")

        @activity.defn(name="release_node_effect_hold")
        async def release(host: HostRef) -> ChangeResult:
            site.holding = False
            for dpu, phase in site.phases.items():
                if phase == "Node Effect":
                    site.phases[dpu] = "Rebooting"
            site.annotation = True
            await site.changed()
            return ChangeResult(name="hold", changed=True)

        @activity.defn(name="mark_dpu_node_rebooted")
        async def mark(host: HostRef) -> ChangeResult:
            was = site.annotation
            site.annotation = False
            site.annotation_removals += int(was)
            if site.moves_after_reboot:
                for dpu, phase in site.phases.items():
                    if phase == "Rebooting":
                        site.phases[dpu] = "Ready"
            await site.changed()
            return ChangeResult(name=f"node-{HOST}", changed=was)

        @activity.defn(name="power_cycle_host")
        async def cycle(request: PowerCycleInput) -> PowerCycleResult:
            if site.bmc_fails:
                from contracts.errors import BMCAuthenticationFailed

                raise BMCAuthenticationFailed("401 from the BMC")
            await site.cycled(request)
            now = request.requested_at
            return PowerCycleResult(
                bmc_id=HOST, boot_generation=request.boot_generation, method="PowerCycle", steps=("done",),
                reset_types=("PowerCycle",), started_at=now, finished_at=now, attempts=1,
            )  # fmt: skip

        @activity.defn(name="set_power_state")
        async def set_power(request: SetPowerInput) -> SetPowerResult:
            await site.power_set(request.reset_type)
            started = activity.info().started_time
            return SetPowerResult(
                bmc_id=HOST, requested=request.reset_type, sent=request.reset_type,
                power_state="Off" if request.reset_type == "ForceOff" else "On",
                started_at=started, finished_at=started,
            )  # fmt: skip

        @activity.defn(name="read_power_state")
        async def read_power(request: ReadPowerStateInput) -> SystemPower:
            # A reboot's power-down wait (and an abort's stop) reads the host.
            return SystemPower(
                bmc_id=HOST, system="/redfish/v1/Systems/1", power_state="Off" if site.reads_off() else "On",
                allowed_reset_types=site.allowed_reset_types, power_cycle_method=site.power_cycle_method,
                observed_at=activity.info().started_time,
            )  # fmt: skip

        # The fleet-wide BMC lease is real: its workflow runs on the test's worker too.
        lease = BMCLeaseActivities(Settings(site_file=Path("unused.yaml")), FakeInventory())
        return {
            "resolve_host_inventory": resolve, "read_host_dpf_state": read, "join_site_dpf_watch": join,
            "reprovision_dpu": reprovision, "release_node_effect_hold": release,
            "mark_dpu_node_rebooted": mark, "power_cycle_host": cycle, "set_power_state": set_power,
            "read_power_state": read_power,
            # The real lease activities are registered under their own (method) names.
            "request_bmc_lease": lease.request_bmc_lease, "lease_host_bmc": lease.lease_host_bmc,
            "find_closed_workflow_runs": lease.find_closed_workflow_runs,
            "describe_reboot_run": lease.describe_reboot_run,
        }  # fmt: skip
