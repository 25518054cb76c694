"""GAE-curve figures from a run directory: turn values vs returns, advantages by turn position,
critic explained variance over training, and a dual-discount sweep on a recorded batch.

Every figure is a pure pair: a data function (tensors or metric rows in, small numpy arrays or
dataclasses out; tested on hand-made batches) and a ``draw_*`` function (data in, matplotlib
``Figure`` out, Agg backend). :func:`write_gae_figures` ties them to a run directory and is what
``verlog-plot`` and ``notebooks/gae_curves.ipynb`` call.

Notation: T turns per env, N envs, R response-token slots (see :mod:`verlog.batch`). "Turn value"
is V_0 = ``values[t, n, 0]`` (the critic at the last prompt token); the turn's return is
R_0 = ``returns[t, n, 0]``; the turn's (unwhitened) advantage is A_0 = R_0 - V_0, the GAE advantage
of the first response token (``returns = advantages + values`` before whitening).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np
import torch
import yaml

from verlog.plots import plt  # Agg backend is selected there
from matplotlib.ticker import MaxNLocator
from verlog.algos.gae import dual_discount_gae
from verlog.algos.rewards import token_rewards
from verlog.batch import ScoredBatch
from verlog.config import GAEConfig
from verlog.logging import read_metrics

__all__ = [
    "TurnPoints", "EVSeries", "SweepResult", "DEFAULT_SWEEP", "GAE_KEYS",
    "episode_positions", "turn_points", "group_by_position", "explained_variance_series", "gae_sweep",
    "newest_batch", "gae_settings", "draw_values_vs_returns", "draw_advantages_by_position",
    "draw_explained_variance", "draw_gae_sweep", "write_gae_figures",
]

#: The four discounts of :func:`verlog.algos.gae.dual_discount_gae`, in its argument order.
GAE_KEYS = ("gamma_step", "lam_step", "gamma_token", "lam_token")

#: Alternative values tried for each discount by the sweep (one discount varied at a time).
DEFAULT_SWEEP: dict[str, tuple[float, ...]] = {
    "gamma_step": (0.9, 0.99, 1.0),
    "lam_step": (0.0, 0.5, 0.95, 1.0),
    "gamma_token": (0.9, 0.99, 1.0),
    "lam_token": (0.0, 0.5, 1.0),
}


# ---------------------------------------------------------------------------------------- data
def episode_positions(terminated: torch.Tensor, truncated: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Where each turn sits in its episode, from the done flags of a batch.

    An episode ends after turn t of env n where ``terminated[t, n] or truncated[t, n]``.

    Args:
        terminated, truncated: bool [T, N].

    Returns:
        ``(turn_index, steps_to_end)``, each int64 numpy [T, N]. ``turn_index`` counts the turns of
        the episode seen in this batch before turn t (0 at t = 0 and after a done; an episode
        that began in an earlier batch is counted from the batch start). ``steps_to_end`` is the
        number of turns after t until the episode's last turn (0 on the last turn), and -1 where
        the episode does not end inside the batch.

    Raises:
        ValueError: the flags are not both [T, N] with T, N >= 1.
    """
    if terminated.dim() != 2 or terminated.shape != truncated.shape or terminated.numel() == 0:
        raise ValueError(f"terminated/truncated must both be [T, N], got {tuple(terminated.shape)} and "
                         f"{tuple(truncated.shape)}")
    done = (terminated.bool() | truncated.bool()).cpu().numpy()
    T, N = done.shape
    index = np.zeros((T, N), dtype=np.int64)
    to_end = np.full((T, N), -1, dtype=np.int64)
    for t in range(1, T):
        index[t] = np.where(done[t - 1], 0, index[t - 1] + 1)
    to_end[T - 1] = np.where(done[T - 1], 0, -1)
    for t in range(T - 2, -1, -1):
        to_end[t] = np.where(done[t], 0, np.where(to_end[t + 1] >= 0, to_end[t + 1] + 1, -1))
    return index, to_end


@dataclass(frozen=True)
class TurnPoints:
    """One entry per turn of a scored batch, flattened time-major (index t * N + n); all numpy [T * N].

    ``value`` V_0 and ``ret`` R_0 are in reward units; ``advantage`` = R_0 - V_0 (unwhitened);
    ``turn_index``/``steps_to_end`` as in :func:`episode_positions`; ``t``/``env`` the turn's indices.
    """

    value: np.ndarray
    ret: np.ndarray
    advantage: np.ndarray
    turn_index: np.ndarray
    steps_to_end: np.ndarray
    t: np.ndarray
    env: np.ndarray


