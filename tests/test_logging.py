"""Metric sinks and plots."""

import json
import math

import pytest

from verlog.logging import MetricLogger, read_metrics
from verlog.plots import plot_run


def test_jsonl_lines_nan_as_null_and_resume_dedup(tmp_path):
    log = MetricLogger(tmp_path, total_iterations=3, progress=False)
    log.log({"iteration": 1, "turns": 10, "episode/success": math.nan, "critic/explained_variance": 0.5})
    log.log({"iteration": 2, "turns": 20, "episode/success": 0.5})
    log.close()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["episode/success"] is None
    # a resumed run appends and re-logs iteration 2: the later line wins
    log = MetricLogger(tmp_path, total_iterations=3, start_iteration=1, progress=False)
    log.log({"iteration": 2, "turns": 20, "episode/success": 0.75})
    log.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [1, 2] and rows[1]["episode/success"] == 0.75


def test_wandb_offline_run_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    log = MetricLogger(tmp_path, total_iterations=1, progress=False,
                       wandb_config={"project": "verlog-test", "mode": "offline", "name": "t", "config": {"a": 1}})
    log.log({"iteration": 1, "turns": 5, "episode/return": 1.0})
    log.close()
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_plot_writes_png(tmp_path):
    log = MetricLogger(tmp_path, total_iterations=2, progress=False)
    for i in (1, 2):
        log.log({"iteration": i, "turns": 16 * i, "phase": "ppo", "episode/success": 0.5 * i,
                 "critic/explained_variance": 0.1})
    log.close()
    (png,) = plot_run(tmp_path)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_progress_postfix_counts_the_episodes_behind_the_recent_success():
    from verlog.logging import progress_postfix

    row = {"episode/success_recent100": 1.0, "episode/recent_episodes": 3, "turns_per_second": 12.4,
           "episode/return": None}
    assert progress_postfix(row) == {"turns/s": "12", "success": "1.00 (3 eps)"}
    assert progress_postfix({"episode/success_recent100": 0.25, "episode/recent_episodes": 100})["success"] \
        == "0.25 (100 eps)"


def test_bar_names_each_phase_and_counts_evaluation_episodes(tmp_path, capsys):
    log = MetricLogger(tmp_path, total_iterations=2, progress=True)
    with log.evaluation("baseline", 3, "greedy") as tick:
        for _ in range(3):
            tick(None)
        assert log.current_phase == "baseline"
    for it, phase in ((1, "critic_warmup"), (2, "ppo")):
        log.phase(phase)
        log.log({"iteration": it, "turns": 8 * it, "phase": phase, "episode/success_recent100": 1.0,
                 "episode/recent_episodes": 2 * it})
    with log.evaluation("final_eval", 2):
        pass
    assert log.current_phase == "ppo"  # back to the phase before the evaluation
    log.close()
    err = capsys.readouterr().err
    for label in ("baseline", "baseline greedy", "3/3", "critic pre-training", "PPO", "final eval"):
        assert label in err, label
    assert "success=1.00 (2 eps)" in err and "success=1.00 (4 eps)" in err and "last 100" not in err


