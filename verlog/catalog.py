"""The names a run configuration may give, as plain data: checked in milliseconds, before anything heavy.

The registries that build what these names stand for (:mod:`verlog.envs.registry`,
:mod:`verlog.algos.registry`, :mod:`verlog.agent.tasks`) import gymnasium, the game packages and
torch, which takes seconds to minutes on a busy machine; :mod:`verlog.preflight` checks a config
against the lists below instead, so a misspelt name is refused at once. ``tests/test_catalog.py``
checks that each list equals its registry. The reply prefix and the proxy's credit modes are
defined here and imported by the modules that use them.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Iterable
from urllib.parse import urlsplit

__all__ = ["ALGORITHM_TRAITS", "AGENT_TASK_NAMES", "AlgorithmTraits", "CREDIT_MODES", "ENTRY_POINT_GROUP", "ENV_TASKS",
           "MIXTURE_TASKS", "OPENENV_PREFIX", "OPTIONAL_AGENT_TASKS", "OPENENV_SCHEMES", "OPTIONAL_FAMILIES", "REPLY_PREFIX", "TIDY_TEXT_FAMILIES",
           "env_names", "did_you_mean", "openenv_url"]

#: every task of every environment family, ``<family>/<task>`` (the names of :func:`verlog.envs.list_envs`);
#: the families of :data:`OPTIONAL_FAMILIES` are listed whether or not their package is installed
ENV_TASKS: dict[str, tuple[str, ...]] = {
    "babaisai": (
        'goto_win', 'goto_win-distr_obj', 'goto_win-distr_obj-irrelevant_rule', 'goto_win-distr_obj_rule',
        'goto_win-distr_rule', 'make_win', 'make_win-distr_obj', 'make_win-distr_obj-irrelevant_rule',
        'make_win-distr_obj_rule', 'make_win-distr_rule', 'two_room-break_stop-goto_win',
        'two_room-break_stop-goto_win-distr_obj', 'two_room-break_stop-goto_win-distr_obj-irrelevant_rule',
        'two_room-break_stop-goto_win-distr_obj_rule', 'two_room-break_stop-goto_win-distr_rule',
        'two_room-break_stop-make_win', 'two_room-break_stop-make_win-distr_obj',
        'two_room-break_stop-make_win-distr_obj-irrelevant_rule', 'two_room-break_stop-make_win-distr_obj_rule',
        'two_room-break_stop-make_win-distr_rule', 'two_room-goto_win', 'two_room-goto_win-distr_obj',
        'two_room-goto_win-distr_obj-irrelevant_rule', 'two_room-goto_win-distr_obj_rule',
        'two_room-goto_win-distr_rule', 'two_room-goto_win-distr_win_rule', 'two_room-make_wall_win',
        'two_room-make_win', 'two_room-make_win-distr_obj', 'two_room-make_win-distr_obj-irrelevant_rule',
        'two_room-make_win-distr_obj_rule', 'two_room-make_win-distr_rule', 'two_room-make_win-distr_win_rule',
        'two_room-make_you', 'two_room-make_you-make_win', 'two_room-maybe_break_stop-goto_win',
        'two_room-maybe_break_stop-goto_win-distr_obj',
        'two_room-maybe_break_stop-goto_win-distr_obj-irrelevant_rule',
        'two_room-maybe_break_stop-goto_win-distr_obj_rule', 'two_room-maybe_break_stop-goto_win-distr_rule',
    ),
    "babyai": (
        'balrog_mix', 'easy_goto', 'goto', 'goto_local', 'open', 'open_door_color', 'pick_up_seq_go_to', 'pickup',
        'pickup_loc', 'pickup_then_goto_local', 'putnext', 'putnext_local',
    ),
    "crafter": (
        'default',
    ),
    "minihack": (
        'Boxoban-Hard', 'Boxoban-Medium', 'Corridor-R3', 'CorridorBattle-Dark', 'MazeWalk-15x15',
        'MazeWalk-9x9', 'Quest-Easy', 'Quest-Medium',
    ),
    "nle": (
        'NetHackChallenge', 'default',
    ),
    "textworld": (
        'coin_collector', 'the_cooking_game', 'treasure_hunter',
    ),
    "sokoban": (
        '6x6_1box', '6x6_2box', '8x8_2box',
    ),
    "reasoning_gym": (
        'ab', 'acre', 'advanced_geometry', 'aiw', 'arc_1d', 'arc_agi', 'base_conversion', 'basic_arithmetic', 'bf',
        'binary_alternation', 'binary_matrix', 'bitwise_arithmetic', 'boxnet', 'caesar_cipher',
        'calendar_arithmetic', 'chain_sum', 'circuit_logic', 'codeio', 'coin_flip', 'color_cube_rotation',
        'complex_arithmetic', 'count_bits', 'count_primes', 'countdown', 'course_schedule', 'cryptarithm',
        'decimal_arithmetic', 'decimal_chain_sum', 'dice', 'emoji_mystery', 'family_relationships', 'figlet_font',
        'fraction_simplification', 'futoshiki', 'game_of_life', 'game_of_life_halting', 'gcd', 'graph_color',
        'group_anagrams', 'gsm_symbolic', 'intermediate_integration', 'isomorphic_strings', 'jugs', 'kakurasu',
        'knight_swap', 'knights_knaves', 'largest_island', 'lcm', 'leg_counting', 'letter_counting',
        'letter_jumble', 'list_functions', 'mahjong_puzzle', 'manipulate_matrix', 'maze', 'mini_sudoku',
        'modulo_grid', 'n_queens', 'needle_haystack', 'number_filtering', 'number_format', 'number_sequence',
        'number_sorting', 'palindrome_generation', 'palindrome_partitioning', 'path_star', 'polynomial_equations',
        'polynomial_multiplication', 'pool_matrix', 'power_function', 'prime_factorization', 'products',
        'propositional_logic', 'puzzle24', 'quantum_lock', 'ransom_note', 'rearc', 'rectangle_count',
        'rotate_matrix', 'rotten_oranges', 'rubiks_cube', 'rush_hour', 'self_reference', 'sentence_reordering',
        'shortest_path', 'simple_equations', 'simple_geometry', 'simple_integration', 'sokoban', 'spell_backward',
        'spiral_matrix', 'string_insertion', 'string_manipulation', 'string_splitting', 'string_synthesis',
        'sudoku', 'survo', 'syllogism', 'time_intervals', 'tower_of_hanoi', 'tsumego', 'word_ladder',
        'word_sequence_reversal', 'word_sorting', 'zebra_puzzles',
    ),
    "gem": (
        'GuessTheNumber-v0-easy', 'GuessTheNumber-v0-hard', 'GuessTheNumber-v0-random', 'Mastermind-v0-easy',
        'Mastermind-v0-hard', 'Mastermind-v0-random', 'Minesweeper-v0-easy', 'Minesweeper-v0-hard',
        'Minesweeper-v0-random', 'FifteenPuzzle-v0-easy', 'FifteenPuzzle-v0-hard',
        'Game2048-v0-easy', 'Game2048-v0-hard', 'Game2048-v0-extreme-hard', 'Game2048-v0-random', 'Sokoban-v0-easy',
        'Sokoban-v0-hard', 'Sokoban-v0-random',
    ),
    "textarena": (
        '2048-v0-ultra-easy', '2048-v0-mega-easy', '2048-v0-super-easy', '2048-v0-very-easy', '2048-v0-easy',
        '2048-v0', '2048-v0-hard', '2048-v0-very-hard', '2048-v0-extreme', '2048-v0-3x3', '2048-v0-5x5',
        '2048-v0-6x6', '2048-v0-8x8', '2048-v0-10x10', 'Bandit-v0', 'Bandit-v0-hard', 'Blackjack-v0',
        'Blackjack-v0-long', 'Crosswords-v0', 'Crosswords-v0-hardcore', 'FifteenPuzzle-v0', 'FrozenLake-v0',
        'FrozenLake-v0-random', 'FrozenLake-v0-hardcore', 'GuessTheNumber-v0', 'GuessTheNumber-v0-hardcore',
        'LightsOut-v0', 'LogicPuzzle-v0', 'LogicPuzzle-v0-hard', 'Mastermind-v0', 'Mastermind-v0-hard',
        'Mastermind-v0-extreme', 'Minesweeper-v0', 'Minesweeper-v0-small', 'Minesweeper-v0-medium',
        'Minesweeper-v0-hard', 'PegJump-v0', 'RushHour-v0', 'Secretary-v0', 'Secretary-v0-long', 'Set-v0',
        'Sokoban-v0', 'Sudoku-v0-very-easy', 'Sudoku-v0-easy', 'Sudoku-v0', 'Sudoku-v0-medium',
        'TowerOfHanoi-v0', 'TowerOfHanoi-v0-medium', 'TowerOfHanoi-v0-hard',
        'TowerOfHanoi-v0-hardcore', 'TowerOfHanoi-v0-extreme',
    ),
}


@dataclass(frozen=True)
class AlgorithmTraits:
    """What a config check needs to know of one ``algo.algorithm`` (the fields of the same name of
    :class:`verlog.algos.registry.AlgorithmSpec`)."""

    needs_critic: bool
    grouped_rollouts: bool
    needs_state_keys: bool
    policy_loss: str = "ppo"


#: ``algo.algorithm`` -> its traits, in the order of :data:`verlog.algos.registry.ALGORITHMS`
ALGORITHM_TRAITS: dict[str, AlgorithmTraits] = {
    "ppo": AlgorithmTraits(needs_critic=True, grouped_rollouts=False, needs_state_keys=False),
    "grpo": AlgorithmTraits(needs_critic=False, grouped_rollouts=True, needs_state_keys=False),
    "gigpo": AlgorithmTraits(needs_critic=False, grouped_rollouts=True, needs_state_keys=True),
    "rloo": AlgorithmTraits(needs_critic=False, grouped_rollouts=True, needs_state_keys=False),
    "reinforce_pp": AlgorithmTraits(needs_critic=False, grouped_rollouts=False, needs_state_keys=False),
    "reinforce_pp_baseline": AlgorithmTraits(needs_critic=False, grouped_rollouts=True, needs_state_keys=False),
    "dapo": AlgorithmTraits(needs_critic=False, grouped_rollouts=True, needs_state_keys=False),
    "gspo": AlgorithmTraits(needs_critic=False, grouped_rollouts=True, needs_state_keys=False, policy_loss="gspo"),
}

#: families whose environments come from packages that Verlog does not install by default: family ->
#: (the modules its environments import, the install line a config naming one of its tasks is told to run)
OPTIONAL_FAMILIES: dict[str, tuple[tuple[str, ...], str]] = {
    "reasoning_gym": (("reasoning_gym",), "pip install 'verlog[reasoning-gym]'"),
    # gem-llm 0.1.0 pins reasoning-gym 0.1.23 (the extra has 0.1.25, which its games run with) and requires
    # packages its text games do not use, hence --no-deps
    "gem": (("gem", "reasoning_gym"), "pip install 'verlog[reasoning-gym]' && pip install --no-deps gem-llm==0.1.0"),
    "textarena": (("textarena",), "pip install 'verlog[textarena]'"),
}

#: ``env.task`` names of the form ``openenv:<url>`` play episodes against an OpenEnv server at ``<url>``
#: (:mod:`verlog.envs.openenv_client`)
OPENENV_PREFIX = "openenv:"

#: the URL schemes an ``openenv:<url>`` task may give (http(s) and ws(s) name the same server)
OPENENV_SCHEMES: tuple[str, ...] = ("http", "https", "ws", "wss")

#: the entry-point group through which installed packages add environment families (:mod:`verlog.envs.registry`)
ENTRY_POINT_GROUP = "verlog.envs"

#: the task mixtures (:class:`verlog.envs.mixture.TaskMixture`) -> the tasks they draw from, in order
#: (``env.task_weights`` names some of them)
MIXTURE_TASKS: dict[str, tuple[str, ...]] = {
    "babyai/balrog_mix": ("babyai/goto", "babyai/pickup", "babyai/open", "babyai/putnext", "babyai/pick_up_seq_go_to"),
}

#: the families whose environments also offer ``env.text_style=tidy`` (the others have BALROG's text only)
TIDY_TEXT_FAMILIES: tuple[str, ...] = ("babyai", "crafter", "minihack", "nle", "textworld")

#: the tool tasks of :data:`verlog.agent.tasks.AGENT_TASKS` (``agent.task``)
AGENT_TASK_NAMES: tuple[str, ...] = ("calculator", "search")

#: built-in tool tasks whose tools come from packages that Verlog does not install by default: task ->
#: (the modules its tools import, the install line a config naming it is told to run)
OPTIONAL_AGENT_TASKS: dict[str, tuple[tuple[str, ...], str]] = {
    "search": (("bm25s",), "pip install 'verlog[search]'"),
}

#: how the proxy spreads a rollout's reward over its calls (``agent.credit``; :mod:`verlog.proxy.adapter`)
CREDIT_MODES: tuple[str, ...] = ("final", "discounted", "gae")

#: what every format warm-up reply starts with (``ACTION: <action>``; :mod:`verlog.warmup`)
REPLY_PREFIX = "ACTION: "


def env_names() -> list[str]:
    """Every name of :data:`ENV_TASKS` as ``<family>/<task>``, sorted."""
    return sorted(f"{family}/{task}" for family, tasks in ENV_TASKS.items() for task in tasks)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to ``name`` by :func:`difflib.get_close_matches`
    (similarity ratio >= 0.6), else ``""``: ``babyai/gotoo`` finds ``babyai/goto``."""
    close = difflib.get_close_matches(str(name), list(choices), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def openenv_url(name: str) -> str | None:
    """The server URL of an ``openenv:<url>`` environment name, or ``None`` for any other name.

    The URL is the server's base address: a scheme of :data:`OPENENV_SCHEMES`, a host, an optional port
    and an optional path prefix, with no query, fragment or user info; one trailing ``/`` is dropped.

    Raises:
        ValueError: ``name`` starts with :data:`OPENENV_PREFIX` but the rest is not such a URL (one line).
    """
    if not isinstance(name, str) or not name.startswith(OPENENV_PREFIX):
        return None
    url = name[len(OPENENV_PREFIX):]
    try:
        parts = urlsplit(url)
        port = parts.port  # parses the port, raising ValueError when it is not a number in range
    except ValueError as exc:
        raise ValueError(f"{name!r} is not openenv:<url> with a valid URL: {exc}") from None
    if parts.scheme not in OPENENV_SCHEMES or not parts.hostname:
        raise ValueError(f"{name!r}: expected openenv:<scheme>://<host>[:<port>] with scheme one of "
                         f"{', '.join(OPENENV_SCHEMES)}, e.g. openenv:http://127.0.0.1:8000")
    if parts.query or parts.fragment or parts.username or parts.password or any(c.isspace() for c in url):
        raise ValueError(f"{name!r}: the server URL takes no query, fragment, user info or whitespace")
    del port
    return url[:-1] if url.endswith("/") else url
