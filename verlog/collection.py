"""One iteration's batch from a collector: reward shaping, and DAPO's dynamic sampling with refills.

The collector (:class:`~verlog.rollout.engine.Collector`) gives a batch of turns; this module adds
the trainer-side reward terms of :mod:`verlog.algos.rewards` that depend on the reply (DAPO's
overlong penalty) and, with dynamic sampling, drops the groups without a learning signal and
collects further rounds until the batch holds as many groups with signal as one round has
(Yu et al. 2025, DAPO, section 3.2).
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from verlog.algos.critic_free import dynamic_sampling_keep
from verlog.algos.rewards import shaped_rewards
from verlog.batch import TurnBatch
from verlog.config import TrainConfig
from verlog.rollout.records import CollectStats

__all__ = ["collect_batch", "merge_stats", "shape_rewards"]


def shape_rewards(batch: TurnBatch, cfg: TrainConfig) -> TurnBatch:
    """The batch with DAPO's overlong penalty (``algo.overlong_penalty``) added to the rewards of its
    real turns; the batch itself when the penalty is off."""
    algo = cfg.algo
    if not algo.overlong_penalty:
        return batch
    return replace(batch, rewards=shaped_rewards(batch.rewards, batch.response_lengths, batch.turns,
                                                 max_response_tokens=cfg.rollout.max_response_tokens,
                                                 cache_tokens=algo.overlong_cache_tokens,
                                                 factor=algo.overlong_penalty_factor))


def merge_stats(into: CollectStats, more: CollectStats) -> None:
    """Add the statistics of another collection round to ``into`` (in place)."""
    for f in fields(CollectStats):
        setattr(into, f.name, getattr(into, f.name) + getattr(more, f.name))


def collect_batch(collector: Any, cfg: TrainConfig, *,
                  dynamic_sampling: bool) -> tuple[TurnBatch, CollectStats, dict[str, float]]:
    """One iteration's turns from ``collector``, rewards shaped.

    With ``dynamic_sampling`` the groups whose episode returns are all equal are dropped (their turns
    become padding) and further rounds are collected, at most ``algo.max_refills``, until as many
    groups as one round holds (``env.num_envs / algo.group_size``) have a learning signal; the
    rounds are joined side by side (:meth:`~verlog.batch.TurnBatch.concat_envs`).

    Returns:
        (batch, statistics of every round collected, metrics ``algo/kept_groups``,
        ``algo/dropped_groups``, ``algo/refills`` — empty without dynamic sampling).
    """
    algo = cfg.algo
    batch, stats = collector.collect()
    batch = shape_rewards(batch, cfg)
    if not dynamic_sampling:
        return batch, stats, {}
    target = cfg.env.num_envs // algo.group_size
    parts, kept_total, dropped_total, refills = [], 0, 0, 0
    while True:
        keep, kept, dropped = dynamic_sampling_keep(batch)
        parts.append(replace(batch, turn_mask=keep))
        kept_total, dropped_total = kept_total + kept, dropped_total + dropped
        if kept_total >= target or refills >= algo.max_refills:
            break
        refills += 1
        batch, more = collector.collect()
        batch = shape_rewards(batch, cfg)
        merge_stats(stats, more)
    merged = TurnBatch.concat_envs(parts) if len(parts) > 1 else parts[0]
    return merged, stats, {"algo/kept_groups": float(kept_total), "algo/dropped_groups": float(dropped_total),
                           "algo/refills": float(refills)}
