"""Env faults at the vector-env level: raise, hang, hard hang, dead worker -> restart, truncated episode."""

from __future__ import annotations

import pytest

from helpers import FAULT_PLAN, FAULTY_TASK
from verlog.envs.faults import EnvFaultError, FaultCatchingEnv, count_faults, restart_seed
from verlog.envs.vector import final_infos, final_observations, make_vector_env, split_infos

CASES = [("raise", "sync"), ("raise", "async"), ("hang", "sync"), ("hang", "async"),
         ("hang_hard", "async"), ("kill", "async")]


@pytest.mark.parametrize("kind, mode", CASES)
def test_fault_truncates_with_last_good_obs_and_restarts(kind, mode):
    # 2 envs, global step 3 (= env 0's 2nd step, envs step in order in sync; in async either env) faults.
    FAULT_PLAN.arm({3: kind})
    vec = make_vector_env(FAULTY_TASK, 2, seed=5, mode=mode, env_kwargs={"max_steps": 50},
                          step_timeout_s=0.5)
    try:
        obs, infos = vec.reset()
        assert count_faults(infos).faults == 0
        vec.step(["wait", "wait"])
        obs, rew, term, trunc, infos = vec.step(["wait", "wait"])
        counts = count_faults(infos)
        assert FAULT_PLAN.injected.value == 1
        assert (counts.faults, counts.restarts) == (1, 1) and len(counts.messages) == 1
        hit = [i for i in range(2) if trunc[i]]
        assert len(hit) == 1 and not term.any()
        i = hit[0]
        assert final_observations(infos, 2)[i] == "count 1"  # the last good observation
        assert final_infos(infos, 2)[i]["action_valid"] is True and rew[i] == 0.0
        assert obs[i] == "count 0" and split_infos(infos, 2)[i]["episode_step"] == 0
        assert obs[1 - i] == "count 2"  # the other env went on
        obs, rew, term, trunc, infos = vec.step(["wait", "wait"])  # both healthy afterwards
        assert count_faults(infos).faults == 0 and not trunc.any()
        assert obs[i] == "count 1" and obs[1 - i] == "count 3"
    finally:
        FAULT_PLAN.armed.value = 0
        vec.close()


def test_reset_that_always_fails_gives_up_with_a_clear_error():
    env = FaultCatchingEnv("test/count", {}, restart_attempts=2)

    def broken(**kwargs):
        raise ValueError("no")

    env.reset(seed=1)
    env._broken = True
    import verlog.envs.faults as faults

    original = faults.make_env
    faults.make_env = lambda *a, **k: type("B", (), {"reset": staticmethod(broken), "close": lambda self=None: None})()
    try:
        with pytest.raises(EnvFaultError, match="2 restarts failed"):
            env.reset()
    finally:
        faults.make_env = original


def test_restart_seeds_are_deterministic_and_distinct():
    seeds = [restart_seed(7, k) for k in range(1, 20)]
    assert seeds == [restart_seed(7, k) for k in range(1, 20)] and len(set(seeds)) == 19
    assert restart_seed(7, 1) != restart_seed(7, 1, salt=1) != restart_seed(8, 1)


def test_bad_timeout_arguments_are_rejected():
    with pytest.raises(ValueError, match="step_timeout_s"):
        make_vector_env("test/count", 1, seed=0, mode="sync", step_timeout_s=0)
    with pytest.raises(ValueError, match="restart_attempts"):
        make_vector_env("test/count", 1, seed=0, mode="sync", restart_attempts=0)


