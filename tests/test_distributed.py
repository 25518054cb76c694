"""Two data-parallel processes on loopback (torchrun): T x N turns in total, identical weights on both ranks,
with both ranks on one node or as two nodes (two launchers, one process each)."""

import json
import socket
import subprocess
import sys
from pathlib import Path

from verlog.logging import read_metrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


BASE = ["env.num_envs=2", "env.vector_mode=sync", "ppo.minibatches=2", "ppo.micro_batch_size=2",
        "format_warmup.steps=5", "format_warmup.episodes=1", "model.tiny.corpus_episodes=2", "eval.episodes=2",
        "eval.num_envs=2", "eval.baseline=false", "env.max_steps=6", "logging.progress=false", "name=dp",
        "deepspeed.zero_stage=2"]


def run_two(tmp_path, *args: str, nodes: int = 1) -> list[dict]:
    """Train the tiny recipe on 2 ranks under torchrun; return both ranks' reports.

    ``nodes=1``: one launcher starting 2 processes. ``nodes=2``: two launchers, node ranks 0 and 1, one
    process each, meeting at a static rendezvous on loopback, as two machines would (gloo between them).
    """
    worker = Path(__file__).with_name("dist_worker.py")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nodes),
                "--nproc_per_node", str(2 // nodes), "--master_addr", "127.0.0.1", "--master_port", str(_free_port())]
    work = [str(worker), str(tmp_path), *BASE, f"run_root={tmp_path}", f"model.cache_dir={tmp_path / 'cache'}", *args]
    procs = [subprocess.Popen([*launcher, "--node_rank", str(node), *work], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for node in range(nodes)]
    try:
        outputs = [p.communicate(timeout=900) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (out, err) in zip(procs, outputs):
        assert p.returncode == 0, out[-2000:] + err[-4000:]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world"] for r in reports] == [2, 2]
    # the same weights on both ranks after DeepSpeed's gradient all-reduce, and in both rollout engines
    assert reports[0]["actor"] == reports[1]["actor"]
    assert reports[0]["engine"] == reports[1]["engine"] == reports[0]["actor"]
    assert (tmp_path / "dp" / "eval.json").is_file()
    return reports


def test_two_processes_train_in_lockstep(tmp_path):
    reports = run_two(tmp_path, "iterations=2", "ppo.critic_warmup_iterations=0", "rollout.turns_per_env=4")
    # each rank collects T x N = 4 x 2 turns; the batch holds 2 x 8 = 16 turns per iteration in total
    assert [r["turns_per_batch"] for r in reports] == [8, 8]
    rows = read_metrics(tmp_path / "dp" / "metrics.jsonl")
    assert [r["turns"] for r in rows] == [16, 32]  # only rank 0 writes, counting both ranks' turns


def test_two_processes_critic_free_with_uneven_ranks(tmp_path):
    # whole episodes of different lengths: the ranks hold different numbers of turn rows, so the
    # ranks must still run as many micro-batches (ZeRO-2 communicates on every backward)
    reports = run_two(tmp_path, "iterations=2", "algorithm=grpo", "algo.group_size=2", "ppo.micro_batch_size=1",
                      "format_warmup.steps=40")
    rows = read_metrics(tmp_path / "dp" / "metrics.jsonl")
    assert [r["phase"] for r in rows] == ["grpo", "grpo"]
    assert rows[-1]["turns"] == reports[0]["turns_done"] == reports[1]["turns_done"]
    assert rows[0]["turns"] >= 2 * 2  # at least one turn per env on both ranks


def test_two_nodes_train_in_lockstep(tmp_path):
    # two node ranks on loopback: the world, the turn counts and the weights are those of one node
    reports = run_two(tmp_path, "iterations=2", "ppo.critic_warmup_iterations=0", "rollout.turns_per_env=4", nodes=2)
    assert sorted(r["rank"] for r in reports) == [0, 1]
    assert [r["turns_per_batch"] for r in reports] == [8, 8]
    rows = read_metrics(tmp_path / "dp" / "metrics.jsonl")
    assert [r["turns"] for r in rows] == [16, 32]
