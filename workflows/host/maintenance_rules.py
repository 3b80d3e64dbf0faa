"""A host's maintenance in words, and whether a request may start on a host in maintenance: the
entity's rule (`HostEntityState.refuse_request`), which the campaign's selection, `campaign plan`
and the monitor read the same way (issue 39). Pure: no Temporal, no I/O.

Split out of `workflows/host/state.py` (the 550-line house rule); `state` re-exports both names.
"""

from __future__ import annotations

from typing import Any

from contracts.host_requests import EntityRequest
from contracts.models.host import Maintenance
from contracts.wording import iso_z

__all__ = ["maintenance_refusal", "maintenance_words"]


def maintenance_words(maintenance: Maintenance) -> str:
    """A host's maintenance in words, as every refusal, skip and view says it."""
    return f"in maintenance since {iso_z(maintenance.since)}, set by {maintenance.by}: {maintenance.reason}"


def maintenance_refusal(
    host_id: str, maintenance: Maintenance | None, kind: EntityRequest[Any], in_maintenance: bool
) -> str | None:
    """May this request start on a host in maintenance? None: yes. Else the refusal in words.

    Every operation request is disruptive (each waits for `approve` on an assigned host: it powers
    the host, its DPUs or DPF's objects), so in maintenance each is refused unless the request
    says `in_maintenance` (an operator's `--in-maintenance`; the monitor and campaigns never say
    it). Read-only commands are no requests and never come here."""
    if maintenance is None or in_maintenance or not kind.approval:
        return None
    return (
        f"host {host_id} is {maintenance_words(maintenance)}; {kind.operation} refused "
        f"(to run it anyway: metalflow host {kind.command} {host_id} --in-maintenance ...; "
        f"to end the maintenance: metalflow host maintenance {host_id} off)"
    )
