"""Critic-free estimators: hand-worked numbers, slow scalar references on random inputs,
no-signal groups, per-episode (not per-turn) statistics, the TurnBatch layout helpers and
input validation."""

import math
import random
import statistics
from collections import defaultdict

import pytest
import torch

from verlog.algos.estimators import (
    dynamic_sampling_filter,
    grpo_advantages,
    reinforce_pp_advantages,
    reinforce_pp_baseline_advantages,
    rloo_advantages,
)
from verlog.algos.gigpo import gigpo_advantages
from verlog.algos.groups import discounted_turn_returns, episode_returns
from verlog.algos.turns import broadcast_turn_advantages, turn_index

torch.set_num_threads(1)
F64 = torch.float64
TINY = 1e-300  # an eps that does not move hand-worked numbers


def t64(xs):
    return torch.tensor(xs, dtype=F64)


def ids(xs):
    return torch.tensor(xs, dtype=torch.long)


def close(actual, expected, tol=1e-12):
    torch.testing.assert_close(actual, t64(expected).to(actual.dtype), atol=tol, rtol=0)


# --------------------------------------------------------------------------------------
# Slow scalar references: plain Python lists, dicts and the statistics module
# --------------------------------------------------------------------------------------
def _members(keys):
    out = defaultdict(list)
    for i, k in enumerate(keys):
        out[k].append(i)
    return out


def _dead(vals):
    return len(vals) == 1 or all(v == vals[0] for v in vals)


def ref_group_norm(values, keys, norm, eps):
    """(adv, no_signal) per element: (v - mean) / (stdev + eps) or v - mean; 0 if dead."""
    adv, dead = [0.0] * len(values), [False] * len(values)
    for members in _members(keys).values():
        vals = [values[i] for i in members]
        if _dead(vals):
            for i in members:
                dead[i] = True
            continue
        mean = sum(vals) / len(vals)
        std = statistics.stdev(vals)
        for i in members:
            adv[i] = (values[i] - mean) / (std + eps) if norm == "mean_std" else values[i] - mean
    return adv, dead


def ref_rloo(returns, groups):
    adv, dead = [0.0] * len(returns), [False] * len(returns)
    for members in _members(groups).values():
        vals = [returns[i] for i in members]
        if _dead(vals):
            for i in members:
                dead[i] = True
            continue
        for i in members:
            others = [returns[j] for j in members if j != i]
            adv[i] = returns[i] - sum(others) / len(others)
    return adv, dead


def ref_rfpp_baseline(returns, groups, eps):
    centred, dead = ref_group_norm(returns, groups, "mean", eps)
    m = sum(centred) / len(centred)
    var = sum((c - m) ** 2 for c in centred) / len(centred)
    return [0.0 if d else (c - m) / math.sqrt(var + eps) for c, d in zip(centred, dead)], dead


def ref_step_returns(rewards, episodes, gamma):
    out = [0.0] * len(rewards)
    for members in _members(episodes).values():
        running = 0.0
        for i in reversed(members):
            running = rewards[i] + gamma * running
            out[i] = running
    return out


def ref_rfpp(rewards, episodes, gamma, eps):
    g = ref_step_returns(rewards, episodes, gamma)
    eps_members = _members(episodes)
    E = len(eps_members)
    w = [1.0 / (E * len(eps_members[e])) for e in episodes]
    if _dead(g):
        return [0.0] * len(g), True
    mu = sum(wi * gi for wi, gi in zip(w, g))
    var = sum(wi * (gi - mu) ** 2 for wi, gi in zip(w, g))
    return [(gi - mu) / math.sqrt(var + eps) for gi in g], False


