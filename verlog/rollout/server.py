"""Server-based asynchronous rollout: rollout engines behind an asyncio token-in/token-out interface.

An :class:`EngineServer` owns one synchronous :class:`~verlog.rollout.engine.RolloutEngine` and serves
single-prompt requests, ``await server.generate(prompt_ids, sampling) -> Generation``, from any thread
and any event loop. It runs its own event loop in a background thread; inside it one
:class:`~verlog.proxy.worker.GenerationWorker` (the proxy's batching worker) batches at request
granularity: whenever the engine is free it takes every waiting request (up to ``max_batch``), groups
them by equal :class:`~verlog.rollout.engine.SamplingParams` and makes one ``engine.generate`` call per
group, so concurrent callers (tool conversations waiting on tools, env slots stepping their envs)
share batches without lock-step. The ids returned are the engine's ids verbatim: they are what gets
trained, with their behaviour-policy logprobs. A failed batch is retried prompt by prompt, so an error
reaches only the callers whose prompt fails.

Weight sync with requests in flight uses the proxy's :class:`~verlog.proxy.gate.PauseGate`:
:meth:`EngineServer.paused` holds new requests (they wait, they do not fail), waits for those in an
engine call to finish, and runs its body (the trainer's ``load_weights``); requests that arrive
meanwhile are generated with the new weights. A trajectory may thus have turns of two policy versions;
each turn's logprobs are those of the policy that sampled it.

An :class:`EngineClient` spreads requests over several servers (one per data-parallel group): a new
trajectory goes to the server with the fewest requests in flight, and every later request of the same
trajectory (same session key) to that server again, so an engine with a prefix cache reuses it.
Its ``generate`` sends the requests that the callers of one event loop make in one round of that
loop together, so conversations woken together reach a server as one burst and share its next engine
call, as they would share the call of a worker running in their own loop.
:meth:`EngineClient.session` gives the per-trajectory engine view that
:class:`~verlog.agent.loop.ToolAgentLoop` calls; :class:`ServedEngine` the synchronous
``generate(prompts, params)`` of a :class:`~verlog.rollout.engine.RolloutEngine` for the lock-step
collectors (prompt ``j`` of every call is session ``j``: an env slot stays on its server).

Only the transformers engine (:class:`~verlog.rollout.hf.HFEngine`) and fake engines have run behind
a server, on CPU.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future, InvalidStateError
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any, ContextManager, Hashable, Iterable, Iterator, Sequence

import torch

from verlog.proxy.gate import PauseGate
from verlog.proxy.worker import GenerationWorker
from verlog.rollout.engine import Generation, RolloutEngine, SamplingParams

__all__ = ["EngineServer", "EngineClient", "SessionEngine", "ServedEngine", "close_served", "weights_pause"]


class EngineServer:
    """One rollout engine served to concurrent callers, batched at request granularity.

    ``server = EngineServer(engine).start()``; ``await server.generate(ids, params)`` from any event
    loop (or ``server.submit(ids, params).result()`` from any thread); ``with server.paused():
    engine.load_weights(...)``; ``server.stop()``. The engine is called from the server's own threads
    only, one call at a time, so a thread-unsafe engine (the transformers one) is safe; nobody else may
    call it while the server runs, except inside :meth:`paused`.

    Args:
        engine: the synchronous rollout engine (``generate(prompts, params)``, ``load_weights``).
        max_batch: most prompts per engine call (>= 1).
        linger_s: before an engine call with fewer than ``max_batch`` prompts, wait for more as long as
            each next request comes within this many seconds of the one before (requests from other
            threads arrive one by one; without it the first of a burst is generated alone).
        name: the server thread's name.

    Attributes:
        requests: requests that have left the server so far (answered, failed or cancelled).

    Raises:
        ValueError: ``max_batch`` < 1 or ``linger_s`` < 0.
    """

    def __init__(self, engine: RolloutEngine, *, max_batch: int = 64, linger_s: float = 0.0,
                 name: str = "verlog-engine-server") -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"EngineServer: max_batch must be a positive int, got {max_batch!r}")
        self.engine, self.max_batch, self.name = engine, max_batch, name
        self.worker = GenerationWorker(engine, max_batch, linger_s=linger_s)
        self.gate: PauseGate | None = None
        self.requests = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifetime
    @property
    def running(self) -> bool:
        """The server thread runs and takes requests."""
        return self._thread is not None and self._thread.is_alive() and self._loop is not None

    def start(self) -> "EngineServer":
        """Start the server thread (idempotent); returns the server."""
        with self._lock:
            if self.running:
                return self
            ready = threading.Event()

            def run() -> None:
                loop = asyncio.new_event_loop()
                asyncio.set_event_loop(loop)
                self.gate = PauseGate()  # made in its loop: it is used from there only
                self._loop = loop
                ready.set()
                try:
                    loop.run_forever()
                finally:  # stopped: the requests still open are cancelled, their callers told so
                    loop.run_until_complete(self.worker.close())
                    tasks = asyncio.all_tasks(loop)
                    for task in tasks:
                        task.cancel()
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                    loop.run_until_complete(loop.shutdown_default_executor())
                    loop.close()

            self._thread = threading.Thread(target=run, name=self.name, daemon=True)
            self._thread.start()
            ready.wait()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Stop serving: requests still waiting are cancelled; joins the thread (idempotent)."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None:
                return
            if thread.is_alive():
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout)
            self._loop, self._thread = None, None

    def __enter__(self) -> "EngineServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ requests
    @property
    def engine_calls(self) -> int:
        """Engine calls made so far (``requests / engine_calls`` is the mean batch size)."""
        return self.worker.engine_calls

    @property
    def inflight(self) -> int:
        """Requests admitted and not yet answered (0 while paused and drained)."""
        return self.gate.inflight if self.gate is not None else 0

    async def _serve(self, prompt_ids: list[int], params: SamplingParams, flush: bool = False) -> Generation:
        assert self.gate is not None
        await self.gate.enter()
        try:
            return await self.worker.generate(prompt_ids, params, flush=flush)
        finally:
            self.gate.leave()
            self.requests += 1

    def submit(self, prompt_ids: Sequence[int], params: SamplingParams) -> "Future[Generation]":
        """Queue one request from any thread; its future holds the generation or the engine's error.

        Cancelling the future drops the request (before its engine call, or its result after it).

        Raises:
            RuntimeError: the server is not running.
        """
        loop = self._loop
        if loop is None or not self.running:
            raise RuntimeError(f"{self.name}: the engine server is not running")
        return asyncio.run_coroutine_threadsafe(self._serve(list(prompt_ids), params), loop)

    def submit_many(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> "list[Future[Generation]]":
        """Queue several requests at once, from any thread: the worker sees them together, so when it is
        free and they are at most ``max_batch`` they share one engine call, in order (a lock-step
        collector's turn is then the engine call it was without the server).

        Raises:
            RuntimeError: the server is not running.
        """
        loop = self._loop
        if loop is None or not self.running:
            raise RuntimeError(f"{self.name}: the engine server is not running")
        futures: list[Future[Generation]] = [Future() for _ in prompts]

        def enqueue() -> None:  # in the server's loop: every task is created before the worker runs again
            for j, (prompt, future) in enumerate(zip(prompts, futures)):  # the last one: nothing more is coming
                task = loop.create_task(self._serve(list(prompt), params, flush=j == len(prompts) - 1))
                _chain(task, future)

        loop.call_soon_threadsafe(enqueue)
        return futures

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams) -> Generation:
        """The engine's generation for one prompt, awaited from any event loop.

        Args:
            prompt_ids: the prompt's token ids.
            params: decoding parameters; only requests with equal params share an engine call.

        Returns:
            the generation: response ids (1 <= L <= ``params.max_tokens``), their logprobs as the engine
            gives them (:class:`~verlog.rollout.engine.Generation`), and the finish reason.

        Raises:
            RuntimeError: the server is not running.
            ValueError: the engine returned no token, logprobs of another length or too many ids.
            Exception: whatever the engine raised for this prompt.
        """
        return await asyncio.wrap_future(self.submit(prompt_ids, params))

    # ------------------------------------------------------------------ weights
    @contextmanager
    def paused(self, timeout: float | None = None) -> Iterator[None]:
        """From any thread but the server's: hold new requests, wait until those admitted are answered,
        run the body, resume (also when the body raises).

        Raises:
            RuntimeError: the server is not running.
            TimeoutError: the drain took longer than ``timeout`` seconds (the pause is undone).
        """
        loop, gate = self._loop, self.gate
        if loop is None or gate is None or not self.running:
            raise RuntimeError(f"{self.name}: the engine server is not running")
        future = asyncio.run_coroutine_threadsafe(gate.pause(), loop)

        async def resume() -> None:
            gate.resume()

        try:
            future.result(timeout)
        except BaseException:
            future.cancel()
            asyncio.run_coroutine_threadsafe(resume(), loop).result()
            raise
        try:
            yield
        finally:  # open again when the with-block ends
            asyncio.run_coroutine_threadsafe(resume(), loop).result()

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new weights into the engine between requests (:meth:`paused` around the load)."""
        with self.paused():
            self.engine.load_weights(named_tensors)


def _chain(task: "asyncio.Task[Generation]", future: "Future[Generation]") -> None:
    """Copy ``task``'s outcome into the thread-safe ``future``; cancelling the future cancels the task."""
    loop = task.get_loop()

    def copy(done: "asyncio.Task[Generation]") -> None:
        if done.cancelled():
            future.cancel()
            return
        try:
            if done.exception() is not None:
                future.set_exception(done.exception())
            else:
                future.set_result(done.result())
        except InvalidStateError:  # the caller cancelled it meanwhile
            pass

    def cancel(done: "Future[Generation]") -> None:
        if done.cancelled():
            loop.call_soon_threadsafe(task.cancel)

    task.add_done_callback(copy)
    future.add_done_callback(cancel)


def _relay(source: "Future[Generation]", target: "asyncio.Future[Generation]",
           loop: asyncio.AbstractEventLoop) -> None:
    """Copy the thread-safe ``source``'s outcome into ``target`` of ``loop``; cancelling ``target``
    (its caller went away) cancels ``source``, which drops the request."""

    def copy(done: "Future[Generation]") -> None:
        def settle() -> None:
            if target.done():
                return
            if done.cancelled():
                target.cancel()
            elif done.exception() is not None:
                target.set_exception(done.exception())  # type: ignore[arg-type]
            else:
                target.set_result(done.result())

        if not loop.is_closed():
            loop.call_soon_threadsafe(settle)

    source.add_done_callback(copy)
    target.add_done_callback(lambda t: source.cancel() if t.cancelled() else None)


class SessionEngine:
    """One trajectory's view of an :class:`EngineClient`: the rollout-engine interface that
    :class:`~verlog.agent.loop.ToolAgentLoop` calls, every request of the trajectory on one server.

    Args:
        client: the client.
        key: the trajectory's session key (hashable, unique among the trajectories running).
    """

    def __init__(self, client: "EngineClient", key: Hashable) -> None:
        self.client, self.key = client, key

    async def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One generation per prompt, in order, all on this session's server (raises what
        :meth:`EngineServer.generate` raises)."""
        return list(await asyncio.gather(*(self.client.generate(p, params, session=self.key) for p in prompts)))

    def close(self) -> None:
        """The trajectory has ended: forget its server (:meth:`EngineClient.release`)."""
        self.client.release(self.key)


class EngineClient:
    """Requests over several :class:`EngineServer` s: the least loaded server for a new trajectory,
    the same server for the rest of it.

    Thread-safe: callers may run in several threads and event loops.

    Args:
        servers: the servers (started by :meth:`start` if they are not); the client stops them in
            :meth:`stop`.

    Attributes:
        assigned: [servers] trajectories (session keys) given to each server so far.
        sent: [servers] requests sent to each server so far.

    Raises:
        ValueError: no server.
    """

    def __init__(self, servers: Sequence[EngineServer]) -> None:
        if not servers:
            raise ValueError("EngineClient: needs at least one server")
        self.servers = list(servers)
        self.assigned = [0] * len(self.servers)
        self.sent = [0] * len(self.servers)
        self._inflight = [0] * len(self.servers)
        self._sticky: dict[Hashable, int] = {}
        self._bursts: dict[asyncio.AbstractEventLoop, list[Any]] = {}
        self._lock = threading.Lock()

    @classmethod
    def over(cls, engines: Sequence[RolloutEngine], *, max_batch: int = 64, linger_s: float = 0.0) -> "EngineClient":
        """A client over one started server per engine (each engine must be its own object).

        Raises:
            ValueError: an engine given twice.
        """
        if len({id(e) for e in engines}) != len(engines):
            raise ValueError("EngineClient.over: every server needs its own engine object")
        return cls([EngineServer(e, max_batch=max_batch, linger_s=linger_s, name=f"verlog-engine-server-{i}").start()
                    for i, e in enumerate(engines)])

    def start(self) -> "EngineClient":
        """Start every server not yet running."""
        for server in self.servers:
            server.start()
        return self

    def stop(self) -> None:
        """Stop every server."""
        for server in self.servers:
            server.stop()

    @property
    def inflight(self) -> list[int]:
        """[servers] requests this client sent to each server and has not had answered yet."""
        with self._lock:
            return list(self._inflight)

    def server_of(self, session: Hashable) -> int | None:
        """The index of the server a running trajectory is on (None: not assigned, or released)."""
        with self._lock:
            return self._sticky.get(session)

    def _pick(self, session: Hashable | None) -> int:
        """Reserve a server for one request: the session's own, else the one with the fewest requests
        in flight (ties: the lowest index)."""
        with self._lock:
            index = self._sticky.get(session) if session is not None else None
            if index is None:
                index = min(range(len(self.servers)), key=lambda i: (self._inflight[i], i))
                if session is not None:
                    self._sticky[session] = index
                    self.assigned[index] += 1
            self._inflight[index] += 1
            self.sent[index] += 1
            return index

    def _done(self, index: int) -> None:
        with self._lock:
            self._inflight[index] -= 1

    def submit(self, prompt_ids: Sequence[int], params: SamplingParams, *,
               session: Hashable | None = None) -> "Future[Generation]":
        """Queue one prompt on the session's server (a new session: the least loaded one), from any
        thread; the future holds its generation or the error raised for it.

        Raises:
            RuntimeError: the chosen server is not running.
        """
        index = self._pick(session)
        try:
            future = self.servers[index].submit(prompt_ids, params)
        except BaseException:
            self._done(index)
            raise
        future.add_done_callback(lambda _: self._done(index))
        return future

    def submit_many(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                    sessions: Sequence[Hashable]) -> "list[Future[Generation]]":
        """Queue ``prompts[j]`` as session ``sessions[j]``, each server's share at once
        (:meth:`EngineServer.submit_many`); futures in the order of ``prompts``.

        Raises:
            RuntimeError: a chosen server is not running.
        """
        chosen = [self._pick(session) for session in sessions[: len(prompts)]]
        futures: list[Future[Generation] | None] = [None] * len(prompts)
        try:
            for index in sorted(set(chosen)):
                mine = [j for j, k in enumerate(chosen) if k == index]
                for j, future in zip(mine, self.servers[index].submit_many([prompts[j] for j in mine], params)):
                    futures[j] = future
        finally:
            for j, index in enumerate(chosen):
                if futures[j] is None:
                    self._done(index)
                else:
                    futures[j].add_done_callback(lambda _, i=index: self._done(i))  # type: ignore[union-attr]
        return futures  # type: ignore[return-value]

    async def generate(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                       session: Hashable | None = None) -> Generation:
        """One prompt's generation on the session's server (a new session: the least loaded one),
        awaited from any event loop.

        The requests that the callers of one event loop make before that loop goes on to its next
        round of ready callbacks are sent together (:meth:`submit_many`): conversations woken
        together (their tool calls done) reach the server as one burst, which it batches as the
        in-loop worker of the direct path would, instead of taking the first of them alone.

        Raises:
            RuntimeError: the chosen server is not running.
            Exception: what the server's engine raised for this prompt (only this caller gets it).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Generation] = loop.create_future()
        with self._lock:
            burst = self._bursts.setdefault(loop, [])
            if not burst:  # runs after the callbacks ready now: whoever else asks in this round joins
                loop.call_soon(self._send_burst, loop)
            burst.append((list(prompt_ids), params, session, future))
        return await future

    def _send_burst(self, loop: asyncio.AbstractEventLoop) -> None:
        """Send one event loop's waiting requests, one :meth:`submit_many` per sampling parameters."""
        with self._lock:
            burst = self._bursts.pop(loop, [])
        groups: dict[SamplingParams, list[tuple[list[int], Hashable, asyncio.Future[Generation]]]] = {}
        for prompt, params, session, future in burst:
            groups.setdefault(params, []).append((prompt, session, future))
        for params, items in groups.items():
            try:
                sent = self.submit_many([p for p, _, _ in items], params, [s for _, s, _ in items])
            except Exception as exc:  # noqa: BLE001 - a server not running: its callers hear it
                for _, _, future in items:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for (_, _, future), done in zip(items, sent):
                _relay(done, future, loop)

    def session(self, key: Hashable) -> SessionEngine:
        """The engine view of trajectory ``key`` (close it, or :meth:`release` the key, at its end)."""
        return SessionEngine(self, key)

    def release(self, session: Hashable) -> None:
        """Forget a finished trajectory's server (a later request with its key is placed anew)."""
        with self._lock:
            self._sticky.pop(session, None)

    @contextmanager
    def paused(self, timeout: float | None = None) -> Iterator[None]:
        """Every server paused and drained (:meth:`EngineServer.paused`) for the body."""
        with ExitStack() as stack:
            for server in self.servers:
                stack.enter_context(server.paused(timeout))
            yield

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load the same weights into every server's engine, all servers paused meanwhile."""
        named = list(named_tensors)
        with self.paused():
            for server in self.servers:
                server.engine.load_weights(iter(named))


