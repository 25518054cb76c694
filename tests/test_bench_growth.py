"""benchmarks/growth.py: the per-run summary, the figure, and the refusal of an unknown sweep."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import growth  # noqa: E402


def _row(rollout: float, update: float, turns: int, tokens: float) -> dict[str, float]:
    return {"time/rollout": rollout, "time/scoring": 0.5, "time/update": update, "rollout/turns": turns,
            "prompt/tokens_mean": tokens}


def test_summarise_takes_medians_of_each_phase_and_of_the_whole_iteration():
    rows = [_row(1.0, 4.0, 512, 100.0), _row(3.0, 2.0, 512, 110.0), _row(2.0, 9.0, 510, 90.0)]
    s = growth.summarise(rows)
    assert s["rollout"] == 2.0 and s["update"] == 4.0 and s["scoring"] == 0.5
    assert s["sync"] == 0.0  # a phase the rows never name
    # the whole iteration's median is of the per-row sums (5.5, 5.5, 11.5), not a sum of medians (6.5)
    assert s["total"] == 5.5
    assert s["turns"] == 512 and s["prompt_tokens"] == 100.0


def test_summarise_refuses_a_run_with_no_timed_iteration():
    with pytest.raises(ValueError, match="no timed iteration"):
        growth.summarise([])


def test_plot_writes_one_png_with_a_panel_per_sweep(tmp_path):
    point = {"rollout": 1.0, "scoring": 0.2, "update": 3.0, "sync": 0.0, "total": 4.2, "turns": 128}
    results = {
        "envs": {"key": "env.num_envs", "points": [{**point, "value": v} for v in (8, 16)]},
        "gae": {"key": "envs", "points": [{"value": n, "total": 1e-3 * n, "turns": 32 * n} for n in (16, 32)]},
    }
    out = tmp_path / "g.png"
    growth.plot(results, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_an_unknown_sweep_is_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        growth.main(["--what", "envs,colours"])
    assert exit_info.value.code == 2
    assert "unknown sweep(s) ['colours']" in capsys.readouterr().err


def test_replot_draws_a_saved_run_without_measuring(tmp_path, monkeypatch):
    point = {"rollout": 1.0, "scoring": 0.2, "update": 3.0, "sync": 0.0, "total": 4.2, "turns": 512}
    saved = {"meta": {"threads": 1},
             "window": {"key": "memory.history_turns",
                        "points": [{**point, "value": v, "prompt_tokens": 90.0 + 70 * v} for v in (0, 1)]}}
    src = tmp_path / "growth.json"
    src.write_text(growth.json.dumps(saved))
    monkeypatch.setattr(growth, "sweep", lambda *a: pytest.fail("--replot must not measure"))
    assert growth.main(["--replot", str(src), "--plot", str(tmp_path / "out.png")]) == 0
    assert (tmp_path / "out.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
