"""Run one metalflow worker with every workflow and activity: `python worker.py --help`."""

from __future__ import annotations

import os
import sys

from metalflow.runtime.worker import main

if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # The SDK's native runtime can abort during interpreter teardown (PyGILState_Release); the
    # worker has already shut down cleanly here, so skip the teardown and keep the real status.
    os._exit(status)
