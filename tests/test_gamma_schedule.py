"""gae.gamma_step_schedule: the step discount in force per iteration, and the advantages it gives."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch

from verlog.advantages import compute_advantages
from verlog.algos.gae import padded_dual_discount_gae
from verlog.config import ConfigError, load_recipe
from verlog.scoring import Scores


def test_the_latest_entry_at_or_before_the_iteration_is_in_force():
    gae = load_recipe("tiny", ["gae.gamma_step=0.95", "gae.gamma_step_schedule={10: 0.9, 30: 0.8}"]).gae
    assert [gae.gamma_step_at(it) for it in (1, 9, 10, 29, 30, 500)] == [0.95, 0.95, 0.9, 0.9, 0.8, 0.8]
    assert load_recipe("tiny", ["gae.gamma_step=0.95"]).gae.gamma_step_at(10**6) == 0.95


def _batch_and_scores(seed: int = 0, T: int = 5, N: int = 3, R: int = 4):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, R + 1, (T, N), generator=g)
    mask = torch.arange(R) < lengths[..., None]
    terminated = torch.zeros(T, N, dtype=torch.bool)
    terminated[2, 0] = terminated[4, 1] = True
    truncated = torch.zeros(T, N, dtype=torch.bool)
    truncated[3, 2] = True
    batch = SimpleNamespace(response_mask=mask, rewards=torch.randn(T, N, generator=g), terminated=terminated,
                            truncated=truncated, turns=torch.ones(T, N, dtype=torch.bool))
    values = torch.randn(T, N, R, generator=g) * mask
    scores = Scores(old_logprobs=torch.zeros(T, N, R), values=values, bootstrap_values=torch.randn(T, N, generator=g))
    return batch, scores


def test_advantages_use_the_scheduled_discount_of_their_iteration():
    cfg = load_recipe("tiny", ["gae.gamma_step=0.99", "gae.gamma_step_schedule={3: 0.5}", "gae.whiten_advantages=false"])
    batch, scores = _batch_and_scores()
    rewards = torch.zeros_like(scores.values)
    last = batch.response_mask.sum(-1) - 1
    rewards.scatter_(-1, last[..., None], batch.rewards[..., None])
    for iteration, gamma in ((2, 0.99), (3, 0.5), (40, 0.5)):
        got = compute_advantages(batch, scores, cfg, iteration=iteration)
        want_adv, want_ret = padded_dual_discount_gae(
            rewards, scores.values, batch.response_mask, batch.terminated, batch.truncated, scores.bootstrap_values,
            batch.turns, gamma, cfg.gae.lam_step, cfg.gae.gamma_token, cfg.gae.lam_token)
        torch.testing.assert_close(got.advantages, want_adv)
        torch.testing.assert_close(got.returns, want_ret)
    early, late = (compute_advantages(batch, scores, cfg, iteration=it).advantages for it in (2, 3))
    assert not torch.allclose(early, late)


@pytest.mark.parametrize("override, key", [
    ("gae.gamma_step_schedule={0: 0.8}", "iterations >= 1"),
    ("gae.gamma_step_schedule={5: 1.5}", "discounts in [0, 1]"),
    ("gae.gamma_step_schedule={5: -0.1}", "discounts in [0, 1]"),
])
def test_a_bad_schedule_is_one_line_naming_the_key(override, key):
    with pytest.raises(ConfigError, match=r"^gae\.gamma_step_schedule: .*" + re.escape(key)):
        load_recipe("tiny", [override])


def test_a_schedule_with_shaping_needs_a_fixed_shaping_discount():
    with pytest.raises(ConfigError, match="env.shaping_gamma"):
        load_recipe("tiny", ["gae.gamma_step_schedule={5: 0.8}", "env.distance_shaping=0.05"])
    cfg = load_recipe("tiny", ["gae.gamma_step_schedule={5: 0.8}", "env.distance_shaping=0.05", "env.shaping_gamma=1.0"])
    assert cfg.env.env_kwargs(shaping_gamma=cfg.gae.gamma_step)["shaping_gamma"] == 1.0
