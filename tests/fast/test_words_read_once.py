"""Words and times (issue 38 item 7): every message read once, as English; ISO 8601 Z for every
time printed; an expected failure logged as one line."""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime

import httpx
import pytest
from fake_bmc_support import ACCESS, ENV
from temporalio.exceptions import ApplicationError

from activities.redfish.power import with_step
from contracts.errors import BMCAuthenticationFailed, BMCUnavailable
from contracts.models.campaign import FailureBudget, HostSelection
from contracts.models.campaign_progress import DeploymentChange
from contracts.models.host import HostOperationInput, HostOperationKind
from contracts.models.redfish import PowerCycleInput
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.powercycle import PowerCycle
from metalflow.cli.campaign import list_lines
from metalflow.cli.campaign_schedule import noted
from metalflow.hosts import _summary
from metalflow.operation_progress import describe_operation, waiting_words
from metalflow.runtime.worker import _ExpectedFailureInOneLine
from workflows.campaign import plan
from workflows.host_operation.state import HostOperationState

REASON = "the BMC of host-002 rejected the credentials (BMCAuthenticationFailed: ... 401 NoValidSession)"
AT = datetime(2026, 11, 29, 6, 30, 5, tzinfo=UTC)


def test_a_manual_interventions_reason_is_said_once() -> None:
    status = {
        "phase": "manual-intervention-required",
        "waiting_for": f"{REASON}. Answer with the update `retry`, `mark_rebooted` or `abort` (CLI)",
        "manual_intervention_reason": REASON,
        "power_cycles_issued": 0,
    }
    line = describe_operation(status)
    assert line.count("rejected the credentials") == 1, line
    assert "MANUAL INTERVENTION: the BMC of host-002" in line
    assert waiting_words(status).startswith("an operator: answer with the update `retry`")
    assert waiting_words({"waiting_for": "the DPUs Ready"}) == "the DPUs Ready"  # other waits as they are


def test_one_host_is_one_host() -> None:
    assert plan.describe_budget(FailureBudget(max_percent=50), 0, 1).endswith("(50% of 1 host)")
    assert plan.describe_budget(FailureBudget(max_percent=10), 3, 100).endswith("(10% of 100 hosts)")


def test_campaign_list_has_a_header_and_shows_every_phase() -> None:
    lines = list_lines(
        [
            ("campaign/a", "completed", "completed", AT),
            ("campaign/b", "completed", "aborted", AT),
            ("campaign/c", "running", "", AT),
            ("campaign/d", "timed_out", "rolling", AT),
        ]
    )
    assert lines == [
        "CAMPAIGN\tRUN\tPHASE\tSTARTED",
        # a phase, not `-` (attack on main); RUN says the run closed, not `completed` again (issue 38)
        "campaign/a\tclosed\tcompleted\t2026-11-29T06:30:05Z",
        "campaign/b\tclosed\taborted\t2026-11-29T06:30:05Z",
        "campaign/c\trunning\t-\t2026-11-29T06:30:05Z",
        "campaign/d\ttimed out\trolling\t2026-11-29T06:30:05Z",
    ]


def test_campaign_schedules_say_their_times_as_a_person_writes_them() -> None:
    """Issue 38 item 5: `--every 30d` read "every 2.592e+06 s"; the listing had no header."""
    from datetime import timedelta

    from temporalio.client import ScheduleIntervalSpec, ScheduleSpec

    from metalflow.cli.campaign_options import duration, duration_words
    from metalflow.cli.campaign_schedule import SCHEDULES_HEADER, schedule_when

    for text in ("30d", "24h", "12h", "90m", "45s", "2h"):
        assert duration_words(duration(text)) == text
    assert duration_words(86400 * 7) == "7d" and duration_words(1.5) == "1.5s"
    every = ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(days=30))])
    assert schedule_when(every) == "every 30d"
    cron = ScheduleSpec(cron_expressions=["0 2 * * *"], time_zone_name="UTC")
    assert schedule_when(cron) == "cron '0 2 * * *' in UTC"
    assert SCHEDULES_HEADER.split("\t") == ["SCHEDULE", "STATE", "WHEN", "NEXT", "LAST", "NOTE"]


