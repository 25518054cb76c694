"""Config faults: YAML edge cases, errors that come within 2 s of the command, a readable ``--help``,
``verlog-eval`` honouring ``threads``, and messages that say what would work."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import cli_error_line

from verlog.cli import eval_main, train_main
from verlog.config import ConfigError, load_recipe

ROOT = Path(__file__).resolve().parent.parent
#: the CLI's config errors must reach the user within this many seconds of the command
DEADLINE_S = 2.0


def _run(main, argv, capsys) -> str:
    """:func:`helpers.cli_error_line` without its ``error: `` prefix."""
    return cli_error_line(main, argv, capsys)[len("error: "):]


def _recipe(tmp_path: Path, text: str, name: str = "r.yaml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# ---------------------------------------------------------------- 6: YAML and value edge cases


@pytest.mark.parametrize("text, key", [
    ("ppo: &p\n  epochs: *p\n", "ppo.epochs"),
    ("model:\n  lora_target_modules: &l [q_proj, *l]\n", "model.lora_target_modules[1]"),
])
def test_alias_that_contains_itself_names_the_key(tmp_path, text, key):
    with pytest.raises(ConfigError) as err:  # was a RecursionError with a 384-line traceback
        load_recipe(_recipe(tmp_path, text))
    assert str(err.value).startswith(f"{key}: a YAML alias") and "\n" not in str(err.value)


def test_scalar_where_a_section_goes_names_the_section(tmp_path):
    with pytest.raises(ConfigError, match=r"^env: expected a section .*got 'babyai/easy_goto'$"):
        load_recipe(_recipe(tmp_path, "env: babyai/easy_goto\n"))


@pytest.mark.parametrize("text, message", [
    ("seed: 1\nseed: 2\n", "seed: duplicate key (lines 1 and 2)"),
    ("ppo:\n  epochs: 1\n  lr: 2\n  epochs: 3\n", "ppo.epochs: duplicate key (lines 2 and 4)"),
])
def test_duplicate_keys_are_refused(tmp_path, text, message):
    with pytest.raises(ConfigError) as err:
        load_recipe(_recipe(tmp_path, text))
    assert str(err.value).startswith(message)


def test_merge_keys_may_repeat_and_override(tmp_path):
    text = "base: &b {epochs: 2, minibatches: 4}\n"  # a YAML anchor outside the schema is an unknown key...
    cfg = load_recipe(_recipe(tmp_path, "ppo:\n  <<: {epochs: 2, minibatches: 4}\n  epochs: 3\n"))
    assert (cfg.ppo.epochs, cfg.ppo.minibatches) == (3, 4)  # ...but a merge then an explicit key is fine
    with pytest.raises(ConfigError, match="^base: unknown key"):
        load_recipe(_recipe(tmp_path, text + "ppo: *b\n"))


@pytest.mark.parametrize("text", ["", "# only a comment\n", "{}\n", "---\n"])
def test_empty_recipe_is_refused(tmp_path, text):
    with pytest.raises(ConfigError, match="empty recipe"):
        load_recipe(_recipe(tmp_path, text))


@pytest.mark.parametrize("override, key", [
    ("seed=99999999999999999999", "seed"), ("seed=4294967296", "seed"), ("eval.seed=4294967296", "eval.seed"),
    ("iterations=9223372036854775808", "iterations"),
])
def test_integers_are_bounded_by_what_they_feed(override, key):
    with pytest.raises(ConfigError) as err:
        load_recipe("tiny", [override])
    assert str(err.value).startswith(f"{key}: expected")
    assert load_recipe("tiny", ["seed=4294967295"]).seed == 2**32 - 1  # the largest numpy seed is fine


def test_yaml_syntax_errors_keep_line_and_column(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_recipe(_recipe(tmp_path, "name: x\nppo:\n  epochs: [1\n  minibatches: 2\nseed: 3\n"))
    message = str(err.value)
    assert "\n" not in message and "malformed YAML at line 4, column 14" in message, message


# ---------------------------------------------------------------- 7: every config error within 2 s


def test_name_lists_match_the_registries():
    """The import-free lists of verlog.catalog, which preflight checks against, are the registries' names."""
    from verlog.agent.tasks import AGENT_TASKS
    from verlog.catalog import AGENT_TASK_NAMES, ALGORITHM_TRAITS, CREDIT_MODES, env_names
    from verlog.algos.registry import ALGORITHMS
    from verlog.envs import list_envs
    from verlog.envs.registry import FAMILIES
    from verlog.proxy.adapter import CREDIT_MODES as ADAPTER_MODES

    # other tests may have registered their own envs (test/count) in this process
    assert env_names() == [name for name in list_envs() if name.partition("/")[0] in FAMILIES]
    traits = lambda t: (t.needs_critic, t.grouped_rollouts, t.needs_state_keys, t.policy_loss)  # noqa: E731
    assert {name: traits(t) for name, t in ALGORITHM_TRAITS.items()} == {name: traits(s) for name, s in ALGORITHMS.items()}
    assert set(AGENT_TASK_NAMES) == set(AGENT_TASKS) and ADAPTER_MODES is CREDIT_MODES


