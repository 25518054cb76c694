"""The Verlog side of training the echo taskset (imported by ``verlog-train`` in Verlog's own
environment; it never imports verifiers): ``agent.task=verlog_echo_agent:rows`` names which task each
conversation plays, ``agent.agent=verlog_echo_agent:solve`` plays it by running ``drive_one.py`` in
the verifiers virtualenv whose python ``VERLOG_VERIFIERS_PYTHON`` names (and appends the driver's JSON
line to the file ``VERIFIERS_ECHO_LOG`` names, if any).
"""

import os
import random
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORDS = ("red", "blue", "green", "ball", "key", "door", "box", "left")  # as verlog_echo.taskset


def rows(n: int, seed: int) -> list[dict]:
    """``n`` task rows drawn from ``seed``: the task index and (for the tokenizer corpus) its prompt."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        index = rng.randrange(len(WORDS))
        out.append({"index": index, "prompt": f"Repeat the word: {WORDS[index]}", "answer": WORDS[index]})
    return out


def solve(row: dict, *, base_url: str, reward_url: str, temperature: float, max_tokens: int) -> None:
    """Play ``row``'s task through verifiers' client against ``base_url``; it posts the reward.

    Raises:
        RuntimeError: the driver failed (the last line of its error output).
    """
    python = os.environ.get("VERLOG_VERIFIERS_PYTHON", sys.executable)
    out = subprocess.run([python, str(HERE / "drive_one.py"), base_url, reward_url, str(row["index"]),
                          str(temperature), str(max_tokens)], capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=str(HERE)))
    if out.returncode != 0:
        raise RuntimeError((out.stderr.strip().splitlines() or ["no output"])[-1][:300])
    if os.environ.get("VERIFIERS_ECHO_LOG"):
        with open(os.environ["VERIFIERS_ECHO_LOG"], "a") as log:
            log.write(out.stdout.strip().splitlines()[-1] + "\n")
