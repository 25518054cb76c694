"""The system prompts of the Crafter env (our own words, BALROG's content)."""

from __future__ import annotations

import functools
from typing import Mapping

from crafter import constants

from verlog.envs.crafter_game import ACHIEVEMENTS, CRAFTER_ACTIONS

__all__ = ["INSTRUCTION_STYLES", "build_brief_instruction", "build_instruction"]

def _words(name: str) -> str:
    return name.replace("_", " ")


def _uses(uses: Mapping[str, int]) -> str:
    return ", ".join(f"{count} {_words(item)}" for item, count in uses.items())


def _action_glosses() -> dict[str, str]:
    """Short help per action; requirements are read from crafter's own rules (``constants``)."""
    glosses = {
        "Noop": "do nothing",
        "Move West": "move one step west (you turn to face west even if the way is blocked)",
        "Move East": "move one step east (you turn to face east even if the way is blocked)",
        "Move North": "move one step north (you turn to face north even if the way is blocked)",
        "Move South": "move one step south (you turn to face south even if the way is blocked)",
        "Do": (
            "interact with what you face: collect a material (tree: wood; water: drink; grass: "
            "sometimes a sapling; stone and coal need a wood pickaxe, iron a stone pickaxe, diamond an "
            "iron pickaxe), hit a creature (cows give food when defeated), or eat a ripe plant"
        ),
        "Sleep": "go to sleep (only when your energy is below 9); you wake up when it is full again",
    }
    for name, info in constants.place.items():
        where = ", ".join(info["where"])
        glosses[f"Place {name.title()}"] = f"place a {name} on the cell you face ({where}); uses {_uses(info['uses'])}"
    for name, info in constants.make.items():
        nearby = " and a ".join(info["nearby"])
        article = "an" if name[0] in "aeiou" else "a"
        glosses[f"Make {_words(name).title()}"] = (
            f"craft {article} {_words(name)}; needs a {nearby} within one step of you (diagonals count) and "
            f"uses {_uses(info['uses'])}"
        )
    missing = set(CRAFTER_ACTIONS) ^ set(glosses)
    if missing:
        raise ImportError(f"no help text for crafter actions {sorted(missing)}")
    return {name: glosses[name] for name in CRAFTER_ACTIONS}


_ACTION_HELP: dict[str, str] = _action_glosses()


#: How the observation text lists things, per text style of :mod:`verlog.envs.crafter`.
_SEEN = {
    "balrog": "every kind of thing in that area, the ground (grass, sand, path) included, at its nearest cell",
    "tidy": "the nearest thing of each kind (the ground of grass, sand and path is not listed)",
}
#: An example position per location style (:func:`verlog.envs.crafter_text.describe_location`).
_WHERE = {"compass": "tree 3 steps to your north-west", "offset": "tree 1 step north and 2 steps west"}


@functools.lru_cache(maxsize=8)
def build_instruction(view: tuple[int, int] = (9, 7), text_style: str = "balrog", location_style: str = "compass") -> str:
    """The system prompt of a Crafter episode (our own words, BALROG's content).

    It carries what BALROG's prompt does (the goal, the 17 actions with their meaning, the 22
    achievements, that a history of actions and observations is shown) and also explains the
    observations, the crafting costs and survival.

    Args:
        view: width (west-east) and height (north-south) of the described area, in cells.
        text_style: ``"balrog"`` or ``"tidy"``: how the observations list things.
        location_style: ``"compass"`` or ``"offset"``: the wording of the example position.

    Returns:
        Text explaining the game and the observations, listing the 17 actions with short help and the
        22 achievements, giving survival tips, and asking for a final ``ACTION: <action>`` line.

    Raises:
        KeyError: an unknown ``text_style`` or ``location_style``.
    """
    width, height = view
    seen, where = _SEEN[text_style], _WHERE[location_style]
    actions = "\n".join(f"- {name}: {help_}" for name, help_ in _ACTION_HELP.items())
    achievements = "\n".join(f"- {_words(name)}" for name in ACHIEVEMENTS)
    return (
        "You are playing Crafter, a 2D survival and crafting game on a grid world seen from above. Your "
        "goal is to unlock as many of the 22 achievements below as possible (each counts once): gather "
        "resources, craft tools and survive.\n\n"
        f"Each turn you are told what is around you in an area {width} cells wide (west to east) and "
        f"{height} cells high (north to south) centred on you: {seen}, with its position relative to "
        f'you, e.g. "{where}", and what you face (the cell you would act on); it also says when you '
        "are asleep or have died. Your health, food, drink and energy (each out of 9) and your "
        "inventory are shown with the current observation; your earlier actions and observations "
        "may come before it.\n\n"
        f"Actions:\n{actions}\n\n"
        f"Achievements:\n{achievements}\n\n"
        "Tips:\n"
        "- You act on the cell you face: move towards a thing until you face it, then use Do.\n"
        "- Food, drink and energy go down over time; when one of them is 0 you lose health, otherwise "
        "health slowly comes back. Eat cows, drink water, sleep when your energy is low.\n"
        "- Zombies (on grass, more at night) and skeletons (in cave tunnels, they shoot arrows) attack "
        "you; walking into lava kills you. Fight with Do, or block them with stone.\n"
        "- Place a table to craft wood tools; stone tools need stone; iron tools need a table and a "
        "furnace next to you.\n"
        "- If an action does not change anything, do not repeat it; try something else.\n\n"
        "Think briefly if you want, then end your reply with one line of the form\n"
        "ACTION: <action>\n"
        "where <action> is exactly one of: " + ", ".join(CRAFTER_ACTIONS) + "."
    )


@functools.lru_cache(maxsize=8)
def build_brief_instruction(
    view: tuple[int, int] = (9, 7), text_style: str = "balrog", location_style: str = "compass"
) -> str:
    """A short system prompt: the goal, the actions and the reply format, nothing else.

    For small models trained from scratch, where :func:`build_instruction` would dominate every
    prompt. The arguments are accepted for symmetry with :func:`build_instruction` and unused.
    """
    return (
        "Play Crafter: collect resources, craft tools and survive to unlock achievements. "
        f"Actions: {', '.join(CRAFTER_ACTIONS)}. Reply with ACTION: <action>."
    )


INSTRUCTION_STYLES = {"full": build_instruction, "brief": build_brief_instruction}