def _cli(*args: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    """Run the installed ``verlog-train`` (or the same entry point through ``python -c``) on this
    checkout; returns the process and its wall time in seconds."""
    script = Path(sys.executable).parent / "verlog-train"
    cmd = [str(script)] if script.is_file() else [sys.executable, "-c", "from verlog.cli import train_main; train_main()"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.perf_counter()
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    return proc, time.perf_counter() - start


SUBPROCESS_CASES = [
    (["tiny", "algorithm=nonsense"], "algo.algorithm"),
    (["tiny", "resume=/nonexistent"], "resume"),
    (["tiny", "env.task=babyai/gotoo"], "env.task"),
    (["tiny", "seed=99999999999999999999"], "seed"),
    (["tiny", "iterations=2"], "ppo.critic_warmup_iterations"),
    (["crafter", "name=mine"], "gpus_per_node"),
    (["tiny", "ppo.epochs=0"], "ppo.epochs"),
]


@pytest.mark.parametrize("argv, key", SUBPROCESS_CASES)
def test_config_errors_come_within_2_seconds(argv, key):
    """Through the real console script: exit 2, one line naming the key, within 2 s (was over a minute
    for algorithm= and resume= on a busy machine: the env registry's import, DeepSpeed's start)."""
    if key == "gpus_per_node":
        import torch

        if torch.cuda.device_count() >= 8:
            pytest.skip("this machine has the GPUs the recipe asks for")
    proc, seconds = _cli(*argv)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {key}"), proc.stderr
    print(f"{' '.join(argv)}: {seconds:.2f} s")
    assert seconds < DEADLINE_S, f"{' '.join(argv)} took {seconds:.2f} s"


# ---------------------------------------------------------------- 9: help, threads, messages that help


def test_help_has_one_entry_per_key_grouped_by_section():
    proc, _ = _cli("--help")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    assert "agent: tool tasks: the built-in loop or an agent through the proxy" in lines
    starts = [line.split()[0] for line in lines if line.startswith("  agent.")]
    assert starts == ["agent.loop", "agent.task", "agent.dataset", "agent.agent", "agent.max_operand", "agent.top_k", "agent.warmup_worlds",
                      "agent.query_space",
                      "agent.max_assistant_turns", "agent.max_total_tokens", "agent.max_tool_response_chars", "agent.credit", "agent.credit_gamma",
                      "agent.tool_latency_s"]


def test_eval_honours_threads(monkeypatch, capsys):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    before = torch.get_num_threads()
    try:
        eval_main(["random", "threads=3", "episodes=1", "num_envs=1", "task=babyai/easy_goto"])
        assert torch.get_num_threads() == 3 and os.environ["OMP_NUM_THREADS"] == "3"
    finally:
        torch.set_num_threads(before)
    assert '"episodes": 1' in capsys.readouterr().out


def test_too_few_iterations_says_what_would_work(capsys):
    line = _run(train_main, ["tiny", "iterations=2"], capsys)
    assert line.startswith("ppo.critic_warmup_iterations: 3 value-only iterations leave no policy update")
    assert "iterations=4 or more" in line and "ppo.critic_warmup_iterations=1 or less" in line
    load_recipe("tiny", ["iterations=2", "ppo.critic_warmup_iterations=1"])  # what it suggests is valid


@pytest.mark.parametrize("override, suggestion", [
    ("env.task=babyai/gotoo", "did you mean 'babyai/goto'?"),
    ("env.task=crafter/defualt", "did you mean 'crafter/default'?"),
    ("algorithm=gigppo", "did you mean 'gigpo'?"),
    ("env.tsk=babyai/goto", "did you mean env.task?"),
])
def test_typos_get_a_suggestion(override, suggestion, capsys):
    assert _run(train_main, ["tiny", override], capsys).endswith(suggestion)


def test_make_env_suggests_the_closest_name():
    from verlog.envs import make_env

    with pytest.raises(ValueError, match=r"did you mean 'babyai/pickup'\?$"):
        make_env("babyai/pickupp")


def test_gpu_recipe_error_names_the_recipe(capsys, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible, whatever this machine has
    line = _run(train_main, ["crafter", "name=my_run"], capsys)
    assert line.startswith("gpus_per_node: recipe crafter needs 8 CUDA GPUs") and "my_run" not in line


# ---------------------------------------------------------------- 50+ malformed inputs of our own

#: overrides on the tiny recipe -> the key the one-line error must start with
MALFORMED_OVERRIDES = [
    ("seed=99999999999999999999", "seed"), ("eval.seed=4294967296", "eval.seed"),
    ("model.tiny.seed=18446744073709551616", "model.tiny.seed"), ("iterations=9223372036854775808", "iterations"),
    ("env.num_envs=99999999999999999999999", "env.num_envs"),
    ("deepspeed.zero_stage=99999999999999999999", "deepspeed.zero_stage"),
    ("algorithm=nonsense", "algo.algorithm"), ("algorithm=grpoo", "algo.algorithm"), ("algo.algorithm=PPO", "algo.algorithm"),
    ("env.task=babyai/gotoo", "env.task"), ("env.task=BabyAI/goto", "env.task"), ("env.task=crafter", "env.task"),
    ("resume=/nonexistent", "resume"), ("resume=recipes", "resume"), ("resume=README.md", "resume"),
    ("iterations=2", "ppo.critic_warmup_iterations"), ("iterations=1", "ppo.critic_warmup_iterations"),
    ("env=3", "env"), ("env=babyai/easy_goto", "env"), ("rollout=[1, 2]", "rollout"), ("gae=null", "gae"),
    ("model.tiny=3", "model.tiny"), ("env.task.x=1", "env.task.x"), ("env.tsk=babyai/goto", "env.tsk"),
    ("ppo.actor_lrr=1", "ppo.actor_lrr"), ("model.tiny.num_layer=2", "model.tiny.num_layer"),
    ("agent.credit=gea", "agent.credit"), ("gpus_per_node=4096", "gpus_per_node"), ("threads=0", "threads"),
    ("eval.every=-1", "eval.every"), ("checkpoint_keep=-1", "checkpoint_keep"), ("turn_budget=-5", "turn_budget"),
    ("algo.dynamic_sampling=true", "algo.dynamic_sampling"), ("rollout.top_k=-2", "rollout.top_k"),
    ("model.lora_rank=-1", "model.lora_rank"), ("algo.norm=median", "algo.norm"),
    ("algo.loss_aggregation=sum", "algo.loss_aggregation"), ("agent.loop=browser", "agent.loop"),
    ("algo.gigpo_gamma=1.5", "algo.gigpo_gamma"), ("env.distance_shaping=-1", "env.distance_shaping"),
    ("model.cache_frozen_activations=true", "model.cache_frozen_activations"),
    ("model.trainable_layers=5", "model.trainable_layers"), ("ppo.micro_batch_tokens=-1", "ppo.micro_batch_tokens"),
    ("eval.num_envs=0", "eval.num_envs"), ("rollout.vllm_tensor_parallel_size=0", "rollout.vllm_tensor_parallel_size"),
]
#: pairs of overrides given together
MALFORMED_PAIRS = [
    (("algorithm=grpo", "algo.group_size=3"), "algo.group_size"),
]
#: recipe files -> the key the one-line error must start with
MALFORMED_FILES = [
    ("ppo: &p\n  epochs: *p\n", "ppo.epochs"), ("model:\n  lora_target_modules: &l [a, *l]\n", "model.lora_target_modules[1]"),
    ("env: babyai/easy_goto\n", "env"), ("ppo: [1, 2]\n", "ppo"), ("gae:\n", "gae"), ("seed: 1\nseed: 2\n", "seed"),
    ("ppo:\n  epochs: 1\n  epochs: 2\n", "ppo.epochs"), ("ppo:\n  epochs: 1\nppo:\n  epochs: 2\n", "ppo"),
    ("", "recipe"), ("# nothing\n", "recipe"), ("{}\n", "recipe"), ("---\n", "recipe"),
    ("seed: 99999999999999999999\n", "seed"), ("ppo:\n  epochs: 1\n   bad: [\n", "recipe"),
    ("env:\n  tsk: babyai/goto\n", "env.tsk"), ("algo:\n  algorithm: nonsense\n", "algo.algorithm"),
    ("env:\n  task: babyai/gotoo\n", "env.task"), ("resume: /nonexistent\n", "resume"),
    ("seed: !!python/object/apply:os.system [echo]\n", "recipe"), ("1: 2\n", "1"), ("model:\n  tiny: 3\n", "model.tiny"),
    ("ppo:\n  epochs: 9223372036854775808\n", "ppo.epochs"),
    ("model:\n  lora_target_modules: " + "[" * 5000 + "]" * 5000 + "\n", "recipe"),
]


def test_at_least_50_malformed_inputs_of_our_own():
    assert len(MALFORMED_OVERRIDES) + len(MALFORMED_PAIRS) + len(MALFORMED_FILES) >= 50


@pytest.mark.parametrize("override, key", MALFORMED_OVERRIDES)
def test_malformed_override(override, key, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # resume=recipes and resume=README.md name what exists there
    assert _run(train_main, ["tiny", override], capsys).startswith(f"{key}:")


@pytest.mark.parametrize("pair, key", MALFORMED_PAIRS)
def test_malformed_override_pair(pair, key, capsys):
    assert _run(train_main, ["tiny", *pair], capsys).startswith(f"{key}:")


@pytest.mark.parametrize("text, key", MALFORMED_FILES)
def test_malformed_recipe_file(text, key, tmp_path, capsys):
    line = _run(train_main, [_recipe(tmp_path, text)], capsys)
    assert line.startswith(f"{key}:") or (key == "recipe" and line.startswith("recipe ")), line


@pytest.mark.parametrize("argv, key", [case for case in SUBPROCESS_CASES if case[1] != "gpus_per_node"])
def test_config_errors_import_no_torch(argv, key):
    """The cause of a slow one-line error, checked without a clock: a bad config is refused before
    torch (over a second to import here) is imported by anything."""
    code = ("import sys\nfrom verlog.cli import train_main\ntry:\n    train_main()\nexcept SystemExit as exc:\n"
            "    print('exit', exc.code, 'torch' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.stdout.split() == ["exit", "2", "False"], (proc.stdout, proc.stderr[-500:])
