"""The algorithm table: every ``algo.algorithm`` choice and what it needs from the trainer.

One :class:`AlgorithmSpec` per algorithm says whether it trains a critic, how its rollouts are
collected, which advantage estimator and which policy loss it uses, and which switches it forces
on. Adding an algorithm means one entry in :data:`ALGORITHMS` plus its estimator (a
``(batch, algo) -> (advantages, metrics)`` callable, see :mod:`verlog.algos.batch_estimators`).

=====================  ======  =======  ======  ====  ===================  =======  =======  =====================
name                   critic  grouped  states  loss  aggregation          dynamic  episode  estimator
=====================  ======  =======  ======  ====  ===================  =======  =======  =====================
ppo                    yes                      ppo   config                                 (GAE)
grpo                           yes              ppo   config                        yes      grpo
gigpo                          yes      yes     ppo   config                                 gigpo
rloo                           yes              ppo   config                        yes      rloo
reinforce_pp                                    ppo   config                                 reinforce_pp
reinforce_pp_baseline          yes              ppo   config                        yes      reinforce_pp_baseline
dapo                           yes              ppo   config               yes      yes      grpo
gspo                           yes              gspo  seq-mean-token-mean           yes      grpo
=====================  ======  =======  ======  ====  ===================  =======  =======  =====================

Columns: the fields ``needs_critic``, ``grouped_rollouts``, ``needs_state_keys``, ``policy_loss``,
``aggregation`` ("config": ``algo.loss_aggregation``), ``dynamic_sampling``, ``episode_level``, and
the estimator (``<name>_estimator`` of :mod:`verlog.algos.batch_estimators`; the critic's path runs
the dual-discount GAE instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from verlog.algos import batch_estimators as B
from verlog.algos.batch_estimators import Estimator
from verlog.algos.losses import AGGREGATIONS

__all__ = ["AlgorithmSpec", "ALGORITHMS", "POLICY_LOSSES", "algorithm_names", "group_algorithm_names",
           "algorithm_spec"]

#: the policy losses an algorithm may use (:func:`~verlog.algos.objectives.actor_loss`)
POLICY_LOSSES = ("ppo", "gspo")


@dataclass(frozen=True)
class AlgorithmSpec:
    """What one ``algo.algorithm`` choice is, as the trainer needs it.

    Attributes:
        name: the ``algo.algorithm`` value.
        needs_critic: trains a critic and takes the dual-discount GAE path (fixed-turn batches,
            token rewards, whitened GAE advantages). False: critic-free, whole-episode batches and
            ``estimator``'s advantages.
        grouped_rollouts: the advantage compares the episodes of a group, so whole episodes must come
            in groups of ``algo.group_size`` >= 2 that share a start state (the same task/seed): the
            config's "group algorithms". (Every critic-free algorithm collects whole episodes in
            groups of ``algo.group_size``; only these need the groups to have more than one episode.)
        needs_state_keys: the estimator groups turns by exact environment state (GiGPO's anchor
            states): the environments must report a state key for every turn.
        policy_loss: "ppo", the clipped token-ratio surrogate with dual clip
            (:func:`~verlog.algos.losses.ppo_policy_loss`), or "gspo", the sequence-ratio surrogate
            (:func:`~verlog.algos.losses.gspo_policy_loss`).
        aggregation: the policy loss's aggregation forced by the algorithm (one of
            :data:`~verlog.algos.losses.AGGREGATIONS`), or None to use ``algo.loss_aggregation``.
        dynamic_sampling: DAPO's dynamic sampling is always on (groups whose episode returns are
            all equal are dropped and replaced), whatever ``algo.dynamic_sampling`` says.
        episode_level: the advantage is one number per episode, computed from the episode returns
            of its group, and every token of the episode gets it.
        estimator: ``(batch, algo) -> (advantages float32 [T, N, R], metrics)`` of a whole-episode
            batch, or None for the critic's GAE path (which the trainer runs).

    Raises:
        ValueError: (on construction) inconsistent fields: a critic with an estimator or without
            one for a critic-free algorithm, an unknown policy loss or aggregation, or grouping,
            state keys, dynamic sampling or an episode-level advantage on the critic's path.
    """

    name: str
    needs_critic: bool
    grouped_rollouts: bool
    needs_state_keys: bool
    policy_loss: Literal["ppo", "gspo"]
    aggregation: str | None
    dynamic_sampling: bool
    episode_level: bool
    estimator: Estimator | None

    def __post_init__(self) -> None:
        if self.needs_critic != (self.estimator is None):
            raise ValueError(f"{self.name}: an algorithm has either a critic (GAE) or an estimator, not both or none")
        if self.policy_loss not in POLICY_LOSSES:
            raise ValueError(f"{self.name}: policy_loss must be one of {', '.join(POLICY_LOSSES)}, "
                             f"got {self.policy_loss!r}")
        if self.aggregation is not None and self.aggregation not in AGGREGATIONS:
            raise ValueError(f"{self.name}: aggregation must be None or one of {', '.join(AGGREGATIONS)}, "
                             f"got {self.aggregation!r}")
        if self.needs_critic and (self.grouped_rollouts or self.needs_state_keys or self.episode_level):
            raise ValueError(f"{self.name}: the critic's path collects fixed-turn batches (no groups, state keys "
                             "or episode-level advantages)")
        if self.dynamic_sampling and not self.grouped_rollouts:
            raise ValueError(f"{self.name}: dynamic sampling drops groups, so it needs grouped rollouts")

    def loss_aggregation(self, configured: str) -> str:
        """The policy loss's aggregation: the forced one, else ``configured`` (``algo.loss_aggregation``)."""
        return self.aggregation if self.aggregation is not None else configured

    def uses_dynamic_sampling(self, configured: bool) -> bool:
        """Whether groups without signal are dropped: forced on, or ``configured`` (``algo.dynamic_sampling``)."""
        return configured or self.dynamic_sampling


