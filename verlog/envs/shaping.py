"""Potential-based reward shaping, added by an environment to its own step rewards (training only).

A sparse task such as BabyAI's go-to pays a reward only at the goal; a policy that rarely reaches it
gets almost no learning signal. Potential-based shaping adds a dense term that provably leaves the
task's optimal policies unchanged (:func:`potential_shaping`); the environment supplies the potential.
"""

from __future__ import annotations

__all__ = ["potential_shaping"]


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
