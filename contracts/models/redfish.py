"""Inputs and results of the Redfish activities (power and DPU firmware). No secrets: a BMC is
named by `BMCAccess`, whose credentials are a reference the activity resolves."""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.inventory import BMCAccess

PowerState = Literal["On", "Off", "PoweringOn", "PoweringOff", "Paused", "Unknown"]
PowerCycleMethod = Literal["PowerCycle", "ForceOff+On", "On", "ForceRestart"]
PowerCycleStep = Literal["started", "off_requested", "off_reached", "on_requested", "cycle_requested", "done"]

DEFAULT_POWER_TIMEOUT_SECONDS = 300.0
DEFAULT_POWER_DOWN_WAIT_SECONDS = 120.0  # docs/DOMAIN.md section 1: Carbide's power_down_wait
# How long PowerState must hold before `set_power_state` trusts it (skipping a reset, or calling
# one done). Real BMCs keep reporting the old state for 1-15 s after a reset, with no Powering*
# state: set it above the slowest BMC's lag where resets by others may be in flight.
DEFAULT_POWER_SETTLE_SECONDS = 3.0


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: a newer worker may add one to a payload that an
    # older worker (a mixed fleet, a rollback) reads back from history (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)


class ReadPowerStateInput(_Frozen):
    bmc: BMCAccess


class WaitPowerInput(_Frozen):
    """Wait until the host's PowerState is `target`, or `deadline` (retries keep the deadline)."""

    bmc: BMCAccess
    target: str = "On"
    deadline: datetime
    poll_seconds: float = Field(default=5.0, gt=0)


class SystemPower(_Frozen):
    """What a BMC says about its (first) ComputerSystem's power."""

    bmc_id: str
    system: str  # the System's @odata.id
    manufacturer: str | None = None
    model: str | None = None
    power_state: PowerState
    allowed_reset_types: tuple[str, ...]
    last_reset_time: datetime | None = None
    power_cycle_method: PowerCycleMethod  # how `power_cycle_host` cycles this host when it is On
    observed_at: datetime


class SetPowerInput(_Frozen):
    bmc: BMCAccess
    reset_type: str  # a Redfish ResetType: On, ForceOff, GracefulShutdown, ForceRestart, ...
    timeout_seconds: float = Field(default=DEFAULT_POWER_TIMEOUT_SECONDS, gt=0)
    settle_seconds: float = Field(default=DEFAULT_POWER_SETTLE_SECONDS, ge=0, le=600)
    # The target reached, then left within the settle (another actor's reset, e.g. a power
    # manager turning the host back On right after our ForceOff): answer it (`reversed_to`)
    # instead of failing retryably, so the caller decides once and never sends the reset again.
    report_reversal: bool = False


class SetPowerResult(_Frozen):
    bmc_id: str
    requested: str  # the reset type asked for
    sent: str | None  # the reset type sent; None when the target state already held
    power_state: PowerState
    started_at: datetime
    finished_at: datetime
    # Seconds from the reset being accepted to PowerState showing its target (the BMC's lag).
    lag_seconds: float | None = None
    # The host's LastResetTime at the final read, when a reset was sent and it moved since this
    # call's first read (the reset's own mark); None otherwise (none shown, nothing sent, or not
    # moved yet: a BMC that updates it late would make it look like a later reset).
    last_reset_time: datetime | None = None
    # `report_reversal`: the target was reached, then PowerState showed this within the settle
    # (a reset nobody here sent); None: the target held.
    reversed_to: str | None = None


POWER_CYCLE_STEP: Final = "power_cycle_step"
"""The key of the detail a failed `power_cycle_host` adds to its error: the step it had reached
(`off_requested`, `off_reached`, `on_requested`: the host may be off by its hand), so the reboot
knows to power the host on or say it is OFF (`workflows/parts/host_power.py`)."""
STEPS_HOST_MAY_BE_OFF: Final = frozenset({"off_requested", "off_reached", "on_requested"})


