"""The host-power invariant of every host operation (`workflows/parts/host_power.py`, README
"A host metalflow turned off"), model-checked: a Hypothesis state machine drives one run's
`PowerCustody` as the reboot, the reset and the host operations' runbooks drive it, with the
events in any order: ForceOff sent, power-on accepted or refused (the BMC rotated its password:
401), the backoff's timer, an operator's abort or retry, a cancel of the workflow (which tries On
afresh, once), a reboot child that left the host off (a reset's, a reprovision's, a
provision's), the credentials fixed or rotated again, a worker restart (the state rebuilt
through the data converter, as a replay has it).

At every step: a host off by the run's hand is being powered on with attempts left (never more
than `POWER_ON_RETRY_DELAYS` + 1 blind attempts, none of them ms apart), or a person was told
"the host ... is OFF" and offered `metalflow host retry` and `abort`; a run that ended left the
host on or says in its final words that it is OFF, and says "the host is on" only if it touched
the host's power or saw it On (a run that never did may follow one that left the host OFF);
`host-rebooted` is taken only with the host On.
"""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from pydantic import ValidationError

from activities.redfish.power import with_step
from contracts.converter import DATA_CONVERTER
from contracts.errors import BMCAuthenticationFailed
from contracts.models.host import OperationPolicy
from workflows.host_reboot.failure import off_step
from workflows.parts.host_power import (
    HOST_IS_OFF,
    HOST_IS_ON,
    POWER_NOT_TOUCHED,
    POWER_ON_RETRY_DELAYS,
    PowerCustody,
    ended_off,
    may_end,
    waits_rightly,
)

HOST = "host-002"
REFUSED = "BMCAuthenticationFailed: 401"


