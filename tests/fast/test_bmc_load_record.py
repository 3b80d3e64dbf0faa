"""A simulated BMC's load record (`simulators/redfish/load.py`, a test instrument): the most
requests it answered at once, and the most that arrived within any 60 s (a sliding window over
arrival times, not clock minutes). `tests/test_sim_bmc_load.py` holds the same over HTTP."""

from __future__ import annotations

from simulators.redfish.load import WINDOW_SECONDS, LoadRecord


def test_requests_at_once_are_counted_and_the_peak_stays() -> None:
    record = LoadRecord()
    for at in (0.0, 0.1, 0.2):
        record.began(at)
    assert (record.in_flight, record.in_flight_peak) == (3, 3)
    for _ in range(3):
        record.ended()
    record.began(0.3)
    assert (record.in_flight, record.in_flight_peak) == (1, 3)


def test_one_at_a_time_is_a_peak_of_one() -> None:
    record = LoadRecord()
    for n in range(10):
        record.began(float(n))
        record.ended()
    assert (record.in_flight, record.in_flight_peak, record.per_minute_peak) == (0, 1, 10)


def test_the_busiest_window_is_found_wherever_it_starts() -> None:
    """8 requests in the first 50 s, then 4 in a burst at 61-62 s: the window (2, 62] holds 9
    of them, more than the first clock minute's 8."""
    record = LoadRecord()
    for at in (0.0, 1.0, 2.0, 10.0, 20.0, 35.0, 40.0, 50.0, 61.0, 61.5, 62.0, 62.0):
        record.began(at)
        record.ended()
    assert record.per_minute_peak == 9


def test_an_arrival_exactly_a_window_ago_has_left_it() -> None:
    record = LoadRecord()
    record.began(0.0)
    record.began(WINDOW_SECONDS)
    assert record.per_minute_peak == 1
    record.began(WINDOW_SECONDS + 0.5)
    assert record.per_minute_peak == 2


def test_a_slow_trickle_never_adds_up() -> None:
    """One request every 61 s for an hour: never two in a window."""
    record = LoadRecord()
    for n in range(60):
        record.began(n * 61.0)
        record.ended()
    assert record.per_minute_peak == 1
