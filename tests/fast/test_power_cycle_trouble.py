"""Attack 40f's MEDIUM: a reboot whose host BMC does not answer was silent for minutes (`host
status` said only "waiting for the power cycle ..."; only the worker's log said `BMC unavailable`).
The power cycle's heartbeat details now carry the BMC's problem (`PowerCycleProgress.bmc_problem`,
since when, until about when the attempt keeps trying), and `host status` / `--wait` say it from
the describe they already read (`metalflow.seen.power_cycle_trouble`, `with_trouble`). These are
the pure words; end to end: tests/test_bmc_silence_said.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from contracts.models.redfish import PowerCycleProgress
from contracts.secret_free import secret_free
from metalflow.seen import Seen, power_cycle_trouble, with_trouble

SINCE = datetime(2026, 11, 30, 3, 10, 2, tzinfo=UTC)
UNTIL = SINCE + timedelta(minutes=15)
NOW = SINCE + timedelta(seconds=20)
WORDS = "BMC bmc-host-003: cannot reach http://10.0.0.3 (ConnectError: All connection attempts failed)"
SILENT = PowerCycleProgress(step="started", bmc_problem=WORDS, bmc_silent_since=SINCE, bmc_retry_until=UNTIL)
POWERING = Seen("powering", "the power cycle of host-003 (its BMC's PowerCycle, or ForceOff then On)",
                milestone="powering", phase="powering")  # fmt: skip


def test_a_bmc_that_does_not_answer_is_said_with_since_when_and_until_when_it_is_tried() -> None:
    last = power_cycle_trouble(SILENT, 5, 5, "", NOW)
    assert last == (
        "BMC bmc-host-003 has not answered since 2026-11-30T03:10:02Z (cannot reach http://10.0.0.3 "
        "(ConnectError: All connection attempts failed)); the power cycle keeps trying until about "
        "2026-11-30T03:25:02Z, then hands the run to a person"
    )
    first = power_cycle_trouble(SILENT, 1, 5, "", NOW)
    assert first.endswith(
        "the power cycle's attempt 1 of 5 keeps trying until about 2026-11-30T03:25:02Z; "
        "after attempt 5 the run is handed to a person"
    ), first
    # Between attempts (the deadline passed, the next attempt not yet started): no stale "until".
    later = power_cycle_trouble(SILENT, 2, 5, "BMC bmc-host-003: cannot reach http://10.0.0.3", UNTIL)
    assert "until about" not in later and "tries again (attempt 2 of 5)" in later, later
    assert later.endswith("(attempt 1 failed: BMC bmc-host-003: cannot reach http://10.0.0.3)"), later


def test_what_the_reboot_waits_for_gains_the_words_and_their_start_is_a_step() -> None:
    words = power_cycle_trouble(SILENT, 1, 5, "", NOW)
    seen = with_trouble(POWERING, words)
    assert seen.waiting_for == f"{POWERING.waiting_for}; {words}"
    assert seen.trouble == words and seen.milestone != POWERING.milestone  # a lasting line in a log


def test_no_problem_and_a_first_attempt_add_nothing() -> None:
    assert power_cycle_trouble(None, 1, 5, "", NOW) == ""
    assert power_cycle_trouble(PowerCycleProgress(step="off_requested"), 1, 5, "", NOW) == ""
    assert with_trouble(POWERING, "") is POWERING


def test_a_retried_attempt_names_the_failure_it_follows() -> None:
    failure = "BMC h: PowerState did not become On in time"
    said = power_cycle_trouble(PowerCycleProgress(), 2, 5, failure, NOW)
    assert said == f"the power cycle is on attempt 2 of 5; the last one failed: {failure}"


# Prefixed so a drawn secret can never be a piece of the surrounding words by chance.
SECRET = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=6, max_size=40).map("Zq9".__add__)
SHAPES = (
    "BMC h: GET /redfish/v1/Systems/1 answered 503 Authorization: Basic {s} was refused",
    "BMC h: GET http://10.0.0.3/redfish/v1/TaskService/Tasks/7?token={s} answered 503 busy",
    "BMC h: cannot reach https://admin:{s}@10.0.0.3 (ConnectError: refused)",
    'BMC h: POST /redfish/v1/SessionService/Sessions answered 500 {{"Password": "{s}"}}',
    "BMC h: answered 409 X-Auth-Token: {s} expired",
    "BMC h: answered 503 Bearer {s}",
)


@given(secret=SECRET, shape=st.sampled_from(SHAPES))
def test_a_secret_looking_text_is_never_rendered(secret: str, shape: str) -> None:
    text = shape.format(s=secret)
    progress = SILENT.model_copy(update={"bmc_problem": text})
    for said in (
        power_cycle_trouble(progress, 2, 5, text, NOW),  # the details' words and the last failure's
        power_cycle_trouble(PowerCycleProgress(), 2, 5, text, NOW),
        secret_free(text),  # what the activity puts in its heartbeat details
    ):
        assert secret not in said, said
        assert "[redacted]" in said
