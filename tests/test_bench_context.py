"""benchmarks/bench_context.py (P2): every built-in text memory is measured, the vision memory is not."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_context  # noqa: E402

from verlog.config import build_config  # noqa: E402
from verlog.memory import MEMORY_TYPES  # noqa: E402


def test_text_memory_types_are_the_built_ins_without_images():
    names = bench_context.text_memory_types()
    assert "vision" in MEMORY_TYPES and "vision" not in names
    assert set(names) == set(MEMORY_TYPES) - {"vision"}


def test_measure_plays_one_crafter_episode_through_every_text_memory(tmp_path):
    cfg = build_config({"env": {"task": bench_context.TASK}},
                       {"threads": 1, "model.tiny.corpus_episodes": 2, "model.cache_dir": str(tmp_path)})
    results, played = bench_context.measure(cfg, episodes=1, early=2, late=8, seed=0, max_attempts=5)
    assert set(results) == {*bench_context.text_memory_types(), bench_context.UNBOUNDED}
    assert played >= 1 and all(len(pairs) == 1 for pairs in results.values())
    (early, late), = results[bench_context.UNBOUNDED]
    assert late.num_tokens > early.num_tokens  # nothing is dropped: six more turns make a longer prompt
    for name in bench_context.text_memory_types():
        (early, late), = results[name]
        assert late.num_tokens <= cfg.memory.max_prompt_tokens
