"""What running episodes produce: one :class:`EpisodeRecord` per finished episode, and the
:class:`CollectStats` of one training collection.

Every producer of episodes writes the same record: the fixed-turn and grouped collectors
(:mod:`verlog.rollout.collector`, :mod:`verlog.rollout.episodes`), the tool conversations
(:mod:`verlog.rollout.conversations`) and fixed-seed evaluation (:func:`verlog.rollout.runner.run_episodes`,
behind :mod:`verlog.evaluate` and the BALROG suite of :mod:`verlog.suite`). The suite's ``episodes.jsonl``
holds :meth:`EpisodeRecord.to_json` lines, read back with :meth:`EpisodeRecord.from_json`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["CollectStats", "EpisodeRecord"]


@dataclass
class EpisodeRecord:
    """One finished episode.

    Attributes:
        episode_id: the episode's number: a collector's running count of the episodes it started, or
            an evaluation episode's index within its task (episode i of a task is reset with seed + i).
        env_index: the env slot (or conversation) that ran it.
        episode_return: the sum of its rewards (undiscounted).
        length: its steps (turns).
        success: whether the env reported success at its last step.
        progression: the env's progression in [0, 1] at its last step.
        invalid_actions: replies the env judged invalid.
        truncated: cut without terminating (the env's step limit, a collector's turn cap or an env fault).
        task: the task it ran (``""`` where the producer does not know it).
        seed: its reset seed (``None`` where the producer does not know it).
        failure: what went wrong in a tool conversation (``None``: nothing).
        turns: the turn log, when asked for (one dict per step: ``observation``, ``context``,
            ``reply``, ``action``, ``action_valid``, ``reward``).
    """

    episode_id: int
    env_index: int
    episode_return: float
    length: int
    success: bool
    progression: float
    invalid_actions: int
    truncated: bool
    task: str = ""
    seed: int | None = None
    failure: str | None = None
    turns: list[dict[str, Any]] | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as one JSON object of an evaluation's ``episodes.jsonl``.

        Keys, in order: ``task``, ``episode`` (:attr:`episode_id`), ``seed``, ``return``, ``length``,
        ``invalid``, ``success``, ``progression``, ``truncated``; then ``failure`` and ``turns`` when
        set. The env slot is left out: an episode's outcome does not depend on it.
        """
        out: dict[str, Any] = {"task": self.task, "episode": self.episode_id, "seed": self.seed,
                               "return": self.episode_return, "length": self.length, "invalid": self.invalid_actions,
                               "success": self.success, "progression": self.progression, "truncated": self.truncated}
        if self.failure is not None:
            out["failure"] = self.failure
        if self.turns is not None:
            out["turns"] = self.turns
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], env_index: int = 0) -> "EpisodeRecord":
        """The record of a :meth:`to_json` object (other keys, e.g. the suite's ``env``, are ignored).

        Raises:
            KeyError: a key of :meth:`to_json` other than ``failure``/``turns`` is missing.
        """
        return cls(episode_id=data["episode"], env_index=env_index, episode_return=data["return"],
                   length=data["length"], success=data["success"], progression=data["progression"],
                   invalid_actions=data["invalid"], truncated=data["truncated"], task=data["task"], seed=data["seed"],
                   failure=data.get("failure"), turns=data.get("turns"))


@dataclass
class CollectStats:
    """What happened while collecting one training batch."""

    episodes: list[EpisodeRecord] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    trimmed_turns: int = 0
    trimmed_observation_tokens: int = 0
    dropped_images: int = 0  # stored images left out of prompts (vision memory's image limit or budget)
    invalid_actions: int = 0
    turns: int = 0
    generate_seconds: float = 0.0
    env_seconds: float = 0.0
    prompt_seconds: float = 0.0
    env_faults: int = 0  # env steps/resets that raised, hung or lost their worker (episode truncated)
    env_restarts: int = 0  # env rebuilds after a fault
    env_fault_messages: list[str] = field(default_factory=list)  # one line per fault, for the log
