"""Rollout helpers shared by the CLI and the demo: one status line, and the message that matters
in a failure chain. No Temporal calls here."""

from __future__ import annotations

from contracts.models.grove import RolloutStatus


def render(status: RolloutStatus, width: int = 30) -> str:
    """One line: phase, a bar of PodGangs done, what is in flight or why it is paused."""
    filled = int(width * status.done / status.total) if status.total else 0
    bar = "#" * filled + "-" * (width - filled)
    what = f"paused: {status.paused_reason}" if status.paused_reason else ""
    if not what and status.in_flight:
        what = f"replica {','.join(map(str, status.replicas))}: {', '.join(status.in_flight)}"
    back = " (rolling back)" if status.rolling_back else ""
    healed = f" healed {status.repairs}" if status.repairs else ""
    return f"{status.pcs} {status.phase}{back} [{bar}] {status.done}/{status.total}{healed} {what}".rstrip()


def root_cause(err: BaseException) -> str:
    """The innermost message of a failure chain (what an activity or validator said)."""
    while getattr(err, "cause", None) is not None:
        err = err.cause  # type: ignore[attr-defined]
    return str(err)
