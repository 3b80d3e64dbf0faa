"""A simulated Kubernetes API on 127.0.0.1 (port 0) in a background thread, for the kube tests.

The official client and kubectl are synchronous, so the aiohttp server runs in its own loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from simulators.faults import Faults
from simulators.kube.crds import find_crd_dir, new_store
from simulators.kube.http import add_kube_routes
from simulators.kube.store import Store

CRDS = find_crd_dir()
FIXTURES = Path(__file__).parent / "kube_fixtures"


@dataclass
class KubeServer:
    url: str
    store: Store
    loop: asyncio.AbstractEventLoop
    kubeconfig: Path

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a store call on the server's loop (the store is not thread-safe)."""

        async def run() -> Any:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(5)


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: sim\n  cluster:\n    server: {url}\n"
        "users:\n- name: sim\n  user: {}\n"
        "contexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: default\n"
        "current-context: sim\n"
    )
    return path


@contextmanager
def kube_server(
    tmp_path: Path, *, history_size: int = 20_000, bookmark_interval: float = 30.0
) -> Iterator[KubeServer]:
    store = new_store(CRDS, history_size=history_size)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    holder: dict[str, Any] = {}

    async def start() -> None:
        app = web.Application()
        add_kube_routes(app, store, Faults(), bookmark_interval=bookmark_interval)
        runner = web.AppRunner(app, shutdown_timeout=1)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        holder["runner"] = runner
        holder["port"] = runner.addresses[0][1]

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(10)
    url = f"http://127.0.0.1:{holder['port']}"
    try:
        yield KubeServer(url, store, loop, write_kubeconfig(tmp_path / "kubeconfig", url))
    finally:
        asyncio.run_coroutine_threadsafe(holder["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