class PowerCycleProgress(_Frozen):
    """Heartbeat details of a power cycle: where a retried attempt resumes."""

    step: PowerCycleStep = "started"
    method: PowerCycleMethod | None = None
    last_reset_before: str | None = None  # LastResetTime read before PowerCycle was sent
    off_reached_at: datetime | None = None
    reset_types: tuple[str, ...] = ()  # every reset sent, over all attempts that recorded it
    steps: tuple[str, ...] = ()
    started_at: datetime | None = None
    # A BMC that does not answer, for `host status` to say while the attempt rides it out
    # (`PowerCycle.bmc_problem`): the last transient error's words (`secret_free`), since when the
    # BMC has not answered, and until about when this attempt keeps trying (its own deadline,
    # `PowerCycle.run`, or the attempt's start-to-close, whichever comes first). All None once it
    # answers again. Words for a person only: resuming reads none of them.
    bmc_problem: str | None = None
    bmc_silent_since: datetime | None = None
    bmc_retry_until: datetime | None = None
    # Some error since `bmc_silent_since` was an answer of the BMC (a 409 ResourceInUse, a 503),
    # not silence: "has answered errors", never "has not answered" (attack 41a MEDIUM-3).
    bmc_answered_error: bool = False


class PowerCycleInput(_Frozen):
    """One power cycle owed to a host; see `drivers.redfish.powercycle` for the guarantees."""

    bmc: BMCAccess
    boot_generation: int = Field(ge=1)  # the generation this cycle brings the host to
    requested_at: datetime  # workflow time the reboot was asked for (timezone-aware)
    power_down_wait_seconds: float = Field(default=DEFAULT_POWER_DOWN_WAIT_SECONDS, ge=0)
    timeout_seconds: float = Field(default=DEFAULT_POWER_TIMEOUT_SECONDS, gt=0)  # per power transition
    # Off reached with more power-down wait left than this: return at once (`wait_left_seconds`
    # and `progress` in the result) instead of waiting, heartbeating, inside the activity; the
    # workflow waits on a durable timer and calls again with `resume`. None: wait inside.
    hand_back_wait_over_seconds: float | None = Field(default=None, ge=0)
    # Where an earlier activity of this cycle left it (its result's `progress`): resumed like an
    # attempt's heartbeat details (which win when this activity has some of its own).
    resume: PowerCycleProgress | None = None
    # A warm reset (ForceRestart) instead, where the BMC offers it and LastResetTime proves it.
    warm: bool = False


class PowerCycleResult(_Frozen):
    bmc_id: str
    boot_generation: int
    method: PowerCycleMethod
    steps: tuple[str, ...]  # e.g. ("off_requested", "off_reached", "on_requested", "done")
    reset_types: tuple[str, ...]  # every reset this cycle sent, in order
    already_done: bool = False  # LastResetTime showed the cycle happened after `requested_at`
    # Off was reached (read from the BMC), then the host was found On before this cycle sent On:
    # another actor turned it on during the power-down wait; the Off-On counts as the cycle.
    turned_on_by_other: bool = False
    # PowerState at the cycle's first read (a first attempt resuming nothing; "" otherwise): a
    # reboot compares it with its entity's last reading, no request added to find it.
    first_power_state: str = ""
    off_reached_at: datetime | None = None
    started_at: datetime
    finished_at: datetime
    attempts: int  # the activity attempt that finished the cycle
    requests: int = 0  # HTTP requests this attempt sent to the BMC
    # > 0: not finished, handed back at Off (`PowerCycleInput.hand_back_wait_over_seconds`): the
    # host is Off, `progress` is at `off_reached` (durable: it is this result); wait this long,
    # then call again with `resume=progress` to send On.
    wait_left_seconds: float = 0.0
    progress: PowerCycleProgress | None = None
    # The host's LastResetTime at this attempt's final read, when it moved since the attempt's
    # first read (the cycle's own mark); None otherwise (as `SetPowerResult.last_reset_time`).
    last_reset_time: datetime | None = None


class GracefulShutdownInput(_Frozen):
    bmc: BMCAccess
    grace_seconds: float = Field(default=300.0, ge=0)  # then ForceOff
    timeout_seconds: float = Field(default=DEFAULT_POWER_TIMEOUT_SECONDS, gt=0)


