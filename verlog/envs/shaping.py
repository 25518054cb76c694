"""Potential-based reward shaping, added by an environment to its own step rewards (training only).

A sparse task such as BabyAI's go-to pays a reward only at the goal; a policy that rarely reaches it
gets almost no learning signal. Potential-based shaping adds a dense term that provably leaves the
task's optimal policies unchanged (:func:`potential_shaping`); the environment supplies the potential.

A policy that has learned a task can still loop: an action that changes nothing (``pick up`` with
nothing ahead) or a cycle of turns brings the agent back to a state it has been in, and a greedy
policy that acts on what it sees then repeats itself until the step limit. :class:`RevisitPenalty`
charges a step that returns to a state already visited in the episode.
"""

from __future__ import annotations

import math

__all__ = ["RevisitPenalty", "potential_shaping"]


def potential_shaping(potential: float, next_potential: float, gamma: float, terminated: bool) -> float:
    """The potential-based shaping reward of one step, to add to the environment's reward.

    Ng, Harada & Russell 1999, "Policy invariance under reward transformations", Theorem 1:
        F(s, s') = gamma * Phi(s') - Phi(s)
    with Phi(s') taken as 0 when s' is terminal (``terminated``; a truncated step keeps Phi(s'), as the
    critic bootstraps from s'). Adding F to every reward leaves the optimal policies of the
    gamma-discounted task unchanged: the discounted sum of F over an episode telescopes to
    gamma^T Phi(s_T) - Phi(s_0) (-Phi(s_0) when it terminates), so every state's value shifts by
    -Phi(s) and every action's advantage stays the same. ``gamma`` must be the discount the
    learner uses across steps (``gae.gamma_step``) for this to hold.

    Args:
        potential: Phi(s), the potential of the state the step started in (reward units).
        next_potential: Phi(s'), the potential of the state it reached.
        gamma: the step discount, in [0, 1].
        terminated: whether s' ends the episode (gymnasium's ``terminated``).

    Returns:
        F(s, s') in reward units.

    Raises:
        ValueError: ``gamma`` outside [0, 1].
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"potential_shaping: gamma must be in [0, 1], got {gamma}")
    return (0.0 if terminated else gamma * next_potential) - potential


class RevisitPenalty:
    """A fixed cost for each step that reaches a state the episode has already been in.

    r'_t = r_t - c * 1[s_{t+1} in {s_0, ..., s_t}], with states compared by an exact key the environment
    supplies (e.g. the whole level state). It is the negative of the episodic first-visit indicator with
    which Zhang et al. 2020 ("BeBold", Sec. 3) restrict an exploration bonus, used as a cost. In a
    deterministic task whose reward falls with the step count, every shortest path is free of revisits
    (removing a cycle shortens it) and every other path earns less, so the optimal policies are those of
    the unpenalised task; what the cost changes is which of a learner's imperfect policies score better:
    those that do not loop. The penalty depends on the episode's past, not on the state alone, so a
    critic sees it as noise where a policy only sometimes loops.

    Args:
        cost: c >= 0, reward units per revisiting step (0: off); settable, validated alike (a new cost
            applies from the next step; the states seen so far are kept).

    Raises:
        ValueError: ``cost`` negative or not finite.
    """

    def __init__(self, cost: float) -> None:
        self.cost = cost
        self._seen: set[bytes] = set()

    @property
    def cost(self) -> float:
        """c, reward units per revisiting step."""
        return self._cost

    @cost.setter
    def cost(self, cost: float) -> None:
        if not (math.isfinite(cost) and cost >= 0.0):
            raise ValueError(f"revisit_penalty must be a finite number >= 0, got {cost}")
        self._cost = float(cost)

    def reset(self, key: bytes) -> None:
        """Start an episode in the state ``key``."""
        self._seen = {key}

    def step(self, key: bytes) -> float:
        """The term to add to the reward of a step that reached the state ``key``: ``-cost`` when the
        episode has been there before, else 0 (the state is then remembered)."""
        if key in self._seen:
            return -self.cost
        self._seen.add(key)
        return 0.0
