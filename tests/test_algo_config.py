"""The ``algo`` config section: defaults, docs, choices and cross-field checks with one-line errors
(the rules that need the algorithm table are checked by :func:`verlog.preflight.check_buildable`)."""

import pytest

from verlog.algos.registry import ALGORITHMS
from verlog.config import AlgoConfig, ConfigError, build_config, field_docs
from verlog.preflight import check_buildable


def test_default_is_ppo_and_every_field_is_documented():
    cfg = build_config({})
    assert cfg.algo == AlgoConfig() and cfg.algo.algorithm == "ppo"
    rows = [r for r in field_docs() if r[0].startswith("algo.")]
    assert len(rows) == len(AlgoConfig.__dataclass_fields__)
    assert all(doc for _, _, _, doc in rows)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_algorithm_builds_with_a_group(algorithm):
    cfg = build_config({}, {"algo.algorithm": algorithm, "algo.group_size": 4})
    check_buildable(cfg)
    assert cfg.algo.algorithm == algorithm


def test_typed_overrides_apply():
    cfg = build_config({}, {"algo.algorithm": "gigpo", "algo.group_size": 8, "algo.gigpo_omega": 0.5,
                            "algo.norm": "mean", "algo.loss_aggregation": "seq-mean-token-mean",
                            "algo.overlong_penalty": True, "algo.overlong_cache_tokens": 4})
    assert (cfg.algo.group_size, cfg.algo.gigpo_omega, cfg.algo.norm) == (8, 0.5, "mean")


@pytest.mark.parametrize("overrides, key", [
    ({"algo.algorithm": "a2c"}, "algo.algorithm"),
    ({"algo.norm": "std"}, "algo.norm"),
    ({"algo.loss_aggregation": "sum"}, "algo.loss_aggregation"),
    ({"algo.algorithm": "grpo"}, "algo.group_size"),  # group size 1
    ({"algo.algorithm": "rloo", "algo.group_size": 3}, "algo.group_size"),  # 16 envs not divisible by 3
    ({"algo.group_size": 0}, "algo.group_size"),
    ({"algo.gigpo_gamma": 1.5}, "algo.gigpo_gamma"),
    ({"algo.reinforce_pp_gamma": -0.1}, "algo.reinforce_pp_gamma"),
    ({"algo.gigpo_omega": -1.0}, "algo.gigpo_omega"),
    ({"algo.std_eps": 0.0}, "algo.std_eps"),
    ({"algo.dynamic_sampling": True}, "algo.dynamic_sampling"),  # with ppo
    ({"algo.overlong_penalty": True, "algo.overlong_cache_tokens": 1000}, "algo.overlong_cache_tokens"),
    ({"algo.overlong_penalty_factor": -1.0}, "algo.overlong_penalty_factor"),
    ({"algo.nope": 1}, "algo.nope"),
])
def test_bad_algo_values_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        check_buildable(build_config({}, overrides))
    message = str(err.value)
    assert message.startswith(key) and "\n" not in message
