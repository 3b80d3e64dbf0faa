"""The reset sequences' pure decisions (workflows/host_reset/state.py): which reset each target
sends, the Arm-and-NIC order (the DPU's OS awaited with the host on: its Arm boots with the host,
simulators/redfish/BEHAVIOUR.md B10, B12) and the refusal of a sequence a DPU's BMC cannot do."""

from __future__ import annotations

import pytest

from contracts.errors import DPUsRemoved, InvalidInput
from contracts.models.host import HostResetInput, ResetTarget
from contracts.models.inventory import BMCAccess, CredentialRef, DPUInventory, HostInventory
from workflows.host_reset import state


@pytest.mark.parametrize(
    ("target", "full", "expected"),
    [
        (ResetTarget.DPU, False, "ForceRestart"),
        (ResetTarget.ALL_DPUS, False, "ForceRestart"),
        (ResetTarget.DPU, True, "PowerCycle"),
        (ResetTarget.ALL_DPUS, True, "PowerCycle"),
        (ResetTarget.BOTH, False, "PowerCycle"),
        (ResetTarget.BOTH, True, "PowerCycle"),
    ],
)
def test_each_target_sends_its_reset_type(target: ResetTarget, full: bool, expected: str) -> None:
    assert state.dpu_reset_type(target, full) == expected
    assert state.full_reset(target, full) == (expected == "PowerCycle")


def test_the_host_target_resets_no_dpu() -> None:
    assert not state.full_reset(ResetTarget.HOST, True)


def test_the_dpus_os_is_awaited_after_the_host_is_on() -> None:
    steps = state.FULL_SEQUENCE
    off, cycle, on, wait = (next(i for i, s in enumerate(steps) if s.startswith(p)) for p in (
        "host ForceOff", "DPU PowerCycle", "host On", "wait for each DPU's OS"))  # fmt: skip
    assert off < cycle < on < wait  # never a wait for the Arm while the host is off


def test_a_bmc_that_takes_the_type_is_not_refused() -> None:
    takes = {"d0": ("ForceRestart", "PowerCycle"), "d1": ("PowerCycle",)}
    assert state.refusal("h1", "PowerCycle", takes) is None


def test_unread_reset_types_are_no_reason_to_refuse() -> None:
    assert state.refusal("h1", "PowerCycle", {"d0": None}) is None


def test_a_bmc_without_the_type_refuses_the_sequence_naming_why() -> None:
    takes = {"d1": ("On", "ForceRestart"), "d0": ("PowerCycle",), "d2": ()}
    why = state.refusal("h1", "PowerCycle", takes)
    assert why is not None
    assert why.startswith("reset of h1 refused before anything was sent: the Arm-and-NIC reset")
    assert "d1's BMC takes On, ForceRestart; d2's BMC takes no reset type" in why
    assert "d0" not in why
    assert "AllowableValues" in why and why.endswith("nothing was changed")


def test_an_arm_reset_needs_force_restart() -> None:
    why = state.refusal("h1", "ForceRestart", {"d0": ("PowerCycle", "On")})
    assert why is not None and "the Arm reset (--dpu, --all-dpus) is a ForceRestart" in why


def test_every_chosen_dpu_not_reset_is_named_with_why() -> None:
    """Issue 40: a reset that cycled one DPU and not the other names the other, and why."""
    chosen = ("h-dpu-0", "h-dpu-1", "h-dpu-2")
    failed = {"h-dpu-1": state.reset_failed("PowerCycle", "BMCAuthenticationFailed")}
    assert state.not_reset(chosen, {"h-dpu-0"}, failed) == (
        "not reset: h-dpu-1 (its PowerCycle failed: BMCAuthenticationFailed), "
        "h-dpu-2 (not reached: the reset ended first)"
    )
    stopped = {"h-dpu-0": state.reset_failed("ForceRestart", None)}
    assert state.not_reset(chosen[:1], set(), stopped) == (
        "not reset: h-dpu-0 (its ForceRestart was stopped in flight: it may have been sent)"
    )


def test_nothing_more_is_said_when_every_dpu_or_none_was_tried() -> None:
    chosen = ("h-dpu-0", "h-dpu-1")
    assert state.not_reset(chosen, set(chosen), {}) == ""
    assert state.not_reset(chosen, set(), {}) == ""  # the run's words say "nothing was reset"


# -- every DPU: the DPUs DPF still has (issue 40, L8 of its last attack) ---------------------------

H1 = "h1"


def _inventory(*dpus: str) -> HostInventory:
    bmc = BMCAccess(bmc_id="h1", endpoint="https://bmc.h1", credentials=CredentialRef(file="/c"))
    return HostInventory(
        host_id=H1,
        site="s",
        bmc=bmc,
        dpus=tuple(
            DPUInventory(
                id=d,
                model="BF3",
                bmc=BMCAccess(bmc_id=d, endpoint=f"https://{d}", credentials=CredentialRef(file="/c")),
            )
            for d in dpus
        ),
    )


