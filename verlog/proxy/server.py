"""Run the proxy with uvicorn in a background thread (its own event loop), for trainers and load tests."""

from __future__ import annotations

import asyncio
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import uvicorn

from verlog.proxy.app import OpenAIProxy, create_app

__all__ = ["ProxyServer"]


class ProxyServer:
    """uvicorn serving :func:`create_app` of ``proxy`` on ``host:port`` (port 0: a free one).

    ``with ProxyServer(proxy) as server: ... server.base_url(rollout, attempt) ...``; the trainer wraps
    weight loading in ``with server.paused(): engine.load_weights(...)``.
    """

    def __init__(self, proxy: OpenAIProxy, host: str = "127.0.0.1", port: int = 0) -> None:
        self.proxy = proxy
        self.host = host
        config = uvicorn.Config(create_app(proxy), host=host, port=port, log_level="warning", access_log=False,
                                lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = port

    def start(self, timeout: float = 30.0) -> "ProxyServer":
        """Start serving and wait until the socket listens.

        Raises:
            RuntimeError: the server did not start within ``timeout`` seconds.
        """
        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self._server.serve())

        self._thread = threading.Thread(target=run, name="verlog-proxy", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the proxy did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        """Stop serving and join the thread."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)

    def __enter__(self) -> "ProxyServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def base_url(self, rollout_id: str, attempt: str | int = 0) -> str:
        """The OpenAI ``base_url`` of one (rollout, attempt): ``http://host:port/rollout/R/attempt/A/v1``."""
        return f"http://{self.host}:{self.port}/rollout/{rollout_id}/attempt/{attempt}/v1"

    @contextmanager
    def paused(self, timeout: float | None = None) -> Iterator[None]:
        """From any other thread: hold new requests, wait for in-flight ones to drain, run the body,
        resume.

        Raises:
            RuntimeError: the server is not running.
            TimeoutError: the drain took longer than ``timeout`` seconds (the pause is undone).
        """
        loop = self._loop
        if loop is None or not self._server.started:
            raise RuntimeError("the proxy server is not running")
        future = asyncio.run_coroutine_threadsafe(self.proxy.gate.pause(), loop)
        try:
            future.result(timeout)
        except BaseException:
            future.cancel()
            loop.call_soon_threadsafe(self.proxy.gate.resume)
            raise
        try:
            yield
        finally:
            loop.call_soon_threadsafe(self.proxy.gate.resume)
