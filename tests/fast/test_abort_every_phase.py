"""`metalflow host abort HOST` is taken in every phase where a host operation waits (issue 40).

The firmware run enters its phases by name (`self.enter("...")` in its runbook); each is listed
in `workflows/firmware/state.py`'s `PHASES` with who takes an abort there: the run itself, or,
while its power cycle runs, that reboot, to which the CLI passes the abort in any of the reboot's
phases (`abort_passes_to_reboot`). The reboot, the provision/reprovision operation, the reset and
the removal take an abort in every phase until they end (they refuse none: the kernel's
`abort_refusal`). Before this rule a firmware run refused every abort from its power cycle on,
and waited in `waiting-for-dpus` for an hour with no way to stop it; a removal refused it from its
first delete on, and waited up to an hour for DPF to let go.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from contracts import names
from contracts.models.host import MANUAL_INTERVENTION_REQUIRED
from metalflow.cli.host_decide import abort_passes_to_reboot
from workflows import kernel
from workflows.firmware import state as firmware
from workflows.host_operation.workflow import HostOperationWorkflow
from workflows.host_reboot.workflow import POWERING, HostRebootWorkflow
from workflows.host_reset.workflow import HostResetWorkflow
from workflows.removal.workflow import HostRemovalWorkflow

ROOT = Path(__file__).resolve().parents[2]
REBOOT = "reboot/h-001/generation-3"
ENDINGS = {"done"}  # entered as the run ends: no wait there


PHASE_ARGUMENT = {"enter": 0, "finish": 0, "_read_versions": 1}  # where a method takes its phase


def _entered(path: Path) -> set[str]:
    """The phase names a runbook enters (`self.enter("phase", ...)`, or through a step that
    enters the phase it is given, `self._read_versions(dpus, "phase")`)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            at = PHASE_ARGUMENT.get(node.func.attr)
            if at is not None and len(node.args) > at and isinstance(node.args[at], ast.Constant):
                found.add(node.args[at].value)
    return found


def test_the_table_names_every_phase_the_firmware_run_enters() -> None:
    assert _entered(ROOT / "workflows/firmware/workflow.py") - ENDINGS == set(firmware.PHASES)


@pytest.mark.parametrize("phase", sorted(firmware.PHASES))
def test_a_firmware_run_takes_an_abort_in_every_phase_or_its_reboot_does(phase: str) -> None:
    refusal = firmware.abort_refusal("h-001", phase, REBOOT)
    if firmware.PHASES[phase] == "the run":
        assert refusal is None, phase
        return
    # Its reboot runs: the refusal says who takes the abort, and the CLI passes it there in
    # every phase of the reboot, a person's or not.
    assert refusal is not None and REBOOT in refusal and "host abort h-001" in refusal
    for reboot_phase in (POWERING, "waiting-for-manual-reboot", MANUAL_INTERVENTION_REQUIRED):
        assert abort_passes_to_reboot(names.FIRMWARE, reboot_phase), reboot_phase


def test_the_power_cycle_refuses_only_while_its_reboot_runs() -> None:
    # Entered, the reboot not started yet (or already ended): the run takes the abort itself.
    assert firmware.abort_refusal("h-001", "power-cycling", None) is None


def test_another_operation_passes_an_abort_to_its_reboot_only_while_it_waits_for_a_person() -> None:
    assert abort_passes_to_reboot(names.PROVISION, "waiting-for-manual-reboot")
    assert not abort_passes_to_reboot(names.PROVISION, POWERING)
    assert not abort_passes_to_reboot(names.REBOOT, "waiting-for-manual-reboot")


@pytest.mark.parametrize(
    "workflow", [HostRebootWorkflow, HostOperationWorkflow, HostResetWorkflow, HostRemovalWorkflow]
)
def test_the_other_host_operations_refuse_no_abort_until_they_end(workflow: type) -> None:
    assert workflow.abort_refusal is kernel.Runbook.abort_refusal, workflow.__name__


def test_an_abort_says_whether_the_host_was_power_cycled() -> None:
    assert firmware.abort_outcome(None) == "no reboot was done"
    assert "power-cycled to generation 4" in firmware.abort_outcome(4)
