"""The words of what an operation waits for (issue 40, an attack's finding: `host status` of a
reset, or a firmware run, waiting for a person with the host OFF read "waiting for the host
host-002 is OFF: ..."): a manual intervention is a wait for an operator, and says so, with or
without a separate reason field (`metalflow.operation_progress.waiting_words`, under `describe_operation`,
`host status` and `--wait`)."""

from __future__ import annotations

from metalflow.operation_progress import describe_operation, waiting_words

OFF = (
    "the host host-002 is OFF: metalflow turned it off (ForceOff of host-002 around the DPU resets) "
    "and could not power it back on after 3 attempts: BMCAuthenticationFailed. Fix the BMC, then "
    "`metalflow host retry host-002` (powers it on and the reset ends failed, naming what it did), "
    "or `metalflow host abort host-002` (the run ends; the host stays OFF)"
)


def test_a_reset_waiting_for_a_person_with_the_host_off_reads_as_a_wait_for_an_operator() -> None:
    status = {"phase": "manual-intervention-required", "waiting_for": OFF}
    line = describe_operation(status)
    assert "waiting for the host" not in line, line
    assert line.startswith(f"manual-intervention-required; waiting for an operator: {OFF}"), line


def test_an_operation_whose_reason_opens_its_wait_says_it_once_as_before() -> None:
    status = {
        "phase": "manual-intervention-required",
        "manual_intervention_reason": "DPF did not move",
        "waiting_for": "DPF did not move. Answer with `metalflow host retry host-002`",
    }
    assert waiting_words(status) == "an operator: answer with `metalflow host retry host-002`"


def test_a_wait_outside_a_manual_intervention_is_the_runs_own_words() -> None:
    status = {"phase": "waiting-for-dpus", "waiting_for": "every DPU Ready"}
    assert waiting_words(status) == "every DPU Ready"
