"""Known episode seeds and a reply log per sub-env, so a checkpoint can restore in-flight episodes.

A text env is deterministic given its reset seed and the replies it has received since
(:class:`~verlog.envs.base.TextEnv` contract: ``reset(seed=int)`` reproduces an episode exactly).
:class:`ReplayableEpisodes` wraps one env of a vector env so that every episode has a seed that
is known: an explicit ``reset(seed=s)`` (the vector env's first reset) starts episode 0 with ``s``;
each later ``reset()`` without a seed (gymnasium's autoreset) starts episode ``k`` with
:func:`episode_seed` ``(s, k)`` instead of continuing the env's RNG. The wrapper also logs the
reply strings of the current episode. :func:`env_states` reads those (JSON-safe) states from a
vector env; :func:`restore_env_states` resets each sub-env with its seed and replays its replies
(sync and async vector envs alike, through gymnasium's ``get_attr`` / ``set_attr`` / ``call``).
"""

from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

__all__ = ["ReplayableEpisodes", "episode_seed", "env_states", "restore_env_states"]


def episode_seed(root_seed: int, episode_index: int) -> int:
    """Seed of episode ``episode_index`` of a sub-env whose first reset had ``root_seed``.

    Episode 0 uses ``root_seed`` itself; later ones a 31-bit hash of both (numpy ``SeedSequence``,
    identical on every platform and process).
    """
    if episode_index == 0:
        return int(root_seed)
    return int(np.random.SeedSequence([int(root_seed), int(episode_index)]).generate_state(1)[0] >> 1)


class ReplayableEpisodes(gymnasium.Wrapper):
    """Give every episode a known seed and log the replies since the last reset (see module doc).

    Attributes:
        replay_state: ``{"root_seed": int, "episode_index": int, "replies": list[str]}`` (a copy).
        pending_replay: set (through ``set_attr``) to a ``replay_state`` before :meth:`replay`.
    """

    def __init__(self, env: gymnasium.Env) -> None:
        super().__init__(env)
        self._root: int | None = None
        self._episode = 0
        self._replies: list[str] = []
        self.pending_replay: dict[str, Any] | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset with ``seed`` (new root, episode 0) or with the next derived episode seed.

        Raises:
            RuntimeError: the first reset without a seed (there is no root to derive from).
        """
        if seed is not None:
            self._root, self._episode = int(seed), 0
        elif self._root is None:
            raise RuntimeError("ReplayableEpisodes: the first reset needs a seed")
        else:
            self._episode += 1
        self._replies = []
        return self.env.reset(seed=episode_seed(self._root, self._episode), options=options)

    def step(self, action: str):
        """Log ``action`` and step the env."""
        self._replies.append(str(action))
        return self.env.step(action)

    @property
    def replay_state(self) -> dict[str, Any]:
        if self._root is None:
            raise RuntimeError("ReplayableEpisodes: no episode yet (reset first)")
        return {"root_seed": self._root, "episode_index": self._episode, "replies": list(self._replies)}

    def replay(self) -> tuple[str, dict[str, Any]]:
        """Re-create :attr:`pending_replay`'s episode: reset with its seed, step every logged reply.

        Returns:
            The last observation and info (the reset's when no replies were logged).

        Raises:
            RuntimeError: no pending state, or the replayed episode ended before its last reply
                (the env is not deterministic given seed and replies).
        """
        state, self.pending_replay = self.pending_replay, None
        if state is None:
            raise RuntimeError("ReplayableEpisodes.replay: set pending_replay first")
        self._root, self._episode, self._replies = int(state["root_seed"]), int(state["episode_index"]), []
        obs, info = self.env.reset(seed=episode_seed(self._root, self._episode))
        replies = [str(r) for r in state["replies"]]
        for i, reply in enumerate(replies):
            obs, _, terminated, truncated, info = self.step(reply)
            if (terminated or truncated) and i < len(replies) - 1:
                raise RuntimeError(f"replay: episode ended after {i + 1} of {len(replies)} replies; "
                                   "the env is not deterministic given its seed and replies")
        return obs, info


def env_states(venv: Any) -> list[dict[str, Any]]:
    """The :attr:`ReplayableEpisodes.replay_state` of every sub-env of a vector env (JSON-safe)."""
    return [dict(s) for s in _base(venv).get_attr("replay_state")]


def restore_env_states(venv: Any, states: list[dict[str, Any]]) -> list[str]:
    """Put every sub-env back into the episode described by ``states`` (from :func:`env_states`).

    The vector env must have been reset once (its own bookkeeping); each sub-env is then reset
    with its episode's seed and its logged replies are stepped again.

    Returns:
        The N current observations after the replay (compare them with the saved ones).

    Raises:
        ValueError: ``len(states)`` differs from the number of sub-envs.
    """
    if len(states) != venv.num_envs:
        raise ValueError(f"{len(states)} env states for {venv.num_envs} envs")
    base = _base(venv)
    base.set_attr("pending_replay", [dict(s) for s in states])
    return [obs for obs, _info in base.call("replay")]


def _base(venv: Any) -> Any:
    """The innermost gymnasium vector env (``VectorWrapper`` does not forward ``get_attr``/``call``)."""
    return getattr(venv, "unwrapped", venv)
