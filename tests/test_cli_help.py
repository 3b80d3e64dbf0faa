"""Help that matches, as a user runs the console script: `metalflow [GROUP] --help` shows every
command README lists, in README's words. (The parser's own texts and README's command list are
checked without a process: tests/fast/test_cli_help_texts.py.)"""

from __future__ import annotations

import re
import subprocess
import sys

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


# Building the parser (what `metalflow --help` and every command do first) imports none of these:
# the SDK's worker (via OpenTelemetry's interceptor), the Kubernetes client, the dev stack and the
# demo cost ~0.5 s of CPU per command together, and the suite runs hundreds of commands. The
# modules a command runs import what it needs when it runs (metalflow.cli.connection, drivers.kube,
# metalflow.cli.dev). (The dev stack's light modules, its state-dir claim and the simulator's
# option values, are imported: `sim` and `dev` register their options from them.)
HEAVY = (
    "temporalio.worker",
    "kubernetes",
    "metalflow.devstack.stack",
    "metalflow.devstack.demo",
    "metalflow.devstack.banner",
)


def test_building_the_parser_imports_no_heavy_module() -> None:
    """A fresh interpreter builds the whole parser, then each command's, then `main(['--help'])`;
    none of it imports a module of HEAVY."""
    code = (
        "import sys, contextlib, io\n"
        "from metalflow.cli import COMMAND_MODULE, build_parser, main\n"
        "build_parser()\n"
        "for command in COMMAND_MODULE: build_parser(command)\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit): main(['--help'])\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r} or m in {HEAVY!r}))\n"
    )
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == "[]", shown.stdout
