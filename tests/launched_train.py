"""``cheems train`` as the tests launch it under ``accelerate launch``, with two optional hooks,
each turned on by an environment variable.

``CHEEMS_TEST_SIGNALS`` (a folder): the second process is always the last to write its share of a
checkpoint, the race of a slow process made certain. Every process writes its own files into
``accelerate_state/`` (its RNG state; under ZeRO its optimizer shard), and the main process moves
the checkpoint's temp folder into place. Here the second process writes its files only once the
main process has moved on after its own ``save_state``: it has either entered a barrier (it waits
for everyone, as it must) or already moved the temp folder (the race lost: the second process's
write then fails). The order is kept with files in that folder, not with a clock. For DDP and
ZeRO-2, whose ``get_state_dict`` is no collective (under ZeRO-3 and FSDP gathering the weights is
one, and the main process would wait there for the held process).

``CHEEMS_TEST_NO_SHM_OP=1``: DeepSpeed's shared-memory collectives for CPU processes are not
built. DeepSpeed compiles that C++ extension on its first use on a machine (about 50 s of one
core, in every fresh CI run) only to speed up all-reduce between CPU processes; without it the
same collectives go through gloo, as on any machine where the extension cannot be built.

Run as ``accelerate launch ... tests/launched_train.py train ARGS`` (the arguments of
``cheems train``); used by tests/test_distributed_train.py.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

SIGNALS = "CHEEMS_TEST_SIGNALS"
NO_SHM_OP = "CHEEMS_TEST_NO_SHM_OP"
WAIT_LIMIT_S = 120.0  # only if the hooks break: then the run fails rather than hangs


def _wait_for(flag: Path) -> None:
    """Block until ``flag`` exists (polled: files are all two processes share here)."""
    waited = 0.0
    while not flag.exists():
        if waited > WAIT_LIMIT_S:
            raise RuntimeError(f"{flag} never appeared: the main process did not move on after save_state")
        time.sleep(0.01)
        waited += 0.01


def _hold_second_process(signals: Path) -> None:
    """The second process writes its accelerate state of save N only after ``moved-on-N``."""
    import accelerate.accelerator as accelerator_module

    write_state, saves = accelerator_module.save_accelerator_state, [0]

    def late_write(*args, **kwargs):
        saves[0] += 1
        _wait_for(signals / f"moved-on-{saves[0]}")
        return write_state(*args, **kwargs)

    accelerator_module.save_accelerator_state = late_write


def _signal_main_moved_on(signals: Path) -> None:
    """The main process writes ``moved-on-N`` when, after its save N, it first enters a barrier
    or has moved the checkpoint's temp folder, whichever comes first."""
    from accelerate import Accelerator

    save_state, wait_for_everyone, rename = Accelerator.save_state, Accelerator.wait_for_everyone, os.rename
    saves, pending = [0], [False]

    def moved_on() -> None:
        if pending[0]:
            pending[0] = False
            (signals / f"moved-on-{saves[0]}").touch()

    def saving(self, *args, **kwargs):
        result = save_state(self, *args, **kwargs)
        saves[0] += 1
        pending[0] = True
        return result

    def waiting(self):
        moved_on()
        return wait_for_everyone(self)

    def renaming(src, dst, *args, **kwargs):
        result = rename(src, dst, *args, **kwargs)
        if Path(src).name.endswith(".tmp"):  # the checkpoint's temp folder, now gone
            moved_on()
        return result

    Accelerator.save_state, Accelerator.wait_for_everyone, os.rename = saving, waiting, renaming


def _without_shm_op() -> None:
    """DeepSpeed's CPU communication backend finds no shared-memory extension to build: gloo."""
    import importlib

    # by its full name: ``deepspeed.comm.torch`` as an attribute is the torch package itself
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def main() -> None:
    if os.environ.get(NO_SHM_OP) == "1":
        _without_shm_op()
    if os.environ.get(SIGNALS):
        signals = Path(os.environ[SIGNALS])
        if int(os.environ.get("RANK", "0")) == 0:
            _signal_main_moved_on(signals)
        else:
            _hold_second_process(signals)
    from cheems.cli import main as cheems_main

    sys.argv = ["cheems", *sys.argv[1:]]
    cheems_main()


if __name__ == "__main__":
    main()
