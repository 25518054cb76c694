"""Fixed-turn batch collection: T turns x N environments per PPO iteration.

Episodes run across batches: the collector keeps each environment's slot (current observation,
memory, the accumulators of its running episode, see :class:`~verlog.rollout.runner.Slot`) between
calls, so the bootstrap prompt of a batch's last turn is exactly the first prompt of the next batch.
Episodes ending inside the batch auto-reset in the same step (gymnasium's same-step autoreset); a
truncated episode's final observation is rendered into a bootstrap prompt so the critic can value it,
a terminated one needs none.
"""

from __future__ import annotations

from typing import Any, Callable, ContextManager

from verlog.batch import TurnBatch
from verlog.envs.base import observation_text
from verlog.envs.replay import env_states, restore_env_states
from verlog.rollout.engine import RolloutEngine, SamplingParams
from verlog.rollout.records import CollectStats
from verlog.rollout.runner import Memory, Slot, generate_turn, play_turn, prompt_images, vector_reset, vector_step
from verlog.rollout.server import close_served, weights_pause

__all__ = ["FixedTurnCollector"]


class FixedTurnCollector:
    """Collect exactly ``num_turns`` turns from every environment of a vector env per call.

    Args:
        venv: a gymnasium vector env of :class:`verlog.envs.base.TextEnv` (same-step autoreset),
            as made by :func:`verlog.envs.vector.make_vector_env`; :meth:`close` closes it.
        memories: one memory per environment (``len == venv.num_envs``).
        engine: the rollout engine; its returned token ids are stored verbatim.
        decode: token ids -> reply text for the environment (special tokens skipped).
        sampling: decoding parameters for training rollouts.
        num_turns: T, turns per environment per batch.
        pad_id: padding id for the batch tensors.
        seed: seed of the first ``venv.reset`` (env i gets seed + i).

    Raises:
        ValueError: a memory count other than ``venv.num_envs``.
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
        self.slots = [Slot(n, memory) for n, memory in enumerate(memories)]
        self._started = False
        self._next_episode_id = 0

    def _begin(self, slot: Slot, observation: str, info: dict[str, Any]) -> None:
        """Start the next episode (by id) in ``slot``."""
        slot.begin(self._next_episode_id, observation, info)
        self._next_episode_id += 1

    def collect(self) -> tuple[TurnBatch, CollectStats]:
        """Run T turns in every environment and pack them.

        Returns:
            The batch (see :class:`verlog.batch.TurnBatch`) and the collection statistics,
            including every episode that finished during it.
        """
        T, N = self.num_turns, self.num_envs
        stats = CollectStats()
        if not self._started:
            for slot, (obs, info) in zip(self.slots, vector_reset(self.venv, self.seed, stats)):
                self._begin(slot, obs, info)
            self._started = True
        cols: dict[str, list[list[Any]]] = {k: [] for k in (
            "prompts", "responses", "logprobs", "rewards", "terminated", "truncated", "episode_ids",
            "action_valid", "cut")}
        bootstrap: dict[tuple[int, int], list[int]] = {}
        images: dict[tuple[int, int], Any] = {}  # (t, n) -> the prompt's VisionInput (vision memory)
        bootstrap_images: dict[tuple[int, int], Any] = {}

        def add_images(store: dict[tuple[int, int], Any], t: int, pairs: Any) -> None:
            for n, vision in pairs:
                if vision is not None:
                    store[(t, n)] = vision

        for t in range(T):
            prompts, gens, replies = generate_turn(self.memories, self.engine, self.decode, self.sampling, stats)
            add_images(images, t, enumerate(prompt_images(self.memories)))
            steps = vector_step(self.venv, range(N), replies, stats)
            row_ep, row_valid = [], []
            for slot, reply, step, record in play_turn(self.slots, replies, steps, stats=stats):
                row_ep.append(slot.episode_id)
                row_valid.append(step.valid)
                if record is None:
                    continue
                if step.truncated:
                    # Value the observation that followed the cut: the episode's own final one.
                    slot.memory.add_turn(reply, step.observation, step.info["context"], step.outcome)
                    bootstrap[(t, slot.index)] = slot.memory.prompt_ids()[0]
                    add_images(bootstrap_images, t, [(slot.index, prompt_images([slot.memory])[0])])
                stats.episodes.append(record)
                self._begin(slot, *step.next_episode)

            cols["prompts"].append(prompts)
            cols["responses"].append([g.token_ids for g in gens])
            cols["logprobs"].append([g.logprobs for g in gens])
            cols["rewards"].append([s.reward for s in steps])
            cols["terminated"].append([s.terminated for s in steps])
            cols["truncated"].append([s.truncated for s in steps])
            cols["episode_ids"].append(row_ep)
            cols["action_valid"].append(row_valid)
            cols["cut"].append([g.finish_reason == "length" for g in gens])

        # The last turn of every env whose episode goes on: the next batch's first prompt.
        for n in range(N):
            if not cols["terminated"][-1][n] and (T - 1, n) not in bootstrap:
                bootstrap[(T - 1, n)] = self.memories[n].prompt_ids()[0]
                add_images(bootstrap_images, T - 1, [(n, prompt_images([self.memories[n]])[0])])

        batch = TurnBatch.from_turns(
            cols["prompts"], cols["responses"], cols["logprobs"], cols["rewards"], cols["terminated"],
            cols["truncated"], cols["episode_ids"], cols["action_valid"], cols["cut"], bootstrap,
            pad_id=self.pad_id, max_response_tokens=self.sampling.max_tokens,
            images=images, bootstrap_images=bootstrap_images,
        )
        return batch, stats

    def state_dict(self) -> dict:
        """Everything needed to continue collecting exactly (plain JSON types).

        Keys: ``started``; ``next_episode_id``; per env (lists of N): ``episode_ids``, ``returns``
        (float, reward so far), ``lengths`` (turns so far), ``invalid`` (invalid replies so far),
        ``observations`` (current observation), ``tasks`` (the running episode's task, ``""`` unless
        the env is a task mixture), ``memories`` (memory states) and ``envs`` (episode
        seed and replies since its reset, see :func:`verlog.envs.replay.env_states`; ``None``
        before the first collection).
        """
        return {
            "started": self._started,
            "next_episode_id": self._next_episode_id,
            "episode_ids": [s.episode_id for s in self.slots],
            "returns": [s.episode_return for s in self.slots],
            "lengths": [s.length for s in self.slots],
            "invalid": [s.invalid_actions for s in self.slots],
            "observations": [s.observation for s in self.slots],
            "tasks": [s.task for s in self.slots],
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
        for n, slot in enumerate(self.slots):
            slot.episode_id = int(state["episode_ids"][n])
            slot.episode_return = float(state["returns"][n])
            slot.length = int(state["lengths"][n])
            slot.invalid_actions = int(state["invalid"][n])
            slot.observation = str(state["observations"][n])
            slot.task = str(state.get("tasks", [""] * self.num_envs)[n])  # absent in older checkpoints
        self._started = bool(state["started"])
        if self._started:
            self.venv.reset(seed=self.seed)
            replayed = restore_env_states(self.venv, state["envs"])
            bad = [n for n in range(self.num_envs) if observation_text(replayed[n]) != self.slots[n].observation]
            if bad:
                raise ValueError(f"resume: replaying envs {bad} did not reproduce their saved observation "
                                 "(the environment is not deterministic given its seed and replies)")

    def weights_changing(self) -> ContextManager[None]:
        """Nothing to hold while the trainer loads new weights (collection runs in the trainer's
        thread), except on engine servers (``rollout.server``): their pause and drain."""
        return weights_pause(self.engine)

    def close(self) -> None:
        """Close the vector env (and stop the engine servers, if any)."""
        self.venv.close()
        close_served(self.engine)
