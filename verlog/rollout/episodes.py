"""Whole-episode group collection for the critic-free estimators (GRPO, GiGPO, RLOO, ...).

Each call plays one *round*: every env is reset with :func:`~verlog.envs.groups.group_seeds`
(the ``group_size`` consecutive envs of a group start from the same state) and runs until its
episode ends (terminated or truncated by the env's step limit). An env whose episode has ended
gets no more generations; the vector env still steps it (gymnasium steps all envs together)
with an empty reply whose outcome is discarded. The result is a
:class:`~verlog.batch.TurnBatch` of one complete episode per env with ``turn_mask``,
``group_ids`` and, with state keys on, ``state_ids`` (the exact state each turn acted in, for
GiGPO's anchor groups); no turn needs a bootstrap value.

Nothing is in flight between calls, so the collector's state is the round counter alone.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager

from verlog.batch import TurnBatch
from verlog.envs.groups import STATE_KEY_INFO, group_seeds
from verlog.rollout.engine import RolloutEngine, SamplingParams
from verlog.rollout.records import CollectStats
from verlog.rollout.runner import Memory, Slot, generate_turn, play_turn, prompt_images, vector_reset, vector_step
from verlog.rollout.server import close_served, weights_pause

__all__ = ["EpisodeCollector"]

_FIELDS = ("prompts", "responses", "logprobs", "rewards", "terminated", "truncated", "episode_ids",
           "action_valid", "cut", "state_ids")
# what a padding turn holds in each column (see TurnBatch.from_turns)
_PADDING = {"prompts": [], "responses": [], "logprobs": [], "rewards": 0.0, "terminated": False,
            "truncated": False, "episode_ids": -1, "action_valid": True, "cut": False, "state_ids": 0}


class EpisodeCollector:
    """Collect one complete episode from every env per call, envs grouped by shared reset seeds.

    Args:
        venv: a vector env from :func:`~verlog.envs.vector.make_vector_env` (``state_keys=True``
            to record ``state_ids``); :meth:`close` closes it.
        memories: one memory per env.
        engine, decode, sampling, pad_id: as :class:`~verlog.rollout.collector.FixedTurnCollector`.
        seed: base seed of the rounds' group seeds.
        group_size: envs per group; divides ``venv.num_envs``.
        max_turns: safety cap on an episode's turns (an episode still running then is cut and
            counted as truncated); the env's own step limit normally ends it first.
        state_keys: record ``info["state_key"]`` as ``state_ids``.

    Raises:
        ValueError: a memory count other than ``venv.num_envs``, a bad ``group_size`` or ``max_turns``.
    """

    def __init__(self, venv: Any, memories: list[Memory], engine: RolloutEngine,
                 decode: Callable[[list[list[int]]], list[str]], sampling: SamplingParams, pad_id: int, seed: int,
                 group_size: int, max_turns: int = 10_000, state_keys: bool = False) -> None:
        if len(memories) != venv.num_envs:
            raise ValueError(f"need one memory per env: {len(memories)} memories, {venv.num_envs} envs")
        if group_size < 1 or venv.num_envs % group_size:
            raise ValueError(f"group_size {group_size} must be >= 1 and divide num_envs {venv.num_envs}")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.venv, self.memories, self.engine, self.decode = venv, memories, engine, decode
        self.sampling, self.pad_id, self.seed = sampling, pad_id, seed
        self.group_size, self.max_turns, self.state_keys = group_size, max_turns, state_keys
        self.num_envs = venv.num_envs
        self.num_groups = self.num_envs // group_size
        self.slots = [Slot(n, memory) for n, memory in enumerate(memories)]
        self.rounds = 0  # completed calls; round r uses group seeds of round r
        self._next_episode_id = 0

    def collect(self) -> tuple[TurnBatch, CollectStats]:
        """Play one round (one episode per env) and pack it.

        Group ids are ``round * num_groups + n // group_size``: distinct across rounds, so batches
        of several rounds can be joined (:meth:`~verlog.batch.TurnBatch.concat_envs`).

        Returns:
            The whole-episode batch and its statistics (every env's episode is in ``episodes``).
        """
        N, G = self.num_envs, self.group_size
        stats = CollectStats()
        round_index, self.rounds = self.rounds, self.rounds + 1
        keys = [0] * N
        for slot, (obs, info) in zip(self.slots, vector_reset(self.venv, group_seeds(self.seed, round_index, N, G),
                                                              stats)):
            slot.begin(self._next_episode_id, obs, info)
            self._next_episode_id += 1
            keys[slot.index] = int(info[STATE_KEY_INFO]) if self.state_keys else 0
        cols: list[dict[str, list[Any]]] = [{k: [] for k in _FIELDS} for _ in range(N)]
        images: dict[tuple[int, int], Any] = {}  # (t, n) -> the prompt's VisionInput (vision memory)
        active = list(self.slots)
        while active:
            prompts, gens, replies = generate_turn([s.memory for s in active], self.engine, self.decode,
                                                   self.sampling, stats)
            for slot, vision in zip(active, prompt_images([s.memory for s in active])):
                if vision is not None:
                    images[(len(cols[slot.index]["prompts"]), slot.index)] = vision
            steps = vector_step(self.venv, [s.index for s in active], replies, stats)
            still = []
            for j, (slot, _, step, record) in enumerate(play_turn(active, replies, steps, stats=stats,
                                                                  max_turns=self.max_turns)):
                n = slot.index
                row = cols[n]
                row["prompts"].append(prompts[j])
                row["responses"].append(gens[j].token_ids)
                row["logprobs"].append(gens[j].logprobs)
                row["rewards"].append(step.reward)
                row["terminated"].append(step.terminated)
                row["truncated"].append(step.truncated)
                row["episode_ids"].append(slot.episode_id)
                row["action_valid"].append(step.valid)
                row["cut"].append(gens[j].finish_reason == "length")
                row["state_ids"].append(keys[n])
                if record is not None:
                    stats.episodes.append(record)
                    continue
                if self.state_keys:
                    keys[n] = int(step.info[STATE_KEY_INFO])
                still.append(slot)
            active = still
        return self._pack(cols, round_index, images), stats

    def _pack(self, cols: list[dict[str, list[Any]]], round_index: int,
              images: dict[tuple[int, int], Any] | None = None) -> TurnBatch:
        """Time-major padded lists -> TurnBatch (turns past an episode's end are padding)."""
        N = self.num_envs
        T = max(len(c["rewards"]) for c in cols)
        grid = {k: [[cols[n][k][t] if t < len(cols[n][k]) else _PADDING[k] for n in range(N)] for t in range(T)]
                for k in _FIELDS}
        turn_mask = [[t < len(cols[n]["rewards"]) for n in range(N)] for t in range(T)]
        group = [round_index * self.num_groups + n // self.group_size for n in range(N)]
        group_ids = [[group[n] if turn_mask[t][n] else -1 for n in range(N)] for t in range(T)]
        return TurnBatch.from_turns(
            grid["prompts"], grid["responses"], grid["logprobs"], grid["rewards"], grid["terminated"],
            grid["truncated"], grid["episode_ids"], grid["action_valid"], grid["cut"], {},
            pad_id=self.pad_id, max_response_tokens=self.sampling.max_tokens, turn_mask=turn_mask,
            group_ids=group_ids, state_ids=grid["state_ids"] if self.state_keys else None, images=images,
        )

    def state_dict(self) -> dict:
        """``{"rounds": int, "next_episode_id": int}``: nothing is in flight between calls."""
        return {"rounds": self.rounds, "next_episode_id": self._next_episode_id}

    def load_state_dict(self, state: dict) -> None:
        """Continue after :meth:`state_dict`'s round (the next call replays nothing)."""
        self.rounds = int(state["rounds"])
        self._next_episode_id = int(state["next_episode_id"])

    def weights_changing(self) -> ContextManager[None]:
        """Nothing to hold while the trainer loads new weights (collection runs in the trainer's
        thread), except on engine servers (``rollout.server``): their pause and drain."""
        return weights_pause(self.engine)

    def close(self) -> None:
        """Close the vector env (and stop the engine servers, if any)."""
        self.venv.close()
        close_served(self.engine)
