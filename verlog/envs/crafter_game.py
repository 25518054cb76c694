"""crafter as the text env runs it: BALROG's action names mapped onto crafter's actions, crafter's
achievements, a crafter that renders no frames and replays exactly from a seed, and the exact world
state as a key (:func:`world_state_key`).

:func:`make_world_deterministic` replaces the world's per-chunk object sets with insertion-ordered
ones, and :class:`TextOnlyCrafter` skips drawing frames while drawing the same random numbers as
crafter's renderer; :mod:`verlog.envs.crafter` explains why both are needed.
"""

from __future__ import annotations

import collections
import hashlib
from typing import Any, Callable

import crafter
import numpy as np
from crafter import constants, engine, objects

__all__ = [
    "ACHIEVEMENTS",
    "ACTION_INDEX",
    "CRAFTER_ACTIONS",
    "DEFAULT_ACTION",
    "TextOnlyCrafter",
    "make_world_deterministic",
    "world_state_key",
]

#: BALROG action name -> crafter's action name (looked up in ``crafter.constants.actions`` by name).
CRAFTER_ACTIONS: dict[str, str] = {
    "Noop": "noop",
    "Move West": "move_left",
    "Move East": "move_right",
    "Move North": "move_up",
    "Move South": "move_down",
    "Do": "do",
    "Sleep": "sleep",
    "Place Stone": "place_stone",
    "Place Table": "place_table",
    "Place Furnace": "place_furnace",
    "Place Plant": "place_plant",
    "Make Wood Pickaxe": "make_wood_pickaxe",
    "Make Stone Pickaxe": "make_stone_pickaxe",
    "Make Iron Pickaxe": "make_iron_pickaxe",
    "Make Wood Sword": "make_wood_sword",
    "Make Stone Sword": "make_stone_sword",
    "Make Iron Sword": "make_iron_sword",
}
DEFAULT_ACTION = "Noop"


def _action_indices() -> dict[str, int]:
    """BALROG action name -> index in crafter's action space; fails loudly if crafter's list changed."""
    upstream = list(constants.actions)
    missing = sorted(set(CRAFTER_ACTIONS.values()) - set(upstream))
    if missing or len(upstream) != len(CRAFTER_ACTIONS):
        raise ImportError(
            f"crafter's action list {upstream} does not match the 17 BALROG actions (missing {missing}); "
            "verlog.envs.crafter was written for crafter 1.8.3"
        )
    return {name: upstream.index(crafter_name) for name, crafter_name in CRAFTER_ACTIONS.items()}


#: BALROG action name -> index in crafter's action space.
ACTION_INDEX: dict[str, int] = _action_indices()

#: crafter's 22 achievements, in crafter's order.
ACHIEVEMENTS: tuple[str, ...] = tuple(constants.achievements)
if len(ACHIEVEMENTS) != 22:
    raise ImportError(f"crafter lists {len(ACHIEVEMENTS)} achievements, expected 22 (crafter 1.8.3)")


class _OrderedObjects(dict):
    """An insertion-ordered stand-in for the ``set`` crafter keeps per world chunk (values unused).

    crafter only calls ``add``, ``remove``, ``len`` and iteration on these sets; iterating a real set of
    objects follows their memory addresses, which made crafter's despawn choice irreproducible.
    """

    def add(self, obj: Any) -> None:
        self[obj] = None

    def remove(self, obj: Any) -> None:
        del self[obj]


class _OrderedWorld(engine.World):
    """crafter's world with insertion-ordered per-chunk object sets; otherwise unchanged."""

    def reset(self, seed: int | None = None) -> None:
        super().reset(seed)
        self._chunks = collections.defaultdict(_OrderedObjects)


def make_world_deterministic(game: crafter.Env) -> None:
    """Give a ``crafter.Env`` insertion-ordered chunk sets (takes effect from its next ``reset``).

    Used by :class:`TextOnlyCrafter` and by tests/benchmarks to build the bare reference env.

    Raises:
        TypeError: ``game`` is not a ``crafter.Env`` or its world is not crafter's ``World``.
    """
    if not isinstance(game, crafter.Env) or type(game._world) not in (engine.World, _OrderedWorld):
        raise TypeError(f"expected a crafter.Env with crafter's World, got {type(game).__name__}")
    game._world.__class__ = _OrderedWorld


