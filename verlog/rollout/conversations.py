"""Turn batches from tool conversations, for the trainer: the built-in tool loop or any
OpenAI-client agent through the proxy.

Each :meth:`collect` runs ``num_envs`` conversations to their end, ``group_size`` of them on each
task item (the groups of the critic-free algorithms; 1 for PPO). Every assistant turn is one turn
sample (:mod:`verlog.chat.samples`, :mod:`verlog.proxy.adapter`): its prompt is every id before it,
its response the ids the engine generated, so the turn-level critic and dual-discount GAE apply
unchanged. Conversations always end inside a round, so the batch is whole-episode: the last turn
of each is terminated and no turn needs a bootstrap value.

Conversations run concurrently and their generate calls are batched by one
:class:`~verlog.proxy.worker.GenerationWorker`; which calls share a batch depends on tool and
thread timing, so sampled runs are not bit-reproducible (greedy ones are).

These collectors do not use the turn-by-turn runner of :mod:`verlog.rollout.runner`: a conversation
is run as a whole (by :class:`~verlog.agent.loop.ToolAgentLoop` or by an outside agent through the
proxy), with no env step or memory for a runner to drive. They produce the same
:class:`~verlog.rollout.records.EpisodeRecord` s and implement the trainer's
:class:`~verlog.rollout.engine.Collector` protocol.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import replace
from typing import Any, Callable, ContextManager

from verlog.agent.loop import AgentLimits, ToolAgentLoop
from verlog.agent.tasks import AgentTask
from verlog.batch import TurnBatch
from verlog.chat.samples import TurnSample, samples_batch_inputs, turn_samples
from verlog.proxy import OpenAIProxy, ProxyServer
from verlog.proxy.adapter import rollout_samples
from verlog.proxy.worker import BatchingEngine, GenerationWorker
from verlog.rollout.engine import SamplingParams
from verlog.rollout.records import CollectStats, EpisodeRecord
from verlog.rollout.server import EngineClient, SessionEngine

__all__ = ["AgentEpisode", "ToolLoopCollector", "ProxyCollector"]

#: An episode of a conversation: (turn samples, total reward, a failure message or None).
AgentEpisode = tuple[list[TurnSample], float, "str | None"]


class _AgentCollector:
    """What both collectors share: items per round, packing into a TurnBatch, stats, state."""

    def __init__(self, task: AgentTask, *, num_envs: int, group_size: int, seed: int, pad_id: int,
                 max_response_tokens: int, sampling: SamplingParams) -> None:
        if num_envs < 1 or group_size < 1 or num_envs % group_size:
            raise ValueError(f"num_envs ({num_envs}) must be a positive multiple of group_size ({group_size})")
        self.task, self.num_envs, self.group_size = task, num_envs, group_size
        self.seed, self.pad_id, self.max_response_tokens = seed, pad_id, max_response_tokens
        self.sampling = sampling
        self.round = 0

    # -- state (exact resume: the round counter fixes the next items)
    def state_dict(self) -> dict[str, Any]:
        return {"round": self.round}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.round = int(state["round"])

    def close(self) -> None:
        """Release what the collector holds (nothing by default)."""

    def weights_changing(self) -> ContextManager[None]:
        """Nothing to hold while the trainer loads new weights (by default)."""
        return nullcontext()

    def _record(self, n: int, episode_id: int, episode: AgentEpisode) -> EpisodeRecord:
        """The record of conversation ``n``: success = the task's success reward reached."""
        samples, reward, failure = episode
        success = reward >= self.task.success_reward
        return EpisodeRecord(episode_id=episode_id, env_index=n, episode_return=reward, length=len(samples),
                             success=success, progression=float(success),
                             invalid_actions=sum(not s.action_valid for s in samples), truncated=False,
                             task=self.task.name, failure=failure)

    def round_items(self) -> list[Any]:
        """The items of the current round: ``num_envs / group_size`` fresh items, each repeated
        ``group_size`` times in a row (a pure function of seed and round)."""
        items = self.task.make_items(self.num_envs // self.group_size, self.seed * 1_000_003 + self.round)
        return [item for item in items for _ in range(self.group_size)]

    def run(self, items: list[Any], sampling: SamplingParams) -> list[AgentEpisode]:
        """One conversation per item, to its end."""
        raise NotImplementedError

    def collect(self) -> tuple[TurnBatch, CollectStats]:
        """One round: ``num_envs`` conversations as a whole-episode TurnBatch and its stats.

        Raises:
            RuntimeError: a conversation produced no assistant turn (e.g. the agent failed before
                its first request).
        """
        items = self.round_items()
        tic = time.perf_counter()
        episodes = self.run(items, self.sampling)
        seconds = time.perf_counter() - tic
        base = self.round * self.num_envs
        self.round += 1
        for i, (samples, _, failure) in enumerate(episodes):
            if not samples:
                raise RuntimeError(f"conversation {i} of round {self.round - 1} has no assistant turn: {failure}")
        kwargs = samples_batch_inputs([s for s, _, _ in episodes], [base + i for i in range(len(episodes))])
        T = len(kwargs["prompts"])
        groups = [n // self.group_size for n in range(self.num_envs)]
        group_ids = [[groups[n] if kwargs["turn_mask"][t][n] else -1 for n in range(self.num_envs)] for t in range(T)]
        batch = TurnBatch.from_turns(**kwargs, pad_id=self.pad_id, max_response_tokens=self.max_response_tokens,
                                     group_ids=group_ids)
        stats = CollectStats(generate_seconds=seconds)
        for n, episode in enumerate(episodes):
            samples, _, failure = episode
            record = self._record(n, base + n, episode)
            stats.turns += len(samples)
            stats.invalid_actions += record.invalid_actions
            stats.prompt_tokens += [len(s.prompt_ids) for s in samples]
            if failure is not None:
                stats.env_faults += 1
                stats.env_fault_messages.append(f"conversation {n}: {failure}")
            stats.episodes.append(record)
        return batch, stats

    def evaluate(self, items: list[Any], *, greedy: bool, seed: int) -> list[EpisodeRecord]:
        """The records of one conversation per item (``episode_id`` = the item's index, ``failure`` set
        when the conversation failed), for :meth:`verlog.evaluate.EvalResult.from_records`; sampled
        decoding is seeded with ``seed``."""
        sampling = replace(self.sampling, greedy=greedy, seed=seed)
        return [self._record(i, i, episode) for i, episode in enumerate(self.run(items, sampling))]


class ToolLoopCollector(_AgentCollector):
    """Conversations of :class:`~verlog.agent.loop.ToolAgentLoop` on a rollout engine.

    Args:
        task: the tool task.
        engine: the rollout engine (``generate(prompts, SamplingParams)``, sync or async).
        tokenizer: the model's tokenizer (its chat template renders the conversations).
        limits: the loop's limits; ``limits.max_response_tokens`` is the batch's R.
        num_envs, group_size, seed, pad_id, sampling: see the module docstring; ``sampling``'s
            ``max_tokens`` is replaced per turn by the limits.
        max_batch: most prompts per engine call.
        client: serve the conversations from these engine servers instead
            (:mod:`verlog.rollout.server`, ``rollout.server``): each conversation is one session,
            kept on one server, and the trainer's weight loads pause and drain them
            (:meth:`weights_changing`); :meth:`close` stops the servers. None: one
            :class:`~verlog.proxy.worker.GenerationWorker` on ``engine`` per collection.

    Raises:
        ValueError: ``num_envs`` not a positive multiple of ``group_size``.
    """

    def __init__(self, task: AgentTask, engine: Any, tokenizer: Any, limits: AgentLimits, *, num_envs: int,
                 group_size: int, seed: int, pad_id: int, sampling: SamplingParams, max_batch: int = 256,
                 client: EngineClient | None = None) -> None:
        super().__init__(task, num_envs=num_envs, group_size=group_size, seed=seed, pad_id=pad_id,
                         max_response_tokens=limits.max_response_tokens, sampling=sampling)
        self.engine, self.tokenizer, self.limits, self.max_batch = engine, tokenizer, limits, max_batch
        self.client = client
        self._runs = 0

    def close(self) -> None:
        """Stop the engine servers, if the collector has any."""
        if self.client is not None:
            self.client.stop()

    def weights_changing(self) -> ContextManager[None]:
        """With engine servers: hold new requests and drain those in flight while the trainer loads
        new weights; without: nothing to hold (generation runs inside :meth:`collect`)."""
        return self.client.paused() if self.client is not None else nullcontext()

    def run(self, items: list[Any], sampling: SamplingParams) -> list[AgentEpisode]:
        """One conversation per item, each started by ``task.start`` (its own tools and reward); a
        reward the task could not give (``Trajectory.reward_note``) is the episode's failure."""
        return [(turn_samples(t), t.total_reward, t.reward_note) for t in asyncio.run(self._run(items, sampling))]

    async def _run(self, items: list[Any], sampling: SamplingParams) -> list[Any]:
        if self.client is not None:
            return await self._run_served(items, sampling, self.client)
        worker = GenerationWorker(self.engine, self.max_batch)
        engine = BatchingEngine(worker)
        try:
            starts = [self.task.start(item) for item in items]
            loops = [ToolAgentLoop(engine, self.tokenizer, conv.tools, reward_fn=conv.reward_fn, limits=self.limits,
                                   sampling=sampling) for conv in starts]
            return list(await asyncio.gather(*(loop.run(conv.messages) for loop, conv in zip(loops, starts))))
        finally:
            await worker.close()

    async def _run_served(self, items: list[Any], sampling: SamplingParams, client: EngineClient) -> list[Any]:
        """The conversations on the engine servers, conversation ``i`` of this call as session
        ``(call, i)``."""
        self._runs += 1
        starts = [self.task.start(item) for item in items]
        sessions = [client.session((self._runs, i)) for i in range(len(items))]

        async def one(conv: Any, session: SessionEngine) -> Any:
            try:
                return await ToolAgentLoop(session, self.tokenizer, conv.tools, reward_fn=conv.reward_fn,
                                           limits=self.limits, sampling=sampling).run(conv.messages)
            finally:
                session.close()

        return list(await asyncio.gather(*(one(conv, s) for conv, s in zip(starts, sessions))))


class ProxyCollector(_AgentCollector):
    """Conversations of an OpenAI-client agent through the proxy (:mod:`verlog.proxy`).

    The agent is a plain function, called once per item in its own thread::

        agent_fn(item, *, base_url, reward_url, temperature, max_tokens) -> None

    It talks to ``base_url`` with any OpenAI client (each conversation has its own rollout id in the
    URL) and posts ``{"reward": r}`` to ``reward_url`` at its end. Every chat call the proxy served is
    one turn sample; ``credit`` assigns the reward to the turns (:mod:`verlog.proxy.adapter`).

    Args:
        task: the tool task (items and success threshold; the agent runs the tools itself).
        engine: the rollout engine the proxy serves.
        tokenizer: the model's tokenizer.
        agent_fn: the agent (see :func:`~verlog.agent.loading.load_agent_fn`).
        max_response_tokens: the ``max_tokens`` given to the agent, and the batch's R.
        credit, gamma: the adapter's credit assignment (``"gae"``: the reward on the last call).
        num_envs, group_size, seed, pad_id, sampling: as :class:`ToolLoopCollector` (the agent gets
            ``sampling``'s temperature, 0 when greedy).

    Raises:
        ValueError: ``num_envs`` not a positive multiple of ``group_size``.
        RuntimeError: the proxy did not start.
    """

    def __init__(self, task: AgentTask, engine: Any, tokenizer: Any, agent_fn: Callable[..., Any], *,
                 max_response_tokens: int, credit: str, gamma: float, num_envs: int, group_size: int, seed: int,
                 pad_id: int, sampling: SamplingParams, max_batch: int = 256) -> None:
        super().__init__(task, num_envs=num_envs, group_size=group_size, seed=seed, pad_id=pad_id,
                         max_response_tokens=max_response_tokens, sampling=sampling)
        self.agent_fn, self.credit, self.gamma = agent_fn, credit, gamma
        self.proxy = OpenAIProxy(engine, tokenizer, default_max_tokens=max_response_tokens, max_batch=max_batch)
        self.server = ProxyServer(self.proxy).start()
        self._calls = 0

    def close(self) -> None:
        self.server.stop()

    def weights_changing(self) -> ContextManager[None]:
        """Hold new requests and drain in-flight ones while the trainer loads new weights."""
        return self.server.paused()

    def run(self, items: list[Any], sampling: SamplingParams) -> list[AgentEpisode]:
        self._calls += 1
        prefix = f"c{self._calls}-"
        temperature = 0.0 if sampling.is_greedy else sampling.temperature

        def one(i: int) -> str | None:
            rid = prefix + str(i)
            reward_url = self.server.base_url(rid, 0).removesuffix("/v1") + "/reward"
            try:
                self.agent_fn(items[i], base_url=self.server.base_url(rid, 0), reward_url=reward_url,
                              temperature=temperature, max_tokens=self.max_response_tokens)
            except Exception as exc:  # noqa: BLE001 - reported per conversation, counted by collect()
                where = traceback.extract_tb(exc.__traceback__)[-1]
                return f"agent raised {type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
            return None

        with ThreadPoolExecutor(max_workers=len(items)) as pool:
            failures = list(pool.map(one, range(len(items))))
        recorded = {r.rollout_id: r for r in self.proxy.recorder.pop_all()}
        out: list[AgentEpisode] = []
        for i, failure in enumerate(failures):
            record = recorded.get(prefix + str(i))
            if record is None or not record.calls:
                out.append(([], 0.0, failure or "the agent made no chat call"))
                continue
            if record.reward is None and failure is None:
                failure = "the agent posted no reward (counted as 0)"
            samples = rollout_samples(record, self.credit, self.gamma, default_reward=0.0)
            out.append((samples, float(record.reward or 0.0), failure))
        return out