def ref_gigpo(rewards, episodes, groups, keys, omega, gamma, norm, eps):
    ep_members = _members(episodes)
    ep_list = list(ep_members)
    ep_ret = [sum(rewards[i] for i in ep_members[e]) for e in ep_list]
    ep_grp = [groups[ep_members[e][0]] for e in ep_list]
    a_ep, d_ep = ref_group_norm(ep_ret, ep_grp, norm, eps)
    a_ep = dict(zip(ep_list, a_ep))
    d_ep = dict(zip(ep_list, d_ep))
    g = ref_step_returns(rewards, episodes, gamma)
    a_st, d_st = ref_group_norm(g, list(zip(groups, keys)), norm, eps)
    adv = [a_ep[e] + omega * a for e, a in zip(episodes, a_st)]
    dead = [d_ep[e] and d for e, d in zip(episodes, d_st)]
    return adv, dead


# --------------------------------------------------------------------------------------
# Random inputs: "dyadic" ones (small multiples of 1/4, gamma in {0, 0.5, 1}) make ties and
# all-equal groups frequent while every sum stays exact; "continuous" ones test the rest.
# --------------------------------------------------------------------------------------
def _random_values(rng, n, dyadic):
    if dyadic:
        return [rng.choice([0.0, 0.25, 1.0, -1.0]) for _ in range(n)]
    return [rng.gauss(0.0, 3.0) for _ in range(n)]


def _random_episodes(rng, dyadic):
    """(returns [E], group ids [E]) with groups of size 1..5, ids scattered and shuffled."""
    n_groups = rng.randint(1, 5)
    groups = []
    for g in range(n_groups):
        groups += [g * 7 - 3] * rng.randint(1, 5)
    rng.shuffle(groups)
    return _random_values(rng, len(groups), dyadic), groups


def _random_turns(rng, dyadic):
    """Per-turn (rewards, episode ids, group ids, anchor keys), episodes interleaved in time order."""
    episodes = []  # (episode id, group id, turns)
    n_groups = rng.randint(1, 4)
    eid = 100
    for g in range(n_groups):
        for _ in range(rng.randint(1, 4)):
            episodes.append((eid, g * 5 + 1, rng.randint(1, 6)))
            eid += rng.randint(1, 3)
    # interleave: repeatedly pick an episode with turns left and emit its next turn
    remaining = {e: n for e, _, n in episodes}
    group_of = {e: g for e, g, _ in episodes}
    ep_ids, grp_ids = [], []
    while remaining:
        e = rng.choice(sorted(remaining))
        ep_ids.append(e)
        grp_ids.append(group_of[e])
        remaining[e] -= 1
        if not remaining[e]:
            del remaining[e]
    rewards = _random_values(rng, len(ep_ids), dyadic)
    keys = [rng.choice(["s0", "s1", "s2", ("t", 1)]) for _ in ep_ids]
    return rewards, ep_ids, grp_ids, keys


def _gamma(rng, dyadic):
    return rng.choice([0.0, 0.5, 1.0]) if dyadic else rng.choice([0.0, 1.0, rng.random(), rng.random()])


CASES = 600


@pytest.mark.parametrize("norm", ["mean_std", "mean"])
def test_grpo_matches_reference_on_random_cases(norm):
    rng = random.Random(11 if norm == "mean" else 12)
    for case in range(CASES):
        dyadic = case % 2 == 0
        returns, groups = _random_episodes(rng, dyadic)
        res = grpo_advantages(t64(returns), ids(groups), norm=norm, eps=1e-6)
        adv, dead = ref_group_norm(returns, groups, norm, 1e-6)
        close(res.advantages, adv, 1e-9)
        assert res.no_signal.tolist() == dead
        assert res.num_groups == len(set(groups))
        assert res.num_no_signal_groups == len({g for g, d in zip(groups, dead) if d})


def test_rloo_matches_reference_on_random_cases():
    rng = random.Random(13)
    for case in range(CASES):
        returns, groups = _random_episodes(rng, case % 2 == 0)
        res = rloo_advantages(t64(returns), ids(groups))
        adv, dead = ref_rloo(returns, groups)
        close(res.advantages, adv, 1e-9)
        assert res.no_signal.tolist() == dead


