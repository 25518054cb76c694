"""The P0 benchmark's minimal PPO loop (``benchmarks/bench_minimal_loop.py``): its GAE, its policy loss,
its prompts and its sampler against Verlog's, and one quick run of the benchmark."""

from __future__ import annotations

import json
import random
import re
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_minimal_loop as P0  # noqa: E402

ENV_KWARGS = {"format_penalty": -0.5, "instruction_style": "brief", "text_style": "tidy"}


def test_turn_gae_on_a_hand_worked_case():
    # env 0: terminates after turn 2. env 1: truncated after turn 0 (bootstrap 0.8), then runs past the batch end
    # (bootstrap 0.5). gamma 0.9, lambda 0.5, so gamma * lambda = 0.45.
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]])
    values = torch.tensor([[0.5, 0.2], [0.6, 0.4], [0.7, 0.1]])
    terminated = torch.tensor([[False, False], [False, False], [True, False]])
    truncated = torch.tensor([[False, True], [False, False], [False, False]])
    bootstrap = torch.tensor([[0.0, 0.8], [0.0, 0.0], [123.0, 0.5]])  # 123: after a termination, never read
    adv, ret = P0.turn_gae(rewards, values, terminated, truncated, bootstrap, gamma=0.9, lam=0.5)
    # env 0: d2 = 1 - 0.7 = 0.3; d1 = 0.9*0.7 - 0.6 = 0.03 -> 0.03 + 0.45*0.3 = 0.165;
    #        d0 = 0.9*0.6 - 0.5 = 0.04 -> 0.04 + 0.45*0.165 = 0.11425
    # env 1: d2 = 0.9*0.5 - 0.1 = 0.35; d1 = 0.9*0.1 - 0.4 = -0.31 -> -0.31 + 0.45*0.35 = -0.1525;
    #        d0 = 1 + 0.9*0.8 - 0.2 = 1.52 (truncated: no carry from turn 1, another episode)
    expected = torch.tensor([[0.11425, 1.52], [0.165, -0.1525], [0.3, 0.35]])
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(ret, expected + values)


def test_turn_gae_equals_verlogs_gae_with_one_token_per_turn():
    from verlog.algos.gae import dual_discount_gae

    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        T, N = int(torch.randint(1, 9, (1,), generator=gen)), int(torch.randint(1, 6, (1,), generator=gen))
        rewards, values, bootstrap = (torch.randn(T, N, generator=gen, dtype=torch.float64) for _ in range(3))
        ends = torch.rand(T, N, generator=gen)
        terminated, truncated = ends < 0.2, (ends >= 0.2) & (ends < 0.35)
        adv, ret = P0.turn_gae(rewards, values, terminated, truncated, bootstrap, gamma=0.99, lam=0.95)
        one_token = torch.ones(T, N, 1, dtype=torch.bool)
        ref_adv, ref_ret = dual_discount_gae(rewards[..., None], values[..., None], one_token, terminated, truncated,
                                             bootstrap, 0.99, 0.95, 1.0, 1.0)
        torch.testing.assert_close(adv, ref_adv[..., 0])
        torch.testing.assert_close(ret, ref_ret[..., 0])


def test_ppo_policy_loss_clips_dual_clips_and_averages_over_the_given_tokens():
    ratio = torch.tensor([[1.5, 0.5, 5.0, 0.5, 9.0]])
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 100.0]])
    mask = torch.tensor([[True, True, True, True, False]])
    loss = P0.ppo_policy_loss(torch.log(ratio), torch.zeros_like(ratio), adv, mask, 0.2, 0.2, 3.0, n_tokens=4.0)
    # per token: max(-1.5, -1.2) = -1.2; max(-0.5, -0.8) = -0.5; min(max(5, 1.2), 3) = 3 (dual clip); max(0.5, 0.8)
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 3.0 + 0.8) / 4)
    no_dual = P0.ppo_policy_loss(torch.log(ratio), torch.zeros_like(ratio), adv, mask, 0.2, 0.2, None, n_tokens=4.0)
    assert no_dual.item() == pytest.approx((-1.2 - 0.5 + 5.0 + 0.8) / 4)


