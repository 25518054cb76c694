"""Text environments with the gymnasium API (string observations, raw reply strings as actions).

Importing this package registers the BabyAI tasks: BALROG's ``babyai/goto``, ``babyai/pickup``,
``babyai/open``, ``babyai/putnext``, ``babyai/pick_up_seq_go_to``, and ``babyai/goto_local``,
``babyai/pickup_loc``, ``babyai/open_door_color``, ``babyai/putnext_local``,
``babyai/pickup_then_goto_local``, ``babyai/easy_goto`` (see :data:`verlog.envs.babyai.BABYAI_TASKS`).
"""

from verlog.envs import babyai as _babyai  # noqa: F401  (registers the babyai/* tasks)
from verlog.envs.base import TextEnv
from verlog.envs.parsing import extract_action
from verlog.envs.registry import list_envs, make_env, register
from verlog.envs.vector import TextVectorEnv, final_infos, final_observations, make_vector_env, split_infos

__all__ = [
    "TextEnv",
    "TextVectorEnv",
    "extract_action",
    "final_infos",
    "final_observations",
    "list_envs",
    "make_env",
    "make_vector_env",
    "register",
    "split_infos",
]