def test_reinforce_pp_baseline_matches_reference_on_random_cases():
    rng = random.Random(14)
    for case in range(CASES):
        returns, groups = _random_episodes(rng, case % 2 == 0)
        res = reinforce_pp_baseline_advantages(t64(returns), ids(groups), eps=1e-8)
        adv, dead = ref_rfpp_baseline(returns, groups, 1e-8)
        close(res.advantages, adv, 1e-7)
        assert res.no_signal.tolist() == dead


def test_discounted_returns_and_reinforce_pp_match_reference_on_random_cases():
    rng = random.Random(15)
    for case in range(CASES):
        dyadic = case % 2 == 0
        rewards, episodes, _, _ = _random_turns(rng, dyadic)
        gamma = _gamma(rng, dyadic)
        g = discounted_turn_returns(t64(rewards), ids(episodes), gamma)
        close(g, ref_step_returns(rewards, episodes, gamma), 1e-10)
        res = reinforce_pp_advantages(t64(rewards), ids(episodes), gamma=gamma, eps=1e-8)
        adv, dead = ref_rfpp(rewards, episodes, gamma, 1e-8)
        close(res.advantages, adv, 1e-7)
        assert res.no_signal.tolist() == [dead] * len(rewards) and res.num_no_signal_groups == int(dead)


@pytest.mark.parametrize("norm", ["mean_std", "mean"])
def test_gigpo_matches_reference_on_random_cases(norm):
    rng = random.Random(16 if norm == "mean" else 17)
    for case in range(CASES):
        dyadic = case % 2 == 0
        rewards, episodes, groups, keys = _random_turns(rng, dyadic)
        gamma, omega = _gamma(rng, dyadic), rng.choice([0.0, 0.5, 1.0, 2.0])
        res = gigpo_advantages(t64(rewards), ids(episodes), ids(groups), keys,
                               omega=omega, gamma=gamma, norm=norm, eps=1e-6)
        adv, dead = ref_gigpo(rewards, episodes, groups, keys, omega, gamma, norm, 1e-6)
        close(res.advantages, adv, 1e-8)
        assert res.no_signal.tolist() == dead


def test_dynamic_sampling_matches_reference_on_random_cases():
    rng = random.Random(18)
    for case in range(CASES):
        returns, groups = _random_episodes(rng, case % 2 == 0)
        keep, dropped = dynamic_sampling_filter(t64(returns), ids(groups))
        by = _members(groups)
        dead_groups = sorted(g for g, m in by.items() if _dead([returns[i] for i in m]))
        assert dropped.tolist() == dead_groups
        assert keep.tolist() == [g not in dead_groups for g in groups]


# --------------------------------------------------------------------------------------
# Hand-worked episode-level examples
# Episodes (in this order):   group 7: returns 1, 0, 0   group 3: 2, 2 (all equal)
#                             group 9: 5 (singleton), interleaved with the others.
# --------------------------------------------------------------------------------------
HAND_RETURNS = [1.0, 2.0, 0.0, 5.0, 2.0, 0.0]
HAND_GROUPS = [7, 3, 7, 9, 3, 7]
HAND_DEAD = [False, True, False, True, True, False]


def test_grpo_hand_worked():
    # group 7: mean 1/3, deviations 2/3, -1/3, -1/3; unbiased var (4/9 + 1/9 + 1/9) / 2 = 1/3
    s = math.sqrt(1 / 3)
    res = grpo_advantages(t64(HAND_RETURNS), ids(HAND_GROUPS), norm="mean_std", eps=TINY)
    close(res.advantages, [(2 / 3) / s, 0, (-1 / 3) / s, 0, 0, (-1 / 3) / s])
    assert res.no_signal.tolist() == HAND_DEAD
    assert (res.num_groups, res.num_no_signal_groups) == (3, 2)
    assert res.metrics["singleton_groups"] == 1.0
    assert res.metrics["no_signal_group_fraction"] == pytest.approx(2 / 3)
    res = grpo_advantages(t64(HAND_RETURNS), ids(HAND_GROUPS), norm="mean")
    close(res.advantages, [2 / 3, 0, -1 / 3, 0, 0, -1 / 3])


