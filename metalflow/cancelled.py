"""A host operation cancelled in Temporal (`temporal workflow cancel`), in words, for `--wait`
(`metalflow.hosts.follow_operation`): a cancel carries no words in Temporal, so they are the
run's own final Phase details (what it did and left: each DPU, the host's power), said to be no
operator's abort (task B3 of issue 40; before: `failed: CancelledError: Workflow cancelled`)."""

from __future__ import annotations

from typing import Final

from contracts.run_words import METADATA_QUERY, final_details
from contracts.wording import cancel_left

__all__ = ["CANCELLED_WORDS", "METADATA_QUERY", "cancelled_words", "final_details"]

CANCELLED_WORDS: Final = (
    "cancelled in Temporal (`temporal workflow cancel` or its parent's close), not by an operator's abort"
)


def cancelled_words(details: str | None) -> str:
    """`CANCELLED_WORDS`, then what the run's final details (`**cancelled**: cancelled (the
    workflow was cancelled). Done: ...`) say it did and left; or that they could not be read."""
    done = cancel_left(details) if details else ""
    return CANCELLED_WORDS + (f". {done}" if done else ": what it did and left could not be read")
