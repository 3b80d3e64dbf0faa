"""One Event per fact (issue 38 item 3): the worker's emitter (`metalflow.runtime.events.Facts`)
tells an operation's start once and a run's ending once, however often its workflow's code runs
the phase change again; and a reboot's power cycle is told when the BMC took it, not before."""

from __future__ import annotations

from datetime import UTC, datetime

from contracts.events import PhaseChange
from metalflow.runtime.events import Facts, describe

AT = datetime(2026, 11, 29, tzinfo=UTC)
NS = "dpf-operator-system"


def change(
    workflow_id: str, run_id: str, kind: str, phase: str, length: int, details: str = "d"
) -> PhaseChange:
    return PhaseChange(workflow_id, run_id, kind, phase, details, AT, length, "h1")


def test_a_run_that_ends_is_one_ending_even_when_its_workflow_task_ran_again() -> None:
    """A workflow task that failed or timed out after entering `aborted` runs again with a longer
    history: still one `OperationAborted` (it read `OperationAborted (x2)`)."""
    facts = Facts()
    for phase in ("aborted", "completed"):
        run = f"run-{phase}"
        first = change("reprovision/h1", run, "HostOperationWorkflow", phase, 40)
        retried = change("reprovision/h1", run, "HostOperationWorkflow", phase, 43)
        assert facts.new(first) and not facts.new(retried) and not facts.new(first)
    # the next operation's run ends again: a fact of its own
    assert facts.new(change("reprovision/h1", "run-next", "HostOperationWorkflow", "completed", 40))


def test_an_operation_starts_once_while_the_entity_shows_it_again() -> None:
    """The entity shows `running reprovision` again with new details (an instance assigned) and in
    its next run after continue-as-new: one `OperationStarted`; the next operation starts anew."""
    facts = Facts()
    by_alice = "reprovision (reprovision/h1) requested by alice"
    assert facts.new(
        change("host/h1", "e1", "HostWorkflow", "running reprovision", 10, f"{by_alice}; no instance")
    )
    assert not facts.new(
        change("host/h1", "e1", "HostWorkflow", "running reprovision", 14, f"{by_alice}; instance i-1")
    )
    assert not facts.new(
        change("host/h1", "e2", "HostWorkflow", "running reprovision", 3, f"{by_alice}; instance i-1")
    )
    assert facts.new(change("host/h1", "e2", "HostWorkflow", "idle", 9))
    assert facts.new(
        change("host/h1", "e2", "HostWorkflow", "running reprovision", 12, f"{by_alice}; no instance")
    )
    # the next request, even with no idle shown between (one workflow task): a start of its own
    by_bob = "reprovision (reprovision/h1) requested by bob; no instance"
    assert facts.new(change("host/h1", "e2", "HostWorkflow", "running reprovision", 20, by_bob))
    # other phases shown again with new details stay Events of their own (two reasons, two Events)
    assert facts.new(
        change("reprovision/h1", "r1", "HostOperationWorkflow", "manual-intervention-required", 20)
    )
    assert facts.new(
        change("reprovision/h1", "r1", "HostOperationWorkflow", "manual-intervention-required", 30)
    )


def test_a_power_cycle_is_issued_when_the_bmc_took_it_not_on_entering_powering() -> None:
    reboot = "reboot/h1/generation-2"
    assert describe(change(reboot, "b1", "HostRebootWorkflow", "powering", 8), NS) is None
    issued = describe(change(reboot, "b1", "HostRebootWorkflow", "power-cycled", 12), NS)
    assert issued is not None and (issued.reason, issued.action) == ("PowerCycleIssued", "PowerCycle")


def test_a_rollout_and_a_campaign_tell_one_start_and_one_end_with_the_reason() -> None:
    """Issue 38 item 3: a rollout told only `RolloutPaused` and a campaign only `CampaignHalted`;
    each now tells its start and its ending (succeeded, rolled back, failed, aborted: an operator's
    abort and a cancel alike), the ending's words in the note, on the PodCliqueSet for a rollout
    and in `default` (regarding nothing: a campaign is no Kubernetes object) for a campaign."""
    rollout, campaign = "rollout/team-a/inference", "campaign/fleet-1"
    told = {
        phase: describe(change(rollout, "r1", "RolloutWorkflow", phase, 9, f"{phase} words"), NS)
        for phase in (
            "preparing",
            "rolling",
            "paused",
            "completed",
            "rolled-back",
            "failed",
            "aborted",
            "cancelled",
        )
    }
    assert {phase: (e.reason, e.type) if e else None for phase, e in told.items()} == {
        "preparing": ("RolloutStarted", "Normal"),
        "rolling": None,
        "paused": ("RolloutPaused", "Warning"),
        "completed": ("RolloutSucceeded", "Normal"),
        "rolled-back": ("RolloutRolledBack", "Warning"),
        "failed": ("RolloutFailed", "Warning"),
        "aborted": ("RolloutAborted", "Warning"),
        "cancelled": ("RolloutAborted", "Warning"),
    }
    ended = told["aborted"]
    assert ended is not None and ended.regarding is not None
    assert (ended.regarding.kind, ended.regarding.namespace, ended.regarding.name) == (
        "PodCliqueSet", "team-a", "inference"
    )  # fmt: skip
    assert (
        ended.namespace == "team-a"
        and ended.note == f"aborted words ({rollout})"
        and ended.action == "Rollout"
    )
    told = {
        phase: describe(change(campaign, "c1", "CampaignWorkflow", phase, 9, f"{phase} words"), NS)
        for phase in (
            "campaign-started",
            "selecting",
            "running",
            "halted",
            "completed",
            "stopped",
            "failed",
            "aborted",
            "cancelled",
        )
    }
    assert {phase: e.reason if e else None for phase, e in told.items()} == {
        "campaign-started": "CampaignStarted",
        "selecting": None,
        "running": None,
        "halted": "CampaignHalted",
        "completed": "CampaignCompleted",
        "stopped": "CampaignStopped",
        "failed": "CampaignFailed",
        "aborted": "CampaignAborted",
        "cancelled": "CampaignAborted",
    }
    start = told["campaign-started"]
    assert start is not None and start.regarding is None and start.namespace == "default"


def test_a_campaign_starts_once_while_it_selects_claims_and_reads_its_deployments() -> None:
    """A retried workflow task reports the start again with a longer history: one `CampaignStarted`
    per run; the ending once per run as well (a rollout's too); a halt again is a fact of its own."""
    facts = Facts()
    assert facts.new(change("campaign/c", "c1", "CampaignWorkflow", "campaign-started", 5))
    assert not facts.new(change("campaign/c", "c1", "CampaignWorkflow", "campaign-started", 11))
    assert facts.new(change("campaign/c", "c1", "CampaignWorkflow", "halted", 20))
    assert facts.new(change("campaign/c", "c1", "CampaignWorkflow", "halted", 30))  # halted again: a fact
    assert facts.new(change("campaign/c", "c1", "CampaignWorkflow", "completed", 40))
    assert not facts.new(change("campaign/c", "c1", "CampaignWorkflow", "completed", 44))
    assert facts.new(change("rollout/a/b", "r1", "RolloutWorkflow", "rolled-back", 40))
    assert not facts.new(change("rollout/a/b", "r1", "RolloutWorkflow", "rolled-back", 45))
    assert facts.new(change("campaign/c2", "c2", "CampaignWorkflow", "campaign-started", 5))  # another one