def test_tensorboard_scalars_beside_the_jsonl(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = MetricLogger(tmp_path, total_iterations=2, progress=False, tensorboard=True)
    for i in (1, 2):
        log.log({"iteration": i, "turns": 16 * i, "phase": "ppo", "episode/success": 0.5 * i, "critic/loss": math.nan})
    log.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    scalars = events.Tags()["scalars"]
    assert "episode/success" in scalars and "turns" in scalars and "phase" not in scalars
    assert "critic/loss" not in scalars  # NaN is logged as null, as in the JSONL
    assert [(e.step, e.value) for e in events.Scalars("episode/success")] == [(1, 0.5), (2, 1.0)]
    assert len(read_metrics(tmp_path / "metrics.jsonl")) == 2


def test_tensorboard_is_a_typed_config_key():
    import pytest

    from verlog.config import ConfigError, load_recipe

    assert load_recipe("tiny", ["logging.tensorboard=true"]).logging.tensorboard is True
    assert load_recipe("tiny", []).logging.tensorboard is False
    with pytest.raises(ConfigError, match="logging.tensorboard"):
        load_recipe("tiny", ["logging.tensorboard=maybe"])


def test_training_run_shows_every_phase_and_writes_tensorboard(tmp_path, capsys):
    from verlog.config import load_recipe
    from verlog.trainer import Trainer

    cfg = load_recipe("tiny", [
        "iterations=2", "ppo.critic_warmup_iterations=1", "env.num_envs=2", "env.vector_mode=sync",
        "rollout.turns_per_env=4", "rollout.max_response_tokens=8", "ppo.minibatches=2", "ppo.micro_batch_size=4",
        "format_warmup.steps=2", "format_warmup.episodes=1", "model.tiny.corpus_episodes=2",
        "model.tiny.vocab_size=300", "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64",
        "eval.episodes=2", "eval.num_envs=2", "eval.baseline=true", "env.max_steps=6", "deepspeed.zero_stage=0",
        "logging.progress=true", "logging.tensorboard=true", f"run_root={tmp_path}",
        f"model.cache_dir={tmp_path / 'cache'}", "name=bar"])
    Trainer(cfg).train()
    err = capsys.readouterr().err
    order = [err.index(label) for label in ("warm-up", "baseline greedy", "critic pre-training", "PPO",
                                            "final eval greedy")]
    assert order == sorted(order)
    assert "2/2 [" in err.split("critic pre-training")[0]  # the baseline's episodes were counted
    rows = read_metrics(tmp_path / "bar" / "metrics.jsonl")
    seen = sum(r["episodes"] for r in rows)  # max_steps 6 < 8 turns per env: some episodes ended
    assert seen > 0 and [r["episode/recent_episodes"] for r in rows][-1] == min(seen, 100)
    assert f"success={rows[-1]['episode/success_recent100']:.2f} ({seen} eps)" in err
    assert "last 100" not in err
    assert list((tmp_path / "bar" / "tensorboard").glob("events.out.tfevents.*"))


def test_curves_have_units_a_named_band_a_titled_task_and_one_point_series(tmp_path):
    import matplotlib.pyplot as plt
    import yaml

    from verlog.plots import curves_figure, run_title

    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"name": "tiny", "env": {"task": "babyai/easy_goto"},
                                                         "algo": {"algorithm": "ppo"}}))
    rows = [{"iteration": 1, "turns": 64, "phase": "critic_warmup", "episode/success": 0.25},
            {"iteration": 2, "turns": 128, "phase": "ppo", "episode/success": 0.5, "actor/entropy": 1.5}]
    title = run_title(tmp_path)
    assert title == "tiny · babyai/easy_goto · ppo"
    fig = curves_figure(rows, title)
    try:
        assert fig.texts[0].get_text() == title
        axes = fig.axes
        labels = [ax.get_ylabel() for ax in axes]
        assert all("(" in label and label.endswith(")") for label in labels), labels
        assert any("nats/token" in label for label in labels)
        legend = axes[0].get_legend()
        assert legend is not None and [t.get_text() for t in legend.get_texts()] == ["critic pre-training"]
        entropy = next(ax for ax in axes if "entropy" in ax.get_title())
        (line,) = entropy.get_lines()  # one point: drawn as a marker, not an invisible line
        assert len(line.get_xdata()) == 1 and line.get_marker() not in (None, "None", "", " ")
        ev = next(ax for ax in axes if "explained variance" in ax.get_title())
        assert not ev.get_lines() and "not logged" in ev.texts[0].get_text()
    finally:
        plt.close(fig)


def test_a_mixture_run_gets_per_task_curves_against_turns_and_training_time(tmp_path):
    from verlog.plots import task_curves_figure, task_names

    rows = [{"iteration": i, "turns": 512 * i, "phase": "ppo", "time/rollout": 2.0, "time/update": 10.0,
             "task/babyai/goto/success_recent100": 0.1 * i,
             **({"task/babyai/open/success_recent100": 0.05 * i} if i > 1 else {})} for i in (1, 2, 3)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert task_names(rows) == ["babyai/goto", "babyai/open"]
    curves, per_task = plot_run(tmp_path)
    assert per_task.name == "curves_tasks.png" and per_task.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = task_curves_figure(rows, "mix")
    by_turns, by_time = fig.axes
    goto_turns, open_turns = by_turns.get_lines()
    assert list(goto_turns.get_xdata()) == [512, 1024, 1536] and list(open_turns.get_xdata()) == [1024, 1536]
    assert [round(x, 6) for x in by_time.get_lines()[0].get_xdata()] == [0.2, 0.4, 0.6]  # 12 s an iteration, minutes
    assert [t.get_text() for t in by_turns.get_legend().get_texts()] == ["babyai/goto", "babyai/open"]
    with pytest.raises(ValueError, match="no task/"):
        task_curves_figure([{"iteration": 1, "turns": 1}], "plain")
    assert curves.name == "curves.png"
