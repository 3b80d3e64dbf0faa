"""The simulated site's state across restarts: a snapshot of the Kubernetes-compatible store.

`metalflow dev` keeps Temporal's history in its state dir (`temporal.db`); a site that started
empty next to it would contradict that history (the hosts' entities say "provisioned", DPF has
no DPU), and an operation would then wait its whole phase timeout on objects that never come.
So with `--persist` the simulator writes `<state-dir>/sim-store.json` on shutdown and every
`SNAPSHOT_SECONDS` while anything changed, and loads it at start, before its controllers sync.

What is kept: every stored object (DPF and Grove objects, Secrets, namespaces), the resource
version, and what each BMC keeps across a restart (`simulators/redfish/keep.py`): its
`LastResetTime`, a host's power state, a power transition in flight and its power log (the newest
`keep.LOG_KEPT` entries), a DPU's firmware (running, staged) and Arm state. Real BMCs keep them
when the site's manager restarts (redfish BEHAVIOUR.md L1, L2): a site that came back with every
host On and every DPU at its generated firmware made the product report power changes and resets
nobody made. What is not: sessions, tasks and named faults (the DPF controller re-reads every object when it
starts, as a real operator does after a restart). A kill -9 loses at most the last
`SNAPSHOT_SECONDS` of changes.

Cost: per `SNAPSHOT_SECONDS`, one read of every BMC's kept state (a small dict each) to compare,
and one JSON dump of the store and that state only when either changed (a few kB per host); no
write per request.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulators.kube.store import Store

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "sim-store.json"
SNAPSHOT_SECONDS = 5.0
FORMAT = 1


class SnapshotMismatch(ValueError):
    """The snapshot in the state dir is of another site (other hosts)."""


class StoreSnapshots:
    """Load, save and periodically save one store's snapshot in a state dir."""

    def __init__(
        self,
        store: Store,
        state_dir: Path,
        host_ids: list[str],
        kept: Callable[[], dict[str, dict[str, Any]]] = dict,
        restore_kept: Callable[[dict[str, dict[str, Any]]], None] = lambda _: None,
    ) -> None:
        """`kept` reads what the BMCs keep, by BMC id (`keep.py`); `restore_kept` gives it back."""
        self.store = store
        self.path = state_dir / SNAPSHOT_FILE
        self.host_ids = sorted(host_ids)
        self.kept, self.restore_kept = kept, restore_kept
        self._saved_rv = -1
        self._saved_kept: dict[str, dict[str, Any]] = {}
        self._task: asyncio.Task[None] | None = None

    def load(self) -> int | None:
        """Restore the snapshot when there is one; returns the objects restored, None without one.

        Raises:
            SnapshotMismatch: It was written for other hosts, or cannot be read.
        """
        if not self.path.exists():
            return None
        try:
            data: dict[str, Any] = json.loads(self.path.read_text())
        except (OSError, ValueError) as err:
            raise SnapshotMismatch(f"cannot read {self.path}: {err}") from err
        if data.get("format") != FORMAT or data.get("hosts") != self.host_ids:
            raise SnapshotMismatch(
                f"{self.path} holds a simulated site of hosts {', '.join(data.get('hosts') or []) or '?'}, "
                f"not {', '.join(self.host_ids)}"
            )
        count = self.store.restore(data["store"])
        kept = data.get("bmcs")
        if kept is None:  # an older snapshot kept the BMCs' LastResetTimes only
            marks = dict(data.get("last_reset_times") or {})
            kept = {bmc_id: {"last_reset_time": mark} for bmc_id, mark in marks.items()}
        self.restore_kept(dict(kept))
        self._saved_rv = self.store.resource_version
        self._saved_kept = self.kept()
        return count

    def save(self) -> None:
        """Write the snapshot (atomically: a crash mid-write leaves the previous one)."""
        rv, kept = self.store.resource_version, self.kept()
        data = {
            "format": FORMAT,
            "hosts": self.host_ids,
            "store": self.store.snapshot(),
            "bmcs": kept,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)
        self._saved_rv, self._saved_kept = rv, kept

    def start(self) -> None:
        """Save every `SNAPSHOT_SECONDS` while the store or a BMC's kept state changes."""
        self._task = asyncio.create_task(self._every(), name="sim-snapshots")

    async def stop(self) -> None:
        """Stop the periodic saves and save once more."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        self.save()

    async def _every(self) -> None:
        while True:
            await asyncio.sleep(SNAPSHOT_SECONDS)
            if self.store.resource_version != self._saved_rv or self.kept() != self._saved_kept:
                try:
                    self.save()
                except OSError as err:  # a full disk must not stop the site; the next try may work
                    log.warning("cannot write %s: %s", self.path, err)
