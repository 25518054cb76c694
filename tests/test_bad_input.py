"""Malformed recipes, overrides and CLI arguments: exit status 2, ONE line naming the key, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import cli_error_line

from verlog.cli import eval_main, train_main

BAD_OVERRIDES = [
    # unknown keys
    "nope=1", "ppo.nope=1", "env.tsk=babyai/goto", "model.tiny.layers=2", "ppo.actor_lr.x=1",
    # wrong types
    "ppo.epochs=abc", "ppo.epochs=1.5", "ppo.epochs=[1]", "ppo.epochs={a: 1}", "ppo.actor_lr=fast",
    "gae.whiten_advantages=maybe", "env.num_envs=two", "model=3", "ppo=1", "env.max_steps=[]",
    "rollout.top_k=0.5", "eval.greedy=[true]", "seed=1e3x",
    # out of range / non-finite
    "gae.gamma_step=1.5", "gae.lam_step=-0.1", "rollout.top_p=2", "env.num_envs=0", "env.num_envs=-4",
    "iterations=0", "rollout.turns_per_env=-1", "ppo.minibatches=0", "ppo.minibatches=7", "ppo.dual_clip=0.5",
    "deepspeed.zero_stage=4", "deepspeed.zero_stage=-1", "ppo.actor_lr=-1", "ppo.critic_lr=0",
    "ppo.actor_lr=.inf", "ppo.actor_lr=.nan", "gae.gamma_step=.nan", "agent.credit_gamma=.nan", "ppo.max_grad_norm=-1",
    "ppo.weight_decay=-0.1", "memory.max_prompt_tokens=0", "memory.history_turns=-1", "env.max_steps=0",
    "env.step_timeout_s=0", "env.step_timeout_s=-3", "env.restart_attempts=0", "rollout.temperature=-1",
    "ppo.target_kl=-0.1", "ppo.value_clip=-0.2", "format_warmup.lr=0", "seed=-1", "eval.seed=-5",
    "rollout.max_response_tokens=0", "rollout.vllm_gpu_memory_utilization=1.5", "rollout.top_k=0",
    "model.tiny.num_heads=0", "model.tiny.hidden_size=101", "ppo.critic_warmup_iterations=1000",
    # bad enum values
    "rollout.engine=sglang", "model.dtype=int8", "env.vector_mode=threads", "ppo.kl_kind=k4",
    "env.instruction_style=terse", "env.text_style=fancy", "logging.wandb_mode=maybe", "env.task=babyai/nonexistent",
    "env.task=nofamily", "model.dtype=",
    # malformed override syntax
    "noequals", "=1", "ppo..x=1", "ppo.=1", "1abc=2", "a b=1",
]

BAD_FILES = {
    "bad_yaml": b"ppo: [unclosed\n",
    "list_top": b"- 1\n- 2\n",
    "scalar_top": b"42\n",
    "string_top": b"just a string\n",
    "binary": bytes(range(256)) * 4,
    "latin1": "name: caf\xe9\n".encode("latin-1"),
    "unknown_key": b"bogus: 1\n",
    "nested_unknown": b"ppo:\n  bogus: 1\n",
    "wrong_type": b"ppo:\n  epochs: {a: 1}\n",
    "section_scalar": b"ppo: 3\n",
    "tabs": b"ppo:\n\tepochs: 2\n",
    "bad_enum": b"rollout:\n  engine: tgi\n",
    "negative": b"env:\n  num_envs: -2\n",
    "duplicate_anchor": b"a: *nope\n",
}


_run = cli_error_line


@pytest.mark.parametrize("override", BAD_OVERRIDES)
def test_bad_override_train(override, capsys):
    line = _run(train_main, ["tiny", override], capsys)
    key = override.partition("=")[0]
    assert line.startswith(f"error: {key.split('.')[0]}"), line  # the message starts with the key


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_recipe_file(name, tmp_path, capsys):
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(BAD_FILES[name])
    _run(train_main, [str(path)], capsys)


BAD_TRAIN_ARGV = [
    [], ["missing-recipe"], ["no/such/file.yaml"], ["tiny", "--bogus"], ["--lr", "1"], ["tiny", "-x"],
]
#: recipe paths that exist but hold no recipe (made by the test)
EMPTY_RECIPES = ("empty.yaml", "dir.yaml")
BAD_EVAL_ARGV = [
    [], ["/no/such/checkpoint"], ["random", "episodes=abc"], ["random", "episodes=0"], ["random", "task=nope/x"],
    ["random", "greedy=perhaps"], ["random", "suite=other"], ["random", "suite=balrog", "episodes_per_task=x"],
    ["random", "record_turns=maybe", "suite=balrog"], ["random", "bogus.key=1"], ["random", "num_envs=-1"],
    ["random", "suite=balrog", "envs=nosuchenv"], ["random", "seed=-3"],
]
SUBPROCESS_ARGS = [["tiny", "ppo.epochs=-1"], ["tiny", "env.vector_mode=fork"]]


@pytest.mark.parametrize("argv", BAD_TRAIN_ARGV)
def test_bad_train_cli_args(argv, capsys):
    _run(train_main, argv, capsys)


def test_empty_file_and_directory_recipes(tmp_path, capsys):
    empty, directory = (tmp_path / name for name in EMPTY_RECIPES)
    empty.write_bytes(b"")
    _run(train_main, [str(empty), "iterations=0"], capsys)  # empty = defaults; the bad override is named
    directory.mkdir()
    _run(train_main, [str(directory)], capsys)


@pytest.mark.parametrize("argv", BAD_EVAL_ARGV)
def test_bad_eval_cli(argv, capsys):
    _run(eval_main, argv, capsys)


def test_model_path_that_does_not_exist(tmp_path, capsys):
    _run(train_main, ["tiny", f"model.path={tmp_path / 'nope'}", f"run_root={tmp_path}"], capsys)


def test_engine_option_refused_at_build_time(monkeypatch, capsys):
    import verlog.trainer
    from verlog.rollout.engine import EngineConfigError

    def refuse(cfg):
        raise EngineConfigError("rollout.vllm_sleep_between_updates: vLLM has no sleep mode on this platform")

    monkeypatch.setattr(verlog.trainer, "Trainer", refuse)
    line = _run(train_main, ["tiny"], capsys)
    assert line == "error: rollout.vllm_sleep_between_updates: vLLM has no sleep mode on this platform"


def test_tokenizer_without_chat_template(tmp_path):
    from verlog.models import ModelLoadError, load_tokenizer

    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    raw.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="a").save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="no chat template") as err:
        load_tokenizer(tmp_path)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("args", SUBPROCESS_ARGS)
def test_subprocess_cli(args):
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len([x for x in proc.stderr.splitlines() if x.strip()]) == 1


def test_at_least_50_distinct_malformed_inputs():
    """Counted from the case lists above (plus the one missing model path), duplicates removed."""
    inputs = ({("override", o) for o in BAD_OVERRIDES} | {("file", n) for n in BAD_FILES}
              | {("train", tuple(a)) for a in BAD_TRAIN_ARGV} | {("recipe", n) for n in EMPTY_RECIPES}
              | {("eval", tuple(a)) for a in BAD_EVAL_ARGV} | {("subprocess", tuple(a)) for a in SUBPROCESS_ARGS}
              | {("model.path", "missing directory")})
    assert len(inputs) >= 50


# ---------------------------------------------------------------- the run directory


class _TrainerStarted(Exception):
    """Raised where a run would start building its model: the run directory was accepted."""


@pytest.fixture
def stop_after_run_dir(monkeypatch):
    """Training stops right after the run directory is prepared (no model is built)."""
    import verlog.trainer

    def stop(cfg):
        raise _TrainerStarted

    monkeypatch.setattr(verlog.trainer, "base_model_path", stop)


def _old_run(run_dir):
    (run_dir / "checkpoints" / "iter_000002").mkdir(parents=True)
    (run_dir / "checkpoints" / "iter_000002" / "COMPLETE").write_text("ok\n")
    (run_dir / "config.yaml").write_text("name: old\n")
    (run_dir / "metrics.jsonl").write_text('{"iteration": 1}\n{"iteration": 2}\n')
    return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", ["../../x", "../escape", "/tmp/verlog_absolute_run", "a/b", "..", "."])
def test_run_name_outside_run_root_is_refused(name, tmp_path, capsys, stop_after_run_dir):
    line = _run(train_main, ["tiny", f"name={name}", f"run_root={tmp_path / 'runs'}"], capsys)
    assert line.startswith("error: name:") and repr(name) in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "x").exists()


def test_a_used_run_name_is_refused_with_what_to_do(tmp_path, capsys, stop_after_run_dir):
    before = _old_run(tmp_path / "old")
    line = _run(train_main, ["tiny", "name=old", f"run_root={tmp_path}"], capsys)
    assert line.startswith("error: name:") and f"resume={tmp_path / 'old'}" in line and "overwrite=true" in line
    assert {p: p.read_bytes() for p in (tmp_path / "old").rglob("*") if p.is_file()} == before


def test_overwrite_replaces_the_old_run(tmp_path, stop_after_run_dir):
    _old_run(tmp_path / "old")
    with pytest.raises(_TrainerStarted):
        train_main(["tiny", "name=old", f"run_root={tmp_path}", "overwrite=true"])
    assert [p.name for p in (tmp_path / "old").iterdir()] == ["config.yaml"]  # no old metrics or checkpoints
    assert "overwrite: true" in (tmp_path / "old" / "config.yaml").read_text()


def test_overwrite_deletes_only_a_run_directory(tmp_path, capsys, stop_after_run_dir):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    line = _run(train_main, ["tiny", "name=notes", f"run_root={tmp_path}", "overwrite=true"], capsys)
    assert line.startswith("error: overwrite:") and (tmp_path / "notes" / "keep.txt").read_text() == "mine"


def test_an_empty_existing_directory_may_be_used(tmp_path, stop_after_run_dir):
    (tmp_path / "fresh").mkdir()
    with pytest.raises(_TrainerStarted):
        train_main(["tiny", "name=fresh", f"run_root={tmp_path}"])
    assert (tmp_path / "fresh" / "config.yaml").is_file()


def test_unwritable_run_directory_is_one_line(tmp_path, capsys, monkeypatch, stop_after_run_dir):
    import verlog.run_dir

    def read_only(cfg, path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(verlog.run_dir, "save_config", read_only)
    line = _run(train_main, ["tiny", "name=ro", f"run_root={tmp_path}"], capsys)
    assert line.startswith("error: run_root:") and "Permission denied" in line
    # a file where the run root should be: also one line
    (tmp_path / "file").write_text("")
    monkeypatch.undo()
    line = _run(train_main, ["tiny", "name=x", f"run_root={tmp_path / 'file'}"], capsys)
    assert line.startswith("error: run_root:") and str(tmp_path / "file") in line


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_run_root_is_one_line(tmp_path, capsys, stop_after_run_dir):
    root = tmp_path / "ro"
    root.mkdir(mode=0o555)
    try:
        line = _run(train_main, ["tiny", "name=x", f"run_root={root}"], capsys)
    finally:
        root.chmod(0o755)
    assert line.startswith("error: run_root:")
