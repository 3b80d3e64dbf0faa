"""The simulated site's state across restarts: a snapshot of the Kubernetes-compatible store.

`metalflow dev` keeps Temporal's history in its state dir (`temporal.db`); a site that started
empty next to it would contradict that history (the hosts' entities say "provisioned", DPF has
no DPU), and an operation would then wait its whole phase timeout on objects that never come.
So with `--persist` the simulator writes `<state-dir>/sim-store.json` on shutdown and every
`SNAPSHOT_SECONDS` while anything changed, and loads it at start, before its controllers sync.

What is kept: every stored object (DPF and Grove objects, Secrets, namespaces), the resource
version, and each BMC's `LastResetTime` (a real BMC's mark of its system's last reset survives
the BMC's own restart, redfish BEHAVIOUR.md L1: a site that showed its restart as every host's
reset made the product report resets nobody made). What is not: the BMCs' power logs and
in-memory timers (a host comes back powered On; the DPF controller re-reads every object when it
starts, as a real operator does after a restart). A kill -9 loses at most the last
`SNAPSHOT_SECONDS` of changes.

Cost: one JSON dump of the store per `SNAPSHOT_SECONDS` when it changed (a few kB per host).
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
        marks: Callable[[], dict[str, str]] = dict,
        restore_marks: Callable[[dict[str, str]], None] = lambda _: None,
    ) -> None:
        """`marks` reads the BMCs' `LastResetTime`s to keep; `restore_marks` gives them back."""
        self.store = store
        self.path = state_dir / SNAPSHOT_FILE
        self.host_ids = sorted(host_ids)
        self.marks, self.restore_marks = marks, restore_marks
        self._saved_rv = -1
        self._saved_marks: dict[str, str] = {}
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
        self.restore_marks(dict(data.get("last_reset_times") or {}))  # none in an older snapshot
        self._saved_rv = self.store.resource_version
        self._saved_marks = self.marks()
        return count

    def save(self) -> None:
        """Write the snapshot (atomically: a crash mid-write leaves the previous one)."""
        rv, marks = self.store.resource_version, self.marks()
        data = {
            "format": FORMAT,
            "hosts": self.host_ids,
            "store": self.store.snapshot(),
            "last_reset_times": marks,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)
        self._saved_rv, self._saved_marks = rv, marks

    def start(self) -> None:
        """Save every `SNAPSHOT_SECONDS` while the store changes."""
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
            if self.store.resource_version != self._saved_rv or self.marks() != self._saved_marks:
                try:
                    self.save()
                except OSError as err:  # a full disk must not stop the site; the next try may work
                    log.warning("cannot write %s: %s", self.path, err)
