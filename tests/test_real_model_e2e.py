"""SmolLM2 end to end, the GPU recipes' path on CPU: LoRA, the vLLM rollout engine and DeepSpeed.

Two PPO iterations, a resume for a third, and the LoRA checkpoint read back three ways: by
``transformers`` (base + adapter), by Verlog's vLLM engine, and by ``verlog-eval``. Everything is as
small as it can be (2 envs x 2 turns, 6 response tokens); the run's figures (wall time, vLLM
start-up, peak memory, checkpoint size) are printed, never asserted.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import train_cli
from verlog.logging import read_metrics

#: The run: the tiny recipe's pipeline on SmolLM2 with the GPU recipes' choices (LoRA, vLLM, ZeRO-2,
#: one turn of history, KL to the reference in the reward, entropy bonus, dual clip) and the CPU
#: recipes' (adapters on the top 4 layers only, the frozen layers' output shared), two PPO
#: iterations, a checkpoint after each; the KV cache is sized from the free memory.
SMOL_ARGS = [
    "iterations=2", "threads=1", "model.lora_rank=8", "model.trainable_layers=4", "model.cache_frozen_activations=true",
    "rollout.engine=vllm", "deepspeed.zero_stage=2",
    "env.num_envs=2", "env.vector_mode=sync", "env.instruction_style=brief", "env.max_steps=3",
    "rollout.turns_per_env=2", "rollout.max_response_tokens=6", "memory.history_turns=1",
    "memory.max_prompt_tokens=320", "ppo.critic_warmup_iterations=0", "ppo.epochs=1", "ppo.minibatches=1",
    "ppo.micro_batch_size=2", "ppo.kl_coef=0.001", "ppo.kl_kind=k1", "ppo.kl_in_reward=true",
    "ppo.entropy_coef=0.001", "ppo.dual_clip=3.0", "ppo.weight_decay=0.01", "format_warmup.steps=0",
    "eval.episodes=1", "eval.num_envs=1", "eval.baseline=false", "checkpoint_every=1", "checkpoint_keep=1",
    "logging.progress=false", "logging.dump_batch_every=1",
]


def test_auto_cpu_kv_cache_is_a_tenth_of_free_memory_within_bounds():
    from verlog.rollout.vllm import auto_cpu_kv_cache_bytes, available_memory_bytes

    gib = 2**30
    assert auto_cpu_kv_cache_bytes(4 * gib) == int(0.4 * gib)
    assert auto_cpu_kv_cache_bytes(64 * gib) == gib  # at most 1 GiB
    assert auto_cpu_kv_cache_bytes(100 << 20) == 64 << 20  # at least 64 MiB
    assert 0 < available_memory_bytes()


def _train(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    proc = train_cli("tiny", *args, timeout=1800)
    return proc, time.perf_counter() - start


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@pytest.fixture(scope="module")
def smol_run(smollm2_dir, tmp_path_factory):
    pytest.importorskip("vllm")
    root = tmp_path_factory.mktemp("smol")
    args = SMOL_ARGS + [f"model.path={smollm2_dir}", f"run_root={root}", "name=smol"]
    _, first = _train(*args)
    run = root / "smol"
    after_two = sorted(p.name for p in (run / "checkpoints").iterdir())
    resume_args = [a for a in args if not a.startswith("iterations=")] + ["iterations=3", f"resume={run}"]
    _, second = _train(*resume_args)
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    print(f"\nSmolLM2 run: 2 iterations {first:.0f} s, resume + 1 iteration {second:.0f} s, "
          f"peak trainer RSS {peak_gib:.2f} GiB")
    return run, after_two


@pytest.mark.slow
def test_two_iterations_then_a_resume_for_a_third(smol_run):
    run, after_two = smol_run
    assert after_two == ["iter_000002"]  # checkpoint_keep=1: iteration 1's checkpoint was deleted
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert all(r["phase"] == "ppo" and r["turns"] == 4 * r["iteration"] for r in rows)
    assert all("actor/pg_loss" in r and "critic/value_loss" in r for r in rows)
    # the KL reference is the actor with its adapter off: equal to the policy before the first
    # update, different after it
    from verlog.batch import ScoredBatch

    first, second = (ScoredBatch.load(run / "batches" / f"iter_00000{k}.pt") for k in (1, 2))
    for scored, moved in ((first, False), (second, True)):
        mask = scored.batch.response_mask.bool()
        gap = (scored.old_logprobs - scored.ref_logprobs)[mask].abs().max().item()
        assert (gap > 1e-4) == moved, gap
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["iter_000003"]
    assert json.loads((run / "eval.json").read_text())["task"] == "babyai/easy_goto"


@pytest.mark.slow
def test_lora_checkpoint_is_an_adapter_that_transformers_loads(smol_run, smollm2_dir):
    from transformers import AutoModelForCausalLM

    from verlog.lora import is_adapter_dir
    from verlog.models import load_actor

    ckpt = smol_run[0] / "checkpoints" / "iter_000003"
    actor = ckpt / "actor"
    assert is_adapter_dir(actor)
    print(f"\nLoRA checkpoint on disk: {_du(ckpt) / 2**20:.1f} MiB (actor adapter "
          f"{_du(actor) / 2**20:.1f} MiB, DeepSpeed state {_du(ckpt / 'ds') / 2**20:.1f} MiB)")
    # transformers reads the adapter's config, loads its base and attaches the adapter
    adapted = AutoModelForCausalLM.from_pretrained(actor, dtype=torch.float32)
    merged = load_actor(actor)  # Verlog's loader: the same weights, merged
    base = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    ids = torch.tensor([[1, 504, 3458, 314, 253, 2]])
    with torch.no_grad():
        logits = adapted(input_ids=ids).logits
        torch.testing.assert_close(merged(input_ids=ids).logits, logits, atol=1e-4, rtol=1e-4)
        assert not torch.allclose(base(input_ids=ids).logits, logits)  # training moved the policy


@pytest.mark.slow
def test_vllm_serves_the_lora_checkpoint_and_verlog_eval_runs(smol_run):
    from verlog.rollout.engine import SamplingParams
    from verlog.rollout.vllm import VLLMEngine

    run = smol_run[0]
    actor = run / "checkpoints" / "iter_000003" / "actor"
    start = time.perf_counter()
    engine = VLLMEngine(actor, max_model_len=256, cpu_kv_cache_gb=0.25)
    print(f"\nVLLMEngine start-up on the checkpoint: {time.perf_counter() - start:.1f} s")
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": "Say hi."}],
                                                  add_generation_prompt=True, tokenize=True)
    prompt = prompt["input_ids"] if isinstance(prompt, dict) or hasattr(prompt, "keys") else prompt
    out = engine.generate([list(prompt)], SamplingParams(max_tokens=4, greedy=True))[0]
    assert 1 <= len(out.token_ids) <= 4 and all(lp <= 0 for lp in out.logprobs)
    del engine

    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import eval_main; eval_main()", str(actor.parent),
                           "task=babyai/easy_goto", "episodes=2", "num_envs=2"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["task"] == "babyai/easy_goto"
