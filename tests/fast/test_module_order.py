"""The longest-first module order `make test` hands to pytest-xdist (tests/module_order.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from module_order import SECONDS_FILE, load_seconds, longest_first, seconds_from_durations


@dataclass(frozen=True)
class Item:
    nodeid: str


def test_listed_modules_go_longest_first_then_the_rest_in_collection_order() -> None:
    items = [
        Item("tests/test_a.py::one"),
        Item("tests/test_a.py::two"),
        Item("tests/test_b.py::only"),
        Item("tests/test_c.py::z"),
        Item("tests/test_c.py::y[1]"),
        Item("tests/test_d.py::new"),
        Item("tests/test_e.py::new"),
    ]
    seconds = {"tests/test_b.py": 120.0, "tests/test_c.py": 30.5, "tests/test_a.py": 1.0}
    ordered = [item.nodeid for item in longest_first(items, seconds)]
    assert ordered == [
        "tests/test_b.py::only",
        "tests/test_c.py::z",  # a module's own order is kept, not sorted by name
        "tests/test_c.py::y[1]",
        "tests/test_a.py::one",
        "tests/test_a.py::two",
        "tests/test_d.py::new",  # not measured yet: after the measured ones, as collected
        "tests/test_e.py::new",
    ]
    assert longest_first(items, {}) == items  # no figures: the order is unchanged


def test_figures_are_summed_per_module_from_durations_output() -> None:
    output = """
============================= slowest durations ==============================
120.03s call     tests/test_cli_dev.py::test_dev_exit[a]
2.50s setup    tests/test_cli_dev.py::test_dev_exit[a]
0.47s teardown tests/test_cli_dev.py::test_help
10.00s call     tests/test_chaos.py::test_chaos
(12 durations < 0.005s hidden.  Use -vv to show these durations.)
"""
    assert seconds_from_durations(output) == {"tests/test_cli_dev.py": 123.0, "tests/test_chaos.py": 10.0}
    assert seconds_from_durations("no durations here") == {}


def test_the_committed_figures_load_and_a_missing_file_changes_nothing(tmp_path: Path) -> None:
    # A module renamed or removed since the figures were taken only costs balance: not checked.
    seconds = load_seconds()
    assert seconds, f"{SECONDS_FILE} is missing or empty"
    # `make test` runs the fast tier too: its modules are timed with the rest.
    assert all(
        module.startswith(("tests/test_", "tests/fast/test_")) and value >= 0
        for module, value in seconds.items()
    )
    assert load_seconds(tmp_path / "missing.json") == {}
    (tmp_path / "figures.json").write_text(json.dumps({"tests/test_x.py": 3}))
    assert load_seconds(tmp_path / "figures.json") == {"tests/test_x.py": 3.0}
