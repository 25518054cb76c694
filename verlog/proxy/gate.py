"""Pause/drain of proxy requests around weight updates.

Requests enter the gate before they touch the engine and leave it once recorded. :meth:`PauseGate.pause`
closes the gate (new requests wait, they do not fail) and returns once every request already inside
has left; :meth:`PauseGate.resume` opens it again. Pauses nest: the gate opens when the last one ends.
Use from the event loop that serves the requests.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import AsyncIterator

__all__ = ["PauseGate"]


class PauseGate:
    """Counts requests in flight and holds new ones while paused."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._inflight = 0
        self._pauses = 0

    @property
    def inflight(self) -> int:
        """Requests inside the gate."""
        return self._inflight

    @property
    def is_paused(self) -> bool:
        return self._pauses > 0

    async def enter(self) -> None:
        """Wait while paused, then count the caller as in flight (pair with :meth:`leave`)."""
        while not self._open.is_set():
            await self._open.wait()
        self._inflight += 1
        self._idle.clear()

    def leave(self) -> None:
        """The caller is no longer in flight.

        Raises:
            RuntimeError: more leaves than enters.
        """
        if self._inflight <= 0:
            raise RuntimeError("PauseGate.leave without enter")
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()

    async def pause(self) -> None:
        """Hold new requests and wait until the ones in flight have left."""
        self._pauses += 1
        self._open.clear()
        await self._idle.wait()

    def resume(self) -> None:
        """End one pause; waiting requests go on when no pause is left.

        Raises:
            RuntimeError: not paused.
        """
        if self._pauses <= 0:
            raise RuntimeError("PauseGate.resume without pause")
        self._pauses -= 1
        if self._pauses == 0:
            self._open.set()

    @asynccontextmanager
    async def paused(self) -> AsyncIterator[None]:
        """``async with gate.paused(): engine.load_weights(...)``: drained on entry, resumed on exit
        (also when the body raises, or when cancelled while draining)."""
        try:
            await self.pause()
            yield
        finally:
            self.resume()