def turn_points(scored: ScoredBatch) -> TurnPoints:
    """Per-turn value, return, advantage and episode position of a scored batch.

    Raises:
        ValueError: the batch has no ``values`` or ``returns`` (a critic-free run has neither).
    """
    if scored.values is None or scored.returns is None:
        raise ValueError("the batch has no values/returns (a run without a critic)")
    batch = scored.batch
    T, N = batch.num_turns, batch.num_envs
    index, to_end = episode_positions(batch.terminated, batch.truncated)
    v = scored.values[..., 0].double().cpu().numpy().reshape(-1)
    r = scored.returns[..., 0].double().cpu().numpy().reshape(-1)
    tt, nn = np.meshgrid(np.arange(T), np.arange(N), indexing="ij")
    return TurnPoints(value=v, ret=r, advantage=r - v, turn_index=index.reshape(-1),
                      steps_to_end=to_end.reshape(-1), t=tt.reshape(-1), env=nn.reshape(-1))


def group_by_position(x: np.ndarray, position: np.ndarray, cap: int | None = None) -> dict[int, np.ndarray]:
    """Split ``x`` by integer position: ``{p: x[position == p]}`` for p >= 0, keys ascending.

    Negative positions (unknown, e.g. ``steps_to_end == -1``) are left out. With ``cap``, positions
    >= cap are pooled under ``cap``.

    Raises:
        ValueError: ``x`` and ``position`` differ in shape.
    """
    x, position = np.asarray(x), np.asarray(position)
    if x.shape != position.shape:
        raise ValueError(f"x and position must have the same shape, got {x.shape} and {position.shape}")
    if cap is not None:
        position = np.minimum(position, cap)
    return {int(p): x[position == p] for p in np.unique(position[position >= 0])}


@dataclass(frozen=True)
class EVSeries:
    """Critic explained variance per logged iteration (numpy arrays of equal length).

    ``iteration`` and ``turns`` (environment turns so far) are int; ``ev`` is the unitless explained
    variance (NaN rows are dropped); ``warmup`` is True for critic warm-up iterations.
    """

    iteration: np.ndarray
    turns: np.ndarray
    ev: np.ndarray
    warmup: np.ndarray


def explained_variance_series(rows: Iterable[dict[str, Any]], key: str = "critic/explained_variance") -> EVSeries:
    """Extract ``key`` from metric rows (as :func:`verlog.logging.read_metrics` returns them).

    Rows without the key, or where it is None/NaN, are skipped.
    """
    kept = [r for r in rows if isinstance(r.get(key), (int, float)) and not math.isnan(float(r[key]))]
    return EVSeries(
        iteration=np.array([int(r["iteration"]) for r in kept], dtype=np.int64),
        turns=np.array([int(r.get("turns", 0)) for r in kept], dtype=np.int64),
        ev=np.array([float(r[key]) for r in kept], dtype=np.float64),
        warmup=np.array([r.get("phase") == "critic_warmup" for r in kept], dtype=bool),
    )


@dataclass(frozen=True)
class SweepResult:
    """GAE recomputed on one batch with one setting of the four discounts.

    ``settings`` maps each of :data:`GAE_KEYS` to its value; ``varied`` names the key that differs
    from the base setting (None for the base itself). ``mean_abs_advantage`` is the mean |A_k| over
    all valid response tokens; ``by_turn_index`` maps turn index in episode (see
    :func:`episode_positions`) to the mean first-token advantage A_0 and ``abs_by_turn_index`` to
    the mean |A_0| (reward units, unwhitened).
    """

    settings: dict[str, float]
    varied: str | None
    mean_abs_advantage: float
    by_turn_index: dict[int, float]
    abs_by_turn_index: dict[int, float]


