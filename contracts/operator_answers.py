"""One answer wins: an operator's `abort` and another's decision (`retry`, `mark_rebooted`) sent
to the same wait for a person within the same instant (issue 40: `host abort` and `host retry`
sent within a second to a run in manual-intervention-required were both answered "accepted",
and only the abort took effect: the retry's sender was told a lie).

A run takes the first of the two and refuses the second, naming the first and when it was
accepted: "abort refused: retry by bob accepted at 2026-11-29T23:58:01Z already". The first is
"taken" from its acceptance until the runbook acts on it (a decision: until the wait reads it;
an abort: until the run ends, it is never withdrawn). A later abort, once the retried step runs,
is an abort of that step and taken as usual. Pure: no Temporal, no I/O (kernel.Runbook and the
reboot's own `retry` call it from their validators).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from contracts.wording import iso_z


@dataclass(frozen=True)
class Answered:
    """An operator's answer a run accepted and has not acted on yet: which, who, when."""

    kind: str  # the update's name: "abort", "retry", "mark_rebooted"
    by: str
    at: datetime


def second_answer_refusal(kind: str, first: Answered | None) -> str | None:
    """Why the answer `kind` is refused because `first`, another answer to the same wait, was
    accepted already (None: nothing stands in its way here; the same kind twice is the
    validator's own "not awaited now")."""
    if first is None or first.kind == kind:
        return None
    return f"{kind} refused: {first.kind} by {first.by} accepted at {iso_z(first.at)} already"
