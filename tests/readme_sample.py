"""README's sample of the demo's output ("What you will see"), read as what it claims: each line is
one the demo prints when its output is not a terminal (`metalflow.progress.Progress`'s plain
lines: the UTC time and the time since the demo began, then the line).

- `demo_sample()`: the sample's lines.
- `matches(line, output)`: whether the demo's real output has the line: its time stamp stands for
  any, `...` for any text, and the UI's address `http://127.0.0.1:8233` for the one the run served.

tests/fast/test_readme_demo_sample.py checks the stamps against `Progress`; tests/test_cli_dev.py
checks every line against a real demo's output.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) \+(\d+:\d\d) ")
SAMPLE_AFTER = "Its output, when it is not a terminal"  # the paragraph before the sample
UI = "http://127.0.0.1:8233"


def demo_sample() -> list[str]:
    """The lines of README's sample of the demo's output (the code block after the demo's steps)."""
    text = README.read_text()
    start = text.index("```text\n", text.index(SAMPLE_AFTER)) + len("```text\n")
    return text[start : text.index("```", start)].splitlines()


def pattern(line: str) -> re.Pattern[str]:
    """The sample line as a pattern of the demo's real line."""
    stamp = STAMP.match(line)
    assert stamp is not None, f"README's demo sample line has no time stamp: {line!r}"
    body = line[stamp.end() :]
    parts = [re.escape(part).replace(re.escape(UI), r"http://127\.0\.0\.1:\d+") for part in body.split("...")]
    return re.compile(STAMP.pattern + ".*".join(parts) + "$")


def matches(line: str, output: str) -> bool:
    """Whether one line of `output` is `line` (see the module docstring)."""
    wanted = pattern(line)
    return any(wanted.match(real) for real in output.splitlines())