def _spec(name: str, *, estimator: Estimator | None, grouped_rollouts: bool = True, needs_state_keys: bool = False,
          policy_loss: Literal["ppo", "gspo"] = "ppo", aggregation: str | None = None,
          dynamic_sampling: bool = False, episode_level: bool = False) -> AlgorithmSpec:
    """A table entry: a critic exactly when there is no estimator; the other fields as given."""
    return AlgorithmSpec(name=name, needs_critic=estimator is None, grouped_rollouts=grouped_rollouts,
                         needs_state_keys=needs_state_keys, policy_loss=policy_loss, aggregation=aggregation,
                         dynamic_sampling=dynamic_sampling, episode_level=episode_level, estimator=estimator)


#: every ``algo.algorithm`` choice, in the config's order (see the module docstring's table)
ALGORITHMS: dict[str, AlgorithmSpec] = {s.name: s for s in (
    _spec("ppo", estimator=None, grouped_rollouts=False),
    _spec("grpo", estimator=B.grpo_estimator, episode_level=True),
    _spec("gigpo", estimator=B.gigpo_estimator, needs_state_keys=True),
    _spec("rloo", estimator=B.rloo_estimator, episode_level=True),
    _spec("reinforce_pp", estimator=B.reinforce_pp_estimator, grouped_rollouts=False),
    _spec("reinforce_pp_baseline", estimator=B.reinforce_pp_baseline_estimator, episode_level=True),
    _spec("dapo", estimator=B.grpo_estimator, dynamic_sampling=True, episode_level=True),
    _spec("gspo", estimator=B.grpo_estimator, policy_loss="gspo", aggregation="seq-mean-token-mean",
          episode_level=True),
)}


def algorithm_names() -> tuple[str, ...]:
    """Every algorithm's name, in table order (the choices of ``algo.algorithm``)."""
    return tuple(ALGORITHMS)


def group_algorithm_names() -> tuple[str, ...]:
    """The algorithms with grouped rollouts, in table order (they need ``algo.group_size`` >= 2)."""
    return tuple(name for name, spec in ALGORITHMS.items() if spec.grouped_rollouts)


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The table entry of ``name``.

    Raises:
        ValueError: an unknown name (the message lists the known ones).
    """
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; expected one of {', '.join(ALGORITHMS)}") from None
