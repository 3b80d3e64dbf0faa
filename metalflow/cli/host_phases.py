"""Every phase `metalflow host list --phase P` can match: a host entity's, and its operations'.

The workflows own these words (the `Phase` search attribute they upsert through
`workflows.kernel.enter_phase`): the entity (`workflows/host/state.py`) and the child workflow of
each operation request. Each request's row (`contracts.host_requests.ENTITY_REQUESTS`) names its
operation and the phases its child shows, so every list here is read from the table: a new row is
taken without an edit here. They are listed so that `--phase` refuses a word no host can be in
before it connects, naming the words it takes, instead of listing nothing.
`tests/test_host_phases.py` holds the rows to the workflows: every phase a child's code enters
and every phase the recorded histories show must be its row's, and every word of a row must be
entered by its child. Monitors (`monitor/host-<id>`) are not an entity's children, so `host list`
never shows their phases. No cost at run time: a frozenset lookup while the arguments are parsed.
"""

from __future__ import annotations

from typing import Final

from contracts.host_requests import ENTITY_REQUESTS
from contracts.validation import safe
from metalflow.seen import as_running

ENTITY_OPERATIONS: Final = tuple(kind.operation for kind in ENTITY_REQUESTS)

ENTITY_PHASES: Final = frozenset(
    {"idle", "awaiting-approval", *(f"running {operation}" for operation in ENTITY_OPERATIONS)}
)
"""A host entity's phase: idle, holding a request for approval, or running one operation."""

EARLY_ENDINGS: Final = frozenset({"failed", "aborted", "cancelled"})
"""The kernel's final phases of a run that ends early (`workflows.kernel.ending`)."""

ENDINGS: Final = EARLY_ENDINGS | {kind.ended for kind in ENTITY_REQUESTS}
"""Final phases: an operation shows one while its last handlers finish, just before it closes."""

OPERATION_PHASES: Final = ENDINGS | {phase for kind in ENTITY_REQUESTS for phase in kind.phases}
"""The phases of an operation in flight on a host (its `Operation` is one of ENTITY_OPERATIONS)."""


def shown(phase: str) -> str:
    """An operation's phase as every status prints it: `metalflow.hosts.as_running`'s (a run in
    its final phase that has not closed reads `finishing`), so `host list`, `host status` and
    `--wait` say one word for one state."""
    return str(as_running({"phase": phase})["phase"])


SHOWN_PHASES: Final = frozenset(shown(phase) for phase in OPERATION_PHASES)
"""The operation phases a status prints (`finishing` among them): derived, never listed."""

NO_ENTITY: Final = "no entity"
"""The PHASE `host list` prints for a host whose entity no longer runs (terminated by hand) while
its operation does: no workflow upserts it, the listing joins it (`host_list._join`); `--phase
"no entity"` lists those hosts."""

KNOWN_PHASES: Final = ENTITY_PHASES | {NO_ENTITY} | OPERATION_PHASES | SHOWN_PHASES


def shown_as(phase: str) -> frozenset[str]:
    """The phases a workflow upserts that a status prints as `phase` (`finishing`: the endings),
    for a visibility query: `--phase finishing` finds what `--wait` called finishing."""
    return frozenset({phase} | {raw for raw in OPERATION_PHASES if shown(raw) == phase})


def unknown_phase_message(text: str) -> str:
    """Why `text` is refused, with every phase that is taken (sorted, entity phases first)."""
    entity = ", ".join([*sorted(ENTITY_PHASES), NO_ENTITY])
    operation = ", ".join(sorted(OPERATION_PHASES | SHOWN_PHASES))
    return (
        f"unknown phase {safe(text, 40)}: a host's phase is one of {entity}; "
        f"an operation's one of {operation}"
    )
