"""Preflight: the names a valid config gives (environment, tool task, credit mode, agent function)
exist, checked after loading with one line naming the key; the config itself stays data."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from verlog.config import ConfigError, load_recipe
from verlog.preflight import check_buildable

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("recipe, overrides, message", [
    ("tiny", ["env.task=babyai/nonexistent"], "env.task: expected a registered environment <family>/<task> or an "
                                               "import path package.module:Name, got 'babyai/nonexistent'"),
    ("tiny", ["env.task=nofamily"], "env.task: expected a registered environment"),
    ("tiny", ["agent.credit=all"], "agent.credit: expected one of final, discounted, gae, got 'all'"),
    ("calculator_tools", ["agent.task=chess"], "agent.task: expected one of calculator, search or an import path "
                                               "package.module:Class, got 'chess'"),
    ("calculator_proxy", ["agent.agent=verlog.nothing:here"], "agent.agent: cannot load 'verlog.nothing:here'"),
    ("calculator_proxy", ["agent.agent=no_colon"], "agent.agent: expected 'module:function', got 'no_colon'"),
    ("calculator_proxy", ["agent.agent=os:sep"], "agent.agent: 'os:sep' is not callable"),
    ("calculator_tools", ["memory.reply_prefix=ACTION:"], "memory.reply_prefix: agent.loop=tools renders its own "
                                                          "conversations and does not use the memory's prompts"),
    ("calculator_proxy", ["memory.reply_prefix=ACTION:"], "memory.reply_prefix: agent.loop=proxy renders"),
    ("tiny", ["memory.reply_prefix=Sure:"], "memory.reply_prefix: the format warm-up teaches replies 'ACTION: '"),
])
def test_unknown_names_are_one_line_naming_the_key(recipe, overrides, message):
    cfg = load_recipe(recipe, overrides)  # the values alone are valid
    with pytest.raises(ConfigError) as err:
        check_buildable(cfg)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_names_are_only_checked_where_they_are_used():
    check_buildable(load_recipe("calculator_tools", ["env.task=not/registered"]))  # tool loop: no env
    check_buildable(load_recipe("tiny", ["agent.task=chess", "agent.agent=verlog.nothing:here"]))  # env loop
    check_buildable(load_recipe("calculator_tools", ["agent.agent=verlog.nothing:here"]))  # no proxy
    check_buildable(load_recipe("tiny", ["memory.reply_prefix=ACTION:"]))  # a start of the warm-up's replies
    check_buildable(load_recipe("tiny", ["memory.reply_prefix=Sure:", "format_warmup.steps=0"]))  # no warm-up


def test_loading_a_config_imports_no_registry():
    code = ("import sys; from verlog.config import load_recipe; load_recipe('calculator_proxy'); "
            "print(sorted(m for m in sys.modules if m.startswith('verlog')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    # verlog.catalog is plain data (names, no imports); verlog.imports checks a name's form (standard library only)
    assert proc.stdout.split() == ["['verlog',", "'verlog.catalog',", "'verlog.config',", "'verlog.config_validate',",
                                   "'verlog.imports']"]


@pytest.mark.parametrize("task, package, extra", [("reasoning_gym/basic_arithmetic", "reasoning_gym", "reasoning-gym"),
                                                  ("textarena/TowerOfHanoi-v0", "textarena", "textarena")])
def test_a_task_of_an_optional_family_needs_its_package(monkeypatch, task, package, extra):
    """An optional family is listed without its package; a config naming one is told the install line."""
    import verlog.preflight as preflight

    cfg = load_recipe("tiny", [f"env.task={task}"])
    monkeypatch.setattr(preflight, "module_exists", lambda name: name != package)
    with pytest.raises(ConfigError) as err:
        check_buildable(cfg)
    assert str(err.value) == (f"env.task: {task} needs the {package} package, not installed: "
                              f"pip install 'verlog[{extra}]'")
    monkeypatch.setattr(preflight, "module_exists", lambda name: True)
    check_buildable(cfg)


def test_every_extra_an_install_line_names_is_one_the_package_provides():
    """pip matches an extra against the installed metadata's spelling (setuptools writes ``a_b`` as ``a-b``);
    one it does not find is skipped with a warning only, so a misspelt extra leaves its packages out."""
    from importlib.metadata import metadata

    from verlog.catalog import OPTIONAL_AGENT_TASKS, OPTIONAL_FAMILIES

    provided = set(metadata("verlog").get_all("Provides-Extra"))
    make_line = re.search(r'-e "\.\[([^\]]+)\]"', (ROOT / "Makefile").read_text()).group(1)
    named = set(make_line.split(","))
    for _, install in [*OPTIONAL_FAMILIES.values(), *OPTIONAL_AGENT_TASKS.values()]:
        named |= set(re.findall(r"verlog\[([^\]]+)\]", install))
    assert named - provided == set()
    assert {"reasoning-gym", "textarena", "balrog", "search"} <= named


def test_gem_tasks_need_gem_and_the_reasoning_gym_it_imports(monkeypatch):
    import verlog.preflight as preflight

    cfg = load_recipe("tiny", ["env.task=gem/GuessTheNumber-v0-easy"])
    monkeypatch.setattr(preflight, "module_exists", lambda name: False)
    with pytest.raises(ConfigError, match=r"^env.task: gem/GuessTheNumber-v0-easy needs the gem and reasoning_gym "
                                          r"packages, not installed: .*--no-deps gem-llm==0.1.0$"):
        check_buildable(cfg)
