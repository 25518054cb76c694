"""Offline generation and on-disk caching of the TextWorld games behind ``textworld/*`` tasks.

BALROG plays 25 pre-made games per task (the Intelligent-Go-Explore set, downloaded from Google Drive).
We cannot download them, so we make games of the same kinds with TextWorld's own challenge makers, with
settings as close to that set as generation time allows (:data:`TASKS`):

* ``treasure_hunter``: ``tw-treasure_hunter`` level **25**. The IGE set uses level 30 (hard mode:
  20 rooms, closed and locked doors and containers, the needed keys in the inventory, 20 distractor
  containers, quest length 20) and kept only games whose walkthrough has 20 commands. Level-30 quest
  sampling takes from 8 s to more than 3 minutes per game on one core, so we keep the same hard-mode
  world (20 rooms, locks, 20 distractor containers) with level 25's quest length of 11 (5-12 s per
  game, child process included). The objective names only the last action (``only_last_action``, as
  IGE's maker did).
* ``the_cooking_game``: ``tw-cooking`` with IGE's settings: ``recipe=5, take=5, go=12, open, cook,
  cut, split=test`` (five ingredients to find in a 12-room house, closed doors and containers, cutting
  and cooking needed; 17 points; 4-7 s per game). The generator's own walkthrough is not the shortest
  solution (it walks back and forth per ingredient): 46 to 88 commands for games 0-5, so some exceed
  the 80-step limit although shorter solutions exist.
* ``coin_collector``: ``tw-coin_collector`` level **220** as in IGE (a 20-room chain with two dead-end
  rooms off each chain room, 60 rooms; 20-command walkthrough; 3-4 s per game), ``only_last_action``.

Settings can be overridden per env (``settings={"level": 10}``); every distinct setting has its own
cache folder. The Glulx (``.ulx``) format of the IGE treasure/coin games is gone in TextWorld 1.7, so
all games are Z-machine ``.z8`` files (same text).

**Determinism.** Game ``i`` of a task is a pure function of (task, settings, ``i``, TextWorld version):
TextWorld's seed is :func:`game_seed` ``(i, attempt)``, attempt 0 first; a seed whose quest cannot be
generated moves on to the next attempt (deterministically). The generator runs with
``PYTHONHASHSEED=0`` (TextWorld iterates over sets while writing the game, so the hash seed changes the
bytes of the game otherwise). The ``.json`` and ``.ni`` files are byte-identical between runs; the
``.z8`` embeds the compile date as its serial number (6 header bytes), nothing else differs.

**Cache.** ``<cache_dir>/<task>/<variant>/game_<iii>.{z8,json,ni,meta.json}`` where ``<variant>`` spells
the settings and the TextWorld version (e.g. ``level25-tw1.7.0``). The default ``cache_dir`` is
``$VERLOG_CACHE/textworld`` when that variable is set, else ``<repo>/.cache/verlog/textworld`` (the
checkout holding this package; the current directory when the package is installed elsewhere). Games
are made lazily, the first time one is needed. Generation runs in a child Python process whose
``HOME``, ``TMPDIR``, ``TMP`` and ``TEMP`` point into a private temporary folder inside the cache (the
Inform 7 compiler writes ``$HOME/Inform``), so nothing is written outside the cache. The files are
written in that folder and moved into place with :func:`os.replace`, the ``.z8`` last (a game exists
once its ``.z8`` does, so no process ever reads a half-written game), under an exclusive
:func:`fcntl.flock` on ``game_<iii>.lock`` so that concurrent processes (vector-env workers) make each
game once; the others wait and reuse it. The file names do not start with ``tw-`` on purpose: Jericho
special-cases such names and then hides the Z-machine status line (``-= Room =-score/moves``), which
BALROG's games (named ``seed_<n>``) show.

This module imports only the standard library at import time (TextWorld is imported in the child), and
it is run in the child by file path, not as ``verlog.envs.textworld_games`` (see :func:`ensure_game`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

__all__ = [
    "TASKS",
    "GameSpec",
    "GenerationError",
    "default_cache_dir",
    "ensure_game",
    "game_paths",
    "game_seed",
    "resolve_spec",
    "variant_dir",
]

logger = logging.getLogger(__name__)

#: Upper bound on the generation attempts (seeds) tried for one game.
MAX_ATTEMPTS = 8
#: Exit status of the child when the quest cannot be generated with the given seed.
_QUEST_FAILED = 3
_COOKING_ROOMS = (1, 6, 9, 12)
_COOKING_SPLITS = (None, "train", "valid", "test")
# (key in game_paths, file name in the child's output folder), in the order they are moved into place.
_MADE_FILES = (("json", "game.json"), ("ni", "game.ni"), ("meta", "game.meta.json"), ("z8", "game.z8"))


@dataclass(frozen=True)
class _TaskDef:
    challenge: str
    defaults: dict[str, Any]
    only_last_action: bool


#: task -> TextWorld challenge, default (IGE-like) settings, and the grammar's ``only_last_action``.
TASKS: dict[str, _TaskDef] = {
    "treasure_hunter": _TaskDef("tw-treasure_hunter", {"level": 25}, True),
    "the_cooking_game": _TaskDef(
        "tw-cooking",
        {
            "recipe": 5,
            "take": 5,
            "go": 12,
            "open": True,
            "cook": True,
            "cut": True,
            "drop": False,
            "recipe_seed": 0,
            "split": "test",
        },
        False,  # IGE made them with plain tw-make; the cooking objective is a fixed text anyway
    ),
    "coin_collector": _TaskDef("tw-coin_collector", {"level": 220}, True),
}


class GenerationError(RuntimeError):
    """A game could not be generated (compiler failure, timeout, no seed gave a quest)."""


@dataclass(frozen=True)
class GameSpec:
    """What fully determines the games of one task variant (hashable; see :func:`resolve_spec`).

    Attributes:
        task: a key of :data:`TASKS`.
        challenge: TextWorld challenge name, e.g. ``"tw-treasure_hunter"``.
        settings: the challenge settings, sorted ``(key, value)`` pairs.
        only_last_action: TextWorld grammar option: the objective states only the quest's last action.
    """

    task: str
    challenge: str
    settings: tuple[tuple[str, Any], ...]
    only_last_action: bool

    @property
    def variant(self) -> str:
        """Folder name of this variant: settings then TextWorld version, e.g. ``level25-tw1.7.0``."""

        def spell(value: Any) -> str:
            if isinstance(value, bool):
                return "1" if value else "0"
            return "none" if value is None else str(value)

        parts = [f"{key}{spell(value)}" for key, value in self.settings]
        return "-".join(parts) + f"-tw{_textworld_version()}"


def _textworld_version() -> str:
    try:
        return metadata.version("textworld")
    except metadata.PackageNotFoundError:  # pragma: no cover - the package is a dependency
        return "unknown"


def _check_int(name: str, value: Any, lo: int, hi: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"settings[{name!r}] must be an int, got {type(value).__name__}")
    if value < lo or (hi is not None and value > hi):
        upper = "" if hi is None else f" and <= {hi}"
        raise ValueError(f"settings[{name!r}] must be >= {lo}{upper}, got {value}")


def _validate(task: str, settings: dict[str, Any]) -> None:
    if task in ("treasure_hunter", "coin_collector"):
        _check_int("level", settings["level"], 1, 30 if task == "treasure_hunter" else 300)
        if task == "coin_collector":
            level = settings["level"]
            rooms = ((level - 1) // 100 + 1) * ((level - 1) % 100 + 1)
            if rooms > 100:
                raise ValueError(
                    f"coin_collector level {level} needs {rooms} rooms; TextWorld 1.7 (.z8 only) supports "
                    "at most 100 rooms"
                )
        return
    _check_int("recipe", settings["recipe"], 1, 5)
    _check_int("take", settings["take"], 0, settings["recipe"])
    _check_int("recipe_seed", settings["recipe_seed"], 0)
    if settings["go"] not in _COOKING_ROOMS or isinstance(settings["go"], bool):
        raise ValueError(f"settings['go'] must be one of {_COOKING_ROOMS}, got {settings['go']!r}")
    for flag in ("open", "cook", "cut", "drop"):
        if not isinstance(settings[flag], bool):
            raise TypeError(f"settings[{flag!r}] must be a bool, got {type(settings[flag]).__name__}")
    if settings["split"] not in _COOKING_SPLITS:
        raise ValueError(f"settings['split'] must be one of {_COOKING_SPLITS}, got {settings['split']!r}")
    if settings["recipe_seed"] > 0 and settings["take"] == 0:
        raise ValueError("settings['recipe_seed'] > 0 needs settings['take'] > 0 (TextWorld's rule)")


def resolve_spec(task: str, settings: Mapping[str, Any] | None = None) -> GameSpec:
    """The :class:`GameSpec` of ``task`` with ``settings`` overriding its defaults.

    Args:
        task: ``treasure_hunter``, ``the_cooking_game`` or ``coin_collector``.
        settings: optional overrides of the task's default challenge settings (see :data:`TASKS`):
            ``level`` for treasure_hunter (1-30) and coin_collector (1-300, at most 100 rooms);
            ``recipe`` (1-5), ``take`` (0-recipe), ``go`` (1, 6, 9, 12), ``open``/``cook``/``cut``/``drop``
            (bool), ``recipe_seed`` (int >= 0), ``split`` (None, train, valid, test) for the cooking game.

    Raises:
        ValueError: unknown task or setting name, or a value out of range.
        TypeError: ``settings`` not a mapping, or a value of the wrong type.
    """
    if task not in TASKS:
        raise ValueError(f"unknown TextWorld task {task!r}; known tasks: {sorted(TASKS)}")
    definition = TASKS[task]
    merged = dict(definition.defaults)
    if settings is not None:
        if not isinstance(settings, Mapping):
            raise TypeError(f"settings must be a mapping, got {type(settings).__name__}")
        unknown = set(settings) - set(merged)
        if unknown:
            raise ValueError(f"unknown settings {sorted(unknown)} for task {task!r}; known: {sorted(merged)}")
        merged.update(settings)
    _validate(task, merged)
    return GameSpec(task, definition.challenge, tuple(sorted(merged.items())), definition.only_last_action)


def game_seed(index: int, attempt: int = 0) -> int:
    """TextWorld's global seed for game ``index`` of a pool, generation attempt ``attempt``.

    ``index + 100_000 * attempt``: attempt 0 of game ``i`` uses seed ``i``. TextWorld derives its map,
    object, quest and grammar seeds from it with ``numpy.random.RandomState``.

    Raises:
        ValueError: negative ``index`` or ``attempt``.
    """
    if index < 0 or attempt < 0:
        raise ValueError(f"index and attempt must be >= 0, got {index}, {attempt}")
    return index + 100_000 * attempt


def default_cache_dir() -> Path:
    """``$VERLOG_CACHE/textworld`` if set, else ``<checkout or cwd>/.cache/verlog/textworld``."""
    root = os.environ.get("VERLOG_CACHE")
    if root:
        return Path(root).expanduser() / "textworld"
    checkout = Path(__file__).resolve().parents[2]
    if not ((checkout / "setup.cfg").is_file() or (checkout / ".git").exists()):
        checkout = Path.cwd()
    return checkout / ".cache" / "verlog" / "textworld"


def variant_dir(cache_dir: str | os.PathLike, spec: GameSpec) -> Path:
    """Folder holding the games of ``spec`` under ``cache_dir``."""
    return Path(cache_dir) / spec.task / spec.variant


def game_paths(cache_dir: str | os.PathLike, spec: GameSpec, index: int) -> dict[str, Path]:
    """Paths of game ``index``: keys ``z8``, ``json``, ``ni``, ``meta``, ``lock``."""
    base = variant_dir(cache_dir, spec) / f"game_{index:03d}"
    return {
        "z8": base.with_suffix(".z8"),
        "json": base.with_suffix(".json"),
        "ni": base.with_suffix(".ni"),
        "meta": base.with_suffix(".meta.json"),
        "lock": base.with_suffix(".lock"),
    }


def _complete(paths: dict[str, Path]) -> bool:
    return paths["z8"].is_file() and paths["json"].is_file()


# Run in the child: load this file by path (importing it as ``verlog.envs.textworld_games`` would import
# the ``verlog.envs`` package, and running it as a script would put ``verlog/envs`` on sys.path, where
# ``textworld.py`` shadows the real package).
_CHILD_BOOT = (
    "import importlib.util, sys\n"
    "spec = importlib.util.spec_from_file_location('_verlog_textworld_games', sys.argv[1])\n"
    "module = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = module\n"
    "spec.loader.exec_module(module)\n"
    "sys.exit(module._child_main(sys.argv[2]))\n"
)


def _child_main(job_json: str) -> int:
    """Generate and compile one game (runs in the child process). Returns the exit status."""
    job = json.loads(job_json)
    import textworld
    import textworld.challenges
    from textworld.generator import QuestGenerationError

    options = textworld.GameOptions()
    options.seeds = job["seed"]
    options.grammar.only_last_action = job["only_last_action"]
    options.path = job["output"]
    options.file_ext = ".z8"
    options.force_recompile = True
    _, make, _ = textworld.challenges.CHALLENGES[job["challenge"]]
    try:
        game = make(dict(job["settings"]), options)
    except QuestGenerationError as err:
        print(f"no quest for seed {job['seed']}: {err}", file=sys.stderr)
        return _QUEST_FAILED
    textworld.generator.compile_game(game, options)
    walkthrough = game.metadata.get("walkthrough") or []
    print(json.dumps({"walkthrough_length": len(walkthrough), "max_score": game.max_score}))
    return 0


def _run_child(spec: GameSpec, seed: int, workdir: Path, timeout: float) -> dict[str, Any] | None:
    """Make one game into ``workdir/game.z8``; ``None`` if the seed has no quest."""
    home, tmp = workdir / "home", workdir / "tmp"
    home.mkdir(parents=True)
    tmp.mkdir()
    env = dict(os.environ)
    env.update(HOME=str(home), TMPDIR=str(tmp), TMP=str(tmp), TEMP=str(tmp), PYTHONHASHSEED="0")
    env.pop("TEXTWORLD_DEBUG", None)
    job = {
        "challenge": spec.challenge,
        "settings": dict(spec.settings),
        "seed": seed,
        "only_last_action": spec.only_last_action,
        "output": str(workdir / "game.z8"),
    }
    command = [sys.executable, "-c", _CHILD_BOOT, str(Path(__file__).resolve()), json.dumps(job)]
    try:
        done = subprocess.run(command, env=env, cwd=workdir, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as err:
        raise GenerationError(f"generating {spec.task} game (seed {seed}) took more than {timeout} s") from err
    if done.returncode == _QUEST_FAILED:
        return None
    if done.returncode != 0:
        raise GenerationError(
            f"generating {spec.task} game (seed {seed}, settings {dict(spec.settings)}) failed with status "
            f"{done.returncode}:\n{done.stderr[-3000:]}"
        )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {}


def _generate(spec: GameSpec, index: int, paths: dict[str, Path], timeout: float) -> None:
    folder = paths["z8"].parent
    for stale in folder.glob(f".tmp-game_{index:03d}-*"):  # left by a killed generator (we hold the lock)
        shutil.rmtree(stale, ignore_errors=True)
    workdir = Path(tempfile.mkdtemp(prefix=f".tmp-game_{index:03d}-", dir=folder))
    try:
        start = time.perf_counter()
        for attempt in range(MAX_ATTEMPTS):
            seed = game_seed(index, attempt)
            result = _run_child(spec, seed, workdir / f"attempt{attempt}", timeout)
            if result is not None:
                break
        else:
            raise GenerationError(f"no quest could be generated for {spec.task} game {index} in {MAX_ATTEMPTS} seeds")
        seconds = time.perf_counter() - start
        made = workdir / f"attempt{attempt}"
        meta = {
            "task": spec.task,
            "challenge": spec.challenge,
            "settings": dict(spec.settings),
            "only_last_action": spec.only_last_action,
            "index": index,
            "seed": seed,
            "attempts": attempt + 1,
            "seconds": round(seconds, 3),
            "textworld": _textworld_version(),
            **result,
        }
        (made / "game.meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        for key, name in _MADE_FILES:  # the .z8 last: its presence marks a complete game
            os.replace(made / name, paths[key])
        logger.info("made %s game %d (seed %d) in %.1f s", spec.task, index, seed, seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def ensure_game(spec: GameSpec, index: int, cache_dir: str | os.PathLike, *, timeout: float = 900.0) -> Path:
    """Path of the ``.z8`` file of game ``index`` of ``spec``, generating it first if needed.

    Safe to call from many processes at once: generation of one game happens under an exclusive file
    lock, in a private temporary folder inside the cache, and the finished files are moved into place
    atomically (``.z8`` last). See the module docstring for the layout and the child-process isolation.

    Args:
        spec: from :func:`resolve_spec`.
        index: game number in the pool, ``>= 0``.
        cache_dir: root of the cache (created if missing).
        timeout: seconds allowed to one generation attempt.

    Raises:
        ValueError: negative ``index``.
        GenerationError: the game could not be generated.
    """
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise ValueError(f"game index must be an int >= 0, got {index!r}")
    paths = game_paths(cache_dir, spec, index)
    if _complete(paths):
        return paths["z8"]
    paths["z8"].parent.mkdir(parents=True, exist_ok=True)
    with open(paths["lock"], "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if not _complete(paths):
                _generate(spec, index, paths, timeout)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return paths["z8"]
