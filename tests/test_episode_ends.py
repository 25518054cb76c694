"""How TextEnv reports the end of an episode: a game step that reports both ``terminated`` and
``truncated`` is a termination (the critic bootstraps nothing after it), a game's own ``truncated`` and
the base class's step limit are truncations (the critic values the last observation)."""

from __future__ import annotations

import pytest

from verlog.envs.base import TextEnv


class _Flags(TextEnv):
    """A game that ends each step with the flags it is given (``ends[k]`` for step k)."""

    fixed_actions = ("go",)
    default_action = "go"

    def __init__(self, ends, max_steps=None):
        super().__init__(max_steps=max_steps)
        self.ends = list(ends)
        self._instruction = "Say go."

    def _reset_game(self, seed):
        return "start", {}

    def _step_game(self, action):
        terminated, truncated = self.ends[self.episode_step]
        return "next", 0.0, terminated, truncated, {}

    @property
    def progression(self) -> float:
        return 0.0


def _last_flags(env: TextEnv) -> tuple[bool, bool]:
    env.reset(seed=0)
    while True:
        _, _, terminated, truncated, _ = env.step("ACTION: go")
        if terminated or truncated:
            return terminated, truncated


@pytest.mark.parametrize("ends, max_steps, expected", [
    ([(True, True)], None, (True, False)),           # both from the game: a terminal state
    ([(False, False), (True, True)], 2, (True, False)),  # both, on the last step the base allows
    ([(False, True)], None, (False, True)),          # the game's own cut from outside the task
    ([(False, False)] * 3, 3, (False, True)),        # the base's step limit
    ([(False, False), (True, False)], 2, (True, False)),  # a real end on the last allowed step
])
def test_an_episode_ends_terminated_or_truncated_never_both(ends, max_steps, expected):
    assert _last_flags(_Flags(ends, max_steps)) == expected