class ServedEngine:
    """The synchronous rollout-engine interface over an :class:`EngineClient`, for the lock-step
    collectors (:class:`~verlog.rollout.collector.FixedTurnCollector`,
    :class:`~verlog.rollout.episodes.EpisodeCollector`): one call's prompts are sent together
    (:meth:`EngineClient.submit_many`), prompt ``j`` as session ``j`` (an env slot keeps its server
    across turns). On one server with at most ``max_batch`` prompts per call and no other clients, the
    engine calls are the ones the collector made without the server.

    Call it from any thread but a server's, never from a running event loop.

    Args:
        client: the client over the engine servers.
    """

    def __init__(self, client: EngineClient) -> None:
        self.client = client

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[Generation]:
        """One generation per prompt, in order.

        Raises:
            Exception: the first error of a prompt (the other prompts' generations are dropped).
        """
        futures = self.client.submit_many(prompts, params, range(len(prompts)))
        try:
            return [future.result() for future in futures]
        finally:
            for future in futures:
                future.cancel()  # no-op on the answered ones

    def load_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load the weights into every server's engine (:meth:`EngineClient.load_weights`)."""
        self.client.load_weights(named_tensors)

    def paused(self, timeout: float | None = None) -> Any:
        """Every server paused and drained for the body (:meth:`EngineClient.paused`)."""
        return self.client.paused(timeout)

    def close(self) -> None:
        """Stop the servers."""
        self.client.stop()


def weights_pause(engine: Any) -> ContextManager[Any]:
    """What a lock-step collector holds while the trainer loads new weights: a :class:`ServedEngine`'s
    pause and drain of its servers, nothing for a plain engine (its generation runs in the trainer's
    thread)."""
    return engine.paused() if isinstance(engine, ServedEngine) else nullcontext()


def close_served(engine: Any) -> None:
    """Stop a :class:`ServedEngine`'s servers; a plain engine is left as it is (the trainer owns it)."""
    if isinstance(engine, ServedEngine):
        engine.close()
