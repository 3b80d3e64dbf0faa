"""Every phase `metalflow host list --phase P` can match: a host entity's, and its operations'.

The workflows own these words (the `Phase` search attribute they upsert through
`workflows.kernel.enter_phase`): the entity (`workflows/host/state.py`), provision and reprovision
(`workflows/host_operation/`), firmware (`firmware/`), removal (`removal/`) and `host reboot`
(`host_reboot/`). They are listed here so that `--phase` refuses a word no host
can be in before it connects, naming the words it takes, instead of listing nothing.
`tests/test_host_phases.py` holds this list to the workflows: every phase their code enters and
every phase their recorded histories show must be here, and every word here must be entered
somewhere. Monitors (`monitor/host-<id>`) are not an entity's children, so `host list` never shows
their phases. No cost at run time: a frozenset lookup while the arguments are parsed.
"""

from __future__ import annotations

from typing import Final

from contracts import names
from contracts.validation import safe

ENTITY_OPERATIONS: Final = (names.PROVISION, names.REPROVISION, names.FIRMWARE, names.REMOVE, names.REBOOT)

ENTITY_PHASES: Final = frozenset(
    {"idle", "awaiting-approval", *(f"running {operation}" for operation in ENTITY_OPERATIONS)}
)
"""A host entity's phase: idle, holding a request for approval, or running one operation."""

ENDINGS: Final = frozenset({"completed", "done", "rebooted", "failed", "aborted", "cancelled"})
"""Final phases: an operation shows one while its last handlers finish, just before it closes."""

OPERATION_PHASES: Final = ENDINGS | {
    # provision, reprovision
    "resolving-inventory",
    "registering-dpus",
    "deleting-dpus",
    "waiting-for-hold",
    "waiting-for-reboot-request",
    "rebooting-host",
    "waiting-for-dpf-after-reboot",
    "manual-intervention-required",
    # firmware
    "reading-versions",
    "staging",
    "waiting-for-dpf-idle",
    "power-cycling",
    "waiting-for-host",
    "waiting-for-dpus",
    "verifying",
    # remove
    "deleting",
    "force-deleting",
    "waiting-until-gone",
    # host reboot
    "powering",
    "waiting-for-manual-reboot",
}
"""The phases of an operation in flight on a host (its `Operation` is one of ENTITY_OPERATIONS)."""

KNOWN_PHASES: Final = ENTITY_PHASES | OPERATION_PHASES


def unknown_phase_message(text: str) -> str:
    """Why `text` is refused, with every phase that is taken (sorted, entity phases first)."""
    entity = ", ".join(sorted(ENTITY_PHASES))
    operation = ", ".join(sorted(OPERATION_PHASES))
    return (
        f"unknown phase {safe(text, 40)}: a host's phase is one of {entity}; "
        f"an operation's one of {operation}"
    )
