"""Help that matches, as a user runs the console script: `metalflow [GROUP] --help` shows every
command README lists, in README's words. (The parser's own texts and README's command list are
checked without a process: tests/fast/test_cli_help_texts.py.)"""

from __future__ import annotations

import re
import subprocess

from cli_support import METALFLOW

from metalflow.cli import build_parser
from metalflow.cli.commands import leaf_commands


def test_metalflow_help_lists_each_command_with_readmes_words() -> None:
    """`metalflow [GROUP] --help` as a user runs it shows every command README lists, same words."""
    for group in ((), ("sim",), ("bmc",), ("host",)):
        shown = subprocess.run([METALFLOW, *group, "--help"], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        flat = " ".join(re.sub(r"-\n\s+", "-", shown.stdout).split())  # argparse wraps after hyphens
        for command, text in leaf_commands(build_parser()):
            words = command.split()[1:]
            if tuple(words[:-1]) == group:
                assert f"{words[-1]} {' '.join(text.split())}" in flat, (command, shown.stdout)


def test_host_status_takes_no_requester() -> None:
    status = subprocess.run(
        [METALFLOW, "host", "status", "host-001", "--by", "x"], capture_output=True, text=True, timeout=60
    )
    assert status.returncode == 2 and "unrecognized arguments: --by" in status.stderr
