"""`--power-down-wait` on a BMC with a native PowerCycle (issue 38 item 8: silently ignored): the
help says the BMC keeps its own off time, `--wait` warns in the words README quotes, and README
says which BMCs apply the wait. tests/test_cli_power_down_wait.py shows the warning for real."""

from __future__ import annotations

import argparse
from pathlib import Path

from metalflow.cli import build_parser
from metalflow.cli.host_requests import POWER_DOWN_WAIT_HELP
from metalflow.hosts import power_down_wait_not_applied

README = Path(__file__).resolve().parents[2] / "README.md"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _help(command: str) -> str:
    parser = build_parser("host")
    host = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["host"]
    sub = next(a for a in host._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return _flat(sub.format_help())


def test_the_help_of_every_command_taking_it_says_a_native_powercycle_keeps_its_own_off_time() -> None:
    assert "a BMC with a native PowerCycle keeps its own off time (--wait warns)" in POWER_DOWN_WAIT_HELP
    for command in ("provision", "reprovision", "reboot", "reset"):
        assert _flat(POWER_DOWN_WAIT_HELP) in _help(command), command


def test_readme_quotes_the_warning_and_says_which_bmcs_apply_the_wait() -> None:
    text = _flat(README.read_text())
    warning = power_down_wait_not_applied("HOST", 300, ["PowerCycle"])
    quoted = warning.split("; the wait applies")[0]
    assert f"`{quoted}; ...`" in text, quoted
    paragraph = text.split("**The power-down wait**")[1].split("**Abort means stop.**")[0]
    assert "on a BMC without a native `PowerCycle`" in paragraph
    assert "`metalflow bmc check HOST` says beforehand how a BMC will cycle" in paragraph
