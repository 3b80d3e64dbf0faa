"""Private by default: the dev stack's state directory is 0700 and everything in it 0600.

The state directory holds the Temporal database (every workflow's history), the logs, the
kubeconfig of the simulated site, the site file and BMC credential files; none is anyone else's
business on a shared machine. The directory is made 0700, files already in it (from an older
release, or a umask that let them be read) are narrowed to 0600, and the processes the stack
starts run with umask 077, so what they create (the database and its WAL, `sim.json`) is 0600
as well.

Cost: a `chmod` per file in the state directory when a stack or simulator starts; nothing per host.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077
DIR_MODE = 0o700
FILE_MODE = 0o600


def private_state_dir(path: Path) -> Path:
    """Create `path` (0700) or narrow it to 0700, and narrow the files directly in it to 0600."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    path.chmod(DIR_MODE)
    for entry in path.iterdir():
        info = entry.lstat()
        if stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) & ~FILE_MODE:
            entry.chmod(FILE_MODE)
        elif stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) & ~DIR_MODE:
            entry.chmod(DIR_MODE)
    return path


def write_private(path: Path, text: str) -> None:
    """Write `text` to `path`, created 0600 (narrowed to 0600 when it existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), FILE_MODE)
        out.write(text)
