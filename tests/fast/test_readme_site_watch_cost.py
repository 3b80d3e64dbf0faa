"""README's deployment section states what the idle site watch costs and how long a dead worker
holds it (issue 37 Deliver 3: at most 2,000 Actions a day per site, the takeover time beside it),
both from the constants the watch runs with."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from contracts.models.dpf import (
    SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS,
    SITE_WATCH_RETRY_MAX_SECONDS,
    SiteWatchInput,
    site_watch_idle_actions_per_day,
    site_watch_idle_beat_seconds,
    site_watch_takeover_seconds,
)
from drivers.settings import Settings
from workflows.site_watch.workflow import SITE_WATCH, site_watch_options

README = Path(__file__).resolve().parents[2] / "README.md"


def _readme() -> str:
    return " ".join(README.read_text().split())


def test_the_idle_watch_costs_at_most_2000_actions_a_day() -> None:
    assert site_watch_idle_actions_per_day() <= 2_000
    assert site_watch_idle_actions_per_day() == 1_728


def test_readme_states_the_idle_cost_and_the_takeover_time_from_the_constants() -> None:
    text = _readme()
    timeout, beat = SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS, site_watch_idle_beat_seconds()
    assert f"idle, costs {site_watch_idle_actions_per_day():,} Temporal Actions a day" in text
    assert f"one heartbeat every {beat:g} s, a third of its {timeout:g} s heartbeat timeout" in text
    assert f"loses it for at most {site_watch_takeover_seconds():g} s" in text
    assert (
        f"the {timeout:g} s heartbeat timeout from its last beat, plus at most "
        f"{SITE_WATCH_RETRY_MAX_SECONDS:g} s" in text
    )
    assert "| `METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS` |" in text
    assert f"moves after it | `{timeout:g}` |" in text
    assert f"({site_watch_idle_actions_per_day():,} Actions a day per site" in text


def test_the_watch_runs_with_those_constants_and_a_setting_changes_both() -> None:
    options = site_watch_options(SiteWatchInput())
    assert options["heartbeat_timeout"] == timedelta(seconds=SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS)
    assert SITE_WATCH["retry_policy"].maximum_interval == timedelta(seconds=SITE_WATCH_RETRY_MAX_SECONDS)
    assert (
        Settings(site_file=Path("x")).site_watch_heartbeat_timeout_seconds
        == SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS
    )
    short = Settings.from_env(
        {"METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS": "12", "METALFLOW_SITE_FILE": "x"}
    )
    assert site_watch_options(
        SiteWatchInput(heartbeat_timeout_seconds=short.site_watch_heartbeat_timeout_seconds)
    )["heartbeat_timeout"] == timedelta(seconds=12)


def test_a_bad_heartbeat_timeout_is_refused_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS"):
        Settings.from_env(
            {"METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS": "soon", "METALFLOW_SITE_FILE": "x"}
        )
    with pytest.raises(ValueError, match="site_watch_heartbeat_timeout_seconds"):
        Settings.from_env({"METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS": "1", "METALFLOW_SITE_FILE": "x"})
