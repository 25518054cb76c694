"""NetHack's actions under BALROG's names, the keys they press and their glosses.

The tables map BALROG's action names onto NetHack keys (:data:`NAMED_ACTIONS`); an env's own action
list is searched for the key's value (:func:`action_indices`), so no action index is hard-coded.
"""

from __future__ import annotations

import string
from typing import Sequence

from nle import nethack

__all__ = [
    "MOVE_ACTIONS",
    "FAR_MOVE_ACTIONS",
    "NAMED_ACTIONS",
    "ACTION_GLOSSES",
    "LETTER_ACTIONS",
    "DIGIT_ACTIONS",
    "action_indices",
]

_C = nethack.C  # Ctrl-key code
_M = nethack.M  # Meta-key code

#: The eight one-step moves (BALROG's names) -> NetHack key (vi-keys).
MOVE_ACTIONS: dict[str, int] = {
    "north": ord("k"),
    "east": ord("l"),
    "south": ord("j"),
    "west": ord("h"),
    "northeast": ord("u"),
    "southeast": ord("n"),
    "southwest": ord("b"),
    "northwest": ord("y"),
}
#: The eight "far" moves (run until something interesting) -> shifted vi-keys.
FAR_MOVE_ACTIONS: dict[str, int] = {f"far {name}": ord(chr(key).upper()) for name, key in MOVE_ACTIONS.items()}

_MOVE_GLOSSES = {name: f"move one step {name}" for name in MOVE_ACTIONS}
_MOVE_GLOSSES.update(
    {name: f"move {name[4:]} until something interesting is reached" for name in FAR_MOVE_ACTIONS}
)

# name, key, gloss. Our own glosses. Covers nle's USEFUL_ACTIONS (except SHELL: the shell escape is
# disabled in NLE's build, the key only prints an error) and the extra names of BALROG's NetHack
# prompt (annotate, teleport, travel, minus, apos); BALROG's commented-out "overview" is left out.
_NAMED: tuple[tuple[str, int, str], ...] = (
    ("up", ord("<"), "go up a staircase or ladder (you must stand on it)"),
    ("down", ord(">"), "go down a staircase or ladder (you must stand on it)"),
    ("wait", ord("."), "rest one turn doing nothing (at a position prompt: confirm the cursor position)"),
    ("more", ord("\r"), "show the next part of a message ending in --More-- (normally pressed for you)"),
    ("adjust", _M("a"), "change the letter of an inventory item"),
    ("annotate", _M("A"), "write a note about the current level"),
    ("apply", ord("a"), "apply (use) a tool, e.g. a key, a lamp, a pick-axe, a horn or a whistle"),
    ("attributes", _C("x"), "show your character's role, race, alignment, god and attributes"),
    ("call", ord("C"), "give a name to a monster, an object or an object type"),
    ("cast", ord("Z"), "cast a spell you know"),
    ("chat", _M("c"), "talk to someone next to you (e.g. a shopkeeper or a priest)"),
    ("close", ord("c"), "close an adjacent door (then give its direction)"),
    ("dip", _M("d"), "dip an object into something (a potion, a fountain)"),
    ("drop", ord("d"), "drop one item"),
    ("droptype", ord("D"), "drop several items, chosen by type"),
    ("eat", ord("e"), "eat something (do it when you are Hungry)"),
    ("engrave", ord("E"), "write on the floor (the word Elbereth scares most monsters)"),
    ("enhance", _M("e"), "advance or check your weapon and spell skills"),
    ("esc", _C("["), "cancel the current prompt or menu"),
    ("fight", ord("F"), "attack in a direction even if you see no monster there (then give the direction)"),
    ("fire", ord("f"), "fire the ammunition in your quiver (then give a direction)"),
    ("force", _M("f"), "force the lock of a box or chest on the floor with your weapon"),
    ("inventory", ord("i"), "show your inventory (it is also given with every observation)"),
    ("inventtype", ord("I"), "show the inventory items of one type"),
    ("invoke", _M("i"), "invoke the special power of an artifact"),
    ("jump", _M("j"), "jump to a nearby location (if you are able to)"),
    ("kick", _C("d"), "kick something, e.g. a locked door or a box (then give its direction)"),
    ("look", ord(":"), "look at what is on your square"),
    ("loot", _M("l"), "open a box or chest on your square to take things out or put things in"),
    ("monster", _M("m"), "use the special ability of your monster form (when polymorphed)"),
    ("move", ord("m"), "prefix: move one step without picking anything up or fighting (then a direction)"),
    ("movefar", ord("M"), "prefix: run without picking anything up or fighting (then a direction)"),
    ("offer", _M("o"), "offer a sacrifice to your god (stand on an altar)"),
    ("open", ord("o"), "open an adjacent door (then give its direction)"),
    ("pay", ord("p"), "pay your shopping bill"),
    ("pickup", ord(","), "pick up things on your square"),
    ("pray", _M("p"), "pray to your god for help (only in real trouble, and rarely)"),
    ("puton", ord("P"), "put on an accessory (ring, amulet, blindfold)"),
    ("quaff", ord("q"), "drink something (a potion, or from a fountain)"),
    ("quiver", ord("Q"), "choose the ammunition to fire"),
    ("read", ord("r"), "read a scroll or a spellbook"),
    ("remove", ord("R"), "remove an accessory"),
    ("ride", _M("R"), "mount or dismount a saddled steed"),
    ("rub", _M("r"), "rub a lamp or a stone"),
    ("rush", ord("g"), "prefix: rush in a direction until something interesting is seen"),
    ("rush2", ord("G"), "prefix: rush in a direction, ignoring side corridors"),
    ("search", ord("s"), "search the adjacent squares for hidden doors, passages and traps"),
    ("seearmor", ord("["), "show the armor you wear"),
    ("seerings", ord("="), "show the rings you wear"),
    ("seetools", ord("("), "show the tools you use"),
    ("seetrap", ord("^"), "show the type of an adjacent trap"),
    ("seeweapon", ord(")"), "show the weapon you wield"),
    ("seespells", ord("+"), "list the spells you know"),
    ("seeamulet", ord('"'), "show the amulet you wear"),
    ("seegold", ord("$"), "count your gold"),
    ("sit", _M("s"), "sit down"),
    ("swap", ord("x"), "swap your wielded and secondary weapons"),
    ("takeoff", ord("T"), "take off one piece of armor"),
    ("takeoffall", ord("A"), "take off all your armor"),
    ("teleport", _C("t"), "teleport within the level (only if you have that ability)"),
    ("throw", ord("t"), "throw something, e.g. a dagger (then give a direction)"),
    ("tip", _M("T"), "empty a container onto the floor"),
    (
        "travel",
        ord("_"),
        "travel to a map location: next press < or > (the up/down actions) to put the cursor on a "
        "staircase, then . (wait) to go there",
    ),
    ("turnundead", _M("t"), "turn undead (knights and priests)"),
    ("twoweapon", ord("X"), "toggle two-weapon combat"),
    ("untrap", _M("u"), "try to disarm a trap"),
    ("versionshort", ord("v"), "show the game's version"),
    ("wear", ord("W"), "wear a piece of armor"),
    ("wield", ord("w"), "wield a weapon"),
    ("wipe", _M("w"), "wipe off your face"),
    ("zap", ord("z"), "zap a wand (then give a direction)"),
    ("minus", ord("-"), "the - key (at an item prompt: nothing, e.g. bare hands for wield)"),
    ("space", ord(" "), "the space key (pages through a menu)"),
    ("apos", ord("'"), "the ' key"),
)

