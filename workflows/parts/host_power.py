"""A host metalflow powered off is never left off in silence: the invariant, as pure decisions.

The rule (README, "Operating hosts", "A host metalflow turned off"): a host a run of metalflow
powered off is powered back on, or handed to a person in a manual-intervention phase whose
status says in words "the host ... is OFF" and offers `metalflow host retry` and a way out,
before the run ends, whatever ends it (a failure, an abort, a cancel, credentials rejected
mid-run). A run that ends with the host off says so in its final status.

`PowerCustody` is what one run knows of the host's power it answers for, and its decisions:

- `turned_off(how)` once a ForceOff may have been sent, `seen_on()` once an On succeeded (or the
  BMC showed On): between the two, the host is off by this run's hand (`is_off`).
- `on_refused(cause)`: a power-on that failed. Not two blind attempts milliseconds apart: the
  next attempt waits `retry_delays` (the policy's `power_on_retry_seconds`, by default
  `POWER_ON_RETRY_DELAYS`: a backoff on a durable timer, for a secrets store that is about to
  serve the new password), and once they are spent the answer is None: hand
  the host to a person (`handed_over`, the words in `hand_over_words`).
- `retried()`: a person's `retry` (the BMC fixed): the attempts start afresh.
- `cancelled()`: a cancel of the run (`temporal workflow cancel`, a parent's, the entity's) asks
  nobody, so whatever it interrupted (a backoff, a person's wait) the attempts start afresh
  before the run ends: True while an On is owed.
- `left_off_by(how, cause)`: a step of this run that powers the host itself (a reset's reboot
  child) ended with the host off, its own attempts spent: handed to a person at once.
- `left()`: the words every early end's status carries about the host's power: OFF (`HOST_IS_OFF`),
  on (`HOST_IS_ON`, only from a run that touched the host's power or saw it On), or, from a run
  that never did (a reset of DPUs only), `POWER_NOT_TOUCHED`: it knows nothing of the host's power,
  so it claims nothing (the entity keeps a host an earlier run left OFF marked: workflows/host/).
- `confirmation_refusal(power_state)`: a person's "I rebooted it" is taken only with the host seen On.

`may_end` and `waits_rightly` are the invariant itself, asserted by the model test
(tests/fast/test_host_power_model.py) at every step of random event orders.

Pure: no Temporal, no clock, no I/O; the state is pydantic, so a replayed or restarted worker
rebuilds the same custody from the run's history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pydantic import BaseModel

from contracts.models.host import OperationPolicy
from contracts.models.redfish import POWER_CYCLE_STEP, STEPS_HOST_MAY_BE_OFF

POWER_ON_RETRY_DELAYS: Final = OperationPolicy().power_on_retry_seconds
"""The default seconds before the second and the third power-on attempt after the first is
refused; after the third a person is asked. Short enough for a run that holds a BMC lease slot,
long enough for a credential rotation the secrets store catches up with."""

HOST_IS_OFF: Final = "is OFF"  # the words every status of a host left off carries
HOST_IS_ON: Final = "the host is on"  # said only by a run that powered the host on or saw it On
POWER_NOT_TOUCHED: Final = "host power not touched by this run"  # a run that never did either


def off_may_have_been_sent(answer: Sequence[Any] | None) -> bool:
    """Whether a failed ForceOff (`set_power_state`) may have reached the BMC, so the host may be
    off by this run's hand (`PowerCustody.turned_off`), from the details of the error the activity
    answered (`contracts.errors.activity_answer_details`). The activity says so in them: a
    `POWER_CYCLE_STEP` detail once a reset was sent, by the last attempt or an earlier one (its
    heartbeat). An error without it failed before anything was sent (a BMC never reached: the
    host is not touched, and no words say this run turned it off: attack 41a MEDIUM-2). None, a
    failure the activity did not answer (a timeout, a cancel, an abort or a cancel of the run
    that cut it short), says nothing: it may have sent."""
    if answer is None:
        return True
    return any(
        isinstance(detail, dict) and detail.get(POWER_CYCLE_STEP) in STEPS_HOST_MAY_BE_OFF
        for detail in answer
    )


def ended_off(what: str, off_words: str) -> str:
    """`what` (its reboot, its power cycle to generation N) ended with the host OFF, in words:
    `off_words` are the custody's ("the host H is OFF: metalflow turned it off ..."), kept whole,
    for the host's entity reads `is OFF` (`HOST_IS_OFF`) in an outcome. Before, `what ended with
    {off_words}` read "ended with the host H is OFF" (issue 40, attack L5)."""
    return f"{what} ended, and {off_words}"


class PowerCustody(BaseModel):
    """The host power one run answers for (see the module docstring)."""

    host_id: str
    retry_delays: tuple[float, ...] = POWER_ON_RETRY_DELAYS  # the policy's `power_on_retry_seconds`
    off_by: str = ""  # what of this run turned the host off; "" when it is not off by our hand
    refused: int = 0  # power-on attempts refused since the host went off (or since a retry)
    cause: str = ""  # the last refusal, in words
    handed_over: bool = False  # a person was asked: the attempts stopped
    cancel_seen: bool = False  # a cancel gave the attempts afresh once (`cancelled`)
    touched: bool = False  # this run turned the host off, or powered it on, or saw it On

    @property
    def is_off(self) -> bool:
        """The host is off by this run's hand, and no On has succeeded since."""
        return bool(self.off_by)

    def turned_off(self, how: str) -> None:
        """A ForceOff (or a cycle that turns the host off) may have been sent."""
        self.off_by, self.touched = how, True

    def seen_on(self) -> None:
        """An On succeeded (or the BMC showed the host On): nothing is owed any more."""
        self.off_by, self.refused, self.cause, self.handed_over = "", 0, "", False
        self.touched = True

    def on_refused(self, cause: str) -> float | None:
        """A power-on failed with `cause`: the seconds to wait before the next attempt, or None:
        the attempts are spent, hand the host to a person (`hand_over_words`)."""
        self.refused += 1
        self.cause = cause
        if self.refused <= len(self.retry_delays):
            return self.retry_delays[self.refused - 1]
        self.handed_over = True
        return None

    def abort_words(self) -> str:
        """What an abort asked now does to the host's power, for `abort_promise` ("" the host is
        not off by this run's hand): the promise matches the end (an abort never powers on a
        host a person was handed: that run ends saying the host is OFF; before, the attempts
        left go on, and their last refusal ends it OFF too)."""
        if not self.is_off:
            return ""
        if self.handed_over:
            return f"; the host {self.host_id} stays OFF and the run's end says so"
        return (
            f"; its power-on attempts of the host {self.host_id} go on first: it ends with the host "
            "on, or, if the BMC keeps refusing On, saying the host is OFF"
        )

    def retried(self) -> None:
        """A person answered `retry`: power-on attempts afresh."""
        self.refused, self.handed_over = 0, False

    def cancelled(self) -> bool:
        """A cancel: nobody is left to ask, so a host off by this run's hand gets its power-on
        attempts afresh, once (the backoff or the person's wait it cut counts for nothing). True
        while an On is owed with attempts left: attempt, `on_refused`, until seen On or the
        attempts are spent; then the run ends with `left()` (asked again, e.g. by an outer step
        the cancel reaches next, no second round: False once they are spent)."""
        if self.is_off and not self.cancel_seen:
            self.retried()
        self.cancel_seen = True
        return self.is_off and not self.handed_over

    def left_off_by(self, how: str, cause: str) -> None:
        """A step of this run that tries On itself (a reboot child, with its own backoff) ended
        with the host off: its attempts are spent, a person is asked (`hand_over_words`)."""
        self.off_by, self.cause, self.touched = how, cause, True
        self.refused, self.handed_over = len(self.retry_delays) + 1, True

    def hand_over_words(self, *, then: str = "goes on", confirm: bool = False) -> str:
        """The manual-intervention phase's details: the host is OFF, why, and every way on
        (`then`: what the run does once a retry powered the host on)."""
        host = self.host_id
        confirmed = ""
        if confirm:
            confirmed = (
                f", or power it on by hand and `metalflow host-rebooted {host}` "
                "(accepted once the BMC shows it On)"
            )
        return (
            f"the host {host} {HOST_IS_OFF}: metalflow turned it off ({self.off_by}) and could not "
            f"power it back on after {self.refused} attempts: {self.cause}. Fix the BMC, then "
            f"`metalflow host retry {host}` (powers it on and {then}){confirmed}, or "
            f"`metalflow host abort {host}` (the run ends; the host stays OFF)"
        )

    def left(self) -> str:
        """What the host's power is as the run ends, in words: a run that never touched it (nor
        saw it On) claims nothing: an earlier run may have left it OFF."""
        if not self.is_off:
            return HOST_IS_ON if self.touched else POWER_NOT_TOUCHED
        why = f" ({self.cause})" if self.cause else ""
        return (
            f"the host {self.host_id} {HOST_IS_OFF}: metalflow turned it off ({self.off_by}) and did not "
            f"power it back on{why}: power it on"
        )

    def confirmation_refusal(self, power_state: str | None, unread: str = "") -> str | None:
        """Why a person's "the host was rebooted" is refused (None: taken): while this run owes
        an On, only with the BMC showing the host On."""
        if not self.is_off or power_state == "On":
            return None
        seen = f"its power cannot be read ({unread})"
        if power_state:
            seen = f"the BMC says PowerState {power_state}"
        return (
            f"the host {self.host_id} is still OFF as far as metalflow can tell ({seen}): power it on "
            f"first, or fix the BMC and `metalflow host retry {self.host_id}`"
        )


def may_end(custody: PowerCustody, final_words: str) -> bool:
    """The invariant at a run's end: the host is on, or the final status says it is OFF; and it
    says the host is on only if this run powered it on or saw it On."""
    if custody.is_off:
        return HOST_IS_OFF in final_words
    return custody.touched or HOST_IS_ON not in final_words


def waits_rightly(custody: PowerCustody, phase_words: str) -> bool:
    """The invariant while a run goes on: a host off by our hand is being powered on (attempts
    left), or a person was told it is OFF and offered `retry` and a way out."""
    if not custody.is_off:
        return True
    if not custody.handed_over:
        return custody.refused <= len(custody.retry_delays)
    return HOST_IS_OFF in phase_words and "metalflow host retry" in phase_words and "abort" in phase_words
