"""LoRA: merged weights under the base names, the adapter-off reference, adapter checkpoints, a short run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import small_corpus
from test_e2e import SMALL, train
from verlog.logging import read_metrics
from verlog.lora import add_lora, is_adapter_dir, merged_named_parameters
from verlog.models import load_actor, load_critic
from verlog.tiny_model import build_tiny_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import soak_resume as soak  # noqa: E402

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "m"
    build_tiny_model(path, small_corpus(), seed=0, vocab_size=300, hidden_size=32, num_layers=2, num_heads=2,
                     num_kv_heads=1, intermediate_size=64)
    return path


def _perturb(model) -> None:
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)


def test_merged_weights_are_the_adapted_model(tiny):
    base = load_actor(tiny)
    names = [n for n, _ in base.named_parameters()]
    model = add_lora(load_actor(tiny), rank=4, alpha=8, dropout=0.0, target_modules=TARGETS, base_path=tiny)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    merged = dict(merged_named_parameters(model))
    assert list(merged) == names
    # B starts at zero: the adapted model starts equal to its base
    assert all(torch.equal(merged[n], p) for n, p in base.named_parameters())
    _perturb(model)
    merged = dict(merged_named_parameters(model))
    changed = [n for n, p in base.named_parameters() if not torch.equal(merged[n], p)]
    assert changed and all(any(t in n for t in TARGETS) for n in changed)
    # a plain model holding the merged weights computes what the adapted model computes
    plain = load_actor(tiny)
    plain.load_state_dict(merged, strict=False)
    ids = torch.tensor([[5, 9, 17, 30, 2]])
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
        with model.disable_adapter():  # the KL reference: the base, no second copy
            torch.testing.assert_close(model(input_ids=ids).logits, base(input_ids=ids).logits)


def test_critic_adapter_keeps_the_value_head_trainable(tiny):
    critic = add_lora(load_critic(tiny), rank=4, alpha=8, dropout=0.0, target_modules=TARGETS, base_path=tiny,
                      critic=True)
    trainable = {n for n, p in critic.named_parameters() if p.requires_grad}
    assert any(".score." in n and "modules_to_save" in n for n in trainable)
    names = [n for n, _ in merged_named_parameters(critic)]
    assert "score.weight" in names and not any("lora_" in n or "original_module" in n for n in names)


def test_modules_to_save_are_trained_in_full_and_merged_under_base_names(tiny):
    base = load_actor(tiny)
    model = add_lora(load_actor(tiny), rank=4, alpha=8, dropout=0.0, target_modules=["q_proj"], base_path=tiny,
                     modules_to_save=["norm"])
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    norms = [n for n, _ in base.named_parameters() if n.endswith("norm.weight")]
    assert len([n for n in trainable if "modules_to_save" in n]) == len(norms) >= 3  # every RMSNorm, final one too
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "modules_to_save" in name:
                p.mul_(1.5)
    merged = dict(merged_named_parameters(model))
    assert sorted(merged) == sorted(n for n, _ in base.named_parameters())
    assert all(torch.equal(merged[n], 1.5 * p) for n, p in base.named_parameters() if n in norms)
    plain = load_actor(tiny)
    plain.load_state_dict(merged, strict=False)  # tied embeddings: no separate lm_head.weight
    ids = torch.tensor([[5, 9, 17, 30, 2]])
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5, rtol=1e-5)


def test_lora_run_saves_adapters_resumes_and_evaluates(tmp_path):
    args = [a for a in SMALL if not a.startswith("logging.dump")] + [
        "model.lora_rank=8", "ppo.kl_coef=0.05", f"model.cache_dir={tmp_path / 'cache'}", "eval.baseline=false"]
    train(*args, f"run_root={tmp_path}", "name=full")
    run = tmp_path / "full"
    ckpt = run / "checkpoints" / "iter_000003"
    for part in ("actor", "critic"):
        assert is_adapter_dir(ckpt / part)  # the adapter only, not a copy of the model
        config = json.loads((ckpt / part / "adapter_config.json").read_text())
        assert config["r"] == 8 and config["base_model_name_or_path"] == str((run / "format_warmup").resolve())
    assert (ckpt / "actor" / "adapter_model.safetensors").stat().st_size < 0.5 * (
        run / "format_warmup" / "model.safetensors").stat().st_size
    rows = read_metrics(run / "metrics.jsonl")
    assert all("actor/kl_ref" in r for r in rows if r["phase"] == "ppo")

    # resume from iteration 2: the same final metrics as the uninterrupted run
    train(*[a for a in args if not a.startswith("iterations")], "iterations=2", f"run_root={tmp_path}", "name=cut")
    train(*args, f"run_root={tmp_path}", "name=cut", f"resume={tmp_path / 'cut'}")
    resumed = read_metrics(tmp_path / "cut" / "metrics.jsonl")
    assert soak.mismatches(rows, resumed) == []

    # verlog-eval loads the adapter checkpoint (its base plus the adapter, merged)
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import eval_main; eval_main()", str(ckpt),
                           "episodes=2", "num_envs=2"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
