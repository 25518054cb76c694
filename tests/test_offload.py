"""ZeRO offload from recipe keys: the DeepSpeed sections it writes, its one-line refusals, and a run with the
optimizer offloaded that trains exactly as one without (offload changes where the states live, not the update)."""

import pytest

from helpers import cli_error_line, train_cli
from verlog import distributed as D
from verlog.cli import train_main
from verlog.logging import read_metrics

SMALL = ["iterations=3", "ppo.critic_warmup_iterations=1", "env.num_envs=4", "env.vector_mode=sync",
         "rollout.turns_per_env=4", "ppo.minibatches=2", "ppo.micro_batch_size=4", "format_warmup.steps=10",
         "format_warmup.episodes=2", "model.tiny.corpus_episodes=4", "eval.episodes=2", "eval.num_envs=2",
         "eval.baseline=false", "env.max_steps=12", "logging.progress=false"]


def _config(**offload: str) -> dict:
    return D.ds_config(zero_stage=3, micro_batch_size=2, grad_accum_steps=1, max_grad_norm=1.0, bf16=False, **offload)


def test_offload_sections_in_the_deepspeed_config():
    assert "offload_optimizer" not in _config()["zero_optimization"]
    assert "zero_force_ds_cpu_optimizer" not in _config()
    both = _config(offload_optimizer="cpu", offload_param="cpu")
    assert both["zero_optimization"]["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert both["zero_optimization"]["offload_param"] == {"device": "cpu", "pin_memory": True}
    assert both["zero_force_ds_cpu_optimizer"] is False  # the run's own torch AdamW steps the host copies
    param_only = _config(offload_param="cpu")
    assert "offload_optimizer" not in param_only["zero_optimization"] and "zero_force_ds_cpu_optimizer" not in param_only


@pytest.mark.parametrize("overrides, start", [
    (["deepspeed.offload_optimizer=nvme"], "deepspeed.offload_optimizer: expected one of none, cpu"),
    (["deepspeed.offload_optimizer=cpu", "deepspeed.zero_stage=0"], "deepspeed.offload_optimizer: needs deepspeed.zero_stage 1"),
    (["deepspeed.offload_param=cpu"], "deepspeed.offload_param: needs deepspeed.zero_stage 3"),
    (["deepspeed.offload_param=gpu", "deepspeed.zero_stage=3"], "deepspeed.offload_param: expected one of none, cpu"),
])
def test_offload_keys_are_checked_in_one_line(overrides, start, capsys, tmp_path):
    line = cli_error_line(train_main, ["tiny", f"run_root={tmp_path}", *overrides], capsys)
    assert line.startswith(f"error: {start}"), line


def test_optimizer_offload_trains_the_same_as_without(tmp_path):
    def run(name, *extra):
        train_cli("tiny", *SMALL, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", f"name={name}",
                  *extra, timeout=600)
        rows = read_metrics(tmp_path / name / "metrics.jsonl")
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "turns_per_second"))} for r in rows]

    plain, offloaded = run("plain"), run("offloaded", "deepspeed.offload_optimizer=cpu")
    assert len(plain) == 3 and [r["phase"] for r in plain] == [r["phase"] for r in offloaded]
    # the same rollouts, losses and statistics at every iteration: iterations 2 and 3 start from the
    # weights the (offloaded) optimizer wrote, so a different update would show in them
    for a, b in zip(plain, offloaded):
        assert a.keys() == b.keys()
        for key in a:
            same = a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-7) if isinstance(a[key], float) else a[key] == b[key]
            assert same, (key, a[key], b[key])


ENGINE = """
import torch
from verlog import distributed as D

D.init_distributed()
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
config = D.ds_config(zero_stage={stage}, micro_batch_size=2, grad_accum_steps=1, max_grad_norm=1.0, bf16=False,
                     offload_optimizer="cpu", offload_param="{param}")
engine = D.make_engine(model, lr=1e-2, weight_decay=0.0, config=config)
engine.backward(engine(torch.ones(2, 4)).pow(2).mean())
engine.step()
print("offload", engine.zero_cpu_offload(), type(engine.optimizer).__name__, flush=True)
"""


@pytest.mark.parametrize("stage, param", [(2, "none"), (3, "cpu")])
def test_deepspeed_takes_the_offload_with_our_optimizer(stage, param):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                             "MASTER_PORT")}
    proc = subprocess.run([sys.executable, "-c", ENGINE.format(stage=stage, param=param)], capture_output=True,
                          text=True, timeout=300, env={**env, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "offload True DeepSpeedZeroOptimizer" in proc.stdout  # ZeRO's offloading optimizer wraps our AdamW


def test_deepspeed_launchers_local_rank_argument_is_accepted(capsys, tmp_path):
    # `deepspeed --hostfile ... verlog-train <recipe>` appends --local_rank=<n>: it reaches the config
    # checks (here a bad key) instead of failing on the argument
    for argv in (["--local_rank=3", "tiny", f"run_root={tmp_path}", "ppo.nope=1"],
                 ["tiny", "--local_rank=3", f"run_root={tmp_path}", "ppo.nope=1"]):
        line = cli_error_line(train_main, argv, capsys)
        assert line.startswith("error: ppo.nope"), line
