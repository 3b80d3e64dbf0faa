"""A host power cycle that can never happen twice, however often its activity is retried.

The activity `power_cycle_host` takes the boot generation it brings the host to (for logs and the
result), `requested_at` (the workflow time the reboot was asked for) and resumes from its last
heartbeat details, a `PowerCycleProgress` whose `step` is one of `started`, `off_requested`,
`off_reached`, `on_requested`, `cycle_requested`, `done`.

What a retried attempt can trust, and what it cannot:

- The BMC's state is the truth: `PowerState`, and `LastResetTime` where the BMC exposes it.
- Heartbeat details are NOT written when `activity.heartbeat` returns: the SDK sends them at
  most once per throttle interval (0.8 x heartbeat timeout by default; the metalflow worker caps
  it at `activities.heartbeat.HEARTBEAT_THROTTLE`, 0.2 s), so a worker killed right after a
  heartbeat may lose its last step, and with the Temporal server down or unreachable nothing is
  recorded at all, however long one waits. The design therefore never relies on a step being
  recorded unless it saw the record: before every reset that cannot be repeated safely, it
  records the step and reads the details back from the server (`confirm`, see
  `activities.heartbeat.wait_until_recorded`), sending the reset only once they are there (the
  read-backs start at once: no blind wait for the throttle; without a server, the CLI and unit
  tests wait `flush_seconds` instead); a server that stays away fails the attempt without
  sending (`ProgressNotRecorded`), and the next attempt resumes from what was recorded.
  `ForceOff` needs no such wait: repeating it cannot turn a host on.

Requests per cycle (first cycle on a BMC with a session; later ones skip Systems): login,
Systems, System, then PowerCycle + polls until it shows (+ the task monitor on BMCs
that answer 202), or ForceOff + polls until Off, On + polls until On; logout. A wait's last
reading is the next decision's input, never read again.

Two ways to cycle, chosen from what the BMC offers (`System.power_cycle_method`):

1. `ForceOff+On` (BMCs without `PowerCycle`, or without `LastResetTime`): the host only comes
   back On when we send On, so every crash point is unambiguous:
   - crash before or right after sending ForceOff (step `started`/`off_requested`): the next
     attempt finds the host On (ForceOff not taken) -> ForceOff again, harmless; or
     PoweringOff/Off -> wait for Off and go on. No On has been sent: On is only sent once the
     `off_reached` step is durable (recorded, then flushed during `power_down_wait`).
   - crash after `off_reached` (recorded and flushed), before or after sending On: the next
     attempt finds the host Off -> sends On (On to a host already coming on is harmless), or
     PoweringOn/On -> waits for On and is done. Finding it On with step >= `off_reached` means
     the host was Off, then On: never ForceOff again. At `on_requested` the On was ours; at
     `off_reached` it was not sent yet, so another actor turned the host on during the
     power-down wait (`turned_on_by_other` in the result: the Off-On is the cycle; the reboot
     says so). One ambiguity: a worker killed between sending On and the SDK sending the
     `on_requested` step reads the same, so our own On may rarely be reported as another's.
   - another actor that turns the host On before a ForceOff is ever seen Off: the next attempt
     sends ForceOff once more (as for a ForceOff not taken); after two accepted ForceOffs the
     cycle stops with `PowerContested` (permanent: a person decides) instead of looping
     against the other actor. A power-down wait of `hand_back_wait_over_seconds` or less is
     spent in the activity and not watched (no request is added to look): On is sent after it.
   A host that is already Off when the cycle starts just gets On. Between Off and On it waits
   `power_down_wait_seconds` (docs/DOMAIN.md section 1), counted from when Off was reached.
   With `hand_back_wait_over_seconds` (the reboot workflow sets it) a longer wait is not spent
   in the activity: at `off_reached` it returns the progress and the time left; the workflow
   waits on a durable timer and calls again with `resume`, which sends On. The step is then
   durable as the activity's result, in the history, so On still follows only a durable
   `off_reached`; a stop cuts the timer and sends On at once. Why: a long wait heartbeated
   inside the activity sends a heartbeat every beat interval, each a billable Action on Temporal
   Cloud and a server write; handed back, a ForceOff+On cycle sends a handful, plus one timer
   and one activity (figures: bench/README.md).
2. Native `PowerCycle`, only where `LastResetTime` is exposed: after sending it the host may
   read On both before and after the cycle, so only `LastResetTime` can tell. The step
   `cycle_requested` with the `LastResetTime` read just before is recorded and confirmed before
   PowerCycle is sent (and, unless the BMC's `Date` shows LastResetTime 2 s or more in the
   past, 1 s after that reading, so the cycle's own LastResetTime differs); a retry then
   compares: changed -> the cycle happened (wait for On, done); unchanged and On -> it was not
   taken, send it again after a settle window (a BMC that answered 5xx may still act). This
   compares the BMC's clock with itself, so clock skew between the BMC and Temporal does not
   matter.

3. `ForceRestart`, a warm reset, only when the request asks for it (`warm`: DPF's reboot method
   is lesser than PowerCycle, docs/DOMAIN.md section 2.5) and the BMC offers ForceRestart and
   exposes `LastResetTime`: exactly as the native `PowerCycle` (the host may read On before and
   after, so only `LastResetTime` tells). Otherwise the request gets a cold cycle (1 or 2),
   which meets every method.

A fresh attempt (no details: a new activity for the same generation after an earlier one failed
for good) on a BMC with `LastResetTime` first checks `LastResetTime > requested_at`: when so,
the host was reset after the reboot was asked for, and the cycle is reported `already_done`
without touching the host. This one check compares clocks (BMC vs workflow) at one-second
resolution: a BMC clock that is wrong by more than the time between request and cycle can
defeat it, which is why it is only the fallback. A BMC without `LastResetTime` leaves no trace
of a finished cycle; a workflow must not start a second activity for a generation whose first
activity ended in a non-retryable error after `off_reached` without a person looking.

A BMC that advertises `PowerCycle` but answers it 501 Not Implemented (or 400
`ActionNotSupported`) has not cycled: the same attempt falls back to `ForceOff+On` from step
`started` (see `_send_power_cycle`), and the BMC is remembered as unable to PowerCycle.

Transient refusals inside an attempt (409 after power-off, 503 with Retry-After, 5xx, timeouts)
are waited out, re-reading the BMC each time, until the attempt's own deadline (3 x the
per-transition timeout plus the power-down wait, from the attempt's start); then the activity
fails with `BMCUnavailable`/`PowerStateTimeout` and the next attempt resumes. Meanwhile the
progress says so (`bmc_problem`: the last error's words, since when the BMC has not answered,
and until about when this attempt keeps trying), cleared when the BMC answers again, so `host
status` can tell a person early (the activity wires it to the connection's hooks).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from contracts import metrics
from contracts.errors import BMCUnavailable, PowerContested, PowerStateTimeout, ResetTypeNotSupported
from contracts.models.redfish import PowerCycleInput, PowerCycleProgress, PowerCycleResult, PowerCycleStep
from contracts.secret_free import secret_free
from drivers.redfish.connection import BMCConnection
from drivers.redfish.system import (
    System,
    as_utc,
    find_system,
    parse_time,
    read_system,
    reset_since,
    send_reset,
    wait_for_power,
)

log = logging.getLogger("metalflow.redfish.powercycle")

_SETTLE_SECONDS = 5.0  # watch for a PowerCycle that was taken before sending it again
# Many BMCs give LastResetTime to the second: a cycle sent at least this long after reading it
# always shows a different value when it ends.
_LAST_RESET_RESOLUTION_SECONDS = 1.0
_EITHER = frozenset({"On", "Off"})
_FORCE_OFFS_BEFORE_A_PERSON = 2  # accepted ForceOffs never seen Off before a person decides


def _now() -> datetime:
    return datetime.now(UTC)


class _HandBack(Exception):  # noqa: N818 - a return path, not an error
    """Off, with this much power-down wait left: return it to the workflow (see `_power_on`)."""

    def __init__(self, left: float) -> None:
        super().__init__(left)
        self.left = left


class PowerCycle:
    """One attempt at one power cycle; `run` is safe to call again in a new attempt with `resume`.

    Args:
        connection: The BMC connection; its `on_wait` is set to heartbeat this cycle's progress.
        request: What to cycle and how long to wait.
        resume: The progress the previous attempt recorded, or None for a first attempt.
        persist: Records progress durably (the activity's `heartbeat`); called on every poll too.
        flush_seconds: How long a recorded step takes to be sent (see the module docstring).
        confirm: Returns once the recorded progress is shown by Temporal, raises when it is not
            within the given seconds; None (the CLI, tests without a server) trusts the wait.
        attempt: The attempt number, for the result.
        on_step: Told every step as it is taken (the CLI prints them).
        attempt_ends_by: When the attempt is ended from outside (the activity's start-to-close),
            if before its own deadline: the `bmc_retry_until` said is the earlier of the two.
    """

    def __init__(
        self,
        connection: BMCConnection,
        request: PowerCycleInput,
        resume: PowerCycleProgress | None,
        *,
        persist: Callable[[PowerCycleProgress], None],
        flush_seconds: float,
        confirm: Callable[[PowerCycleProgress, float], Awaitable[None]] | None = None,
        attempt: int = 1,
        on_step: Callable[[str], None] | None = None,
        attempt_ends_by: datetime | None = None,
    ) -> None:
        self._connection = connection
        self._attempt_ends_by = attempt_ends_by
        self._gives_up_at: datetime | None = None  # `run`'s deadline, on the wall clock
        self._request = request
        self._resumed = resume is not None
        # A first attempt that resumes nothing: its first read is the host as we found it (a later
        # attempt's may follow a ForceOff whose step was never recorded: not said to be theirs).
        self._fresh = resume is None and attempt == 1
        self._first_power_state: str | None = None
        self.progress = resume or PowerCycleProgress(started_at=_now())
        self._persist = persist
        self._flush_seconds = flush_seconds
        self._confirm = confirm
        self._attempt = attempt
        self._on_step = on_step
        self._unflushed_since: float | None = None
        # LastResetTime at this attempt's first read and at its latest (the result's
        # `last_reset_time`: the latest, when it moved since the first).
        self._mark_at_start: str | None = None
        self._mark_now: str | None = None
        connection.on_wait = lambda: self._persist(self.progress)

    def _say(self, text: str, level: int = logging.DEBUG) -> None:
        # Each inner step at DEBUG: at INFO the worker log says one line per power cycle (the
        # activity's start; the reboot workflow's end); a busy BMC or a fallback is INFO.
        bmc, generation = self._connection.bmc_id, self._request.boot_generation
        log.log(level, "BMC %s generation %d: %s", bmc, generation, text)
        if self._on_step is not None:
            self._on_step(text)

    def _record(self, step: PowerCycleStep, **changes: object) -> None:
        update: dict[str, object] = {"step": step, "steps": (*self.progress.steps, step), **changes}
        self.progress = self.progress.model_copy(update=update)
        self._persist(self.progress)
        self._say(step)

    async def _send(self, system: System, reset_type: str) -> None:
        """Send a reset; once the BMC accepted it, it counts in the result's `reset_types`."""
        await send_reset(self._connection, system, reset_type, self._deadline())
        self.progress = self.progress.model_copy(
            update={"reset_types": (*self.progress.reset_types, reset_type)}
        )
        self._say(f"{reset_type} accepted")

    async def _flush(self, at_least: float = 0.0) -> None:
        """Wait until Temporal has recorded the last recorded step (raises when it does not).

        With `confirm` it reads the step back from the server and returns as soon as it shows
        (no blind wait for the SDK's throttle); without (the CLI, unit tests) it waits
        `flush_seconds`. Either way not before `at_least` seconds since the step was recorded.
        """
        if self._unflushed_since is None:
            return
        wait = at_least if self._confirm is not None else max(self._flush_seconds, at_least)
        if self._confirm is not None:
            await self._confirm(self.progress, self._request.timeout_seconds)
        left = self._unflushed_since + wait - time.monotonic()
        if left > 0:
            await self._connection.sleep(left)
        self._unflushed_since = None

    async def run(self) -> PowerCycleResult:
        """Carry the cycle to its end from wherever the previous attempt left it."""
        request = self._request
        retry_for = 3 * request.timeout_seconds + request.power_down_wait_seconds
        attempt_deadline = time.monotonic() + retry_for
        self._gives_up_at = _now() + timedelta(seconds=retry_for)
        while True:
            try:
                return await self._drive()
            except _HandBack as back:
                self._say(f"Off: handing the power-down wait back ({back.left:.1f} s left)", logging.INFO)
                return self._result().model_copy(
                    update={"wait_left_seconds": back.left, "progress": self.progress}
                )
            except BMCUnavailable as err:
                self._connection.note_problem(err)
                if time.monotonic() >= attempt_deadline:
                    raise
                delay = err.next_retry_delay.total_seconds() if err.next_retry_delay else 1.0
                self._say(f"BMC unavailable ({err.message}); again in {delay:g} s", logging.INFO)
                await self._connection.sleep(min(delay, max(0.0, attempt_deadline - time.monotonic())))

    def bmc_problem(self, words: str) -> None:
        """The BMC did not answer, or answered an error (`words`: the transient error waited
        out): the progress says so, with since when (the first such error since it last
        answered with a success), whether any was an error answer (`bmc_answered_error`: not
        silence) and until about when this attempt keeps trying. Recorded (a beat) only when
        that changes; secret-free words."""
        until = min((t for t in (self._gives_up_at, self._attempt_ends_by) if t is not None), default=None)
        since = self.progress.bmc_silent_since
        self._note_bmc(
            bmc_problem=secret_free(words),
            bmc_silent_since=since or _now(),
            bmc_retry_until=until,
            bmc_answered_error=self._connection.last_problem_answered
            or (since is not None and self.progress.bmc_answered_error),
        )

    def bmc_answered(self) -> None:
        """The BMC answered a request: whatever the progress said of it not answering is over."""
        if self.progress.bmc_problem is not None:
            self._note_bmc(
                bmc_problem=None, bmc_silent_since=None, bmc_retry_until=None, bmc_answered_error=False
            )

    def _note_bmc(self, **changes: object) -> None:
        progress = self.progress.model_copy(update=changes)
        if progress != self.progress:
            self.progress = progress
            self._persist(progress)

    async def _drive(self) -> PowerCycleResult:
        connection = self._connection
        first = await find_system(connection)
        uri = first.uri
        if self._mark_at_start is None:
            self._mark_at_start = first.last_reset_time or ""
        if self._first_power_state is None and self.progress.step == "started" and self._fresh:
            self._first_power_state = first.power_state  # before anything of ours was sent
        seen: System | None = first  # the reading a wait ended on: not read again
        while True:
            system = seen or await read_system(connection, uri)
            seen = None
            self._mark_now = system.last_reset_time
            if self.progress.method is None:
                self._choose_method(system)
            step, state = self.progress.step, system.power_state
            if step == "done":
                return self._result()
            if state not in _EITHER:  # PoweringOn/PoweringOff/Paused: let it settle first
                seen = await wait_for_power(connection, uri, _EITHER, self._deadline())
                continue
            if state == "On":
                if step == "off_reached":
                    # Off was read and our On not sent (`on_requested` is recorded before On is):
                    # another actor turned the host on during the power-down wait. The host was
                    # Off, then On: that is the cycle; never ForceOff again to fight them.
                    self._say("On before this cycle sent On: turned on by someone else", logging.INFO)
                    return self._finish(turned_on_by_other=True)
                if step == "on_requested":
                    return self._finish()  # our On was sent (only ever after off_reached was durable)
                if step == "cycle_requested":
                    if system.last_reset_time != self.progress.last_reset_before:
                        return self._finish()
                    if await self._cycle_seen(uri, settle=True):
                        return self._finish()
                    self._record("cycle_requested")
                    if await self._send_power_cycle(system) and await self._cycle_seen(uri, settle=False):
                        return self._finish()
                    continue
                if not self._resumed and self._reset_since_request(system):
                    return self._finish(already_done=True)
                if self.progress.method in ("PowerCycle", "ForceRestart"):
                    self._record("cycle_requested", last_reset_before=system.last_reset_time)
                    self._unflushed_since = time.monotonic()
                    await self._flush(at_least=self._last_reset_resolution(system))
                    if await self._send_power_cycle(system) and await self._cycle_seen(uri, settle=False):
                        return self._finish()
                else:
                    self._refuse_to_fight()
                    self._record("off_requested")
                    await self._send(system, "ForceOff")
                    seen = await wait_for_power(connection, uri, frozenset({"Off"}), self._deadline())
                continue
            seen = await self._power_on(system, uri, step)

    def _refuse_to_fight(self) -> None:
        """About to send ForceOff to a host found On: the first one, or one more after a ForceOff
        the BMC accepted but that was never seen Off (not taken, or a crash: harmless to repeat
        once). After two accepted and the host On again, another actor is turning it back on:
        sending a third would loop against them (the bare-metal manager's 14-hour loop,
        simulators/redfish/BEHAVIOUR.md F6), so a person decides (`PowerContested`)."""
        accepted = self.progress.reset_types.count("ForceOff")
        if accepted >= _FORCE_OFFS_BEFORE_A_PERSON:
            raise PowerContested(
                f"BMC {self._connection.bmc_id}: the host is On again after {accepted} ForceOffs the BMC "
                "accepted, never seen Off: another actor keeps turning it on; no ForceOff sent again "
                "(stop the other actor, then reboot the host and confirm it)"
            )

    async def _send_power_cycle(self, system: System) -> bool:
        """Send PowerCycle (or the warm ForceRestart); False when the BMC refused it as not
        implemented and we fell back to a cold ForceOff+On.

        A 501 (or `ActionNotSupported`) means the cycle was not taken: the same attempt goes on
        with ForceOff / wait Off / On, from step `started`, so the main loop sends ForceOff (safe
        to repeat) and On only once Off is durable, exactly as for a BMC without PowerCycle. The
        BMC is remembered as unable to PowerCycle for the rest of this worker's life.
        """
        native = "ForceRestart" if self.progress.method == "ForceRestart" else "PowerCycle"
        try:
            await self._send(system, native)
        except ResetTypeNotSupported as err:
            self._say(
                f"{native} refused as not implemented ({err.message}); falling back to ForceOff+On",
                logging.INFO,
            )
            self._record("started", method="ForceOff+On")
            return False
        return True

    async def _power_on(self, system: System, uri: str, step: PowerCycleStep) -> System:
        """The host is Off: make `off_reached` durable, wait power_down_wait, send On, wait for On.

        Returns the reading the wait ended on (On, or Off when the host fell back)."""
        if step in ("started", "off_requested", "cycle_requested"):
            # Found Off at the very start: it was off before us, no power-down wait is owed.
            off_at = None if step == "started" else _now()
            self._record("off_reached", off_reached_at=off_at)
            self._unflushed_since = time.monotonic()
        off_at = self.progress.off_reached_at
        if off_at is not None:
            left = (off_at - _now()).total_seconds() + self._request.power_down_wait_seconds
            hand_back = self._request.hand_back_wait_over_seconds
            if hand_back is not None and left > hand_back:
                raise _HandBack(left)  # the workflow waits on a durable timer: no heartbeats
            if left > 0:
                self._say(f"power_down_wait: {left:.1f} s before On")
                await self._connection.sleep(left)
        await self._flush()
        self._record("on_requested")
        await self._send(system, "On")
        # A host may read PoweringOn and fall back to Off: the caller's loop then sends On again.
        return await wait_for_power(
            self._connection, uri, frozenset({"On"}), self._deadline(), fallback=frozenset({"Off"})
        )

    async def _cycle_seen(self, uri: str, *, settle: bool) -> bool:
        """Poll until `LastResetTime` moved and the host is On.

        With `settle` (before sending PowerCycle again) a short watch: False when nothing moved.
        Otherwise the full wait: False when the host stopped at Off (the main loop sends On);
        `PowerStateTimeout` when it is neither cycled nor Off at the deadline.
        """
        wait = (
            min(self._request.timeout_seconds, _SETTLE_SECONDS) if settle else self._request.timeout_seconds
        )
        deadline = time.monotonic() + wait
        state = "unknown"
        went_down = False  # seen leaving On: the cycle is under way even if LastResetTime lags
        while True:
            self._connection.heartbeat()
            try:
                system = await read_system(self._connection, uri)
            except BMCUnavailable as err:
                self._connection.note_problem(err)
            else:
                state = system.power_state
                self._mark_now = system.last_reset_time
                went_down = went_down or state != "On"
                if state == "On" and (went_down or system.last_reset_time != self.progress.last_reset_before):
                    return True
            if time.monotonic() >= deadline:
                if settle or state == "Off":
                    return False
                raise PowerStateTimeout(
                    f"BMC {self._connection.bmc_id}: PowerCycle was accepted but LastResetTime did not move "
                    f"and the host was not On again within {wait:g} s (last seen: {state})"
                )
            await self._connection.sleep(0.25)

    def _choose_method(self, system: System) -> None:
        method = system.power_cycle_method
        if self._request.warm and system.allows("ForceRestart") and system.last_reset_time is not None:
            self.progress = self.progress.model_copy(update={"method": "ForceRestart"})
            self._say("warm reset by ForceRestart")
            return
        needed = ("PowerCycle", "On") if method == "PowerCycle" else ("ForceOff", "On")
        missing = [t for t in needed if not system.allows(t)]
        if missing:
            raise ResetTypeNotSupported(
                f"BMC {self._connection.bmc_id}: cannot power cycle: ResetType {', '.join(missing)} not "
                f"offered (offered: {', '.join(system.allowed) or 'none'})"
            )
        self.progress = self.progress.model_copy(update={"method": method})
        self._say(f"power cycle by {method}")

    @staticmethod
    def _last_reset_resolution(system: System) -> float:
        """How long after reading `LastResetTime` a PowerCycle may be sent so that its own
        LastResetTime differs: none when the BMC's clock (its `Date` header) already read 2 s or
        more past it (a cycle cannot then land in the same second, even with 1 s between the
        clock of Date and that of LastResetTime); else `_LAST_RESET_RESOLUTION_SECONDS`."""
        last, now = parse_time(system.last_reset_time), system.bmc_date
        if last is not None and now is not None and (now - last).total_seconds() >= 2:
            return 0.0
        return _LAST_RESET_RESOLUTION_SECONDS

    def _reset_since_request(self, system: System) -> bool:
        if not reset_since(system.last_reset_time, self._request.requested_at):
            return False
        requested = as_utc(self._request.requested_at).isoformat()
        self._say(f"LastResetTime {system.last_reset_time} is after the request ({requested})")
        return True

    def _deadline(self) -> float:
        return time.monotonic() + self._request.timeout_seconds

    def _finish(self, *, already_done: bool = False, turned_on_by_other: bool = False) -> PowerCycleResult:
        self._record("done")
        result = self._result(already_done=already_done)
        if turned_on_by_other:
            result = result.model_copy(update={"turned_on_by_other": True})
        return metrics.activity_power_cycle(result)

    def _result(self, *, already_done: bool = False) -> PowerCycleResult:
        progress = self.progress
        sent = progress.reset_types
        method = (
            "PowerCycle" if "PowerCycle" in sent else "ForceOff+On" if "ForceOff" in sent
            else "ForceRestart" if "ForceRestart" in sent
            else "On" if "On" in sent else progress.method or "ForceOff+On"
        )  # fmt: skip
        return PowerCycleResult(
            bmc_id=self._connection.bmc_id,
            boot_generation=self._request.boot_generation,
            method=method,
            steps=progress.steps,
            reset_types=sent,
            already_done=already_done,
            off_reached_at=progress.off_reached_at,
            started_at=progress.started_at or _now(),
            finished_at=_now(),
            attempts=self._attempt,
            requests=self._connection.requests,
            first_power_state=self._first_power_state or "",
            last_reset_time=parse_time(self._mark_now) if self._mark_now != self._mark_at_start else None,
        )