def test_pausing_a_schedule_keeps_its_description() -> None:
    made = "created by alice with `metalflow campaign schedule`: bfb bf-2 on group rack7"
    paused = noted(made, "pause", "bob")
    assert paused == f"{made}; paused by bob"
    assert noted(paused, "unpause", "carol") == f"{made}; unpaused by carol"  # not piled up
    assert noted("", "pause", "bob") == "paused by bob"


def test_a_deployment_change_tells_its_times_in_iso_8601_z() -> None:
    change = DeploymentChange(
        deployment="fleet", field="bfb", previous="bf-1", value="bf-2", role="fleet", pointed_at=AT
    )
    assert change.describe() == "fleet DPUDeployment fleet bfb bf-1 -> bf-2: pointed 2026-11-29T06:30:05Z"
    restored = change.model_copy(update={"restored_at": AT})
    assert "restored 2026-11-29T06:30:05Z" in restored.describe()


def test_an_expected_activity_failure_is_one_line_in_the_worker_log() -> None:
    try:
        raise BMCAuthenticationFailed(REASON)
    except BMCAuthenticationFailed:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "temporalio.activity", logging.WARNING, __file__, 1, "Completing activity as failed", None, exc_info
    )
    assert _ExpectedFailureInOneLine().filter(record)
    said = logging.Formatter("%(levelname)s %(name)s: %(message)s").format(record)
    assert (
        said
        == f"WARNING temporalio.activity: Completing activity as failed: BMCAuthenticationFailed: {REASON}"
    )
    try:
        raise RuntimeError("a bug")
    except RuntimeError:
        bug = logging.LogRecord(
            "temporalio.activity", logging.WARNING, __file__, 1, "failed", None, sys.exc_info()
        )
    assert _ExpectedFailureInOneLine().filter(bug)
    assert "Traceback" in logging.Formatter().format(bug)  # a bug keeps its traceback


def test_an_expected_failure_passed_on_as_a_plain_application_error_is_one_line_too() -> None:
    """The power cycle passes a BMC's refusal on as a plain `ApplicationError` of the same type
    with the step it reached (`with_step`): still expected, still one line (it was the SDK's
    traceback of the driver's internals, ~38 lines, in the worker log)."""
    try:
        try:
            raise BMCAuthenticationFailed(REASON)
        except BMCAuthenticationFailed as err:
            raise with_step(err, "off-sent") from err
    except ApplicationError:
        exc_info = sys.exc_info()
    record = logging.LogRecord(
        "temporalio.activity", logging.WARNING, __file__, 1, "Completing activity as failed", None, exc_info
    )
    assert _ExpectedFailureInOneLine().filter(record)
    said = logging.Formatter("%(message)s").format(record)
    assert said == f"Completing activity as failed: BMCAuthenticationFailed: {REASON}"
    retried = ApplicationError("the BMC answered 503", type="BMCUnavailable")  # retried: not said so
    kept = logging.LogRecord("temporalio.activity", logging.WARNING, __file__, 1, "failed", None, (
        ApplicationError, retried, None))  # fmt: skip
    assert _ExpectedFailureInOneLine().filter(kept) and kept.exc_info is not None


def test_a_removal_without_a_reboot_says_no_none() -> None:
    """`remove/host-001 completed (boot_generation None, ...)` leaked Python's None."""
    said = _summary({"reboots": 0, "boot_generation": None, "removed": ["host-001-dpu-0"]})
    assert said == "completed (reboots 0, removed host-001-dpu-0)", said
    assert _summary({"boot_generation": 3}) == "completed (boot_generation 3)"


def test_a_deleted_dpu_is_said_deleted_once() -> None:
    """`deleted DPU ... (uid ...): deleted` said it twice."""
    request = HostOperationInput.model_construct(host_id="host-001", kind=HostOperationKind.REPROVISION)
    state = HostOperationState.start(request, AT)
    state.deleted("dpu-0", "u-1", "host-001-dpu-0", "deleted")
    state.deleted("dpu-1", "u-2", "host-001-dpu-1", "already deleting")
    assert state.changes == [
        "deleted DPU host-001-dpu-0 (uid u-1)",
        "deleted DPU host-001-dpu-1 (uid u-2): already deleting",
    ]


def test_one_listed_host_is_one_listed_host() -> None:
    """`campaign plan` said `reprovision on 1 listed hosts`."""
    assert HostSelection(hosts=["host-001"]).describe() == "1 listed host"
    assert HostSelection(hosts=["host-001", "host-002"]).describe() == "2 listed hosts"


