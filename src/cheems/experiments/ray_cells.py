"""Cells of an experiment as Ray tasks: each cell runs on a worker of the cluster with the GPUs it
asks for (``gpus_per_cell``), one cell after another, so a grid is placed on whatever node has a
free GPU while the driver keeps the folder's records.

The worker writes the cell's folder itself (the experiment folder must be on storage every
node sees: a local instance, or a shared file system); the driver appends the results line.
Warnings the worker hears come back with the results line and are passed on after the cell.
"""

from __future__ import annotations

import logging

from cheems.records import CheemsInputError

__all__ = ["RayCellRunner", "run_cell_collecting_notes"]


def run_cell_collecting_notes(plan) -> tuple[dict, list[str]]:
    """:func:`cheems.experiments.cell_recipe.run_cell` of ``plan``, and the lines it notified."""
    from cheems.experiments.cell_recipe import run_cell

    notes: list[str] = []
    return run_cell(plan, None, notes.append), notes


class RayCellRunner:
    """Runs cells as Ray tasks on the cluster at ``address`` ("auto", an address, or "local":
    a new local instance), ``gpus`` GPUs each (None: one when the cluster has GPUs, else none).
    Opens the connection on creation; :meth:`close` ends it (when this runner opened it)."""

    def __init__(self, address: str, gpus: float | None):
        try:
            import ray
        except ImportError:
            raise CheemsInputError("--ray needs ray: pip install 'cheems[ray]'") from None
        self.ray = ray
        self.opened = not ray.is_initialized()
        if self.opened:
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            except ConnectionError as e:
                raise CheemsInputError(f"cannot reach a Ray cluster ({e})", field="--ray") from None
        if gpus is None:
            gpus = 1 if ray.cluster_resources().get("GPU", 0) >= 1 else 0
        if gpus > ray.cluster_resources().get("GPU", 0):
            self.close()
            raise CheemsInputError(f"a cell asks for {gpus:g} GPU(s) but the cluster has "
                                   f"{ray.cluster_resources().get('GPU', 0):g}", field="gpus_per_cell")
        self.task = ray.remote(num_gpus=gpus, max_retries=0)(run_cell_collecting_notes)

    def __call__(self, plan, report, notify) -> dict:
        """Run ``plan`` on the cluster and wait for it; its results line."""
        report("train")
        try:
            row, notes = self.ray.get(self.task.remote(plan))
        except self.ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, CheemsInputError):
                raise cause from None
            raise
        for line in notes:
            if notify is not None:
                notify(line)
        return row

    def close(self) -> None:
        if self.opened and self.ray.is_initialized():
            self.ray.shutdown()
