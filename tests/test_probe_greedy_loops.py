"""``benchmarks/probe_greedy_loops.py``: its loop detection on hand-made turn logs, its prompt replay
against a memory that played the turns, and a run on a tiny model."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "probe_greedy_loops.py"
_spec = importlib.util.spec_from_file_location("probe_greedy_loops", SCRIPT)
probe = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = probe  # its dataclasses look their module up
_spec.loader.exec_module(probe)


def turns_of(pairs: list[tuple[str, str]]) -> list[dict]:
    """A turn log of (observation, action) pairs."""
    return [{"observation": o, "action": a, "reply": f"ACTION: {a}", "action_valid": True, "reward": 0.0}
            for o, a in pairs]


def test_period_1_is_a_no_op_repeat_traced_back_to_its_start() -> None:
    log = turns_of([("a", "turn left"), ("b", "go forward")] + [("key ahead", "go forward")] * 5)
    assert probe.find_loop(log) == probe.Loop(1, 2, "no-op repeat")


def test_period_2_turn_left_turn_right() -> None:
    log = turns_of([("x", "go forward")] + [("a", "turn left"), ("b", "turn right")] * 3)
    assert probe.find_loop(log) == probe.Loop(2, 1, "period 2")


def test_period_4_turn_left_forever_and_the_shortest_period_wins() -> None:
    spin = [(side, "turn left") for side in ("north", "west", "south", "east")]
    assert probe.find_loop(turns_of(spin * 3)) == probe.Loop(4, 0, "period 4")
    # period 1 also repeats with periods 2..8: the shortest is reported
    assert probe.find_loop(turns_of([("wall", "go forward")] * 30)) == probe.Loop(1, 0, "no-op repeat")


def test_other_periods_and_no_loop() -> None:
    cycle = [("a", "turn left"), ("b", "go forward"), ("c", "turn right")]
    assert probe.find_loop(turns_of(cycle * 3)) == probe.Loop(3, 0, "other")
    assert probe.find_loop(turns_of(cycle * 2)) is None  # two periods only, three are needed
    assert probe.find_loop(turns_of([("a", "turn left"), ("a", "turn left")])) is None
    assert probe.find_loop([]) is None
    # the same observation answered by different actions is no loop
    assert probe.find_loop(turns_of([("a", "turn left"), ("a", "go forward")] * 2 + [("a", "pick up")])) is None
    # a period longer than max_period is not looked for
    long_cycle = [(str(i), "turn left") for i in range(9)] * 3
    assert probe.find_loop(turns_of(long_cycle)) is None
    assert probe.find_loop(turns_of(long_cycle), max_period=9) == probe.Loop(9, 0, "other")


def test_replay_rebuilds_the_prompt_the_memory_built_in_play(tiny) -> None:
    from verlog.memory import TurnOutcome
    from verlog.memory.window import WindowMemory
    from verlog.models import load_tokenizer

    tokenizer = load_tokenizer(tiny)
    log = turns_of([("a wall 1 step forward", "turn left"), ("a red ball 2 steps left", "go forward"),
                    ("a red ball 1 step left", "turn left"), ("a red ball 1 step forward", "pick up")])
    played = WindowMemory(tokenizer, history_turns=2, reply_prefix="ACTION:")
    played.start_episode("go to the red ball", log[0]["observation"])
    prompts = [played.prompt_ids()[0]]
    for before, after in zip(log, log[1:]):
        played.add_turn(before["reply"], after["observation"], "", TurnOutcome(before["action"], True, 0.0))
        prompts.append(played.prompt_ids()[0])
    fresh = WindowMemory(tokenizer, history_turns=2, reply_prefix="ACTION:")
    rebuilt = [probe.replay_prompt(fresh, "go to the red ball", log, i) for i in range(len(log))]
    assert rebuilt == prompts
    assert len(set(map(tuple, rebuilt))) == len(log)  # every turn's prompt differs: an off-by-one would show


def test_run_on_a_tiny_model(tiny) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), str(tiny), "--recipe", "tiny", "--episodes", "1"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    rows = [line.split() for line in lines if re.match(r"^  babyai/\S+( +\d+){7} ", line)]  # the table's
    assert [r[0] for r in rows] == ["babyai/goto", "babyai/pickup", "babyai/open", "babyai/putnext",
                                    "babyai/pick_up_seq_go_to"]
    loops = 0
    for row in rows:
        episodes, failures, *kinds = (int(x) for x in row[1:8])
        assert episodes == 1 and failures == sum(kinds)  # every failure has exactly one kind
        loops += failures - kinds[-1]
    match = re.match(r"^result: (\d+) of (\d+) greedy failures end in a loop; median p\(looping action\) "
                     r"(\d\.\d\d|n/a), median p\(runner-up\) (\d\.\d\d|n/a)$", lines[-1])
    assert match, lines[-1]
    assert int(match[1]) == loops and int(match[2]) == sum(int(r[2]) for r in rows)
    if loops:  # probabilities of two different actions of one distribution
        assert float(match[3]) + float(match[4]) <= 1.0 + 1e-9