def test_rloo_hand_worked():
    # group 7: 1 - (0 + 0)/2 = 1;  0 - (1 + 0)/2 = -0.5
    res = rloo_advantages(t64(HAND_RETURNS), ids(HAND_GROUPS))
    close(res.advantages, [1.0, 0, -0.5, 0, 0, -0.5])
    assert res.no_signal.tolist() == HAND_DEAD
    # a pair: 3 - 1 = 2, 1 - 3 = -2
    close(rloo_advantages(t64([3.0, 1.0]), ids([0, 0])).advantages, [2.0, -2.0])


def test_reinforce_pp_baseline_hand_worked():
    # centred: group 7 -> 2/3, -1/3, -1/3; group 3 -> 0, 0; group 9 -> 0; plus a pair 3, 1 -> 1, -1.
    # over the 8 episodes: mean 0, population var (4/9 + 1/9 + 1/9 + 1 + 1) / 8 = (8/3) / 8 = 1/3
    returns = HAND_RETURNS + [3.0, 1.0]
    groups = HAND_GROUPS + [4, 4]
    s = math.sqrt(1 / 3)
    res = reinforce_pp_baseline_advantages(t64(returns), ids(groups), eps=TINY)
    close(res.advantages, [(2 / 3) / s, 0, (-1 / 3) / s, 0, 0, (-1 / 3) / s, 1 / s, -1 / s])


def test_group_stats_are_per_episode_not_per_turn():
    # Group 0: episode 10 has 4 turns with rewards 0, 0, 0, 1 (return 1); episode 11 has one
    # turn with reward 0 (return 0). Per episode: mean 0.5 -> advantages +0.5 / -0.5.
    # (A baseline over turn rows would be (4*1 + 0)/5 = 0.8 and give +0.2 / -0.8.)
    rewards = t64([0.0, 0.0, 0.0, 0.0, 1.0])
    episodes = ids([10, 11, 10, 10, 10])
    returns, ep, inverse = episode_returns(rewards, episodes)
    close(returns, [1.0, 0.0])
    assert ep.tolist() == [10, 11] and inverse.tolist() == [0, 1, 0, 0, 0]
    res = grpo_advantages(returns, ids([0, 0]), norm="mean")
    close(res.advantages, [0.5, -0.5])
    close(res.advantages[inverse], [0.5, -0.5, 0.5, 0.5, 0.5])


def test_no_signal_groups_are_exactly_zero_even_with_inexact_means():
    # 0.1 * 3 / 3 != 0.1 in floating point: the deviations would be ~1e-17 and, divided by
    # a zero std + eps, ~1e-11. All-equal groups must give exactly 0 and be flagged.
    returns = t64([0.1, 0.1, 0.1, 0.7, 0.7])
    groups = ids([0, 0, 0, 1, 1])
    for res in (grpo_advantages(returns, groups), grpo_advantages(returns, groups, norm="mean"),
                rloo_advantages(returns, groups), reinforce_pp_baseline_advantages(returns, groups)):
        assert (res.advantages == 0).all() and res.no_signal.all()
        assert res.num_no_signal_groups == 2
    keep, dropped = dynamic_sampling_filter(returns, groups)
    assert not keep.any() and dropped.tolist() == [0, 1]


def test_all_singleton_groups_give_zero_and_are_reported():
    returns = t64([1.0, -2.0, 3.5])
    groups = ids([4, 5, 6])
    for res in (grpo_advantages(returns, groups), rloo_advantages(returns, groups),
                reinforce_pp_baseline_advantages(returns, groups)):
        assert (res.advantages == 0).all() and res.no_signal.all()
        assert (res.num_groups, res.num_no_signal_groups) == (3, 3)


