"""Malformed recipes, overrides and CLI arguments: exit status 2, ONE line naming the key, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

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


def _run(main, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    return lines[0]


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