def test_the_prompt_is_the_token_for_token_prompt_of_verlogs_memory(tiny):
    from verlog.envs import make_env
    from verlog.memory.window import WindowMemory
    from verlog.models import load_tokenizer

    tok = load_tokenizer(tiny)
    env = make_env("babyai/easy_goto", **ENV_KWARGS)
    rng = random.Random(0)
    obs, info = env.reset(seed=3)
    memory = WindowMemory(tok, history_turns=0, max_prompt_tokens=512)
    memory.start_episode(info["instruction"], obs, info["context"])
    for step in range(6):
        ours = tok(P0.render_prompt(info["instruction"], obs, info["context"]), add_special_tokens=False)["input_ids"]
        assert ours == memory.prompt_ids()[0], f"step {step}"
        reply = rng.choice(["ACTION: turn left", "ACTION: go forward", "no action"])  # an invalid one too
        obs, _, term, trunc, info = env.step(reply)
        assert not (term or trunc)
        memory.add_turn(reply, obs, info["context"])
    env.close()


def small_loop(model_dir: Path) -> P0.MinimalPPO:
    cfg = P0.LoopConfig(env_kwargs=ENV_KWARGS, num_envs=3, turns_per_env=4, epochs=1, minibatches=2,
                        micro_batch_size=4, critic_warmup_iterations=0, warmup_steps=0)
    return P0.MinimalPPO(cfg, model_dir)


def test_sampled_logprobs_are_the_training_forwards_and_an_iteration_trains_both_models(tiny):
    loop = small_loop(tiny)
    try:
        ro = loop.collect()
        assert ro.values.shape == ro.rewards.shape == (4, 3)
        for prompts, replies, logprobs in zip(ro.prompts, ro.replies, ro.logprobs):
            for p, r, lp in zip(prompts, replies, logprobs):
                assert 1 <= len(r) == len(lp) <= loop.cfg.max_response_tokens
                assert loop.eos not in r[:-1]
                # KV-cached, left-padded sampling vs the update's right-padded forward of prompt + reply
                with torch.no_grad():
                    train = loop.reply_logprobs(torch.tensor([p + r]), torch.arange(len(r))[None] + len(p) - 1,
                                                torch.tensor([r]))[0]
                torch.testing.assert_close(train, torch.tensor(lp), atol=1e-4, rtol=0)
        actor0 = [x.detach().clone() for x in loop.actor.parameters()]
        critic0 = [x.detach().clone() for x in loop.critic.parameters()]
        row = loop.iteration()
        assert row["turns"] == 12 and row["seconds"] > 0
        assert torch.isfinite(torch.tensor([row["pg_loss"], row["value_loss"]])).all()
        assert any(not torch.equal(a, b) for a, b in zip(actor0, loop.actor.parameters()))
        assert any(not torch.equal(a, b) for a, b in zip(critic0, loop.critic.parameters()))
    finally:
        loop.close()


def test_the_models_have_verlogs_parameter_counts(tiny):
    from verlog.models import load_actor, load_critic

    loop = small_loop(tiny)
    loop.close()
    assert P0.parameter_count(loop.actor) == P0.parameter_count(load_actor(tiny))
    assert P0.parameter_count(loop.critic) == P0.parameter_count(load_critic(tiny))


@pytest.mark.slow
def test_quick_benchmark_ends_with_its_result_line_and_writes_the_json(tmp_path, capsys):
    m = re.search(r"^RESULT_LINE = (.+)$", (ROOT / "Makefile").read_text(), re.M)
    regex = re.compile(m.group(1).replace("$$", "$"))
    path = tmp_path / "p0.json"
    assert P0.main(["--quick", "--pairs", "1", "--json", str(path), f"model.cache_dir={tmp_path / 'cache'}"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("P0 minimal: Verlog ") and regex.match(last)
    data = json.loads(path.read_text())
    assert data["figure"] == "P0" and data["pairs"] == 1 and data["threads"] == 1
    assert data["compare"] == {"op": ">=", "value": 0.8}
    assert data["median"] > 0 and len(data["ratios"]) == 1 and len(data["load"]) == 3
