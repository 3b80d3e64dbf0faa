"""Every configurable duration of the simulated site, one set per timing profile.

`demo` takes a few seconds per phase so a person can watch; `zero` makes everything as fast as
the event loop allows (benchmarks, most tests); `slow` is realistic (the `slow` fault profile).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Timings:
    # DPF: how long a DPU stays in each phase that DPF itself moves on from.
    dpu_phase_seconds: float = 1.0
    # DPF: DPUNode/DPUDevice discovery to Ready.
    dpu_registration_seconds: float = 1.0
    # Grove: a PodGang at a new template hash goes Scheduled, then Ready/Available after this.
    podgang_ready_seconds: float = 1.0
    # BMC: a power transition (On->Off, Off->On) completes after this.
    power_transition_seconds: float = 0.5
    # BMC: a reset-cooldown profile refuses resets with 409 for this long after a power-off.
    reset_cooldown_seconds: float = 3.0
    # BMC: an idle session expires after this (a leaked session is a violation).
    session_timeout_seconds: float = 60.0
    # DPU BMC: SimpleUpdate staging takes this long.
    firmware_stage_seconds: float = 1.0
    # BMC (power-lag profile): PowerState keeps its old value this long after a reset (drawn).
    power_lag_min_seconds: float = 1.0
    power_lag_max_seconds: float = 15.0
    # DPF v26: a DPU asked for a SystemLevelReset holds the host reboot (`rebootStatus`
    # WaitForShutdown) this long while its Arm OS shuts down.
    arm_shutdown_seconds: float = 2.0
    # DPF v26: DPF releases WaitForShutdown anyway (reason DPUArmShutdownWaitTimeout) when the
    # DPU BMC has not shown the Arm off this long after it began (DPF redfish `rebooting.go`
    # `armShutdownWaitTimeout = 5 * time.Minute`; BEHAVIOUR.md R2).
    arm_shutdown_timeout_seconds: float = 300.0
    # DPF v26: how often DPF reads the DPU BMC while it waits for the Arm to power off (ours:
    # a reconcile's requeue, which upstream does not pin).
    arm_poll_seconds: float = 0.5
    # DPF v26: the DPU's cluster-join secret expires this long after DPF asked for the host
    # reboot; a reboot acknowledged later leaves the DPU in `DPU Cluster Config` (ZT-doc: 2 hours).
    join_deadline_seconds: float = 7200.0
    # DPF v26: DPF stamps a DPU that joins a reboot round already asked for (Step 2: rebootStatus,
    # or on v26.4.0-rc.3 its `Rebooted` condition) this long after it joined (ours: a reconcile's
    # latency, which upstream does not pin; BEHAVIOUR.md R3, R7).
    reboot_stamp_seconds: float = 0.0
    # DPU BMC: the Arm boots (BootRom .. OsIsRunning) this long after a reset.
    dpu_boot_seconds: float = 2.0


PROFILES: dict[str, Timings] = {
    "demo": Timings(),
    "zero": Timings(
        dpu_phase_seconds=0.0,
        dpu_registration_seconds=0.0,
        podgang_ready_seconds=0.0,
        power_transition_seconds=0.0,
        reset_cooldown_seconds=0.0,
        firmware_stage_seconds=0.0,
        power_lag_min_seconds=0.0,
        power_lag_max_seconds=0.0,
        arm_shutdown_seconds=0.0,
        arm_poll_seconds=0.05,
        dpu_boot_seconds=0.0,
    ),
    "slow": Timings(
        dpu_phase_seconds=30.0,
        dpu_registration_seconds=20.0,
        podgang_ready_seconds=60.0,
        power_transition_seconds=10.0,
        reset_cooldown_seconds=60.0,
        session_timeout_seconds=600.0,
        firmware_stage_seconds=180.0,
        arm_shutdown_seconds=15.0,
        dpu_boot_seconds=60.0,
    ),
}


def timings_for(name: str, **overrides: float) -> Timings:
    """The named profile, with any field overridden (for tests that need one delay longer)."""
    if name not in PROFILES:
        raise ValueError(f"unknown timing profile {name!r}; choose one of {', '.join(PROFILES)}")
    unknown = sorted(set(overrides) - {f.name for f in fields(Timings)})
    if unknown:
        known = ", ".join(f.name for f in fields(Timings))
        raise ValueError(f"unknown timing {unknown[0]!r}; choose from {known}")
    return replace(PROFILES[name], **overrides)


def parse_overrides(items: list[str]) -> dict[str, float]:
    """`NAME=SECONDS` items (`serve --timing`) as overrides; ValueError naming a malformed one."""
    found: dict[str, float] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not sep or seconds < 0:
            raise ValueError(f"--timing {item!r}: expected NAME=SECONDS with SECONDS >= 0")
        found[name.strip()] = seconds
    return found