def _reset(target: ResetTarget, left_out: dict[str, str] | None = None, **more: object) -> HostResetInput:
    return HostResetInput(host_id=H1, target=target, requested_by="bob", left_out=left_out or {}, **more)  # type: ignore[arg-type]


@pytest.mark.parametrize("target", [ResetTarget.ALL_DPUS, ResetTarget.BOTH])
def test_every_dpu_leaves_out_those_dpf_no_longer_has(target: ResetTarget) -> None:
    """`host reset --all-dpus` after `host remove --dpus d1` sent ForceRestart to d1 through its
    BMC: every DPU is now the DPUs DPF still has, and the run's words name those left out."""
    inventory = _inventory("d0", "d1", "d2")
    gone = {"d1": "remove/h1"}
    assert [d for d, _ in state.chosen_dpus(_reset(target, gone), inventory)] == ["d0", "d2"]
    assert [d for d, _ in state.chosen_dpus(_reset(target), inventory)] == ["d0", "d1", "d2"]
    assert state.left_out_said(_reset(target, gone), inventory) == (
        "left out d1: DPF no longer has it (removed by remove/h1)"
    )
    assert state.left_out_said(_reset(target, gone), None) != ""  # an end before the inventory was read
    assert state.left_out_said(_reset(target), inventory) == ""


def test_every_dpu_with_none_left_in_dpf_is_refused_before_anything_is_sent() -> None:
    gone = {"d0": "remove/h1", "d1": "remove/h1"}
    with pytest.raises(DPUsRemoved) as refused:
        state.chosen_dpus(_reset(ResetTarget.ALL_DPUS, gone), _inventory("d0", "d1"))
    assert refused.value.message == (
        "reset of h1 refused: DPF no longer has d0, d1 (removed by remove/h1) and h1 has no other DPU; "
        "nothing was changed (bring them back with: metalflow host provision h1 --dpus d0,d1)"
    )


def test_named_dpus_and_bad_input_are_as_before() -> None:
    inventory = _inventory("d0", "d1")
    assert [d for d, _ in state.chosen_dpus(_reset(ResetTarget.DPU, dpu_ids=("d1",)), inventory)] == ["d1"]
    assert state.chosen_dpus(_reset(ResetTarget.HOST), inventory) == []
    with pytest.raises(InvalidInput, match="host h1 has no DPU d9 "):
        state.chosen_dpus(_reset(ResetTarget.DPU, dpu_ids=("d9",)), inventory)
    with pytest.raises(InvalidInput, match="name the DPUs"):
        state.chosen_dpus(_reset(ResetTarget.ALL_DPUS), _inventory())


def test_an_early_end_after_the_hosts_power_cycle_says_the_host_was_power_cycled() -> None:
    """Issue 40 (attack M2): a `--full` reset aborted right after its ForceOff (or failed there,
    the BMC's password rotated) powers the host on again: a power cycle, generation 5 reached.
    Before, its words read `Done: nothing was reset`. Now they say the host was power-cycled, that
    this rebooted each DPU's Arm (B10, B12) and that no DPU was reset (its NIC untouched)."""
    chosen = ("h-dpu-0", "h-dpu-1")
    undone = state.not_reset(chosen, set(), {}, host_cycled=True)
    assert undone == (
        "not reset: h-dpu-0 (not reached: the reset ended first), "
        "h-dpu-1 (not reached: the reset ended first)"
    )
    done = state.done_words("h", (), undone, 5)
    assert done.startswith("host h power-cycled (this run's ForceOff, then On): generation 5 reached, ")
    assert "rebooted each DPU's Arm with it" in done and "its NIC is reset only by its own PowerCycle" in done
    assert done.endswith(f"; {undone}") and "nothing was reset" not in done
    # One DPU PowerCycled before the end: named first, the other after the host's cycle.
    undone = state.not_reset(chosen, {"h-dpu-0"}, {}, host_cycled=True)
    done = state.done_words("h", ("h-dpu-0: PowerCycle",), undone, 5)
    assert done.startswith("h-dpu-0: PowerCycle; host h power-cycled"), done
    assert done.endswith("; not reset: h-dpu-1 (not reached: the reset ended first)"), done


def test_nothing_was_reset_only_when_the_run_did_nothing() -> None:
    assert state.done_words("h", (), state.not_reset(("h-dpu-0",), set(), {}), None) == "nothing was reset"
    # The cycle already named by the resets (the sequence went past its On): not said twice.
    said = ("h-dpu-0: PowerCycle", "host h: ForceOff, On around the DPU resets")
    assert state.done_words("h", said, "", None) == "; ".join(said)
