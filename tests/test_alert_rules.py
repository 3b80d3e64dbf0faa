"""The alert rules are tested the way Prometheus users test theirs: `promtool check rules` and
`promtool test rules` (deploy/monitoring/tests/metalflow-rules.test.yaml fires every alert and
holds series that must not fire it), with the promtool of the Prometheus packaged for the OS
(`make test` installs it when missing: `make prometheus-tools`).

And each alert's test is shown to fail on a broken rule: one that never fires and one that always
does, so no alert's test passes whatever its rule says (the test file cut to that alert's tests,
which are the ones a broken rule of it can fail)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

MONITORING = Path(__file__).resolve().parent.parent / "deploy" / "monitoring"
RULES = MONITORING / "metalflow-rules.yaml"
TESTS = MONITORING / "tests" / "metalflow-rules.test.yaml"
ALERTS = [rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail(
            "promtool is not installed: run `make prometheus-tools` (README, Observability)", pytrace=False
        )
    return found


def run_promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *map(str, args)], capture_output=True, text=True, timeout=120)


def test_the_rules_are_valid_and_their_tests_pass() -> None:
    checked = run_promtool("check", "rules", RULES)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(ALERTS)} rules found" in checked.stdout
    tested = run_promtool("test", "rules", TESTS)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_every_alert_asked_for_has_a_rule_and_a_test() -> None:
    assert sorted(ALERTS) == sorted([
        "MetalflowHostInManualIntervention", "MetalflowOperationStalled", "MetalflowCampaignHalted",
        "MetalflowRolloutPaused", "MetalflowBMCRequestsFailing", "MetalflowWorkerNotPolling",
        "MetalflowRebootLoop", "MetalflowHostInMaintenanceLong",
    ])  # fmt: skip
    tests = yaml.safe_load(TESTS.read_text())["tests"]
    for alert in ALERTS:
        cases = [
            case for test in tests for case in test.get("alert_rule_test", []) if case["alertname"] == alert
        ]
        assert any(case["exp_alerts"] for case in cases), f"{alert}: no test where it fires"
        assert any(not case["exp_alerts"] for case in cases), f"{alert}: no test where it must not fire"


def test_the_prometheusrule_holds_the_same_rules() -> None:
    resource = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert resource["kind"] == "PrometheusRule"
    assert resource["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


def _broken(rules: dict[str, Any], alert: str, how: str) -> dict[str, Any]:
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == alert:
                rule["expr"] = "vector(0) > 1" if how == "never fires" else f"({rule['expr']}) or vector(1)"
    return rules


def _tests_of(alert: str) -> dict[str, Any]:
    """The rules' test file with only the tests that check `alert` (each test's series and cases
    as they are): a broken rule of `alert` can fail no other test, and the others cost most of a
    run (the maintenance alert's test alone evaluates every rule for 25 hours of minutes)."""
    tests = yaml.safe_load(TESTS.read_text())
    tests["tests"] = [
        test
        for test in tests["tests"]
        if any(case["alertname"] == alert for case in test.get("alert_rule_test", []))
    ]
    assert tests["tests"], f"{alert}: no test checks it"
    return tests


@pytest.mark.parametrize("how", ["never fires", "always fires"])
@pytest.mark.parametrize("alert", ALERTS)
def test_an_alerts_test_fails_on_a_broken_rule(alert: str, how: str, tmp_path: Path) -> None:
    broken = _broken(yaml.safe_load(RULES.read_text()), alert, how)
    (tmp_path / "metalflow-rules.yaml").write_text(yaml.safe_dump(broken, sort_keys=False))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / TESTS.name).write_text(yaml.safe_dump(_tests_of(alert), sort_keys=False))
    tested = run_promtool("test", "rules", tmp_path / "tests" / TESTS.name)
    assert tested.returncode != 0, f"{alert} ({how}): promtool still passes:\n{tested.stdout}"
    assert f"alertname: {alert}" in tested.stdout + tested.stderr


def test_the_local_prometheus_config_readme_gives_is_valid_and_loads_the_rules() -> None:
    """README's `:9090` alerts example had no Prometheus to ask: it now starts one with this file."""
    config = MONITORING / "prometheus-local.yml"
    checked = run_promtool("check", "config", config)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 1 rule files found" in checked.stdout
