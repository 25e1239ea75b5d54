"""How many threads torch runs its CPU kernels on: the cores this process may use.

torch starts with one intra-op thread per core of the machine, whatever share of it the
process was given (CPU affinity, ``taskset``, a container's CPU set). On a machine whose
other cores are busy, those extra threads wait on each other and a training step can take
many times longer than it should. Scoring and training set the count once, where they load a
model on the CPU (:func:`use_available_cores`); ``OMP_NUM_THREADS``, when set, wins.
"""

from __future__ import annotations

import os
from typing import Mapping

__all__ = ["available_cores", "use_available_cores"]


def available_cores(environ: Mapping[str, str] | None = None) -> int:
    """Threads for torch's CPU kernels: ``OMP_NUM_THREADS`` when it is a positive integer (its
    first level, for a nested list such as ``4,2``); else the cores this process may run on
    (``os.sched_getaffinity``, else ``os.cpu_count``), shared among the ``LOCAL_WORLD_SIZE``
    processes a launcher started on this machine. At least 1."""
    env = os.environ if environ is None else environ
    first = env.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) > 0:
        return int(first)
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    local = env.get("LOCAL_WORLD_SIZE", "1").strip()
    processes = int(local) if local.isdigit() and int(local) > 0 else 1
    return max(1, cores // processes)


def use_available_cores() -> int:
    """Set torch's intra-op thread count to :func:`available_cores` and return it (needs torch)."""
    import torch

    n = available_cores()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    return n
