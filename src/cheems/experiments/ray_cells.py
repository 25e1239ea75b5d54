"""Cells of an experiment as Ray tasks: every unfinished cell is submitted at once as a task of
its own asking for ``gpus_per_cell`` GPUs; Ray places each on a node with the GPUs free and
queues what does not fit yet, so the cells of a grid run side by side across the cluster. The
driver waits on the tasks together and records each cell as its task completes.

The worker writes the cell's folder itself; the driver appends the results line (results.jsonl
holds the cells in the order they finished; the tables order them by the grid). Warnings the
worker hears come back with the results line and are passed on as the cell finishes.

With a cluster of several nodes, the experiment folder, the data and benchmark files and
``$CHEEMS_CACHE_DIR`` must be on storage every node sees (a shared file system, mounted at the
same path): a cell may run on any node, and the driver reads what its worker wrote.

A cell that fails is one line (the cell and the last line of its error, never a traceback);
the other cells go on, and the run ends with the first failure once every task is over.
"""

from __future__ import annotations

import logging
from typing import Callable

from cheems.records import CheemsInputError

__all__ = ["RayCellRunner", "error_line", "run_as_tasks", "run_cell_collecting_notes"]

Notify = Callable[[str], None]


def run_cell_collecting_notes(plan) -> tuple[dict, list[str]]:
    """:func:`cheems.experiments.cell_recipe.run_cell` of ``plan``, and the lines it notified."""
    from cheems.experiments.cell_recipe import run_cell

    notes: list[str] = []
    return run_cell(plan, None, notes.append), notes


def error_line(error: BaseException) -> str:
    """The last non-blank line of ``error``'s text (a task's error carries the worker's
    traceback before it), or its type's name."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


def _cell_error(cell: str, error: Exception) -> CheemsInputError:
    """A failed task as one CheemsInputError: the cell's own CheemsInputError as it is, any
    other error as the cell id and its last line."""
    cause = getattr(error, "cause", None)
    if isinstance(cause, CheemsInputError):
        return cause
    if isinstance(error, CheemsInputError):
        return error
    return CheemsInputError(f"cell {cell} failed: {error_line(error)}")


def run_as_tasks(ray, task, plans: list, finished: Callable[[object, dict], None],
                 notify: Notify | None = None) -> None:
    """Submit ``task.remote(plan)`` for every plan at once, then ``ray.wait`` on them: as each
    completes, pass on its notes and call ``finished(plan, row)``. A failed cell is noted (when
    others are still running) and the first failure raised once every task is over."""
    pending = {task.remote(plan): plan for plan in plans}
    failures: list[CheemsInputError] = []
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            plan = pending.pop(ref)
            try:
                row, notes = ray.get(ref)
            except Exception as e:  # the task's error, the worker's crash: one line each
                failures.append(_cell_error(plan.cell, e))
                if pending and notify is not None:
                    notify(f"{failures[-1]} (the other cells go on)")
                continue
            for line in notes:
                if notify is not None:
                    notify(line)
            finished(plan, row)
    if len(failures) == 1:
        raise failures[0]
    if failures:
        raise CheemsInputError(f"{len(failures)} cells failed; the first: {failures[0]}")


class RayCellRunner:
    """Runs cells as Ray tasks on the cluster at ``address`` ("auto", an address, or "local":
    a new local instance), ``gpus`` GPUs each (None: one when the cluster has GPUs, else none).
    Opens the connection on creation; :meth:`close` ends it (when this runner opened it)."""

    def __init__(self, address: str, gpus: float | None):
        try:
            import ray
        except ImportError:
            raise CheemsInputError("running cells on Ray needs ray: pip install 'cheems[ray]'") from None
        self.ray = ray
        self.opened = not ray.is_initialized()
        if self.opened:
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            except Exception as e:  # a cluster not reached, a local instance not started: one line
                raise CheemsInputError(f"cannot start or reach Ray at {address!r} ({error_line(e)})",
                                       field="ray_address") from None
        available = ray.cluster_resources().get("GPU", 0)
        if gpus is None:
            gpus = 1 if available >= 1 else 0
        if gpus > available:
            self.close()
            raise CheemsInputError(f"a cell asks for {gpus:g} GPU(s) but the cluster has {available:g}",
                                   field="gpus_per_cell")
        self.task = ray.remote(num_gpus=gpus, max_retries=0)(run_cell_collecting_notes)

    def run(self, plans: list, finished: Callable[[object, dict], None], notify: Notify | None = None) -> None:
        """Every plan as a task at once; ``finished(plan, row)`` as each completes (see
        :func:`run_as_tasks`)."""
        run_as_tasks(self.ray, self.task, plans, finished, notify)

    def close(self) -> None:
        if self.opened and self.ray.is_initialized():
            self.ray.shutdown()
