"""One watch subscription: a per-watcher event buffer fed synchronously by the store.

The store pushes each change to the watchers of that resource type at write time (no polling);
a watcher filters by namespace and selectors and converts a MODIFIED that crosses its selector
into ADDED or DELETED, as the API server's watch cache does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import TYPE_CHECKING, Any

from simulators.kube.selectors import Selector

if TYPE_CHECKING:
    from simulators.kube.store import Object, WatchEvent


def clone(value: Any) -> Any:
    """A deep copy of JSON-like data (much faster than copy.deepcopy)."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


class Watcher:
    """Async iterator of `WatchEvent`s; ends when closed (by the store, on overflow, or aclose)."""

    def __init__(self, namespace: str | None, selector: Selector, max_pending: int) -> None:
        self.namespace = namespace
        self.selector = selector
        self.max_pending = max_pending
        self.overflowed = False
        self._pending: deque[WatchEvent] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._closed = False

    # -- fed by the store ---------------------------------------------------------------
    def _matches(self, obj: Object | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return self.selector.empty or self.selector.matches(obj)

    def offer(self, kind: str, old: Object | None, new: Object, rv: int) -> None:
        """Queue the event as this watcher sees it (or nothing when it does not match)."""
        from simulators.kube.store import WatchEvent

        if self._closed:
            return
        if kind == "MODIFIED":
            was, now = self._matches(old), self._matches(new)
            if was and now:
                self._push(WatchEvent("MODIFIED", new, rv))
            elif now:
                self._push(WatchEvent("ADDED", new, rv))
            elif was and old is not None:
                # The object left our selector: a DELETED with its last matching content.
                gone = dict(old)
                gone["metadata"] = {**old["metadata"], "resourceVersion": str(rv)}
                self._push(WatchEvent("DELETED", gone, rv))
        elif self._matches(new):
            self._push(WatchEvent(kind, new, rv))  # type: ignore[arg-type]

    def _push(self, event: WatchEvent) -> None:
        if len(self._pending) >= self.max_pending:
            # A consumer this far behind is cut off, as the API server does; it resumes
            # from its last resourceVersion.
            self.overflowed = True
            self.close()
            return
        self._pending.append(event)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def close(self) -> None:
        self._closed = True
        self._wake()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- read by the consumer ---------------------------------------------------------------
    async def next_shared(self, timeout: float | None = None) -> WatchEvent | None:
        """The next event, sharing the store's snapshot (do not mutate it); None on timeout.

        Raises StopAsyncIteration once the watch is closed and drained.
        """
        while not self._pending:
            if self._closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                if timeout is None:
                    await self._waiter
                else:
                    try:
                        await asyncio.wait_for(self._waiter, timeout)
                    except TimeoutError:
                        return None
            finally:
                self._waiter = None
        return self._pending.popleft()

    def __aiter__(self) -> Watcher:
        return self

    async def __anext__(self) -> WatchEvent:
        from simulators.kube.store import WatchEvent

        event = await self.next_shared()
        assert event is not None
        return WatchEvent(event.type, clone(event.object), event.resource_version)

    async def aclose(self) -> None:
        self.close()
        self._pending.clear()
