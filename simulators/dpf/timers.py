"""Keyed one-shot timers on the event loop: at most one pending action per key."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)


class Timers:
    """`start(key, token, ...)` keeps a pending timer with the same token (repeated events for an
    unchanged state must not push the deadline back) and replaces one with another token."""

    def __init__(self) -> None:
        self._pending: dict[Hashable, tuple[Hashable, asyncio.TimerHandle]] = {}

    def start(self, key: Hashable, token: Hashable, delay: float, action: Callable[[], None]) -> None:
        current = self._pending.get(key)
        if current is not None:
            if current[0] == token:
                return
            current[1].cancel()

        def fire() -> None:
            if self._pending.get(key, (None,))[0] == token:
                del self._pending[key]
            try:
                action()
            except Exception:
                log.exception("DPF timer %r failed", key)

        self._pending[key] = (token, asyncio.get_running_loop().call_later(max(delay, 0.0), fire))

    def cancel(self, key: Hashable) -> None:
        current = self._pending.pop(key, None)
        if current is not None:
            current[1].cancel()

    def close(self) -> None:
        for _, handle in self._pending.values():
            handle.cancel()
        self._pending.clear()

    def __len__(self) -> int:
        return len(self._pending)
