"""ppo.kl_coef_schedule: the KL weight to the reference policy changes at given iterations.

The weight in force at iteration i is that of the latest schedule entry at or before i (``kl_coef``
before the first). The reference is loaded when any iteration weighs it, even with ``kl_coef`` 0.
"""

from __future__ import annotations

import pytest

from helpers import SHRUNK_TINY_RUN, train_cli
from verlog.config import load_recipe
from verlog.logging import read_metrics


def test_the_latest_entry_at_or_before_the_iteration_is_in_force():
    ppo = load_recipe("tiny", ["ppo.kl_coef=0.05", "ppo.kl_coef_schedule={300: 0.01, 400: 0}"]).ppo
    assert [ppo.kl_coef_at(it) for it in (1, 299, 300, 399, 400, 900)] == [0.05, 0.05, 0.01, 0.01, 0.0, 0.0]
    assert ppo.uses_reference


@pytest.mark.parametrize("overrides, uses", [
    (["ppo.kl_coef=0"], False),
    (["ppo.kl_coef=0", "ppo.kl_coef_schedule={5: 0.1}"], True),
    (["ppo.kl_coef=0.1", "ppo.kl_coef_schedule={5: 0}"], True),
    (["ppo.kl_coef=0", "ppo.kl_coef_schedule={5: 0}"], False),
])
def test_the_reference_is_needed_where_any_iteration_weighs_it(overrides, uses):
    assert load_recipe("tiny", overrides).ppo.uses_reference is uses


def test_a_run_weighs_the_kl_from_the_scheduled_iteration(tmp_path):
    """kl_coef 0 with {3: 0.1}: iterations 1-2 have no KL term (no actor/kl_ref), iteration 3 has one, and
    it is not 0 (the actor has moved from the reference by then), so the reference was loaded."""
    train_cli("tiny", "iterations=3", "env.vector_mode=sync", *SHRUNK_TINY_RUN,
              "ppo.kl_coef=0", "ppo.kl_coef_schedule={3: 0.1}",
              f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", "name=klsched")
    rows = read_metrics(tmp_path / "klsched" / "metrics.jsonl")
    assert [row["ppo/kl_coef"] for row in rows] == [0.0, 0.0, 0.1]
    assert [row.get("actor/kl_ref") is None for row in rows] == [True, True, False]
    assert rows[2]["actor/kl_ref"] > 1e-6
