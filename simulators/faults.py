"""Fault profiles of the simulated site, deterministic under a seed.

Each piece asks at its own layer whether to misbehave on this request. Every layer draws from
its own seeded stream, so that the faults one layer sees do not depend on how many requests
another layer served: the same seed and the same client behaviour give the same faults.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass

PROFILES = ("none", "flaky", "slow")


@dataclass(frozen=True)
class FaultRates:
    """Probabilities per request (0..1) and the delays that go with them."""

    bmc_server_error: float = 0.0  # 500/502 bursts from a BMC
    bmc_busy: float = 0.0  # 503 with Retry-After from a BMC
    bmc_conflict: float = 0.0  # 409 on a reset from a BMC
    bmc_retry_after_seconds: int = 1
    api_server_error: float = 0.0  # 500/503 from the Kubernetes API
    watch_drop: float = 0.0  # a watch stream closed early, per event sent
    slow_response: float = 0.0  # a response held back by `slow_response_seconds`
    slow_response_seconds: float = 0.0


RATES: dict[str, FaultRates] = {
    "none": FaultRates(),
    "flaky": FaultRates(
        bmc_server_error=0.05,
        bmc_busy=0.05,
        bmc_conflict=0.05,
        bmc_retry_after_seconds=1,
        api_server_error=0.03,
        watch_drop=0.05,
        slow_response=0.05,
        slow_response_seconds=0.5,
    ),
    # `slow` is about realistic timings (see timings.py), not about errors.
    "slow": FaultRates(slow_response=0.02, slow_response_seconds=1.0),
}


class Faults:
    """The fault profile in force; each `*` method answers for one request."""

    def __init__(self, profile: str = "none", seed: int = 0) -> None:
        if profile not in RATES:
            raise ValueError(f"unknown fault profile {profile!r}; choose one of {', '.join(PROFILES)}")
        self.profile = profile
        self.rates = RATES[profile]
        self._seed = seed
        self._streams: dict[str, random.Random] = {}
        self.api_down = False  # a Kubernetes API outage, switched by `/sim/faults/api/outage`
        self.writes_to_hold = 0  # the next writes held, set by `/sim/faults/api/hold-writes`
        self.writes_held = 0  # writes held now
        self._release = asyncio.Event()

    def _draw(self, layer: str) -> float:
        stream = self._streams.get(layer)
        if stream is None:
            stream = self._streams[layer] = random.Random(f"{self._seed}/{layer}")
        return stream.random()

    def bmc_fault(self, bmc_id: str, *, is_reset: bool) -> tuple[int, int | None] | None:
        """A fault for this BMC request: (status, Retry-After seconds or None), or None."""
        r = self.rates
        draw = self._draw(f"bmc/{bmc_id}")
        if draw < r.bmc_server_error:
            return (500, None)
        draw -= r.bmc_server_error
        if draw < r.bmc_busy:
            return (503, r.bmc_retry_after_seconds)
        draw -= r.bmc_busy
        if is_reset and draw < r.bmc_conflict:
            return (409, None)
        return None

    def api_fault(self) -> int | None:
        """An HTTP status to answer this API request with instead of serving it, or None."""
        if self.api_down:
            return 503  # no draw: the seeded faults after the outage stay as they would have been
        if self._draw("api") < self.rates.api_server_error:
            return 503
        return None

    async def hold_write(self) -> None:
        """Hold this write (POST, PUT, PATCH, DELETE) until `release_writes` when a hold is set:
        a Kubernetes API that accepted the request and has not answered yet."""
        if self.writes_to_hold <= 0:
            return
        self.writes_to_hold -= 1
        self.writes_held += 1
        release = self._release
        try:
            await release.wait()
        finally:
            self.writes_held -= 1

    def release_writes(self) -> None:
        """Answer every held write now (each is then served as usual) and hold no more."""
        self.writes_to_hold = 0
        self._release.set()
        self._release = asyncio.Event()

    def drop_watch(self) -> bool:
        """Whether to close a watch stream after the event just sent."""
        return self._draw("watch") < self.rates.watch_drop

    def response_delay(self, layer: str) -> float:
        """Seconds to hold this response back (0 for most)."""
        if self._draw(f"slow/{layer}") < self.rates.slow_response:
            return self.rates.slow_response_seconds
        return 0.0
