"""The pure rules of a DPU reset nobody here made (issue 39, a DPU reset by hand at rest,
workflows/host/power_rest.py): the power watch compares each DPU BMC's reset mark with the one it
read before while no operation of ours ran; an operation of ours (which may reset DPUs) forgets
the marks; a reading whose host power changed tells the host's change only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from contracts.models.power_watch import PowerAtRest
from workflows.host.power_rest import after_operation, after_reading, baseline, dpu_resets_at_rest

T0 = datetime(2026, 11, 29, 7, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=15)
T2 = T1 + timedelta(minutes=15)
MARK, LATER = "2026-11-29T06:00:00Z", "2026-11-29T07:05:00Z"


def _read(
    before: PowerAtRest | None, at: datetime, marks: dict[str, str], power: str = "On"
) -> tuple[PowerAtRest, str | None]:
    return after_reading("h1", before, power, None, at, marks)


def test_a_dpu_reset_at_rest_is_told_once_naming_the_dpu() -> None:
    first, told = _read(None, T0, {"d1": MARK, "d2": MARK})
    assert told is None and first.dpu_marks == {"d1": MARK, "d2": MARK}  # the baseline
    second, told = _read(first, T1, {"d1": MARK, "d2": LATER})
    assert told is not None and "DPU d2 of h1 was reset" in told and "d1" not in told.split("DPU d2")[0], told
    assert f"{MARK} -> {LATER}" in told and "metalflow did not cause it" in told
    assert second.unplanned == told and second.dpu_marks["d2"] == LATER
    third, again = _read(second, T2, {"d1": MARK, "d2": LATER})
    assert again is None and third.unplanned == told  # once: the new mark is the baseline


def test_a_dpu_not_read_now_keeps_its_mark_and_is_not_compared() -> None:
    first, _ = _read(None, T0, {"d1": MARK})
    second, told = _read(first, T1, {})
    assert told is None and second.dpu_marks == {"d1": MARK}
    _, told = _read(second, T2, {"d1": LATER})
    assert told is not None and "DPU d1" in told


def test_an_operation_of_ours_forgets_the_dpu_marks_whatever_its_end() -> None:
    first, _ = _read(None, T0, {"d1": MARK})
    for outcome, cycled in (("completed", True), ("completed", False), ("failed: x", False)):
        after = after_operation(first, outcome, True, cycled, T1)
        assert after is not None and after.dpu_marks == {}, outcome
        _, told = _read(after, T2, {"d1": LATER})
        assert told is None, outcome  # our reset (or the next reading's baseline), never someone else's
    assert after_operation(first, "withdrawn by x", False, False, T1) == first  # never started: kept


def test_a_reading_whose_host_power_changed_tells_the_host_only() -> None:
    first, _ = _read(None, T0, {"d1": MARK})
    _, told = _read(first, T1, {"d1": LATER}, power="Off")
    assert told is not None and "went On -> Off" in told and "DPU" not in told


def test_a_reboot_is_handed_no_dpu_marks_and_nothing_is_told_without_marks_before() -> None:
    first, _ = _read(None, T0, {"d1": MARK})
    handed = baseline(first)
    assert handed is not None and handed.dpu_marks == {}
    assert dpu_resets_at_rest("h1", PowerAtRest(power_state="On", read_at=T0), {"d1": LATER}, T1) is None


def test_a_mark_that_appears_is_a_reset_one_that_vanishes_is_not() -> None:
    first, _ = _read(None, T0, {"d1": ""})  # a BMC that shows no mark yet (simulators/redfish B9)
    second, told = _read(first, T1, {"d1": LATER})
    assert told is not None and f"reset mark none -> {LATER}" in told, told
    _, told = _read(second, T2, {"d1": ""})
    assert told is None