def gae_sweep(scored: ScoredBatch, base: dict[str, float],
              grid: dict[str, Sequence[float]] | None = None) -> list[SweepResult]:
    """Recompute :func:`dual_discount_gae` on a scored batch for the base setting and for each
    alternative value in ``grid`` (one discount varied at a time, the others at ``base``).

    Token rewards are the batch's ``token_rewards`` when saved (KL-in-reward included), else the
    environment reward on each turn's last token. ``bootstrap_values`` missing means 0.

    Args:
        scored: a scored batch (``values`` set).
        base: the four discounts (keys :data:`GAE_KEYS`), e.g. the run's ``gae`` config.
        grid: ``{key: values}``; default :data:`DEFAULT_SWEEP`. Values equal to the base are skipped.

    Returns:
        The base result first, then one per alternative value in grid order.

    Raises:
        ValueError: no ``values`` in the batch, an unknown key, or a discount outside [0, 1]
            (from :func:`dual_discount_gae`).
    """
    if scored.values is None:
        raise ValueError("the batch has no values (a run without a critic)")
    batch = scored.batch
    grid = DEFAULT_SWEEP if grid is None else grid
    unknown = sorted(set(grid) - set(GAE_KEYS)) + sorted(set(GAE_KEYS) - set(base))
    if unknown:
        raise ValueError(f"gae_sweep: unknown or missing discount keys {unknown} (expected {GAE_KEYS})")
    values = scored.values.double()
    mask = batch.response_mask
    rewards = scored.token_rewards if scored.token_rewards is not None else token_rewards(batch.rewards, mask)
    boot = scored.bootstrap_values if scored.bootstrap_values is not None else torch.zeros(batch.rewards.shape)
    index, _ = episode_positions(batch.terminated, batch.truncated)

    def run(settings: dict[str, float], varied: str | None) -> SweepResult:
        adv, _ = dual_discount_gae(rewards.double(), values, mask, batch.terminated, batch.truncated,
                                   boot.double(), *(float(settings[k]) for k in GAE_KEYS))
        a0 = adv[..., 0].cpu().numpy()
        groups = group_by_position(a0.reshape(-1), index.reshape(-1))
        return SweepResult(
            settings=dict(settings), varied=varied,
            mean_abs_advantage=float(adv[mask].abs().mean()),
            by_turn_index={p: float(g.mean()) for p, g in groups.items()},
            abs_by_turn_index={p: float(np.abs(g).mean()) for p, g in groups.items()},
        )

    base = {k: float(base[k]) for k in GAE_KEYS}
    out = [run(base, None)]
    for key, alternatives in grid.items():
        for value in alternatives:
            if float(value) != base[key]:
                out.append(run({**base, key: float(value)}, key))
    return out


def newest_batch(run_dir: Path) -> Path | None:
    """The newest dumped batch ``<run_dir>/batches/iter_*.pt`` (highest iteration), or None."""
    paths = sorted((Path(run_dir) / "batches").glob("iter_*.pt"))
    return paths[-1] if paths else None


def gae_settings(run_dir: Path) -> dict[str, float]:
    """The run's four GAE discounts from ``config.yaml`` (defaults of :class:`GAEConfig` if absent)."""
    defaults = GAEConfig()
    section: dict[str, Any] = {}
    cfg_path = Path(run_dir) / "config.yaml"
    if cfg_path.is_file():
        loaded = yaml.safe_load(cfg_path.read_text()) or {}
        section = loaded.get("gae") or {} if isinstance(loaded, dict) else {}
    return {k: float(section.get(k, getattr(defaults, k))) for k in GAE_KEYS}


# ---------------------------------------------------------------------------------------- drawing
def _label(key: str) -> str:
    return {"gamma_step": "γ_step", "lam_step": "λ_step", "gamma_token": "γ_tok", "lam_token": "λ_tok"}[key]


def draw_values_vs_returns(points: TurnPoints, title: str = ""):
    """Left: scatter of turn value V_0 vs return R_0 (y = x dashed); right: their means ± sd by turn index.

    Returns a matplotlib ``Figure`` (the caller saves and closes it). ``points`` must be non-empty.
    """
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.5))
    sc = ax1.scatter(points.value, points.ret, c=points.turn_index, cmap="viridis", s=18, alpha=0.8)
    lo = float(min(points.value.min(), points.ret.min()))
    hi = float(max(points.value.max(), points.ret.max()))
    ax1.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="R = V")
    fig.colorbar(sc, ax=ax1, label="turn index in episode")
    ax1.set_xlabel("turn value V_0")
    ax1.set_ylabel("return R_0 (critic target)")
    ax1.legend(fontsize=8)
    for x, name in ((points.value, "V_0"), (points.ret, "R_0")):
        groups = group_by_position(x, points.turn_index)
        ks = list(groups)
        ax2.errorbar(ks, [g.mean() for g in groups.values()], yerr=[g.std() for g in groups.values()],
                     marker="o", capsize=3, label=f"mean {name} ± sd")
    ax2.set_xlabel("turn index in episode (within the batch)")
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.legend(fontsize=8)
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(title or "turn values vs returns", fontsize=11)
    fig.tight_layout()
    return fig


