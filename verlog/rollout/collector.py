"""Fixed-turn batch collection: T turns x N environments per PPO iteration.

Episodes run across batches: the collector keeps each environment's current observation and
memory between calls, so the bootstrap prompt of a batch's last turn is exactly the first prompt
of the next batch. Episodes ending inside the batch auto-reset in the same step (gymnasium's
same-step autoreset); a truncated episode's final observation is rendered into a bootstrap prompt
so the critic can value it, a terminated one needs none.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from verlog.batch import TurnBatch
from verlog.envs.faults import count_faults
from verlog.envs.replay import env_states, restore_env_states
from verlog.envs.vector import final_infos, final_observations, split_infos
from verlog.rollout.engine import RolloutEngine, SamplingParams


class Memory(Protocol):
    """What the collector needs from a per-environment memory (see :mod:`verlog.memory`)."""

    def start_episode(self, instruction: str, observation: str, context: str = "") -> None: ...
    def add_turn(self, reply: str, next_observation: str, context: str = "") -> None: ...
    def prompt_ids(self) -> tuple[list[int], Any]: ...
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


@dataclass
class EpisodeRecord:
    """One finished training episode."""

    episode_id: int
    env_index: int
    episode_return: float
    length: int
    success: bool
    progression: float
    invalid_actions: int
    truncated: bool


@dataclass
class CollectStats:
    """What happened while collecting one batch."""

    episodes: list[EpisodeRecord] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    trimmed_turns: int = 0
    trimmed_observation_tokens: int = 0
    invalid_actions: int = 0
    turns: int = 0
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    prompt_seconds: float = 0.0
    env_faults: int = 0  # env steps/resets that raised, hung or lost their worker (episode truncated)
    env_restarts: int = 0  # env rebuilds after a fault
    env_fault_messages: list[str] = field(default_factory=list)  # one line per fault, for the log


def generate_turn(memories: list[Memory], engine: RolloutEngine, decode: Callable[[list[list[int]]], list[str]],
                  sampling: SamplingParams, stats: CollectStats) -> tuple[list[list[int]], list[Any], list[str]]:
    """Build each memory's prompt and generate one reply each; prompt and timing stats go to ``stats``.

    Returns:
        (prompt token ids per memory, the engine's generations, the decoded reply texts).
    """
    tic = time.perf_counter()
    prompts = []
    for memory in memories:
        ids, pstats = memory.prompt_ids()
        prompts.append(ids)
        stats.prompt_tokens.append(pstats.num_tokens)
        stats.trimmed_turns += pstats.trimmed_turns
        stats.trimmed_observation_tokens += pstats.trimmed_observation_tokens
    stats.prompt_seconds += time.perf_counter() - tic
    tic = time.perf_counter()
    gens = engine.generate(prompts, sampling) if prompts else []
    replies = decode([g.token_ids for g in gens]) if gens else []
    stats.generate_seconds += time.perf_counter() - tic
    return prompts, gens, replies


def add_faults(stats: CollectStats, counts: Any) -> None:
    """Add the fault counts of one vector-env call (:func:`~verlog.envs.faults.count_faults`) to ``stats``."""
    stats.env_faults += counts.faults
    stats.env_restarts += counts.restarts
    stats.env_fault_messages.extend(counts.messages)


class FixedTurnCollector:
    """Collect exactly ``num_turns`` turns from every environment of a vector env per call.

    Args:
        venv: a gymnasium vector env of :class:`verlog.envs.base.TextEnv` (same-step autoreset),
            as made by :func:`verlog.envs.vector.make_vector_env`.
        memories: one memory per environment (``len == venv.num_envs``).
        engine: the rollout engine; its returned token ids are stored verbatim.
        decode: token ids -> reply text for the environment (special tokens skipped).
        sampling: decoding parameters for training rollouts.
        num_turns: T, turns per environment per batch.
        pad_id: padding id for the batch tensors.
        seed: seed of the first ``venv.reset`` (env i gets seed + i).
    """

    def __init__(
        self,
        venv: Any,
        memories: list[Memory],
        engine: RolloutEngine,
        decode: Callable[[list[list[int]]], list[str]],
        sampling: SamplingParams,
        num_turns: int,
        pad_id: int,
        seed: int,
    ) -> None:
        if len(memories) != venv.num_envs:
            raise ValueError(f"need one memory per env: {len(memories)} memories, {venv.num_envs} envs")
        self.venv, self.memories, self.engine, self.decode = venv, memories, engine, decode
        self.sampling, self.num_turns, self.pad_id, self.seed = sampling, num_turns, pad_id, seed
        self.num_envs = venv.num_envs
        self._started = False
        self._next_episode_id = 0
        self._episode_ids = [0] * self.num_envs
        self._returns = [0.0] * self.num_envs
        self._lengths = [0] * self.num_envs
        self._invalid = [0] * self.num_envs
        self._start_faults = None  # fault counts of the first reset, added to the first batch's stats
        self._obs: list[str] = [""] * self.num_envs

    def _new_episode(self, n: int) -> None:
        self._episode_ids[n] = self._next_episode_id
        self._next_episode_id += 1
        self._returns[n], self._lengths[n], self._invalid[n] = 0.0, 0, 0

    def _start(self) -> None:
        obs, infos = self.venv.reset(seed=self.seed)
        self._start_faults = count_faults(infos)
        for n, info in enumerate(split_infos(infos, self.num_envs)):
            self.memories[n].start_episode(info["instruction"], obs[n], info["context"])
            self._obs[n] = obs[n]
            self._new_episode(n)
        self._started = True

    def collect(self) -> tuple[TurnBatch, CollectStats]:
        """Run T turns in every environment and pack them.

        Returns:
            The batch (see :class:`verlog.batch.TurnBatch`) and the collection statistics,
            including every episode that finished during it.
        """
        if not self._started:
            self._start()
        T, N = self.num_turns, self.num_envs
        stats = CollectStats()
        start_faults, self._start_faults = self._start_faults, None
        if start_faults is not None:
            add_faults(stats, start_faults)
        cols: dict[str, list[list[Any]]] = {k: [] for k in (
            "prompts", "responses", "logprobs", "rewards", "terminated", "truncated", "episode_ids",
            "action_valid", "cut")}
        bootstrap: dict[tuple[int, int], list[int]] = {}

        for t in range(T):
            prompts, gens, replies = generate_turn(self.memories, self.engine, self.decode, self.sampling, stats)

            tic = time.perf_counter()
            obs, rewards, terminated, truncated, infos = self.venv.step(list(replies))
            stats.env_seconds += time.perf_counter() - tic
            add_faults(stats, count_faults(infos))

            step_infos = split_infos(infos, N)
            finals_obs = final_observations(infos, N)
            finals_info = final_infos(infos, N)
            row_ep, row_valid = [], []
            for n in range(N):
                self._obs[n] = obs[n]
                done = bool(terminated[n]) or bool(truncated[n])
                # The step's info describes the step for a continuing episode; for an episode that
                # ended here it is the new episode's reset info and the step's own is the final info.
                info_step = finals_info[n] if done else step_infos[n]
                valid = bool(info_step["action_valid"])
                row_ep.append(self._episode_ids[n])
                row_valid.append(valid)
                self._returns[n] += float(rewards[n])
                self._lengths[n] += 1
                self._invalid[n] += int(not valid)
                stats.invalid_actions += int(not valid)
                if not done:
                    self.memories[n].add_turn(replies[n], obs[n], step_infos[n]["context"])
                    continue
                if truncated[n] and not terminated[n]:
                    # Value the observation that followed the cut: the episode's own final one.
                    self.memories[n].add_turn(replies[n], finals_obs[n], finals_info[n]["context"])
                    bootstrap[(t, n)] = self.memories[n].prompt_ids()[0]
                stats.episodes.append(EpisodeRecord(
                    episode_id=self._episode_ids[n], env_index=n, episode_return=self._returns[n],
                    length=self._lengths[n], success=bool(info_step["success"]),
                    progression=float(info_step["progression"]), invalid_actions=self._invalid[n],
                    truncated=bool(truncated[n]) and not bool(terminated[n]),
                ))
                self.memories[n].start_episode(step_infos[n]["instruction"], obs[n], step_infos[n]["context"])
                self._new_episode(n)

            cols["prompts"].append(prompts)
            cols["responses"].append([g.token_ids for g in gens])
            cols["logprobs"].append([g.logprobs for g in gens])
            cols["rewards"].append([float(r) for r in rewards])
            cols["terminated"].append([bool(x) for x in terminated])
            cols["truncated"].append([bool(tr) and not bool(te) for tr, te in zip(truncated, terminated)])
            cols["episode_ids"].append(row_ep)
            cols["action_valid"].append(row_valid)
            cols["cut"].append([g.finish_reason == "length" for g in gens])
            stats.turns += N

        # The last turn of every env whose episode goes on: the next batch's first prompt.
        for n in range(N):
            if not cols["terminated"][-1][n] and (T - 1, n) not in bootstrap:
                bootstrap[(T - 1, n)] = self.memories[n].prompt_ids()[0]

        batch = TurnBatch.from_turns(
            cols["prompts"], cols["responses"], cols["logprobs"], cols["rewards"], cols["terminated"],
            cols["truncated"], cols["episode_ids"], cols["action_valid"], cols["cut"], bootstrap,
            pad_id=self.pad_id, max_response_tokens=self.sampling.max_tokens,
        )
        return batch, stats

    def state_dict(self) -> dict:
        """Everything needed to continue collecting exactly (plain JSON types).

        Keys: ``started``; ``next_episode_id``; per env (lists of N): ``episode_ids``, ``returns``
        (float, reward so far), ``lengths`` (turns so far), ``invalid`` (invalid replies so far),
        ``observations`` (current observation), ``memories`` (memory states) and ``envs`` (episode
        seed and replies since its reset, see :func:`verlog.envs.replay.env_states`; ``None``
        before the first collection).
        """
        return {
            "started": self._started,
            "next_episode_id": self._next_episode_id,
            "episode_ids": list(self._episode_ids),
            "returns": list(self._returns),
            "lengths": list(self._lengths),
            "invalid": list(self._invalid),
            "observations": list(self._obs),
            "memories": [m.state_dict() for m in self.memories],
            "envs": env_states(self.venv) if self._started else None,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`: counters, memories, and each env's in-flight episode (replayed).

        Raises:
            ValueError: a state for another number of envs, or a replayed env whose observation
                differs from the saved one (the env is not deterministic given seed and replies).
        """
        if len(state["memories"]) != self.num_envs:
            raise ValueError(f"collector state has {len(state['memories'])} envs, this collector {self.num_envs}")
        for memory, mstate in zip(self.memories, state["memories"]):
            memory.load_state_dict(mstate)
        self._next_episode_id = int(state["next_episode_id"])
        self._episode_ids = [int(x) for x in state["episode_ids"]]
        self._returns = [float(x) for x in state["returns"]]
        self._lengths = [int(x) for x in state["lengths"]]
        self._invalid = [int(x) for x in state["invalid"]]
        self._obs = [str(x) for x in state["observations"]]
        self._started = bool(state["started"])
        if self._started:
            self.venv.reset(seed=self.seed)
            replayed = restore_env_states(self.venv, state["envs"])
            bad = [n for n in range(self.num_envs) if replayed[n] != self._obs[n]]
            if bad:
                raise ValueError(f"resume: replaying envs {bad} did not reproduce their saved observation "
                                 "(the environment is not deterministic given its seed and replies)")
