"""A host operation's policy: its time limits and escalation (`OperationPolicy`), apart from the
host models (`contracts.models.host`, which re-exports both names) so each file keeps to one
subject."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from contracts.validation import (
    ApprovalTimeout,
    PowerDownRead,
    PowerDownWait,
    PowerOnRetries,
    Retries,
    StepTimeout,
)


class _Frozen(BaseModel):
    # Unknown fields are ignored, never refused: older workers read what newer ones wrote (versioning.py).
    model_config = ConfigDict(frozen=True)


class RebootMethod(StrEnum):
    BMC = "bmc"  # metalflow power-cycles the host through its BMC
    MANUAL = "manual"  # someone else reboots it and says so with the `host_rebooted` signal


class OperationPolicy(_Frozen):
    """Time limits and escalation of host operations (docs/DOMAIN.md section 1's power handling).

    Defaults are the bare-metal manager's; the demo and tests pass shorter ones.
    """

    reboot_method: RebootMethod = RebootMethod.BMC
    power_down_wait_seconds: PowerDownWait = 120.0  # between Off and On
    # A power-down wait the reboot spends on its own timer (a BMC without PowerCycle) reads the
    # host's power this often, so an On by another actor ends it then, not at the wait's end
    # (one BMC read per this many seconds of wait; workflows/host_reboot/power_steps.py).
    power_down_read_seconds: PowerDownRead = 30.0
    # A power-on the BMC refused after our ForceOff (a secrets store rotating the password) is
    # tried again after each of these seconds, then a person is asked (workflows/parts/host_power.py).
    power_on_retry_seconds: PowerOnRetries = (2.0, 4.0)
    reboot_wait_seconds: StepTimeout = 1800.0  # DPF asked, nothing moved: re-issue
    max_power_cycle_retries: Retries = 3  # re-issues before manual intervention
    force_off_from_retry: Retries = 1  # retries from this one use ForceOff then On
    phase_timeout_seconds: StepTimeout = 3600.0  # a barrier that does not progress
    max_dpu_error_reprovisions: Retries = 2  # DPU in Error: reprovision it this often
    approval_timeout_seconds: ApprovalTimeout = 86400.0  # a request awaiting approval expires
    # A Kubernetes call (retries included) that has not succeeded in this long stops for an
    # operator (host operations) or fails the run (firmware, removal) instead of retrying unseen.
    kube_call_timeout_seconds: StepTimeout = 900.0
    # DPF v26 (docs/DOMAIN.md section 2.5): a reboot DPF asks for with a lesser method than
    # PowerCycle gets a warm reset where the BMC offers one (False: always a cold power cycle).
    warm_reset: bool = True
    # A DPU that asks for more host reboots of ours in one sequence stops the operation
    # (`RebootLoop`); a BF4 needs 2. Not the agent's `rebootSequenceCount`: it also counts the
    # DPU's own FirmwareReset/DPUWarmReboot, and stops at 5 by itself.
    max_reboot_sequence_count: Retries = 3
    # DPF's deadline for the host reboot it asked for (ZT-doc: 2 hours, or the DPU's
    # cluster-join secret expires), and how long before it the operation asks an operator.
    dpf_reboot_deadline_seconds: StepTimeout = 7200.0
    # After a reboot of ours, each DPU of the round whose agent ran must report a new
    # `agentStatus.lastStartupTime` within this (v26; issue 36 point 4): DPF leaves `Rebooting` at
    # the annotation's removal whether or not the host reset reached the DPU, then waits in `DPU
    # Config` for a fresh agent start (`dpu_config.go` c=62099c8b l.56). 900 s: the Arm's boot
    # (600 s, `HostResetInput.dpu_boot_timeout_seconds`, the bound of metalflow's DPU reset) and
    # 300 s for the agent to start and write its time (`laststartuptime.go` c=0f647461; margin ours).
    agent_restart_wait_seconds: StepTimeout = 900.0
    escalate_before_deadline_seconds: StepTimeout = 1800.0
    # A reboot barrier that waits on a step only DPF takes (ask for the reboot, stamp a Rebooting
    # DPU; upstream its next reconcile, seconds) says so after this (plus DPF's own 300 s bound on
    # an Arm shutdown): details and a `DPFStepOverdue` Warning Event, not an hour of silence
    # (issue 36ae, workflows/host_operation/dpf_owed.py). The wait goes on to the phase timeout.
    dpf_step_seconds: StepTimeout = 180.0
    # DPUs of one host in Error reprovisioned automatically, in all (per DPU: above).
    max_host_error_reprovisions: Retries = 4
