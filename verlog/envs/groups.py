"""Group rollouts for the critic-free estimators: seeds shared by a group, and exact state keys.

GRPO-style estimators compare episodes that start from the same initial state (a *group*,
Shao et al. 2024, "DeepSeekMath", sec. 4.1); GiGPO also compares turns taken in the same
exact state (an *anchor state*, Feng et al. 2025, arXiv 2505.10978, sec. 3.2).

* :func:`group_seeds`: the reset seeds of one round of whole episodes, equal within a group of
  ``group_size`` consecutive envs, different between groups and rounds. A text env reset with an
  int seed reproduces its episode exactly (:class:`~verlog.envs.base.TextEnv` contract), so the
  envs of a group start from the same state.
* :class:`StateKeyInfo`: adds ``info["state_key"]``, a stable 64-bit id of the env's exact game
  state (:attr:`~verlog.envs.base.TextEnv.state_key`, not the text), after every reset and step.
"""

from __future__ import annotations

import hashlib
from typing import Any

import gymnasium

from verlog.envs.replay import episode_seed

__all__ = ["StateKeyInfo", "group_seeds", "state_id", "STATE_KEY_INFO"]

#: The info key :class:`StateKeyInfo` adds.
STATE_KEY_INFO = "state_key"


def state_id(key: bytes) -> int:
    """A stable signed 64-bit id of a state key (BLAKE2b, the same in every process and run).

    Raises:
        TypeError: ``key`` is not bytes.
    """
    if not isinstance(key, bytes):
        raise TypeError(f"a state key must be bytes, got {type(key).__name__}")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little", signed=True)


def group_seeds(base_seed: int, round_index: int, num_envs: int, group_size: int) -> list[int]:
    """Reset seeds of round ``round_index``: env n gets :func:`~verlog.envs.replay.episode_seed`
    ``(base_seed + n // group_size, round_index)``, so the ``group_size`` envs of a group share it.

    Args:
        base_seed: >= 0; round_index: >= 0; num_envs: N >= 1; group_size: divides N.

    Returns:
        N ints in [0, 2**31).

    Raises:
        ValueError: ``group_size`` < 1 or does not divide ``num_envs``; a negative seed or round.
    """
    if group_size < 1 or num_envs % group_size:
        raise ValueError(f"group_size {group_size} must be >= 1 and divide num_envs {num_envs}")
    if base_seed < 0 or round_index < 0:
        raise ValueError(f"base_seed and round_index must be >= 0, got {base_seed}, {round_index}")
    return [episode_seed(base_seed + n // group_size, round_index) for n in range(num_envs)]


class StateKeyInfo(gymnasium.Wrapper):
    """Put :func:`state_id` of the wrapped text env's ``state_key`` into ``info["state_key"]``.

    The id describes the state *after* the reset or step, i.e. the state in which the next action
    is chosen (after a same-step autoreset, the new episode's first state).

    Raises:
        NotImplementedError: (from reset) the game reports no state key.
    """

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return obs, self._with_key(info)

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._with_key(info)

    def _with_key(self, info: dict[str, Any]) -> dict[str, Any]:
        return {**info, STATE_KEY_INFO: state_id(self.env.unwrapped.state_key)}
