"""End to end: a short tiny-model run through the real pipeline, its outputs, resume, and verlog-eval."""

import json
import math
import subprocess
import sys

import pytest
import yaml

from helpers import train_cli
from verlog.config import load_recipe
from verlog.logging import read_metrics

SMALL = [
    "iterations=3", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "env.vector_mode=sync",
    "rollout.turns_per_env=4", "ppo.minibatches=2", "ppo.micro_batch_size=4", "format_warmup.steps=10",
    "format_warmup.episodes=2", "model.tiny.corpus_episodes=4", "eval.episodes=3", "eval.num_envs=3",
    "env.max_steps=12", "checkpoint_every=1", "logging.progress=false", "logging.dump_batch_every=1",
]


def train(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``verlog-train tiny <args>`` in a subprocess (one thread) and check it succeeded."""
    return train_cli("tiny", *args, timeout=timeout)


def short_run(tmp_path, name: str, *extra: str) -> list[dict]:
    """A 3-iteration run without checkpoints between iterations; returns its metrics rows."""
    args = [a for a in SMALL if not a.startswith(("checkpoint_every", "logging.dump"))]
    train(*args, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", f"name={name}",
          "eval.baseline=false", *extra)
    return read_metrics(tmp_path / name / "metrics.jsonl")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    args = SMALL + [f"run_root={root}", f"model.cache_dir={root / 'cache'}", "name=e2e"]
    return root / "e2e", args, train(*args)


def test_run_directory_contents(run):
    run_dir, _, proc = run
    assert (run_dir / "config.yaml").is_file() and (run_dir / "curves.png").stat().st_size > 1000
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["iterations"] == 3 and cfg["env"]["num_envs"] == 4
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    assert [r["phase"] for r in rows] == ["critic_warmup", "ppo", "ppo"]
    assert [r["turns"] for r in rows] == [16, 32, 48]
    for key in ("episode/success", "rollout/invalid_action_rate", "prompt/tokens_mean", "prompt/tokens_max",
                "prompt/trimmed_turns", "critic/explained_variance", "critic/value_loss", "time/rollout",
                "time/scoring", "time/update", "turns_per_second"):
        assert key in rows[-1], key
    assert "actor/pg_loss" not in rows[0] and "actor/pg_loss" in rows[1]  # no actor update in warm-up
    # behaviour logprobs of the HF engine equal the trainer's recomputed ones (same weights, fp32)
    assert all(r["rollout/behaviour_vs_old_logprob_max_abs"] < 1e-3 for r in rows)
    ev = json.loads((run_dir / "eval.json").read_text())
    assert {"success_mean", "success_se", "episodes", "task"} <= set(ev)
    assert ev["episodes"] == 3 and ev["task"] == "babyai/easy_goto"
    assert set(ev["untrained"]) == {"greedy", "sampled"} and set(ev["trained"]) == {"greedy", "sampled"}
    assert '"success_mean"' in proc.stdout


def test_checkpoints_are_hf_directories_with_safetensors(run):
    run_dir, _, _ = run
    ckpts = sorted((run_dir / "checkpoints").glob("iter_*"))
    assert [c.name for c in ckpts] == ["iter_000001", "iter_000002", "iter_000003"]
    last = ckpts[-1]
    for part in ("actor", "critic"):
        assert (last / part / "model.safetensors").is_file() and (last / part / "config.json").is_file()
    assert (last / "COMPLETE").is_file() and (last / "ds").is_dir()
    state = json.loads((last / "trainer_state.json").read_text())
    assert state["iteration"] == 3
    from verlog.models import is_critic_dir, load_critic

    assert is_critic_dir(last / "critic")
    critic = load_critic(last / "critic")
    assert critic.score.weight.abs().sum() > 0  # the trained value head was saved, not re-initialised


def test_resume_continues_from_the_newest_checkpoint(run):
    run_dir, args, _ = run
    train(*[a for a in args if not a.startswith("iterations=")], "iterations=4", f"resume={run_dir}")
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert rows[-1]["turns"] == 64
    assert (run_dir / "checkpoints" / "iter_000004" / "COMPLETE").is_file()


def test_verlog_eval_on_the_checkpoint(run):
    run_dir, _, _ = run
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import eval_main; eval_main()", str(run_dir),
                           "episodes=2"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["episodes"] == 2 and summary["task"] == "babyai/easy_goto" and summary["greedy"] is True


def test_dumped_batch_reloads(run):
    from verlog.batch import ScoredBatch

    run_dir, _, _ = run
    scored = ScoredBatch.load(run_dir / "batches" / "iter_000002.pt")
    batch = scored.batch
    assert scored.advantages is not None and scored.advantages.shape == batch.response_mask.shape
    assert scored.values is not None and scored.returns is not None and scored.bootstrap_values is not None
    assert batch.num_turns == 4 and batch.num_envs == 4


def test_missing_model_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", "tiny",
                           f"model.path={tmp_path / 'nope'}", f"run_root={tmp_path}"],
                          capture_output=True, text=True, timeout=300, env={**__import__("os").environ,
                                                                            "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("[")]
    assert len(lines) == 1 and "nope" in lines[0], proc.stderr[-2000:]


def test_recipe_defaults_are_the_documented_main_job():
    cfg = load_recipe("tiny")
    assert cfg.env.task == "babyai/easy_goto" and cfg.model.path == "tiny" and cfg.eval.episodes == 100


def test_vllm_rollouts_match_the_trainer_after_every_weight_sync(tmp_path):
    pytest.importorskip("vllm")
    rows = short_run(tmp_path, "v", "rollout.engine=vllm")
    assert len(rows) == 3
    # behaviour logprobs come from vLLM, old logprobs from the DeepSpeed actor: after each sync they agree
    assert all(r["rollout/behaviour_vs_old_logprob_max_abs"] < 1e-3 for r in rows)


def test_vllm_sleeps_during_updates_and_wakes_in_sync(tmp_path):
    """rollout.vllm_sleep_between_updates: the engine sleeps after each rollout and wakes for the next.

    vLLM has no sleep mode on CPU (refused in one line, tests/test_engines.py), so this run patches the
    platform's check: vLLM's engine core then pauses, drops its prefix cache and wakes by tags as on a
    GPU, while the CPU worker frees nothing. Iteration 1 (critic warm-up) wakes without new weights."""
    pytest.importorskip("vllm")
    args = [a for a in SMALL if not a.startswith(("checkpoint_every", "logging.dump"))]
    patch = ("from vllm.platforms import current_platform; current_platform.is_sleep_mode_available = lambda: True; "
             "from verlog.cli import train_main; train_main()")
    proc = subprocess.run([sys.executable, "-c", patch, "tiny", *args, f"run_root={tmp_path}",
                           f"model.cache_dir={tmp_path / 'cache'}", "name=s", "eval.baseline=false",
                           "rollout.engine=vllm", "rollout.vllm_sleep_between_updates=true"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(tmp_path / "s" / "metrics.jsonl")
    assert len(rows) == 3 and all("time/engine_sleep" in r for r in rows)
    assert all(r["rollout/behaviour_vs_old_logprob_max_abs"] < 1e-3 for r in rows)  # woke with the synced weights


def test_zero3_with_reference_kl_entropy_and_kl_early_stop(tmp_path):
    rows = short_run(tmp_path, "z3", "deepspeed.zero_stage=3", "ppo.kl_coef=0.05", "ppo.entropy_coef=0.001",
                     "ppo.target_kl=1e-12", "ppo.epochs=2")
    ppo_rows = [r for r in rows if r["phase"] == "ppo"]
    assert all("actor/kl_ref" in r for r in ppo_rows)
    # a target KL this small stops the actor after its first minibatch
    assert all(r["actor/early_stopped"] == 1.0 for r in ppo_rows)
    ckpt = tmp_path / "z3" / "checkpoints" / "iter_000003"
    from verlog.models import load_actor

    actor = load_actor(ckpt / "actor")  # ZeRO-3 parameters were gathered into a complete HF checkpoint
    assert sum(p.numel() for p in actor.parameters()) > 10_000


def test_kl_in_reward_runs(tmp_path):
    short_run(tmp_path, "klr", "ppo.kl_coef=0.05", "ppo.kl_in_reward=true", "logging.dump_batch_every=3")
    from verlog.batch import ScoredBatch

    scored = ScoredBatch.load(tmp_path / "klr" / "batches" / "iter_000003.pt")
    batch = scored.batch
    # with the KL in the reward, non-final response tokens carry a (generally non-zero) penalty
    inner = batch.response_mask.clone()
    inner.scatter_(2, (batch.response_lengths - 1).unsqueeze(-1), False)
    assert scored.ref_logprobs is not None and bool((scored.token_rewards[inner] != 0).any())


@pytest.mark.parametrize("task", ["babaisai/goto_win", "crafter/default"])
def test_tiny_recipe_trains_on_a_non_babyai_env(tmp_path, task):
    """The whole pipeline (tiny model + tokenizer from the env's text, warm-up, PPO) on another BALROG game."""
    rows = short_run(tmp_path, "other", f"env.task={task}", "env.max_steps=8")
    assert [r["phase"] for r in rows] == ["critic_warmup", "ppo", "ppo"]
    assert all(r["turns"] == 16 * (i + 1) for i, r in enumerate(rows))
    assert all(math.isfinite(r["critic/value_loss"]) and math.isfinite(r["actor/pg_loss"]) for r in rows[1:])
    assert sum(r["episodes"] for r in rows) >= 4  # 12 turns per env: the 8-step limit ends every env's episode
    ev = json.loads((tmp_path / "other" / "eval.json").read_text())
    assert ev["task"] == task and ev["episodes"] == 3


#: The first heavy steps of a run: build or load a model or tokenizer, make an environment, start a
#: process group or a DeepSpeed engine. A recipe this machine cannot run is refused before any of them.
HEAVY_STEPS = [
    ("verlog.tiny_model", "build_tiny_model"), ("verlog.models", "load_tokenizer"), ("verlog.models", "load_actor"),
    ("verlog.models", "load_critic"), ("verlog.envs.registry", "make_env"), ("verlog.envs.vector", "make_vector_env"),
    ("verlog.distributed", "init_distributed"), ("verlog.distributed", "make_engine"),
    ("torch.distributed", "init_process_group"), ("deepspeed", "initialize"),
]


def trip_heavy_steps(monkeypatch) -> list[str]:
    """Make every function of :data:`HEAVY_STEPS` raise, and return the list its calls are recorded in.

    Each is replaced in its own module (for modules imported later) and wherever an already imported
    ``verlog`` module bound it by name (``from verlog.models import load_actor``).
    """
    import importlib

    # import the modules that bind these names first: a module first imported while the tripwires are
    # in place would keep a tripwire after monkeypatch restores the originals, and trip later tests
    for module_name in ("verlog.cli", "verlog.trainer", "verlog.builders", "verlog.training_models"):
        importlib.import_module(module_name)
    called: list[str] = []
    for module_name, attr in HEAVY_STEPS:
        original = getattr(importlib.import_module(module_name), attr)
        name = f"{module_name}.{attr}"

        def tripwire(*args, _name=name, **kwargs):
            called.append(_name)
            raise AssertionError(f"{_name} was called before the recipe was refused")

        for mod_name, module in list(sys.modules.items()):
            if module is None or not (mod_name == module_name or mod_name.split(".")[0] == "verlog"):
                continue
            for key, value in list(vars(module).items()):
                if value is original:
                    monkeypatch.setattr(module, key, tripwire)
    return called


@pytest.fixture
def restore_library_logging():
    """``verlog-train`` quiets transformers and DeepSpeed; run in-process, it must not do so for later tests."""
    import logging

    import transformers.utils.logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    ds_level = logging.getLogger("DeepSpeed").level
    yield
    hf_logging.set_verbosity(verbosity)
    (hf_logging.enable_progress_bar if bars else hf_logging.disable_progress_bar)()
    logging.getLogger("DeepSpeed").setLevel(ds_level)


@pytest.mark.parametrize("recipe", ["balrog", "crafter"])
def test_gpu_recipes_stop_at_once_without_gpus(recipe, tmp_path, monkeypatch, capsys, restore_library_logging):
    import torch

    from verlog.cli import train_main

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA GPUs")
    called = trip_heavy_steps(monkeypatch)
    with pytest.raises(SystemExit) as exit_info:
        train_main([recipe, f"run_root={tmp_path}"])
    assert exit_info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip() and not line.startswith("[")]
    assert len(lines) == 1 and "GPUs per node" in lines[0] and "this machine has 0" in lines[0]
    assert load_recipe(recipe).gpus_per_node >= 4
    # refused before any model, env or process group, and before the run directory is written
    assert called == [] and list(tmp_path.iterdir()) == []


def test_token_budget_micro_batches_and_gradient_checkpointing(tmp_path):
    by_rows = short_run(tmp_path, "rows")
    by_tokens = short_run(tmp_path, "tokens", "ppo.micro_batch_tokens=400", "ppo.gradient_checkpointing=true")
    ppo = lambda rows: [r for r in rows if r["phase"] == "ppo"]  # noqa: E731
    assert all(0.0 <= r["update/padding_fraction"] < 1.0 for r in by_rows + by_tokens)
    # the same batches (identical first update inputs); length-sorted packing pads no more than row order
    assert by_rows[0]["rollout/reward_mean"] == by_tokens[0]["rollout/reward_mean"]
    assert ppo(by_tokens)[0]["update/padding_fraction"] <= ppo(by_rows)[0]["update/padding_fraction"] + 1e-9
