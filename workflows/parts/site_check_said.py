"""A host operation started under the kept `metalflow site check`'s degraded verdict says so where
it runs, not only on the CLI's stderr (issue 36 deliver 4; a rollout says it too, in its status's
warnings and the UI).

The CLI hands the words to the request (`OperationRequest.site_check` and its kin), the entity to
the operation's input; a runbook deriving from `SiteCheckSaid` sets `site_check` from its input.
Its first phase says the words (so its start Event and its first log line do: the worker's
Kubernetes Events follow phase changes), every phase's details in the UI end with them, and its
status carries them (each workflow's `status`). Nothing else changes: the operation runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.common import SearchAttributeUpdate

from workflows import kernel


def said(details: str, site_check: Sequence[str]) -> str:
    """`details` followed by the site check's words (unchanged without any)."""
    words = "; ".join(site_check)
    return f"{details} (site check: {words})" if words else details


class SiteCheckSaid(kernel.Runbook):
    """A runbook whose phases say the site check's words it started under (the module docstring)."""

    site_check: tuple[str, ...] = ()
    _site_check_said: bool = False

    def enter(
        self, phase: str, details: str, *, log: bool = True, also: Sequence[SearchAttributeUpdate[Any]] = ()
    ) -> None:
        """As `kernel.Runbook.enter`; the run's first phase (its start Event, its log line) says the
        words, and the UI's details say them in every phase. `self.details` stays the phase's own."""
        first = bool(self.site_check) and not self._site_check_said
        self._site_check_said = self._site_check_said or first
        super().enter(phase, said(details, self.site_check) if first else details, log=log, also=also)
        self.details = details
        if self.site_check and not first:
            kernel.set_details(phase, said(details, self.site_check))

    def show(self, details: str) -> None:
        """As `kernel.Runbook.show`, the UI's details ending with the words."""
        super().show(details)
        if self.site_check:
            kernel.set_details(self.phase, said(details, self.site_check))
