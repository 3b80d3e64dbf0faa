"""`metalflow dev --reset` starts afresh, the kept site check included (issue 36 attack item 3): it
left `site-check.json` in place, findings of the site before the reset that every operation then
consulted. The reset deletes every kept check (each site file's) with the history and the site."""

from __future__ import annotations

from pathlib import Path

from metalflow.devstack.stack import reset_state


def test_reset_deletes_the_kept_site_checks_with_the_history_and_the_site(tmp_path: Path) -> None:
    for name in (
        "temporal.db",
        "sim-store.json",
        "site-check.json",
        "site-check-0123456789ab.json",
        "site.yaml",
    ):
        (tmp_path / name).write_text("{}")
    removed = reset_state(tmp_path)
    assert removed == ["temporal.db", "sim-store.json", "site-check-0123456789ab.json", "site-check.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site.yaml"], "the site file itself stays"