#: Every named action (moves, far moves, commands; not the single letters/digits) -> NetHack key.
NAMED_ACTIONS: dict[str, int] = {**MOVE_ACTIONS, **FAR_MOVE_ACTIONS, **{name: key for name, key, _ in _NAMED}}
#: Named action -> short explanation (our words), shown in the instructions.
ACTION_GLOSSES: dict[str, str] = {**_MOVE_GLOSSES, **{name: gloss for name, _, gloss in _NAMED}}
#: The 52 single-letter actions (an item letter at a prompt; outside prompts, that key's command).
LETTER_ACTIONS: tuple[str, ...] = tuple(string.ascii_lowercase + string.ascii_uppercase)
#: The ten digit actions (counts, menu choices).
DIGIT_ACTIONS: tuple[str, ...] = tuple(string.digits)


def _action_key(name: str) -> int:
    if name in NAMED_ACTIONS:
        return NAMED_ACTIONS[name]
    if len(name) == 1 and (name in LETTER_ACTIONS or name in DIGIT_ACTIONS):
        return ord(name)
    raise ValueError(f"unknown NetHack action name {name!r}")


def action_indices(env_actions: Sequence[int], names: Sequence[str], *, strict: bool = True) -> dict[str, int]:
    """Map action names onto indices of an NLE env's own action list, by the keys' values.

    Args:
        env_actions: the env's ``actions`` (nle enums, i.e. ints: the key codes).
        names: action names: keys of :data:`NAMED_ACTIONS`, single letters or digits.
        strict: raise if a name's key is not in ``env_actions``; otherwise leave the name out.

    Returns:
        ``{name: index}`` in the order of ``names`` (the first index when a key appears twice).

    Raises:
        ValueError: an unknown name, or (``strict``) a name whose key the env does not have.
    """
    first: dict[int, int] = {}
    for index, key in enumerate(env_actions):
        first.setdefault(int(key), index)
    out: dict[str, int] = {}
    for name in names:
        key = _action_key(name)
        if key in first:
            out[name] = first[key]
        elif strict:
            raise ValueError(f"action {name!r} (key {key}) is not in this env's action set")
    return out
