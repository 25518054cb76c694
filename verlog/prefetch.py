"""Collecting the next batch while the trainer scores and updates on this one (``rollout.max_staleness=1``).

The trainer starts :meth:`BatchPrefetcher.start` right after it has its batch; the collection runs in
one background thread (the engine, its sampling generator and the environments are used by that
thread alone until :meth:`wait` returns), while the main thread scores, computes advantages and
updates the actor and the critic, which are other modules than the engine's. Before the trainer
loads the new weights into the engine it waits for the collection to end (weights never change under
a generation in flight), and the next iteration :meth:`take` s the batch: its tokens were sampled by
the policy of one update before, which :func:`verlog.algos.staleness.decoupled_advantages` corrects.

A checkpoint written while a collected batch waits to be trained stores the collector's and the
sampling generator's states from before that collection (:meth:`resume_states`), so a resumed run
collects that batch again, from the same environment states, with the newer weights. The trainer
starts no collection in an iteration that ends with a scheduled checkpoint, so those resume exactly.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

import torch

__all__ = ["BatchPrefetcher"]


class BatchPrefetcher:
    """At most one collection running in a background thread, and the states from before it.

    Args:
        collector: the trainer's collector (``state_dict()`` is read before each collection).
        generator: the rollout engine's sampling generator (its state is read before each collection).
    """

    def __init__(self, collector: Any, generator: torch.Generator) -> None:
        self.collector, self.generator = collector, generator
        self._pool: ThreadPoolExecutor | None = None
        self._future: Future[Any] | None = None
        self._before: tuple[dict[str, Any], torch.Tensor] | None = None
        self.version = -1

    @property
    def pending(self) -> bool:
        """A collection was started and its batch not taken yet."""
        return self._future is not None

    def start(self, collect: Callable[[], Any], *, version: int) -> None:
        """Run ``collect()`` in the background thread; ``version`` is the engine's policy version now.

        Raises:
            RuntimeError: a collection is already pending.
        """
        if self._future is not None:
            raise RuntimeError("BatchPrefetcher.start: the previous batch was not taken")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="verlog-prefetch")
        self._before = (self.collector.state_dict(), self.generator.get_state().clone())
        self.version = version
        self._future = self._pool.submit(collect)

    def wait(self) -> None:
        """Block until the pending collection (if any) has ended, without raising its error."""
        if self._future is not None:
            self._future.exception()

    def take(self) -> tuple[Any, int]:
        """The pending collection's result and the policy version it was generated with.

        Raises:
            RuntimeError: nothing is pending.
            Exception: whatever the collection raised.
        """
        if self._future is None:
            raise RuntimeError("BatchPrefetcher.take: no collection is pending")
        future, self._future, self._before = self._future, None, None
        return future.result(), self.version

    def resume_states(self) -> tuple[dict[str, Any], torch.Tensor] | None:
        """(collector state, sampling generator state) from before the pending collection, None when
        nothing is pending: what a checkpoint must store so that the batch is collected again."""
        return self._before if self._future is not None else None

    def close(self) -> None:
        """Wait for a running collection and stop the thread."""
        self.wait()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self._future = self._before = None
