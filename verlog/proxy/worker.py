"""One generation worker per proxy: the only place the engine is called.

Concurrent requests put (prompt ids, SamplingParams) on an asyncio queue; a single task takes every
pending request (up to ``max_batch``), groups them by sampling parameters and makes one engine call
per group, in a worker thread for a synchronous engine (so the event loop keeps serving) and never
two at once (the HF engine is not thread-safe). A failed batch of several prompts is retried prompt by
prompt, so one bad request does not fail the others.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from verlog.rollout.engine import Generation, SamplingParams

__all__ = ["GenerationWorker", "BatchingEngine"]

_Item = tuple[list[int], SamplingParams, "asyncio.Future[Generation]"]


class GenerationWorker:
    """Serialises and batches engine calls from concurrent requests.

    Args:
        engine: ``generate(prompts, SamplingParams) -> list[Generation]``, sync or async.
        max_batch: most prompts per engine call.

    Raises:
        ValueError: ``max_batch`` < 1.
    """

    def __init__(self, engine: Any, max_batch: int = 64) -> None:
        if max_batch < 1:
            raise ValueError(f"GenerationWorker: max_batch must be >= 1, got {max_batch}")
        self.engine = engine
        self.max_batch = max_batch
        self.engine_calls = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Item] | None = None
        self._task: asyncio.Task[None] | None = None

    def _ensure_started(self) -> asyncio.Queue[_Item]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop, self._queue = loop, asyncio.Queue()
            self._task = loop.create_task(self._run(self._queue))
        assert self._queue is not None
        return self._queue

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Generation:
        """The engine's generation for one prompt.

        Raises:
            ValueError: the engine returned no token, logprobs of another length or a wrong count.
            Exception: whatever the engine raised for this prompt.
        """
        queue = self._ensure_started()
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        await queue.put((list(prompt_ids), params, future))
        return await future

    async def close(self) -> None:
        """Stop the worker task (pending requests are cancelled)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, RuntimeError):
                pass
            self._task = None

    async def _run(self, queue: asyncio.Queue[_Item]) -> None:
        while True:
            batch = [await queue.get()]
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            groups: dict[SamplingParams, list[_Item]] = {}
            for item in batch:
                if not item[2].done():  # the client went away: skip it
                    groups.setdefault(item[1], []).append(item)
            for params, items in groups.items():
                await self._serve(params, items)

    async def _serve(self, params: SamplingParams, items: list[_Item]) -> None:
        try:
            gens = await self._call([p for p, _, _ in items], params)
        except Exception as exc:  # noqa: BLE001 - handed to the requests
            if len(items) > 1:
                for item in items:
                    await self._serve(params, [item])
                return
            gens = [exc] * len(items)
        for (_, _, future), gen in zip(items, gens):
            if future.done():
                continue
            if isinstance(gen, Exception):
                future.set_exception(gen)
            else:
                future.set_result(gen)

    async def _call(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        self.engine_calls += 1
        if inspect.iscoroutinefunction(self.engine.generate):
            gens = await self.engine.generate(prompts, params)
        else:
            gens = await asyncio.to_thread(self.engine.generate, prompts, params)
        if len(gens) != len(prompts):
            raise ValueError(f"engine returned {len(gens)} generations for {len(prompts)} prompts")
        for gen in gens:
            if not gen.token_ids or len(gen.logprobs) != len(gen.token_ids):
                raise ValueError(f"engine returned {len(gen.token_ids)} ids and {len(gen.logprobs)} logprobs")
        return list(gens)


class BatchingEngine:
    """The rollout-engine interface over a :class:`GenerationWorker`, for agent loops that run
    concurrently: each loop's ``await generate([prompt], params)`` joins whatever other loops are
    waiting for in one engine call.

    Args:
        worker: the worker that owns the engine.
    """

    def __init__(self, worker: GenerationWorker) -> None:
        self.worker = worker

    async def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """One generation per prompt, in order (raises what :meth:`GenerationWorker.generate` raises)."""
        return list(await asyncio.gather(*(self.worker.generate(p, params) for p in prompts)))
