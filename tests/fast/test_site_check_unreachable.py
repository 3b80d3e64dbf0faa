"""A site check that cannot reach the cluster (issue 36 attack item 3): it exited 1 and replaced
the kept findings with "blocked: DPF's API cannot be read", so every operation was refused for an
outage of the check's own connection. README's exit table says 3 for a site that cannot be
reached: the check exits 3, keeps nothing and says the previous findings stand.

No server: a kubeconfig to a port nothing listens on (the connection is refused at once), a site
of no host (no BMC to read)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from metalflow.cli import build_parser
from metalflow.cli.site import handle_check

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: dead, cluster: {server: "http://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: dead, user: u}}]
current-context: c
"""


def test_a_check_that_cannot_reach_the_cluster_exits_3_and_keeps_the_previous_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("METALFLOW_SITE_FILE", "TEMPORAL_ADDRESS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("METALFLOW_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("METALFLOW_INVENTORY", "site")
    (tmp_path / "site.yaml").write_text("name: rack7\nhosts: []\n")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    kept = tmp_path / "site-check.json"
    kept.write_text('{"previous": "findings"}')
    args = build_parser().parse_args(
        ["site", "check", "--site", str(tmp_path / "site.yaml"), "--timeout", "5"]
    )
    assert handle_check(args) == 3
    said = capsys.readouterr().err
    assert (
        "the cluster cannot be reached (" in said
        and f"nothing was kept, the findings of {kept} stand" in said
    )
    assert kept.read_text() == '{"previous": "findings"}', "the previous findings stand"
    args = build_parser().parse_args(["site", "check", "--json", "--timeout", "5"])
    assert handle_check(args) == 3
    assert json.loads(capsys.readouterr().out)["exit_status"] == 3