def draw_advantages_by_position(points: TurnPoints, title: str = "", cap: int = 20):
    """Box plots of the unwhitened turn advantage A_0 by turn index and by turns before episode end.

    Positions >= ``cap`` are pooled. Turns whose episode does not end in the batch are left out of
    the right panel (it says so when none ends). Returns a ``Figure`` (the caller closes it).
    """
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5))
    for ax, pos, xlabel in ((axes[0], points.turn_index, "turn index in episode (within the batch)"),
                            (axes[1], points.steps_to_end, "turns before episode end")):
        groups = group_by_position(points.advantage, pos, cap=cap)
        if groups:
            ax.boxplot(list(groups.values()), positions=list(groups), widths=0.6)
            ax.axhline(0.0, color="0.5", lw=0.8)
        else:
            ax.text(0.5, 0.5, "no episode ends in this batch", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("A_0 = R_0 − V_0 (unwhitened)")
        ax.grid(alpha=0.3)
    fig.suptitle(title or "turn advantages by position", fontsize=11)
    fig.tight_layout()
    return fig


def draw_explained_variance(series: EVSeries, title: str = ""):
    """Critic explained variance against environment turns (warm-up iterations marked); returns a ``Figure``."""
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(series.turns, series.ev, marker="o", lw=1.2, label="explained variance")
    if series.warmup.any():
        ax.scatter(series.turns[series.warmup], series.ev[series.warmup], color="C1", zorder=3,
                   label="critic warm-up")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("environment turns")
    ax.set_ylabel("1 − Var[R − V] / Var[R]")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    ax.set_title(title or "critic explained variance", fontsize=11)
    fig.tight_layout()
    return fig


def draw_gae_sweep(results: Sequence[SweepResult], title: str = ""):
    """One panel per discount: mean |A_0| by turn index for each value tried (base in black, legend
    gives mean |A| over tokens). ``results`` as :func:`gae_sweep` returns them (base first).
    Returns a ``Figure`` (the caller closes it).
    """
    base = results[0]
    fig, axes = plt.subplots(1, len(GAE_KEYS), figsize=(4 * len(GAE_KEYS), 4), sharey=True)
    for ax, key in zip(axes, GAE_KEYS):
        rows = [base] + [r for r in results if r.varied == key]
        for r in sorted(rows, key=lambda r: r.settings[key]):
            is_base = r is base
            ax.plot(list(r.abs_by_turn_index), list(r.abs_by_turn_index.values()), marker="o",
                    color="k" if is_base else None, lw=2 if is_base else 1.2,
                    label=f"{_label(key)}={r.settings[key]:g} (mean|A| {r.mean_abs_advantage:.3g})"
                          + (" base" if is_base else ""))
        ax.set_title(f"varying {_label(key)}", fontsize=10)
        ax.set_xlabel("turn index in episode")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("mean |A_0| (unwhitened)")
    fig.suptitle(title or "dual-discount GAE sweep", fontsize=11)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------- run dir
def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def write_gae_figures(run_dir: Path, out_dir: Path | None = None,
                      log: Callable[[str], None] = print) -> list[Path]:
    """Write the GAE figures of a run as PNGs into ``out_dir`` (default ``<run_dir>/figures``).

    Files: ``explained_variance.png`` (from ``metrics.jsonl``), and from the newest dumped batch
    ``values_vs_returns.png``, ``advantages_by_position.png``, ``gae_sweep.png``. A figure whose
    input is missing (no ``metrics.jsonl``, no finite explained variance, no dumped batch, an
    unreadable or unscored batch) is skipped with one line passed to ``log``.

    Returns:
        The PNG paths written, in the order above.
    """
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir is not None else run_dir / "figures"
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []

    metrics = run_dir / "metrics.jsonl"
    if metrics.is_file():
        series = explained_variance_series(read_metrics(metrics))
        if len(series.ev):
            written.append(_save(draw_explained_variance(series, f"{run_dir.name}: critic explained variance"),
                                 out_dir / "explained_variance.png"))
        else:
            log(f"skipped explained_variance.png: no finite critic/explained_variance in {metrics}")
    else:
        log(f"skipped explained_variance.png: no {metrics}")

    needs = "values_vs_returns.png, advantages_by_position.png, gae_sweep.png"
    path = newest_batch(run_dir)
    if path is None:
        log(f"skipped {needs}: no dumped batches in {run_dir / 'batches'} (train with logging.dump_batch_every > 0)")
        return written
    try:
        batch = ScoredBatch.load(path)
        points = turn_points(batch)
    except Exception as err:  # noqa: BLE001 - any unreadable file is reported, not raised
        log(f"skipped {needs}: cannot use {path}: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")
        return written
    tag = f"{run_dir.name}, {path.stem}"
    written.append(_save(draw_values_vs_returns(points, f"{tag}: turn values vs returns"),
                         out_dir / "values_vs_returns.png"))
    written.append(_save(draw_advantages_by_position(points, f"{tag}: turn advantages by position"),
                         out_dir / "advantages_by_position.png"))
    base = gae_settings(run_dir)
    base_txt = ", ".join(f"{_label(k)}={v:g}" for k, v in base.items())
    written.append(_save(draw_gae_sweep(gae_sweep(batch, base), f"{tag}: GAE sweep around {base_txt}"),
                         out_dir / "gae_sweep.png"))
    return written