def test_float32_in_float32_out():
    res = grpo_advantages(torch.tensor([1.0, 0.0]), ids([0, 0]))
    assert res.advantages.dtype == torch.float32
    res = reinforce_pp_advantages(torch.tensor([1.0, 0.0, 2.0]), ids([0, 0, 1]), gamma=0.9)
    assert res.advantages.dtype == torch.float32


# --------------------------------------------------------------------------------------
# Hand-worked REINFORCE++
# Episode 5: rewards 0, 1 (2 turns); episode 8: reward 2 (1 turn); gamma = 0.5.
#   G: episode 5 -> [0 + 0.5*1, 1] = [0.5, 1]; episode 8 -> [2].
#   weights 1/(E T_i): 1/4, 1/4, 1/2.  mu = 0.125 + 0.25 + 1 = 1.375
#   var = 1/4 (0.875^2) + 1/4 (0.375^2) + 1/2 (0.625^2) = 0.421875
# --------------------------------------------------------------------------------------
def test_reinforce_pp_hand_worked():
    rewards, episodes = t64([0.0, 2.0, 1.0]), ids([5, 8, 5])  # episode 5's turns are not contiguous
    close(discounted_turn_returns(rewards, episodes, 0.5), [0.5, 2.0, 1.0])
    res = reinforce_pp_advantages(rewards, episodes, gamma=0.5, eps=TINY)
    s = math.sqrt(0.421875)
    close(res.advantages, [-0.875 / s, 0.625 / s, -0.375 / s])
    assert res.metrics["return_mean"] == pytest.approx(1.375)
    assert res.metrics["return_std"] == pytest.approx(s)
    assert res.num_groups == 1 and not res.no_signal.any()


def test_reinforce_pp_constant_returns_have_no_signal():
    # gamma = 0: every turn's return is its own reward, 2 everywhere
    res = reinforce_pp_advantages(t64([2.0, 2.0, 2.0]), ids([0, 0, 1]), gamma=0.0)
    assert (res.advantages == 0).all() and res.no_signal.all() and res.num_no_signal_groups == 1