def test_collector_counts_a_fault_and_bootstraps_from_the_last_good_observation(tmp_path):
    from helpers import COUNT_CORPUS, ScriptedEngine
    from verlog.memory import WindowMemory
    from verlog.models import load_tokenizer
    from verlog.rollout.collector import FixedTurnCollector
    from verlog.rollout.engine import SamplingParams
    from verlog.tiny_model import build_tiny_model

    tok = load_tokenizer(build_tiny_model(tmp_path, COUNT_CORPUS, vocab_size=300, hidden_size=64, num_heads=1,
                                          intermediate_size=64))
    FAULT_PLAN.arm({3: "raise"})  # env 0's 2nd step (sync steps envs in order)
    venv = make_vector_env(FAULTY_TASK, 2, seed=0, mode="sync", env_kwargs={"max_steps": 50})
    T = 4
    engine = ScriptedEngine(tok, [["ACTION: wait"] * 2] * T)
    memories = [WindowMemory(tok, history_turns=1, max_prompt_tokens=256) for _ in range(2)]
    collector = FixedTurnCollector(venv, memories, engine, lambda ids: tok.batch_decode(ids, skip_special_tokens=True),
                                   SamplingParams(max_tokens=8), T, tok.pad_token_id, seed=0)
    try:
        batch, stats = collector.collect()
    finally:
        FAULT_PLAN.armed.value = 0
        venv.close()
    assert batch.rewards.shape == (T, 2)  # no short batch
    assert (stats.env_faults, stats.env_restarts, len(stats.env_fault_messages)) == (1, 1, 1)
    assert "injected fault" in stats.env_fault_messages[0]
    assert batch.truncated[:, 0].tolist() == [False, True, False, False] and not batch.terminated.any()
    assert (1, 0) in batch.bootstrap_prompts  # valued on the last good observation "count 1"
    assert "count 1" in tok.decode(batch.bootstrap_prompts[(1, 0)]) and len(stats.episodes) == 1


@pytest.mark.parametrize("when", ["before_step", "before_reset"])
def test_worker_killed_from_outside_between_calls_is_replaced(when):
    # SIGKILL of a real, idle worker process: the next command cannot even be sent (broken pipe).
    import os
    import signal

    vec = make_vector_env("test/count", 2, seed=5, mode="async", env_kwargs={"max_steps": 50}, step_timeout_s=2.0)
    try:
        vec.reset()
        vec.step(["wait", "wait"])
        worker = vec.unwrapped.processes[1]
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(timeout=10)
        assert worker.exitcode == -signal.SIGKILL
        if when == "before_step":
            obs, rew, term, trunc, infos = vec.step(["wait", "wait"])
            assert trunc.tolist() == [False, True] and not term.any() and rew[1] == 0.0
            assert final_observations(infos, 2)[1] == "count 1"  # the last good observation
            assert obs[0] == "count 2" and obs[1] == "count 0"
        else:
            obs, infos = vec.reset(seed=9)
            assert list(obs) == ["count 0", "count 0"]
        counts = count_faults(infos)
        assert (counts.faults, counts.restarts) == (1, 1)
        assert "worker 1 died" in counts.messages[0] and "BrokenPipeError" in counts.messages[0]
        assert vec.unwrapped.processes[1].is_alive() and vec.unwrapped.processes[1].pid != worker.pid
        obs, rew, term, trunc, infos = vec.step(["wait", "wait"])  # healthy afterwards
        assert count_faults(infos).faults == 0 and not trunc.any()
    finally:
        vec.close()


def test_worker_dead_at_a_call_gives_none_there_and_the_next_step_replaces_it():
    # A call (e.g. the trainer setting a scheduled revisit cost) reaching a worker killed between steps
    # does not raise: that env's result is None, and the next step restarts it as a counted fault step.
    import os
    import signal

    vec = make_vector_env("test/count", 2, seed=5, mode="async", env_kwargs={"max_steps": 50}, step_timeout_s=2.0)
    try:
        vec.reset()
        vec.step(["wait", "wait"])
        assert vec.call("max_steps") == (50, 50)
        worker = vec.unwrapped.processes[1]
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(timeout=10)
        assert vec.call("max_steps") == (50, None)
        obs, rew, term, trunc, infos = vec.step(["wait", "wait"])
        assert trunc.tolist() == [False, True] and obs[1] == "count 0"
        counts = count_faults(infos)
        assert (counts.faults, counts.restarts) == (1, 1) and "worker 1 died" in counts.messages[0]
        assert vec.call("max_steps") == (50, 50)  # healthy afterwards
    finally:
        vec.close()