def _restarted(custody: PowerCustody) -> PowerCustody:
    """The custody as a restarted worker rebuilds it: through the run's data converter."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        [payload] = DATA_CONVERTER.payload_converter.to_payloads([custody])
    [decoded] = DATA_CONVERTER.payload_converter.from_payloads([payload], [PowerCustody])
    assert isinstance(decoded, PowerCustody)
    return decoded


class HostPowerModel(RuleBasedStateMachine):
    """One run's power custody, driven as the runbooks drive it."""

    def __init__(self) -> None:
        super().__init__()
        self.custody = PowerCustody(host_id=HOST)
        self.bmc_accepts = True  # the credentials the worker holds are the BMC's
        self.host_on = True  # the world: the BMC's PowerState
        self.phase_words = "working"
        self.ended: str | None = None  # the final status's words, once the run ended
        self.backoff: float | None = None  # a power-on attempt is due after this many seconds
        self.delays: list[float] = []
        self.accepted_at_cancel: bool | None = None  # the BMC took the credentials when cancelled
        self.attempts_since_cancel = 0
        self.powered = False  # the run sent the host a power action (or saw it On)

    # -- the world -----------------------------------------------------------------------------
    @rule()
    def credentials_fixed(self) -> None:
        self.bmc_accepts = True

    @rule()
    def password_rotated(self) -> None:
        self.bmc_accepts = False

    @rule()
    def worker_restart(self) -> None:
        self.custody = _restarted(self.custody)

    # -- the runbook -----------------------------------------------------------------------------
    @precondition(lambda self: self.ended is None and not self.custody.is_off)
    @rule()
    def force_off_sent(self) -> None:
        """ForceOff (a reset's, a reboot's cycle): a rotation right after it is the named fault."""
        self.custody.turned_off("ForceOff of the reset")
        self.host_on, self.powered = False, True
        self.phase_words = "the DPUs reset with the host off"

    @precondition(lambda self: self.ended is None and self.custody.is_off and not self.custody.handed_over)
    @rule()
    def power_on_attempt(self) -> None:
        """On sent (first, or after the backoff's timer): accepted, or refused (401)."""
        self._power_on()

    @precondition(lambda self: self.ended is None)
    @rule(how=st.sampled_from(["failed", "aborted"]))
    def run_ends_early(self, how: str) -> None:
        """A failure or an abort: the runbooks' early end powers a host off by their hand on
        first (not abortable), with the backoff; an abort while a person is asked ends the run at
        once, its words from `left()`."""
        if how == "failed" or not self.custody.handed_over:
            while self.custody.is_off and not self.custody.handed_over:
                self._power_on()
        if how == "failed" and self.custody.handed_over:
            return  # a failure with the host off waits for a person instead of ending
        self.ended = f"{how}. Done: ...; {self.custody.left()}"

    @precondition(lambda self: self.ended is None)
    @rule(outer_step=st.booleans())
    def cancelled(self, outer_step: bool) -> None:
        """A cancel (`temporal workflow cancel`, a parent's): whatever it cut (a backoff, a
        person's wait, an attempt), nobody is left to ask, so the attempts start afresh (a reset's
        cancel in its On backoff made one and ended with the host OFF); an outer step the cancel
        reaches next (`outer_step`: the reset's own `except`) asks the custody again and gets
        no second round."""
        self.accepted_at_cancel = self.bmc_accepts
        self.attempts_since_cancel = 0
        for _ in range(2 if outer_step else 1):
            if self.custody.cancelled():
                while self.custody.is_off and not self.custody.handed_over:
                    self._power_on()
        self.ended = f"cancelled. Done: ...; {self.custody.left()}"

    @precondition(lambda self: self.ended is None and not self.custody.is_off)
    @rule(runbook=st.sampled_from(["reset --host", "reprovision", "provision"]))
    def reboot_child_left_off(self, runbook: str) -> None:
        """`host reset --host`, a reprovision or a provision (workflows/host_operation/
        reboot_round.py): its reboot child turned the host off and spent its own attempts (it
        escalates `BMCRebootFailed` "is OFF"): the run hands the host to a person; a cancel then
        runs the reboot again once (`cancelled`, the same rule: issue 40, a cancelled reprovision
        said the host is OFF and sent no On)."""
        self.custody.left_off_by("the ForceOff of its reboot to generation 2", REFUSED)
        self.host_on, self.powered = False, True
        self.phase_words = self.custody.hand_over_words(then=f"the {runbook} goes on")

    @precondition(lambda self: self.ended is None and self.custody.handed_over)
    @rule()
    def operator_retry(self) -> None:
        self.custody.retried()
        self._power_on()

    @precondition(lambda self: self.ended is None)
    @rule()
    def operator_says_rebooted(self) -> None:
        """`host-rebooted`: taken only with the BMC showing On (or nothing owed)."""
        power = ("On" if self.host_on else "Off") if self.bmc_accepts else None
        refusal = self.custody.confirmation_refusal(power, "401")
        if refusal is None:
            if self.custody.is_off:
                self.custody.seen_on()
            assert self.host_on or not self.custody.is_off
        else:
            assert "still OFF" in refusal and "metalflow host retry" in refusal

    @precondition(lambda self: self.ended is None and not self.custody.is_off)
    @rule()
    def run_completes(self) -> None:
        self.ended = f"completed; {self.custody.left()}"

    def _power_on(self) -> None:
        self.attempts_since_cancel += 1
        self.powered = True
        if self.bmc_accepts:
            self.host_on = True
            self.custody.seen_on()
            self.phase_words = "working"
            return
        delay = self.custody.on_refused(REFUSED)
        if delay is None:
            self.phase_words = self.custody.hand_over_words(confirm=True)
        else:
            self.delays.append(delay)

    # -- the invariant ---------------------------------------------------------------------------
    @invariant()
    def never_off_in_silence(self) -> None:
        assert self.custody.is_off == (not self.host_on), "the custody lost track of the host's power"
        if self.ended is not None:
            assert may_end(self.custody, self.ended), f"ended with the host off, saying: {self.ended}"
            if not self.host_on:
                assert HOST_IS_OFF in self.ended
            if not self.powered:  # it knows nothing of the host's power: it claims nothing
                assert HOST_IS_ON not in self.ended and POWER_NOT_TOUCHED in self.ended, self.ended
            return
        assert waits_rightly(self.custody, self.phase_words), (
            f"host off, refused {self.custody.refused}, showing: {self.phase_words}"
        )
        if self.custody.handed_over:
            assert not self.host_on and HOST_IS_OFF in self.phase_words

    @invariant()
    def a_cancel_tries_on_afresh(self) -> None:
        """A cancelled run whose BMC took the credentials left the host on; one whose BMC refused
        made its full set of attempts after the cancel (never a second set)."""
        if self.accepted_at_cancel is None or not self.ended:
            return
        if self.accepted_at_cancel:
            assert self.host_on, f"cancelled with the BMC fixed, the host left off: {self.ended}"
        elif self.custody.is_off:
            assert self.attempts_since_cancel == len(POWER_ON_RETRY_DELAYS) + 1, self.attempts_since_cancel

    @invariant()
    def never_blind_attempts_ms_apart(self) -> None:
        assert all(d >= 1.0 for d in self.delays), self.delays
        assert self.custody.refused <= len(POWER_ON_RETRY_DELAYS) + 1


HostPowerModel.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    database=None,
    derandomize=True,  # the same event orders every run: each deliberate break is caught
    suppress_health_check=[HealthCheck.too_slow],
)
TestHostPowerModel = HostPowerModel.TestCase


def test_the_words_a_person_gets() -> None:
    custody = PowerCustody(host_id=HOST)
    custody.turned_off("ForceOff around the DPU resets")
    assert [custody.on_refused(REFUSED) for _ in range(3)] == [*POWER_ON_RETRY_DELAYS, None]
    words = custody.hand_over_words(confirm=True)
    assert f"the host {HOST} is OFF" in words and "ForceOff around the DPU resets" in words
    assert f"`metalflow host retry {HOST}`" in words and f"`metalflow host abort {HOST}`" in words
    assert f"`metalflow host-rebooted {HOST}` (accepted once the BMC shows it On)" in words
    assert "the host stays OFF" in words and REFUSED in words
    assert custody.left().startswith(f"the host {HOST} is OFF: metalflow turned it off")
    assert custody.confirmation_refusal("Off") is not None
    assert custody.confirmation_refusal("On") is None
    custody.seen_on()
    assert custody.left() == "the host is on" and custody.confirmation_refusal("Off") is None