class TextOnlyCrafter(crafter.Env):
    """``crafter.Env`` that renders no frame but keeps the random stream of one that does.

    ``step``/``reset`` are crafter's own; only ``_obs`` (which crafter calls to render the returned
    image) is replaced: it returns ``None`` and, at night, draws the numbers crafter's renderer would
    have drawn from ``world.random`` for its noise (``uniform(32, 127, world_view_pixels)``).
    ``render()`` still works for debugging, but like crafter's it draws that noise at night, so an
    extra call changes the rest of the episode.

    Args:
        image_size: the ``(width, height)`` in pixels of the frame crafter would render (at least
            ``(9, 9)``); it sets how many numbers the night noise draws.

    Raises:
        TypeError / ValueError: a bad ``image_size``.
    """

    def __init__(self, image_size: tuple[int, int]) -> None:
        image_size = _check_image_size(image_size)
        # seed=0: crafter must not draw a seed from numpy's global RNG; each episode sets its own.
        super().__init__(area=(64, 64), view=(9, 9), size=image_size, reward=True, length=None, seed=0)
        make_world_deterministic(self)
        unit = self._size // self._view
        self._noise_shape = tuple(int(n) for n in self._local_view._grid * unit)

    def _obs(self) -> None:
        self.draw_render_noise()
        return None

    def draw_render_noise(self) -> None:
        """Draw from ``world.random`` what one ``render()`` of crafter's would draw, and nothing else.

        That is ``uniform(32, 127, world_view_pixels)`` at night (``daylight < 0.5``, when crafter's
        ``engine.LocalView`` adds noise to the frame) and nothing by day. Called by ``_obs`` (crafter
        renders once in ``reset`` and ``step``) and by whoever replays a caller that renders again.
        """
        if self._world.daylight < 0.5:
            self._world.random.uniform(32, 127, self._noise_shape)

    def reset_with_seed(self, episode_seed: int) -> None:
        """Start the episode that ``crafter.Env(seed=episode_seed).reset()`` would start first."""
        self._seed = episode_seed
        self._episode = 0
        self.reset()


def _check_image_size(image_size: Any) -> tuple[int, int]:
    if not isinstance(image_size, (tuple, list)) or len(image_size) != 2:
        raise TypeError(f"image_size must be a (width, height) pair of ints, got {image_size!r}")
    if any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) for n in image_size):
        raise TypeError(f"image_size must be a (width, height) pair of ints, got {image_size!r}")
    if any(n < 9 for n in image_size):
        raise ValueError(f"image_size must be at least (9, 9) pixels (one per view cell), got {image_size!r}")
    return int(image_size[0]), int(image_size[1])


#: crafter's object classes -> (a code, the object's state besides its kind, position and health). The
#: player's is written separately (:func:`_player_numbers`); cows and fences hold nothing else.
_OBJECT_STATE: dict[type, tuple[int, Callable[[Any], tuple]]] = {
    objects.Player: (1, lambda obj: ()),
    objects.Cow: (2, lambda obj: ()),
    objects.Zombie: (3, lambda obj: (obj.cooldown,)),
    objects.Skeleton: (4, lambda obj: (obj.reload,)),
    objects.Arrow: (5, lambda obj: tuple(obj.facing)),
    objects.Plant: (6, lambda obj: (obj.grown,)),
    objects.Fence: (7, lambda obj: ()),
}


def _player_numbers(game: crafter.Env) -> list[float]:
    """The player's state besides its place among the objects: facing, sleeping, the inventory (vitals
    included) in crafter's item order, the hidden hunger/thirst/fatigue/recovery counters and the
    health of the last update (which decides waking up when hurt), and the unlocked achievements."""
    player = game._player
    unlocked = [name in game._unlocked for name in ACHIEVEMENTS]
    return [*player.facing, player.sleeping, *(player.inventory[name] for name in constants.items),
            player._hunger, player._thirst, player._fatigue, player._recover, player._last_health, *unlocked]


def world_state_key(game: crafter.Env) -> bytes:
    """A 32-byte BLAKE2b digest of the exact state of a running crafter game (equal digests: the same state).

    It hashes, as numbers of one fixed layout: the step counter (the time of day and the 10-step
    creature balancing are functions of it), :func:`_player_numbers`, every object of the WHOLE world
    in crafter's update order (kind, position, health, and a zombie's cooldown, a skeleton's reload, an
    arrow's direction, a plant's growth), then the whole 64 x 64 material map. The raw bytes are about
    4.5 KB plus 32 to 48 bytes per object, hence the digest.

    Left out, as they are not the state: ``world.random`` (crafter's random stream: the source of chance
    in a state, not part of it), achievement counts beyond the first unlock (they change nothing), the
    last action, and the memory order of the per-chunk object sets (crafter picks from them at random).

    Raises:
        RuntimeError: ``game`` has no episode yet, or holds an object kind crafter 1.8.3 does not have
            (its state would be missing from the key).
    """
    if game._player is None:
        raise RuntimeError("no episode yet: call reset() first")
    numbers: list[float] = [game._step, *_player_numbers(game)]
    for obj in game._world.objects:
        entry = _OBJECT_STATE.get(type(obj))
        if entry is None:
            raise RuntimeError(f"crafter object {type(obj).__name__} has no state layout in the key")
        code, extra = entry
        numbers.extend((code, *obj.pos, obj.health, *extra(obj)))
    # every number (ints, and counters in steps of 0.5) is exact in float64
    head = np.asarray(numbers, dtype=np.float64).tobytes()
    digest = hashlib.blake2b(head, digest_size=32)
    digest.update(game._world._mat_map.tobytes())
    return digest.digest()
