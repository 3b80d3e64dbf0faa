"""Where the local state lives (`metalflow dev`, `metalflow sim ...`), found from anywhere.

Like Temporal's envconfig: an explicit `--state-dir`, else `METALFLOW_STATE_DIR`, else
`.metalflow` in the metalflow checkout this code runs from (so `metalflow sim violations` run in
another directory finds the simulator `make demo` started), else `.metalflow` in the current
directory (an installed, not checked-out, metalflow). Commands say which one they used.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

STATE_DIR_ENV = "METALFLOW_STATE_DIR"
STATE_DIR_NAME = ".metalflow"
STATE_DIR_DEFAULT = f"default: ${STATE_DIR_ENV}, else {STATE_DIR_NAME} in the metalflow checkout"
STATE_DIR_HELP = f"the state dir ({STATE_DIR_DEFAULT})"


def checkout() -> Path | None:
    """The metalflow checkout this code runs from, None for an installed copy."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").exists() and (root / "metalflow").is_dir() else None


def find_state_dir(explicit: Path | None = None, env: Mapping[str, str] | None = None) -> tuple[Path, str]:
    """The state dir and where it came from (for the message a command prints)."""
    env = os.environ if env is None else env
    if explicit is not None:
        return explicit, "--state-dir"
    if env.get(STATE_DIR_ENV):
        return Path(env[STATE_DIR_ENV]), STATE_DIR_ENV
    root = checkout()
    if root is not None:
        return root / STATE_DIR_NAME, "the metalflow checkout"
    return Path(STATE_DIR_NAME), "the current directory"


def state_dir_for(explicit: Path | None, command: str) -> Path:
    """`find_state_dir`, saying on stderr which state dir `command` uses and why."""
    path, source = find_state_dir(explicit)
    print(f"metalflow {command}: state dir {path.resolve()} (from {source})", file=sys.stderr, flush=True)
    return path