@pytest.mark.parametrize(
    ("step", "off"),
    [("started", False), ("off_requested", True), ("off_reached", True), ("on_requested", True),
     ("cycle_requested", False), ("done", False)],
)  # fmt: skip
def test_a_failed_power_cycle_says_whether_it_may_have_left_the_host_off(step: str, off: bool) -> None:
    """The reboot knows the host is off by its hand from the step the failed cycle had reached
    (`activities/redfish/power.py` `with_step`, read by `off_step`): after its ForceOff, not
    before it, nor a PowerCycle the BMC completes itself."""
    refused = BMCAuthenticationFailed("BMC host-002: ... answered 401")
    carried = with_step(refused, step)
    assert (carried.type, carried.message, carried.non_retryable) == (refused.type, refused.message, True)
    assert off_step(carried) == (step if off else None)
    assert off_step(refused) is None


def test_a_run_that_never_touched_the_hosts_power_claims_nothing_of_it() -> None:
    """An aborted `host reset --dpu` (issue 40) said `the host is on` of a host an earlier run
    had left OFF, and the entity took it: a run that never powered the host on nor saw it On
    says so, not that the host is on; `may_end` refuses the claim."""
    custody = _restarted(PowerCustody(host_id=HOST))
    assert custody.left() == POWER_NOT_TOUCHED and HOST_IS_ON not in custody.left()
    assert not may_end(custody, f"aborted. Done: nothing was reset; {HOST_IS_ON}")
    assert may_end(custody, f"aborted. Done: nothing was reset; {custody.left()}")
    custody.seen_on()  # the BMC showed it On: now it may say so
    assert custody.left() == HOST_IS_ON and may_end(custody, f"completed; {HOST_IS_ON}")


def test_the_policy_sets_the_waits_between_power_on_attempts_within_bounds() -> None:
    """`power_on_retry_seconds`: 2 s and 4 s by default; a policy's own waits are the custody's,
    their count the attempts before a person is asked; no wait under 0.5 s (no two attempts
    milliseconds apart), none over 600 s, one to five of them."""
    assert OperationPolicy().power_on_retry_seconds == POWER_ON_RETRY_DELAYS == (2.0, 4.0)
    policy = OperationPolicy(power_on_retry_seconds=(0.5, 1.0, 8.0))
    custody = PowerCustody(host_id=HOST, retry_delays=policy.power_on_retry_seconds)
    custody.turned_off("ForceOff of its reboot")
    assert [custody.on_refused(REFUSED) for _ in range(4)] == [0.5, 1.0, 8.0, None]
    assert "after 4 attempts" in custody.hand_over_words()
    for wrong in ((), (0.0,), (0.1, 1.0), (601.0,), (1.0,) * 6, (float("inf"),)):
        with pytest.raises(ValidationError, match="power_on_retry_seconds"):
            OperationPolicy(power_on_retry_seconds=wrong)


def test_an_aborts_promise_matches_what_the_run_then_does_with_the_host_off() -> None:
    """The re-attack (B6): an aborted reset whose On kept failing promised "the host is powered
    on again first", then ended with the host OFF. The words now say what the run does: handed to
    a person, the host stays OFF; before, the attempts go on and may end it OFF too."""
    custody = PowerCustody(host_id="host-001", retry_delays=(1.0,))
    assert custody.abort_words() == ""  # not off by this run's hand: nothing to promise
    custody.turned_off("ForceOff")
    words = custody.abort_words()
    assert "attempts of the host host-001 go on first" in words and "saying the host is OFF" in words
    assert "powered on again" not in words, words
    custody.on_refused("401")
    custody.on_refused("401")  # spent: a person is asked
    assert custody.abort_words() == "; the host host-001 stays OFF and the run's end says so"


def test_a_run_whose_reboot_ended_with_the_host_off_says_so_in_a_sentence() -> None:
    """Attack L5: outcomes read `its power cycle to generation 2 ended with the host host-002 is
    OFF`. Now `... ended, and the host host-002 is OFF: ...`: grammatical, and still carrying
    `is OFF`, which the host's entity reads to mark the host."""
    custody = PowerCustody(host_id="host-002")
    custody.turned_off("the ForceOff of its reboot to generation 2")
    custody.on_refused("BMCAuthenticationFailed")
    words = ended_off("its power cycle to generation 2", custody.left())
    assert words.startswith("its power cycle to generation 2 ended, and the host host-002 is OFF: "), words
    assert HOST_IS_OFF in words and "ended with the host" not in words, words
