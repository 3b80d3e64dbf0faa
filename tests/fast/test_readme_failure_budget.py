"""`--failure-budget`'s help and README say the same thing in the same words (issue 38 item 8:
they disagreed), and the words are the rule `FailureBudget.allowed` applies."""

from __future__ import annotations

import argparse
from pathlib import Path

from contracts.models.campaign import FailureBudget
from metalflow.cli import build_parser
from metalflow.cli.campaign_options import FAILURE_BUDGET_WORDS

README = Path(__file__).resolve().parents[2] / "README.md"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _help_of(command: str, option: str) -> str:
    parser = build_parser("campaign")
    campaign = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[
        "campaign"
    ]
    sub = next(a for a in campaign._actions if isinstance(a, argparse._SubParsersAction)).choices[command]
    return _flat(sub.format_help())


def test_help_and_readme_give_one_wording() -> None:
    for command in ("start", "plan"):
        assert FAILURE_BUDGET_WORDS in _help_of(command, "--failure-budget"), command
    assert f"`--failure-budget N|X%`: {FAILURE_BUDGET_WORDS}." in _flat(README.read_text())


def test_the_words_are_the_rule() -> None:
    assert FailureBudget(max_percent=10).allowed(100) == 10  # halts at the 11th
    assert FailureBudget(max_failures=0).allowed(40) == 0  # default 0: the first failure halts
    assert FailureBudget(max_failures=3).allowed(2) == 3  # more than N
