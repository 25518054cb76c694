"""One generation worker per proxy: the only place the engine is called.

Concurrent requests put (prompt ids, SamplingParams) on an asyncio queue; a single task takes every
pending request (up to ``max_batch``), groups them by sampling parameters and makes one engine call
per group, in a worker thread for a synchronous engine (so the event loop keeps serving) and never
two at once (the HF engine is not thread-safe). A failed batch of several prompts is retried prompt by
prompt, so one bad request does not fail the others.

With ``chunk_tokens`` set, a request is generated ``chunk_tokens`` tokens per engine call: after each
call its prompt grows by what was generated and it goes round again until it ends (eos) or reaches its
``max_tokens``. Between calls the worker drops requests whose caller went away (their future is
cancelled) and takes in new ones, so an abandoned long generation costs at most one more chunk and a new
request waits for one round of chunks, not for every generation before it to finish. The tokens are
the same model's, each conditioned on exactly the ids before it, so ids and logprobs keep their meaning;
the ids of one request are those of one call per chunk (an engine samples each chunk with its own
call seed; a request's ``seed`` seeds its first chunk and, mixed with the chunk's index, the later ones).

With ``linger_s`` set, the worker does not start an engine call on what happens to be waiting: it keeps
taking requests as long as each next one arrives within ``linger_s`` of the one before (until
``max_batch``) or one of them is marked ``flush`` (its caller knows nothing more is coming, e.g. the
last prompt of a lock-step turn). Callers in other threads (an engine server's) otherwise hand the
worker their first request alone while the others are still being prepared, and the batch splits in two.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field, replace
from typing import Any

from verlog.rollout.engine import Generation, SamplingParams

__all__ = ["GenerationWorker", "BatchingEngine"]


@dataclass
class _Job:
    """One request in the worker: its prompt, parameters, the caller's future and what is generated so far."""

    prompt: list[int]
    params: SamplingParams
    future: "asyncio.Future[Generation]"
    flush: bool = False
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    chunks: int = 0


def chunk_seed(seed: int | None, chunk: int) -> int | None:
    """The sampling seed of a request's ``chunk``-th engine call: its own seed for the first, the seed
    mixed with the index (a golden-ratio multiple, so nearby seeds do not share chunks) after that."""
    if seed is None or chunk == 0:
        return seed
    return (seed ^ (chunk * 0x9E3779B97F4A7C15)) % 2**63