async def test_an_unreachable_bmc_is_not_called_busy() -> None:
    """The worker log called a BMC it could not reach "BMC busy (... cannot reach ...)"."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    said: list[str] = []
    client = RedfishClient(CredentialResolver(env=ENV), transport=httpx.MockTransport(refuse))
    request = PowerCycleInput(
        bmc=ACCESS, boot_generation=1, requested_at=AT, timeout_seconds=0.01, power_down_wait_seconds=0
    )
    with pytest.raises(BMCUnavailable):
        async with client.connect(ACCESS) as connection:
            cycle = PowerCycle(
                connection, request, None, persist=lambda _: None, flush_seconds=0, on_step=said.append
            )
            await cycle.run()
    await client.aclose()
    retried = [line for line in said if "cannot reach" in line]
    assert retried and all(line.startswith("BMC unavailable (") for line in retried), said


def test_a_host_operations_question_says_once_how_to_answer_with_the_clis_commands() -> None:
    """Issue 38 item 6: the line said how to answer twice ("; `retry` once the BMC is fixed,
    `mark_rebooted` once ... . Answer with the update `retry`, `mark_rebooted` or `abort`") and
    named the update `mark_rebooted` where the CLI's command is `host mark-rebooted`."""
    from contracts.wording import answers_in_words

    when = {"retry": "once the BMC is fixed", "mark_rebooted": "once h-1 was rebooted by hand"}
    said = answers_in_words(("retry", "mark_rebooted"), when, "h-1")
    assert said == (
        "Answer with `metalflow host retry h-1` once the BMC is fixed, `metalflow host mark-rebooted h-1` "
        "once h-1 was rebooted by hand or `metalflow host abort h-1`"
    )
    assert "mark_rebooted" not in said and said.count("Answer") == 1
    # Campaigns and rollouts keep the updates by name (their CLI commands are named after them).
    assert answers_in_words(("resume",), {}, None) == (
        "Answer with the update `resume` or `abort` (`metalflow` CLI, Temporal CLI or UI)"
    )


def test_a_firmware_run_that_is_done_waits_for_nothing_but_its_close() -> None:
    """Issue 38 item 7: "done; waiting for every DPU runs 32.45.1020" (a finished run's words read
    as a wait); and one spelling of a reboot's method ("by bmc:ForceOff+On" vs "by ForceOff+On")."""
    from contracts.wording import method_words
    from metalflow.seen import as_running

    status = as_running({"phase": "done", "waiting_for": "every DPU runs 32.45.1020"})
    line = describe_operation(status)
    assert line.startswith("finishing; waiting for its run to close"), line
    assert "(every DPU runs 32.45.1020)" in line and "done:" not in line, line
    assert method_words("bmc:ForceOff+On") == method_words("ForceOff+On") == "ForceOff+On"


async def test_wrong_bmc_credentials_are_said_once_not_first_as_a_session_fallback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 38: a reboot of a host whose BMC rejects the credentials logged the 401 three times:
    `session login answered 401; trying basic auth` (INFO), the activity's failure, then the
    operation's phase. The login's 401 that basic auth then decides is no fact of its own (DEBUG);
    the failure says it. A BMC with no SessionService (404) is still said at INFO: basic auth
    works there, and the line is the only one that says how metalflow logs in."""
    from fake_bmc_support import FakeBMC, read, with_sessions

    bmc = FakeBMC()
    with_sessions(bmc)
    accepting = bmc.handle

    def refusing(request: httpx.Request) -> httpx.Response:  # the stored password no longer works
        if request.url.path == "/redfish/v1/SessionService/Sessions" and request.method == "POST":
            return httpx.Response(401, json={"error": {"message": "The user name or password is not valid."}})
        return accepting(request)

    bmc.handle = refusing  # type: ignore[method-assign]
    caplog.set_level(logging.DEBUG, logger="metalflow.redfish")
    with pytest.raises(BMCAuthenticationFailed, match="answered 401"):
        await read(bmc, auth="auto")
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert [line for line in said if "401" in line] == [], said
    assert any("trying basic auth" in r.getMessage() for r in caplog.records)  # at DEBUG
    caplog.clear()
    await read(FakeBMC(), auth="auto")  # no SessionService: basic auth, said once at INFO
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == ["BMC bmc-1: session login answered 404; trying basic auth"], said
