"""Config: recipes, overrides, validation and the one-line errors of the CLI."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from verlog.config import (ConfigError, TrainConfig, build_config, field_docs, load_recipe, parse_overrides,
                           save_config)
from verlog.preflight import check_buildable

RECIPES = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "recipes").glob("*.yaml"))


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_recipe_loads(recipe):
    from verlog.envs import make_env

    cfg = load_recipe(recipe)
    check_buildable(cfg)  # its environment, tool task and agent function exist
    assert isinstance(cfg, TrainConfig)
    assert cfg.name == recipe  # runs go to runs/<recipe name>/
    # the task exists and accepts the recipe's env settings (builds the env, then closes it)
    make_env(cfg.env.task, **cfg.env.env_kwargs()).close()
    # a batch splits evenly into minibatches of whole micro-batches
    batch = cfg.env.num_envs * cfg.rollout.turns_per_env
    assert batch % cfg.ppo.minibatches == 0
    assert (batch // cfg.ppo.minibatches) % min(cfg.ppo.micro_batch_size, batch // cfg.ppo.minibatches) == 0


def test_overrides_are_typed_and_applied():
    cfg = load_recipe("tiny", ["ppo.actor_lr=1e-5", "env.num_envs=4", "ppo.target_kl=null", "eval.greedy=false"])
    assert cfg.ppo.actor_lr == pytest.approx(1e-5) and isinstance(cfg.ppo.actor_lr, float)
    assert cfg.env.num_envs == 4
    assert cfg.ppo.target_kl is None
    assert cfg.eval.greedy is False


def test_a_mapping_value_is_replaced_by_its_override_and_a_section_is_merged():
    # A schedule on the command line is the whole schedule (the recipe's entries do not stay in force);
    # a section given as a mapping sets only the keys it names.
    recipe = "balrog_babyai_cpu"
    assert load_recipe(recipe).rollout.temperature_schedule == {401: 0.5}
    assert load_recipe(recipe, ["rollout.temperature_schedule={}"]).rollout.temperature_schedule == {}
    assert load_recipe(recipe, ["rollout.temperature_schedule={451: 0.3}"]).rollout.temperature_schedule == {451: 0.3}
    cfg = load_recipe(recipe, ["memory={history_turns: 2}"])
    assert cfg.memory.history_turns == 2 and cfg.memory.reply_prefix == "ACTION: "


@pytest.mark.parametrize("override, problem", [
    ("ppo.actor_lr_schedule={0: 1e-4}", "iterations >= 1"),
    ("ppo.actor_lr_schedule={5: 0}", "learning rates > 0"),
    ("ppo.actor_lr_schedule={5: -1e-4}", "learning rates > 0"),
    ("ppo.actor_lr_schedule={5: .nan}", "learning rates > 0"),
    ("ppo.kl_coef_schedule={0: 0.1}", "iterations >= 1"),
    ("ppo.kl_coef_schedule={5: -0.1}", "KL weights >= 0"),
    ("ppo.kl_coef_schedule={5: .inf}", "KL weights >= 0"),
    ("rollout.temperature_schedule={0: 0.5}", "iterations >= 1"),
    ("rollout.temperature_schedule={5: 0}", "temperatures > 0"),
    ("rollout.temperature_schedule={5: -0.5}", "temperatures > 0"),
    # YAML reads 201:0.5 as one base-60 number with no value: a hint, not a type error about 12060.5
    ("rollout.temperature_schedule={201:0.5}", "a space after each colon"),
    ("env.revisit_penalty_schedule={0: 0.1}", "iterations >= 1"),
    ("env.revisit_penalty_schedule={5: -0.1}", "costs >= 0"),
    ("env.revisit_penalty_schedule={5: .nan}", "costs >= 0"),
    ("env.revisit_penalty_schedule={5: .inf}", "costs >= 0"),
])
def test_a_bad_schedule_is_one_line_naming_the_key(override, problem):
    key = override.partition("=")[0]
    with pytest.raises(ConfigError, match=rf"^{re.escape(key)}: .*{re.escape(problem)}"):
        load_recipe("tiny", [override])


def test_parse_overrides_values():
    assert parse_overrides(["a.b=1", "c=none", "d=[1, 2]", "e=x=y"]) == {"a.b": 1, "c": None, "d": [1, 2], "e": "x=y"}


def test_text_that_yaml_reads_as_a_mapping_stays_text():
    assert parse_overrides(["a=ACTION:", "b=Action: go", "c={x: 1}"]) == {"a": "ACTION:", "b": "Action: go",
                                                                         "c": {"x": 1}}
    assert load_recipe("tiny", ["memory.reply_prefix=ACTION:"]).memory.reply_prefix == "ACTION:"
    assert load_recipe("tiny").memory.reply_prefix is None
    with pytest.raises(ConfigError, match="^memory.reply_prefix: expected a non-empty text or null"):
        build_config({"memory": {"reply_prefix": ""}})


@pytest.mark.parametrize("overrides, key", [
    (["ppo.nope=1"], "ppo.nope"),
    (["nope=1"], "nope"),
    (["ppo.epochs=abc"], "ppo.epochs"),
    (["ppo.epochs=1.5"], "ppo.epochs"),
    (["rollout.engine=sglang"], "rollout.engine"),
    (["gae.lam_step=1.5"], "gae.lam_step"),
    (["env.num_envs=0"], "env.num_envs"),
    (["ppo.minibatches=7"], "ppo.minibatches"),
    (["ppo.dual_clip=0.5"], "ppo.dual_clip"),
    (["deepspeed.zero_stage=4"], "deepspeed.zero_stage"),
    (["rollout.vllm_sleep_between_updates=true"], "rollout.vllm_sleep_between_updates"),  # the hf engine
    (["env.text_style=fancy"], "env.text_style"),
    (["rollout.server=maybe"], "rollout.server"),
    (["rollout.server_max_batch=0"], "rollout.server_max_batch"),
    (["rollout.server=true", "agent.loop=proxy"], "rollout.server"),
    (["rollout.server=true", "env.observation_mode=image", "memory.type=vision"], "rollout.server"),
    (["agent.tool_latency_s=-0.1"], "agent.tool_latency_s"),
    (["noequals"], "noequals"),
    (["ppo..x=1"], "ppo..x=1"),
])
def test_bad_overrides_name_the_key(overrides, key):
    with pytest.raises(ConfigError) as err:
        load_recipe("tiny", overrides)
    message = str(err.value)
    assert message.startswith(key) and "\n" not in message


def test_unknown_recipe_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="unknown recipe"):
        load_recipe("does-not-exist")
    bad = tmp_path / "bad.yaml"
    bad.write_text("ppo: [unclosed\n")
    with pytest.raises(ConfigError, match="malformed YAML"):
        load_recipe(str(bad))
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("ppo:\n  epochs: {a: 1}\n")
    with pytest.raises(ConfigError, match="ppo.epochs"):
        load_recipe(str(wrong))


def test_saved_config_is_a_recipe(tmp_path):
    cfg = load_recipe("tiny", ["ppo.actor_lr=2e-4"])
    save_config(cfg, tmp_path / "config.yaml")
    again = load_recipe(str(tmp_path / "config.yaml"))
    assert again == cfg


def test_every_field_has_a_doc():
    rows = field_docs()
    assert len(rows) > 50
    assert all(doc for _, _, _, doc in rows)
    keys = {key for key, *_ in rows}
    assert {"ppo.actor_lr", "gae.gamma_step", "memory.history_turns", "agent.credit", "model.tiny.seed"} <= keys
    assert not {"agent", "model", "model.tiny"} & keys  # sections are expanded into their keys


def test_text_style_reaches_the_env_only_when_not_the_default():
    from verlog.envs import make_env

    assert "text_style" not in load_recipe("crafter").env.env_kwargs()
    assert load_recipe("tiny", ["env.task=crafter/default"]).env.env_kwargs()["text_style"] == "tidy"  # pinned
    assert "text_style" not in load_recipe("tiny", ["env.text_style=balrog"]).env.env_kwargs()
    assert make_env("babyai/easy_goto").text_style == "balrog"
    cfg = load_recipe("tiny")  # the tiny recipe keeps the wording its results were measured with
    assert cfg.env.env_kwargs()["text_style"] == "tidy"
    assert make_env(cfg.env.task, **cfg.env.env_kwargs()).text_style == "tidy"


def test_critic_warmup_must_leave_policy_updates():
    with pytest.raises(ConfigError, match="ppo.critic_warmup_iterations"):
        check_buildable(build_config({"iterations": 3, "ppo": {"critic_warmup_iterations": 3}}))
    check_buildable(build_config({"iterations": 3, "ppo": {"critic_warmup_iterations": 3}, "algo": {
        "algorithm": "reinforce_pp"}}))  # an algorithm without a critic has no warm-up to leave room for


@pytest.mark.parametrize("args", [["tiny", "ppo.bogus=1"], ["tiny", "ppo.epochs=x"], ["missing-recipe"], []])
def test_cli_bad_input_exits_2_with_one_line(args):
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", *args],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr


def test_cli_help_lists_config_keys():
    proc = subprocess.run([sys.executable, "-c", "from verlog.cli import train_main; train_main()", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert "ppo.actor_lr" in proc.stdout and "gae.lam_token" in proc.stdout


def test_engine_server_keys_default_off():
    cfg = load_recipe("tiny")
    assert (cfg.rollout.server, cfg.rollout.server_max_batch, cfg.agent.tool_latency_s) == (False, 64, 0.0)
    on = load_recipe("tiny", ["rollout.server=true", "rollout.server_max_batch=8", "agent.loop=tools",
                              "agent.tool_latency_s=0.1"])
    assert (on.rollout.server, on.rollout.server_max_batch, on.agent.tool_latency_s) == (True, 8, 0.1)
