"""Helpers of checkpoint/resume: RNG states (without pickle), metric rows, stop signals.

Per rank, a checkpoint holds ``rng_rank<r>.json`` (python ``random`` and numpy's global state) and
``rng_rank<r>.safetensors`` (torch's CPU state, every CUDA device's state when there is one, and any
named ``torch.Generator`` such as the trainer's update stream and the rollout engine's sampling
stream). Loading reads JSON and safetensors only. :func:`truncate_metrics` drops metric rows that
a resumed run logs again; :class:`StopSignals` turns SIGINT/SIGTERM into a request to stop after
the current iteration.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

__all__ = ["RngStates", "save_rng_states", "read_rng_states", "load_rng_states", "truncate_metrics", "StopSignals"]


def save_rng_states(directory: Path, rank: int, generators: dict[str, torch.Generator]) -> None:
    """Write this process's global RNG states and ``generators``' states into ``directory``.

    Args:
        directory: the (temporary) checkpoint directory.
        rank: this process's rank (part of the file names).
        generators: name -> CPU ``torch.Generator`` (names must be plain identifiers).
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    doc = {"python": [version, list(internal), gauss],
           "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]}
    (directory / f"rng_rank{rank}.json").write_text(json.dumps(doc))
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = state
    for key, gen in generators.items():
        tensors[f"gen_{key}"] = gen.get_state()
    save_file(tensors, str(directory / f"rng_rank{rank}.safetensors"))


@dataclass
class RngStates:
    """One rank's saved random states, read and checked by :func:`read_rng_states`."""

    python: tuple[Any, ...]
    numpy: tuple[Any, ...]
    tensors: dict[str, torch.Tensor]


def read_rng_states(directory: Path, rank: int, generator_names: Iterable[str] = ()) -> RngStates:
    """Read and check what :func:`save_rng_states` wrote for ``rank``, changing no random state.

    Every state is tried on a scratch generator of its kind, so a file that reads but holds a
    state of the wrong size or type is refused here, not half-way through a resume.

    Args:
        directory: the checkpoint directory.
        rank: the rank whose files are read.
        generator_names: the named torch generators that must be present.

    Raises:
        FileNotFoundError: the checkpoint has no RNG files for this rank (e.g. another world size).
        ValueError: a file is truncated, not JSON/safetensors, or holds a malformed state (one line).
    """
    path = directory / f"rng_rank{rank}.json"
    if not path.is_file():
        raise FileNotFoundError(f"resume: {path} is missing (was the checkpoint written with fewer ranks?)")
    try:
        doc = json.loads(path.read_text())
        version, internal, gauss = doc["python"]
        python = (version, tuple(internal), gauss)
        random.Random().setstate(python)
        name, keys, pos, has_gauss, cached = doc["numpy"]
        numpy = (name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached)
        np.random.RandomState().set_state(numpy)
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"{path.name}: not a saved random state ({type(err).__name__}: {_first_line(err)})") from None
    tensors_path = directory / f"rng_rank{rank}.safetensors"
    try:
        tensors = load_file(str(tensors_path))
        for key in ["torch_cpu", *(f"gen_{n}" for n in generator_names)]:
            torch.Generator().set_state(tensors[key])
    except FileNotFoundError:
        raise
    except (OSError, ValueError, TypeError, KeyError, RuntimeError, SafetensorError) as err:
        raise ValueError(f"{tensors_path.name}: not a saved random state "
                         f"({type(err).__name__}: {_first_line(err)})") from None
    return RngStates(python, numpy, tensors)


def load_rng_states(directory: Path, rank: int, generators: dict[str, torch.Generator]) -> None:
    """Restore what :func:`save_rng_states` wrote for ``rank`` (global RNGs and ``generators``).

    Raises:
        FileNotFoundError: the checkpoint has no RNG files for this rank (e.g. another world size).
        ValueError: a file is damaged or lacks a generator named here (:func:`read_rng_states`);
            nothing was changed then.
    """
    states = read_rng_states(directory, rank, generators)
    random.setstate(states.python)
    np.random.set_state(states.numpy)
    tensors = states.tensors
    torch.set_rng_state(tensors["torch_cpu"])
    if torch.cuda.is_available():
        cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("torch_cuda_")),
                                           key=lambda k: int(k.rsplit("_", 1)[1]))]
        if cuda:
            torch.cuda.set_rng_state_all(cuda)
    for key, gen in generators.items():
        gen.set_state(tensors[f"gen_{key}"])


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else "no detail"


def truncate_metrics(path: Path, iteration: int) -> None:
    """Keep the ``metrics.jsonl`` rows of iterations <= ``iteration`` (those a checkpoint includes).

    Rows logged after the checkpoint by the interrupted run (and a line cut short by a kill) are
    dropped because the resumed run logs those iterations again; the count is printed. The file is
    replaced atomically, so a kill during the rewrite leaves the old one.
    """
    if not path.is_file():
        return
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        if int(row["iteration"]) <= iteration:
            kept.append(line)
        else:
            dropped += 1
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(line + "\n" for line in kept))
    os.replace(tmp, path)
    if dropped:
        print(f"resume: dropped {dropped} metric line(s) after iteration {iteration}; they are logged again",
              flush=True)


class StopSignals:
    """SIGINT/SIGTERM handlers that only record a stop request; a second signal aborts at once.

    Attributes:
        requested: the name of the first signal caught (``"SIGTERM"``), or ``None``.
    """

    def __init__(self) -> None:
        self.requested: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        """Install the handlers (only in the main thread, where Python allows it)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        """Put the previous handlers back."""
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum: int, _frame: Any) -> None:
        if self.requested is not None:  # asked twice: stop now, without a checkpoint
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name
        print(f"{self.requested}: finishing the current iteration, then writing a checkpoint "
              "(send it again to abort now)", file=sys.stderr, flush=True)