class GenerationWorker:
    """Serialises and batches engine calls from concurrent requests.

    Args:
        engine: ``generate(prompts, SamplingParams) -> list[Generation]``, sync or async.
        max_batch: most prompts per engine call.
        chunk_tokens: most tokens per request per engine call (see the module docstring); None: a
            request's whole ``max_tokens`` in one call.
        linger_s: seconds the worker waits for a next request before it calls the engine with fewer
            than ``max_batch`` (see the module docstring); 0: it calls at once.

    Attributes:
        engine_calls: engine calls made.
        abandoned: requests dropped unfinished because their caller went away.

    Raises:
        ValueError: ``max_batch`` or ``chunk_tokens`` < 1, or ``linger_s`` < 0.
    """

    def __init__(self, engine: Any, max_batch: int = 64, chunk_tokens: int | None = None,
                 linger_s: float = 0.0) -> None:
        if max_batch < 1:
            raise ValueError(f"GenerationWorker: max_batch must be >= 1, got {max_batch}")
        if chunk_tokens is not None and chunk_tokens < 1:
            raise ValueError(f"GenerationWorker: chunk_tokens must be >= 1 or None, got {chunk_tokens}")
        if not 0.0 <= linger_s < float("inf"):
            raise ValueError(f"GenerationWorker: linger_s must be a finite number >= 0, got {linger_s}")
        self.engine = engine
        self.max_batch = max_batch
        self.chunk_tokens = chunk_tokens
        self.linger_s = linger_s
        self.engine_calls = 0
        self.abandoned = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[_Job] | None = None
        self._task: asyncio.Task[None] | None = None

    def _ensure_started(self) -> asyncio.Queue[_Job]:
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop, self._queue = loop, asyncio.Queue()
            self._task = loop.create_task(self._run(self._queue))
        assert self._queue is not None
        return self._queue

    async def generate(self, prompt_ids: list[int], params: SamplingParams, *, flush: bool = False) -> Generation:
        """The engine's generation for one prompt. Cancelling the caller drops the request from the
        worker (before its next engine call when ``chunk_tokens`` is set). ``flush``: do not linger
        for more requests once this one is taken (``linger_s``).

        Raises:
            ValueError: the engine returned no token, logprobs of another length or a wrong count.
            Exception: whatever the engine raised for this prompt.
        """
        queue = self._ensure_started()
        future: asyncio.Future[Generation] = asyncio.get_running_loop().create_future()
        await queue.put(_Job(list(prompt_ids), params, future, flush))
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

    async def _run(self, queue: asyncio.Queue[_Job]) -> None:
        active: list[_Job] = []
        try:
            while True:
                if not active:
                    active.append(await queue.get())
                while len(active) < self.max_batch and not queue.empty():
                    active.append(queue.get_nowait())
                while self.linger_s and len(active) < self.max_batch and not any(j.flush for j in active):
                    try:
                        active.append(await asyncio.wait_for(queue.get(), self.linger_s))
                    except asyncio.TimeoutError:
                        break
                    while len(active) < self.max_batch and not queue.empty():
                        active.append(queue.get_nowait())
                groups: dict[tuple[SamplingParams, int, int], list[_Job]] = {}
                for job in active:
                    groups.setdefault(self._call_key(job), []).append(job)
                for (params, max_tokens, chunk), jobs in groups.items():
                    call_params = replace(params, max_tokens=max_tokens, seed=chunk_seed(params.seed, chunk))
                    await self._serve(call_params, jobs)
                self.abandoned += sum(job.future.cancelled() for job in active)
                active = [job for job in active if not job.future.done()]
        finally:  # closed: nobody will serve what is left
            while not queue.empty():
                active.append(queue.get_nowait())
            for job in active:
                job.future.cancel()

    def _call_key(self, job: _Job) -> tuple[SamplingParams, int, int]:
        """(request params, tokens of its next call, index of the call when the request is seeded):
        requests with one key share an engine call."""
        left = job.params.max_tokens - len(job.ids)
        step = left if self.chunk_tokens is None else min(left, self.chunk_tokens)
        return job.params, step, job.chunks if job.params.seed is not None else 0

    async def _serve(self, params: SamplingParams, jobs: list[_Job]) -> None:
        jobs = [job for job in jobs if not job.future.done()]  # the others' callers went away
        if not jobs:
            return
        try:
            gens = await self._call([job.prompt + job.ids for job in jobs], params)
        except Exception as exc:  # noqa: BLE001 - handed to the requests
            if len(jobs) > 1:
                for job in jobs:
                    await self._serve(params, [job])
                return
            if not jobs[0].future.done():
                jobs[0].future.set_exception(exc)
            return
        for job, gen in zip(jobs, gens):
            if job.future.done():  # abandoned during the call
                continue
            job.ids += gen.token_ids
            job.logprobs += gen.logprobs
            job.chunks += 1
            # ended: eos, its max_tokens, or the engine stopped short of the call's max_tokens itself
            if (gen.finish_reason == "stop" or len(job.ids) >= job.params.max_tokens
                    or len(gen.token_ids) < params.max_tokens):
                job.future.set_result(Generation(job.ids, job.logprobs, gen.finish_reason))

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
            if len(gen.token_ids) > params.max_tokens:
                raise ValueError(f"engine returned {len(gen.token_ids)} ids for max_tokens {params.max_tokens}")
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
