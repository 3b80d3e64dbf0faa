"""README's "Your first hour" says what the demo stack does: its reprovision's power-down wait is
the demo policy's, not the production default (an operator saw ForceOff and On 2 s apart where
README promised 120 s and "2 minutes later")."""

from __future__ import annotations

from pathlib import Path

from contracts.models.host import OperationPolicy
from metalflow.devstack.demo import DEMO_POLICY

README = Path(__file__).resolve().parents[2] / "README.md"


def _first_hour() -> str:
    text = README.read_text()
    start = text.index("## Your first hour")
    return " ".join(text[start : text.index("\n## ", start + 1)].split())


def test_step_3_states_the_demo_policys_power_down_wait() -> None:
    section = _first_hour()
    wait = DEMO_POLICY.power_down_wait_seconds
    assert f"a {wait:g} s power-down wait" in section
    assert f"default {OperationPolicy().power_down_wait_seconds:g} s" in section
    assert "2 minutes later" not in section
