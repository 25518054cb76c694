"""The system prompts of the TextWorld env (our own words, BALROG's content)."""

from __future__ import annotations

from verlog.envs.options import task_entry

__all__ = ["INSTRUCTION_STYLES", "build_brief_instruction", "build_instruction"]

_COMMON_COMMANDS = [
    ("look", "describe the room you are in"),
    ("goal", "show the objective of the game"),
    ("inventory", "list what you are carrying"),
    ("go <direction>", "move north, south, east or west"),
    ("examine <thing>", "look closely at something"),
    ("open <door or container> / close <door or container>", "open or close it"),
    ("take <object>", "pick up an object from the floor"),
    ("take <object> from <container or supporter>", "take an object out of a container or off a supporter"),
    ("put <object> on <supporter>", "place an object on a table, counter, shelf ..."),
    ("insert <object> into <container>", "place an object into a box, chest, fridge ..."),
    ("drop <object>", "drop an object you carry"),
    ("unlock <door or container> with <key>", "unlock it with a key you carry (lock ... with ... locks)"),
]
_COOKING_COMMANDS = [
    ("eat <food>", "eat something edible (eat the meal once it is prepared)"),
    ("cook <food> with <heat source>", "fry it on the stove, roast it in the oven or grill it on the BBQ"),
    ("slice / chop / dice <food> with <knife>", "cut food; you must hold both the food and the knife"),
    ("prepare meal", "combine the prepared ingredients into the meal (in the kitchen)"),
]
#: The tip that sends the agent to ``goal`` (only where ``goal`` shows the objective), per task.
_GOAL_TIPS = {
    "treasure_hunter": "Type goal first: it names the object to find and where it is.",
    "coin_collector": "Type goal to see what is asked.",
}
_GAME_TEXT = {
    "treasure_hunter": (
        "You are in a randomly generated maze of rooms and must find one particular object and pick it "
        "up. The object may be behind closed or locked doors, or inside closed or locked containers.",
        [
            "Picking up the wrong object loses the game: take only the object named in the goal, and a "
            "key only when a locked door or container is in your way.",
            "A locked door or container must be unlocked with the matching key in your inventory before "
            "it can be opened.",
            "Explore systematically and remember which rooms and exits you have already visited.",
        ],
    ),
    "the_cooking_game": (
        "You are hungry and must cook a meal. Find the kitchen, read the cookbook to learn the recipe, "
        "collect every ingredient it lists (they are spread over the house, often inside closed "
        "containers such as the fridge), process each one exactly as the recipe says, then prepare the "
        "meal in the kitchen and eat it. You score a point for each useful step.",
        [
            "examine cookbook (in the kitchen) shows the recipe.",
            "Cooking: the stove fries, the oven roasts, the BBQ grills. Cutting (slice, chop, dice) needs "
            "a knife in your hands.",
            "Do exactly what the recipe says: cooking or cutting an ingredient the wrong way, burning it, "
            "or eating a needed ingredient loses the game.",
            "Doors between rooms may be closed: open them to pass.",
        ],
    ),
    "coin_collector": (
        "You are in a chain of rooms, some with dead ends branching off, and must find the coin and "
        "pick it up.",
        [
            "The rooms are connected by exits north, south, east and west; a dead end means you should "
            "go back and try another exit.",
            "Remember which exits you have already tried, so you do not walk in circles.",
            "When you see the coin, take coin.",
        ],
    ),
}


def build_instruction(task: str, max_steps: int | None, objective: str | None = None) -> str:
    """BALROG's instruction content for a TextWorld task, in our own words.

    Without ``objective``, like BALROG's prompt, it does not state the episode's objective and sends the
    agent to ``goal``. With it (the ``balrog`` text style, whose reply to ``goal`` has the objective cut
    out, as BALROG's has) it states the objective and does not list ``goal``. Unlike BALROG's prompt
    (which claims 40, 80 and 25 steps) it states the real step limit.

    Args:
        task: a key of :data:`~verlog.envs.textworld.TEXTWORLD_TASKS`.
        max_steps: the episode's step limit (stated in the text; ``None``: no limit, not stated).
        objective: the episode's objective to state, or ``None``.

    Raises:
        ValueError: unknown task.
    """
    intro, tips = task_entry(_GAME_TEXT, task, "TextWorld")
    commands = _COMMON_COMMANDS + (_COOKING_COMMANDS if task == "the_cooking_game" else [])
    if objective is None:
        tips = [_GOAL_TIPS[task], *tips] if task in _GOAL_TIPS else tips
    else:
        commands = [(name, meaning) for name, meaning in commands if name != "goal"]
        intro = f"{intro}\n\nThe objective of this game: {' '.join(objective.split())}"
    listing = "\n".join(f"- {name}: {meaning}" for name, meaning in commands)
    if max_steps is not None:
        tips = [*tips, f"You have at most {max_steps} commands."]
    tip_lines = "\n".join(f"- {tip}" for tip in tips)
    return (
        "You are playing TextWorld, a text adventure game. Each turn you read what the game says and "
        f"type one command in plain English.\n\n{intro}\n\n"
        f"Useful commands:\n{listing}\n\n"
        f"Tips:\n{tip_lines}\n"
        "- Use the exact names of things as the game writes them.\n"
        "- If the game does not understand a command, rephrase it with the verbs above.\n\n"
        "Think briefly if you want, then end your reply with one line of the form\n"
        "ACTION: <command>\n"
        "with exactly one command, e.g. ACTION: go north"
    )


def build_brief_instruction(objective: str) -> str:
    """A short system prompt: the game's objective and the reply format (for tiny models)."""
    return (
        f"Text adventure. {objective.strip()} "
        "Type one command per turn (look, goal, inventory, go north, open door, take key ...). "
        "Reply with ACTION: <command>."
    )


INSTRUCTION_STYLES = ("full", "brief")