class GracefulShutdownResult(_Frozen):
    bmc_id: str
    reset_types: tuple[str, ...]  # () when already Off; ("GracefulShutdown", "ForceOff") when forced
    forced: bool
    power_state: PowerState
    started_at: datetime
    finished_at: datetime


class FirmwareComponent(_Frozen):
    id: str
    software_id: str | None = None
    version: str | None = None
    state: str | None = None  # Status.State: Enabled (running), StandbyOffline (staged)
    name: str | None = None  # Name: how some vendors tell which member is which (HPE: "iLO 6")


class ReadFirmwareInput(_Frozen):
    bmc: BMCAccess  # a DPU's BMC
    component: str = "DPU_NIC"  # SoftwareId (or Id) of the firmware to report


class FirmwareVersions(_Frozen):
    bmc_id: str
    component: str
    running: str | None
    staged: str | None  # a version waiting for activation (next host power cycle)
    components: tuple[FirmwareComponent, ...]


class StageFirmwareInput(_Frozen):
    bmc: BMCAccess  # a DPU's BMC
    image_uri: str
    version: str  # the version the image carries: skip when already staged or running
    transfer_protocol: str | None = None  # HTTP, HTTPS, SCP; None lets the BMC infer it
    component: str = "DPU_NIC"
    timeout_seconds: float = Field(default=1800.0, gt=0)


class StageFirmwareResult(_Frozen):
    bmc_id: str
    version: str
    outcome: Literal["staged", "already_staged", "already_running"]
    task: str | None = None  # the task monitor followed
    task_state: str | None = None
    running: str | None
    staged: str | None


# -- a DPU's own BMC (BlueField: `Systems/Bluefield`, docs/DOMAIN.md section 4.3) -----------------

DPUResetType = Literal["ForceRestart", "PowerCycle", "SOC.ForceReset"]
DPUResetStep = Literal["started", "reset_requested", "done"]


class ReadDPUInput(_Frozen):
    bmc: BMCAccess  # a DPU's BMC


class DPUSystemState(_Frozen):
    """What a DPU's BMC shows of its Arm system."""

    bmc_id: str
    power_state: str  # On, Paused (UEFI shell, or the Arm shut down), Off
    arm: str | None = None  # BootProgress.OemLastState (OsIsRunning: booted in DPU mode)
    last_reset_time: str | None = None  # LastResetTime as the BMC writes it, None when absent
    arm_since: str | None = None  # BootProgress.LastStateTime
    # The reset types its System takes (AllowableValues / ResetActionInfo, else the assumed set,
    # `drivers.redfish.system.ASSUMED_RESET_TYPES`); None: not read.
    reset_types: tuple[str, ...] | None = None
    observed_at: datetime

    @property
    def os_running(self) -> bool:
        return self.power_state != "Paused" and self.arm == "OsIsRunning"

    @property
    def reset_mark(self) -> str | None:
        """What moves when the DPU is reset: LastResetTime, else the Arm's boot stage time."""
        return self.last_reset_time or self.arm_since


class DPUResetInput(_Frozen):
    """One reset of a DPU, exactly once however often the activity is retried (see
    `drivers.redfish.dpu_reset`)."""

    bmc: BMCAccess  # the DPU's BMC
    reset_type: DPUResetType
    owed_since: datetime  # when the reset was asked for: a reset the BMC shows after it is this one
    timeout_seconds: float = Field(default=DEFAULT_POWER_TIMEOUT_SECONDS, gt=0)


class DPUResetProgress(_Frozen):
    step: DPUResetStep = "started"
    mark_before: str | None = None  # the reset mark read just before the reset was sent


class DPUResetResult(_Frozen):
    bmc_id: str
    reset_type: str
    sent: bool  # False: the BMC already showed a reset since `owed_since` (nothing sent)
    state: DPUSystemState


class WaitDPUOSInput(_Frozen):
    """Wait until the DPU's Arm OS runs (`OsIsRunning`, not Paused), or `deadline`."""

    bmc: BMCAccess
    deadline: datetime
    poll_seconds: float = Field(default=1.0, gt=0)
