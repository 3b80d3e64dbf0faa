"""A firmware run's decision before its power cycle (workflows/firmware/state.py): DPUs DPF has
no object of (never provisioned, or removed) would never be Ready after the cycle, so the run
ends naming them instead of waiting an hour in `waiting-for-dpus` (issue 40)."""

from __future__ import annotations

from contracts.models.dpf import DPUNodeState, DPUState, HostDPFState
from workflows.firmware import state as firmware

NOTHING = HostDPFState(host_id="h-001")  # never provisioned: no DPUNode, no DPU


def _dpu(dpu_id: str, phase: str = "Ready", *, deleting: bool = False) -> DPUState:
    return DPUState(name=f"node-h-001-device-{dpu_id}", uid=f"u-{dpu_id}", dpu_id=dpu_id, phase=phase,
                    deleting=deleting)  # fmt: skip


def test_a_host_never_provisioned_has_every_dpu_missing_and_the_words_say_so() -> None:
    missing = firmware.not_in_dpf(NOTHING, ["h-001-dpu-0", "h-001-dpu-1"])
    assert missing == ["h-001-dpu-0", "h-001-dpu-1"]
    words = firmware.not_in_dpf_words("h-001", missing, NOTHING)
    assert words.startswith(
        "DPF has no DPU object of h-001-dpu-0, h-001-dpu-1 of host h-001 (no DPUNode; DPUs: none)"
    )
    assert "the host was not rebooted" in words and "metalflow host provision h-001" in words


def test_a_dpu_removed_or_being_deleted_is_missing_and_the_others_are_named_with_their_phase() -> None:
    state = HostDPFState(
        host_id="h-001",
        node=DPUNodeState(name="node-h-001", uid="n1"),
        dpus=(_dpu("h-001-dpu-0", "Ready"), _dpu("h-001-dpu-1", "Deleting", deleting=True)),
    )
    missing = firmware.not_in_dpf(state, ["h-001-dpu-0", "h-001-dpu-1", "h-001-dpu-2"])
    assert missing == ["h-001-dpu-1", "h-001-dpu-2"]
    assert "(its DPUNode; DPUs: h-001-dpu-0 (Ready))" in firmware.not_in_dpf_words("h-001", missing, state)


def test_dpus_dpf_has_in_any_phase_are_not_missing() -> None:
    state = HostDPFState(host_id="h-001", dpus=(_dpu("h-001-dpu-0", "Error"), _dpu("h-001-dpu-1", "")))
    assert firmware.not_in_dpf(state, ["h-001-dpu-0", "h-001-dpu-1"]) == []


def test_an_early_end_before_its_power_cycle_says_what_each_dpu_bmc_holds_and_when_it_activates() -> None:
    """Issue 40: a run that staged, then ended `DPUsNotInDPF`, said nothing of the images staged."""
    words = firmware.staged_words(["h-dpu-0", "h-dpu-1"], "32.45.1020", cycled=False)
    assert words == (
        "staged on h-dpu-0, h-dpu-1 (32.45.1020 held by each DPU's BMC, not running: it activates at "
        "the host's next power cycle, whoever causes it)"
    )
    assert firmware.staged_words(["h-dpu-0"], "32.45.1020", cycled=True) == "staged on h-dpu-0"
    assert firmware.staged_words([], "32.45.1020", cycled=False) == "nothing staged"


def test_an_end_after_the_power_cycle_says_it_activated_what_was_staged() -> None:
    """Attack L1: a run aborted in its reboot's power-down wait (On sent at once: the host
    cycled) said `Left behind: staged on h-dpu-0, h-dpu-1` while the new version ran; one aborted
    after the cycle said `which activates`. Both now say the cycle activated the staged images,
    unverified, in the same words."""
    words = firmware.cycled_words(["h-dpu-0", "h-dpu-1"], "32.45.1020", 2, reboot_aborted=True)
    assert words == (
        "the host was power-cycled to generation 2 before its reboot was aborted, which activated "
        "32.45.1020 staged on h-dpu-0, h-dpu-1; their versions were not verified"
    )
    after = firmware.cycled_words(["h-dpu-0"], "32.45.1020", 2, reboot_aborted=False)
    assert after == (
        "the host was power-cycled to generation 2, which activated 32.45.1020 staged on h-dpu-0; "
        "their versions were not verified"
    )
    assert firmware.cycled_words([], "32.45.1020", 2, reboot_aborted=False) == (
        "nothing staged; the host was power-cycled to generation 2"
    )
    assert "which activated the staged images" in firmware.abort_outcome(2)  # the abort's answer
