"""The kept `metalflow site check` file is believed only when it can be (issue 36 attack item 3):
a `checked_at` that is no time ("yesterday") was accepted silently, and so was a file naming
another site. Either now refuses every judged operation, naming the file (a gate never fails open,
as for a corrupt file), until `metalflow site check` keeps new findings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_site_verdicts import site

from metalflow.site_check import consult_words, digest, findings_path, save_findings


@pytest.fixture
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("METALFLOW_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("METALFLOW_SITE_FILE", raising=False)
    (tmp_path / "site.yaml").write_text("name: rack7\nhosts: []\n")
    return tmp_path


def test_a_kept_check_whose_time_is_no_time_refuses_naming_the_file(state_dir: Path) -> None:
    path = findings_path()
    save_findings(path, dataclasses.replace(site(), site="rack7", checked_at="yesterday"))
    refuse, said = consult_words("h1", "reboot")
    assert refuse, said
    assert str(path) in said[0] and "checked_at 'yesterday' is not a time" in said[0], said


def test_a_kept_check_of_another_site_refuses_naming_the_file(state_dir: Path) -> None:
    path = findings_path()
    site_file = (state_dir / "site.yaml").absolute()
    own = dataclasses.replace(site(), site="rack7", site_file=str(site_file), site_digest=digest(site_file))
    save_findings(path, own)
    assert consult_words("h1", "reboot")[0] is False, "its own site: believed"
    save_findings(path, dataclasses.replace(own, site="rack9"))
    refuse, said = consult_words("h1", "reboot")
    assert refuse and str(path) in said[0], said
    assert "the findings name site 'rack9', but" in said[0] and "is site 'rack7'" in said[0], said
    other = state_dir / "other.yaml"
    other.write_text("name: rack9\nhosts: []\n")
    copied = dataclasses.replace(
        own, site="rack9", site_file=str(other.absolute()), site_digest=digest(other)
    )
    save_findings(path, copied)
    refuse, said = consult_words("h1", "reboot")
    assert refuse and f"the findings of the site file {other.absolute()}" in said[0], said