# --------------------------------------------------------------------------------------
# Hand-worked GiGPO (gamma = 0.5)
#   group 0: episode a: states s0, s1, rewards 0, 1    (return 1)
#            episode b: states s0, s2, s1, rewards 0, 0, 1 (return 1)
#            episode c: states s0, s2, rewards 0, 0    (return 0)
#   group 1: episode d: state s0, reward 1 (singleton group; its s0 is a different anchor)
#   turn order: a0, b0, c0, d0, a1, b1, c1, b2
#   step returns: a [0.5, 1]; b [0.25, 0.5, 1]; c [0, 0]; d [1]
#   episode level (mean): mean(1, 1, 0) = 2/3 -> a 1/3, b 1/3, c -2/3, d 0
#   anchors: (0,s0) {a0 .5, b0 .25, c0 0} -> +.25, 0, -.25; (0,s1) {a1 1, b2 1} -> 0, 0 (no signal);
#            (0,s2) {b1 .5, c1 0} -> +.25, -.25; (1,s0) {d0} -> 0 (singleton)
# --------------------------------------------------------------------------------------
G_REWARDS = [0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
G_EPISODES = [0, 1, 2, 3, 0, 1, 2, 1]
G_GROUPS = [0, 0, 0, 1, 0, 0, 0, 0]
G_KEYS = ["s0", "s0", "s0", "s0", "s1", "s2", "s2", "s1"]


def _gigpo_hand(**kw):
    return gigpo_advantages(t64(G_REWARDS), ids(G_EPISODES), ids(G_GROUPS), G_KEYS, gamma=0.5, **kw)


def test_gigpo_hand_worked_mean_norm():
    a_ep = {0: 1 / 3, 1: 1 / 3, 2: -2 / 3, 3: 0.0}
    a_st = [0.25, 0.0, -0.25, 0.0, 0.0, 0.25, -0.25, 0.0]
    for omega in (1.0, 0.5):
        res = _gigpo_hand(omega=omega, norm="mean", eps=TINY)
        close(res.advantages, [a_ep[e] + omega * s for e, s in zip(G_EPISODES, a_st)])
    assert res.no_signal.tolist() == [False, False, False, True, False, False, False, False]
    assert (res.num_groups, res.num_no_signal_groups) == (2, 1)
    assert res.metrics["anchor_groups"] == 4.0
    assert res.metrics["anchor_no_signal_fraction"] == pytest.approx(0.5)


def test_gigpo_hand_worked_mean_std_norm():
    # episode level: unbiased std of (1, 1, 0) = sqrt(1/3); (0,s0): std of (.5,.25,0) = 0.25;
    # (0,s2): std of (.5, 0) = sqrt(0.125)
    se, s2 = math.sqrt(1 / 3), math.sqrt(0.125)
    a_ep = {0: (1 / 3) / se, 1: (1 / 3) / se, 2: (-2 / 3) / se, 3: 0.0}
    a_st = [1.0, 0.0, -1.0, 0.0, 0.0, 0.25 / s2, -0.25 / s2, 0.0]
    res = _gigpo_hand(omega=1.0, norm="mean_std", eps=TINY)
    close(res.advantages, [a_ep[e] + s for e, s in zip(G_EPISODES, a_st)])


def test_gigpo_anchor_keys_as_integer_tensor():
    keys = ids([0, 0, 0, 0, 1, 2, 2, 1])
    res = gigpo_advantages(t64(G_REWARDS), ids(G_EPISODES), ids(G_GROUPS), keys, gamma=0.5, norm="mean")
    close(res.advantages, _gigpo_hand(norm="mean").advantages.tolist())


def test_gigpo_with_omega_zero_is_grpo_on_episode_returns():
    rewards, episodes, groups = t64(G_REWARDS), ids(G_EPISODES), ids(G_GROUPS)
    res = gigpo_advantages(rewards, episodes, groups, G_KEYS, omega=0.0, norm="mean_std")
    returns, _, inverse = episode_returns(rewards, episodes)
    grpo = grpo_advantages(returns, ids([0, 0, 0, 1]), norm="mean_std")
    close(res.advantages, grpo.advantages[inverse].tolist())


# --------------------------------------------------------------------------------------
# DAPO dynamic sampling, hand-worked
# --------------------------------------------------------------------------------------
def test_dynamic_sampling_hand_worked():
    keep, dropped = dynamic_sampling_filter(t64(HAND_RETURNS), ids(HAND_GROUPS))
    assert keep.tolist() == [not d for d in HAND_DEAD]
    assert dropped.tolist() == [3, 9] and dropped.dtype == torch.long
    keep, dropped = dynamic_sampling_filter(t64([1.0, 0.0]), ids([2, 2]))
    assert keep.all() and dropped.numel() == 0


# --------------------------------------------------------------------------------------
# TurnBatch layout
# --------------------------------------------------------------------------------------
def test_turn_index_lists_env_by_env_in_time_order():
    episode_ids = torch.zeros(3, 2, dtype=torch.long)
    # flat position t * N + n; env 0 first (t = 0, 1, 2), then env 1
    assert turn_index(episode_ids).tolist() == [0, 2, 4, 1, 3, 5]
    include = torch.tensor([[True, False], [False, True], [True, True]])
    assert turn_index(episode_ids, include).tolist() == [0, 4, 3, 5]


def test_broadcast_turn_advantages_hand_worked():
    # T=2, N=2, R=3. Lengths [[2, 1], [3, 2]]; turn (1, 0) is not listed -> zeros.
    lengths = torch.tensor([[2, 1], [3, 2]])
    mask = torch.arange(3) < lengths.unsqueeze(-1)
    index = ids([0, 1, 3])  # (0,0), (0,1), (1,1)
    out = broadcast_turn_advantages(t64([1.5, -2.0, 0.25]), index, mask)
    expected = [[[1.5, 1.5, 0.0], [-2.0, 0.0, 0.0]], [[0.0, 0.0, 0.0], [0.25, 0.25, 0.0]]]
    close(out, expected)


def test_estimator_round_trip_through_turn_batch_layout():
    # Two envs, three turns: env 0 runs episode 1 (turns 0-1) then episode 2 (turn 2);
    # env 1 runs episode 3 (turns 0-2). Groups: episodes 1 and 3 in group 0, episode 2 alone.
    episode_ids = ids([[1, 3], [1, 3], [2, 3]])
    rewards = t64([[0.0, 0.0], [1.0, 0.0], [4.0, 0.0]])
    idx = turn_index(episode_ids)
    flat_eps = episode_ids.reshape(-1)[idx]
    returns, ep, inverse = episode_returns(rewards.reshape(-1)[idx], flat_eps)
    close(returns, [1.0, 4.0, 0.0])  # episodes 1, 2, 3
    res = grpo_advantages(returns, ids([0, 1, 0]), norm="mean")  # group 0: (1, 0) -> +.5, -.5
    mask = torch.ones(3, 2, 2, dtype=torch.bool)
    out = broadcast_turn_advantages(res.advantages[inverse], idx, mask)
    close(out[..., 0], [[0.5, -0.5], [0.5, -0.5], [0.0, -0.5]])


# --------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------
def test_bad_inputs_raise():
    r, g = t64([1.0, 0.0]), ids([0, 0])
    with pytest.raises(ValueError, match="norm must be one of"):
        grpo_advantages(r, g, norm="std")
    with pytest.raises(TypeError, match="group_ids must be an integer"):
        grpo_advantages(r, g.double())
    with pytest.raises(ValueError, match="group_ids has shape"):
        rloo_advantages(r, ids([0, 0, 1]))
    with pytest.raises(ValueError, match="NaN or inf"):
        grpo_advantages(t64([1.0, math.nan]), g)
    with pytest.raises(ValueError, match="empty"):
        grpo_advantages(t64([]), ids([]))
    with pytest.raises(TypeError, match="float32 or float64"):
        grpo_advantages(ids([1, 0]), g)
    with pytest.raises(ValueError, match="1-D"):
        grpo_advantages(t64([[1.0, 0.0]]), ids([[0, 0]]))
    with pytest.raises(ValueError, match="eps must be > 0"):
        reinforce_pp_baseline_advantages(r, g, eps=0.0)
    with pytest.raises(ValueError, match="gamma must be in"):
        reinforce_pp_advantages(r, g, gamma=1.5)
    with pytest.raises(ValueError, match="gamma must be in"):
        discounted_turn_returns(r, g, -0.1)


def test_gigpo_bad_inputs_raise():
    r, e = t64([1.0, 0.0]), ids([0, 0])
    with pytest.raises(ValueError, match="constant within each episode"):
        gigpo_advantages(r, e, ids([0, 1]), ["a", "b"])
    with pytest.raises(ValueError, match="anchor_keys has 1 entries"):
        gigpo_advantages(r, e, ids([0, 0]), ["a"])
    with pytest.raises(TypeError, match="hashable"):
        gigpo_advantages(r, e, ids([0, 0]), [["a"], ["b"]])
    with pytest.raises(ValueError, match="omega"):
        gigpo_advantages(r, e, ids([0, 0]), ["a", "b"], omega=-1.0)


def test_layout_bad_inputs_raise():
    mask = torch.ones(2, 2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="more than once"):
        broadcast_turn_advantages(t64([1.0, 2.0]), ids([1, 1]), mask)
    with pytest.raises(ValueError, match="index must be in"):
        broadcast_turn_advantages(t64([1.0]), ids([4]), mask)
    with pytest.raises(TypeError, match="response_mask must be a bool"):
        broadcast_turn_advantages(t64([1.0]), ids([0]), mask.float())
    with pytest.raises(ValueError, match="include has shape"):
        turn_index(ids([[0, 0]]), torch.ones(2, 1, dtype=torch.bool))
