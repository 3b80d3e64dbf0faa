"""A BMC's load record: a test instrument of the simulator, not a Redfish behaviour.

Real BMCs answer a request in 0.2-2 s and are the most fragile part of a site; how many requests
one of them sees at once, and how many a minute, is what a polite client keeps low. Each BMC
service keeps this record of the requests it answered (`GET /sim/bmcs/<id>/load`, the
benchmarks' `bmc_max_in_flight` and `bmc_max_per_minute`):

- `in_flight_peak`: the most requests it was answering at once. A request counts from the moment
  its handler starts until the turn of the event loop after it answered (`Redfish.handle`): the
  simulated BMCs answer most requests at once, so two requests that reached the BMC together
  (in one turn of the loop) count as two; a request sent after the previous one was answered
  never overlapped it on this BMC. Against a real BMC's 0.2-2 s answers, a client that keeps two
  requests outstanding on one BMC would show 2 more often: the figure is what these BMCs saw.
- `per_minute_peak`: the most requests that arrived within any `WINDOW_SECONDS` (a sliding
  window over the arrival times, not clock minutes).

Cost: two integers per BMC, and the arrival times of the last `WINDOW_SECONDS` while it serves
(a deque created at its first request: idle BMCs of a 10,000-host site hold none).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

WINDOW_SECONDS = 60.0


@dataclass
class LoadRecord:
    """One BMC service's requests in flight now and the two peaks since it started."""

    in_flight: int = 0
    in_flight_peak: int = 0
    per_minute_peak: int = 0
    _arrivals: deque[float] | None = field(default=None, repr=False)

    def began(self, now: float) -> None:
        """A request arrived at `now` (seconds of a monotonic clock) and is being answered."""
        self.in_flight += 1
        self.in_flight_peak = max(self.in_flight_peak, self.in_flight)
        arrivals = self._arrivals
        if arrivals is None:
            arrivals = self._arrivals = deque()
        arrivals.append(now)
        # The window (now - WINDOW_SECONDS, now]: the busiest window ends at an arrival, so its
        # count is taken at one; arrivals at or before its start leave it.
        while arrivals[0] <= now - WINDOW_SECONDS:
            arrivals.popleft()
        self.per_minute_peak = max(self.per_minute_peak, len(arrivals))

    def ended(self) -> None:
        """The request `began` marked was answered (or failed)."""
        self.in_flight -= 1
