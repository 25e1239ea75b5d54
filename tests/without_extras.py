"""Run cheems commands in a process where the packages of the extras are missing, as after the
core install (``make demo``: numpy, scipy, orjson, typer, rich; no torch).

``python -m tests.without_extras`` reads a JSON object on stdin: ``blocked`` (top-level module
names that no import finds: a finder first on ``sys.meta_path`` raises ModuleNotFoundError for
them, as Python does for a package that is not installed), ``cwd``, ``runs`` (argument lists) and
``output`` (a file).
Each run is ``cheems ARGS`` through :func:`tests.conftest.run_cli_in`, one after the other in this
one process; ``output`` gets a JSON list of ``{args, returncode, stdout, stderr}`` (an exception a
command does not handle: its traceback as stderr, exit 1). Used by
tests/test_missing_extras.py.
"""

from __future__ import annotations

import json
import sys
import traceback

__all__ = ["Uninstalled", "main"]


class Uninstalled:
    """A ``sys.meta_path`` finder for which the ``blocked`` packages are not installed."""

    def __init__(self, blocked: set[str]):
        self.blocked = blocked

    def find_spec(self, name: str, path=None, target=None):
        if name.partition(".")[0] in self.blocked:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None  # every other module: the next finders


def main() -> None:
    job = json.load(sys.stdin)
    sys.meta_path.insert(0, Uninstalled(set(job["blocked"])))
    from tests.conftest import run_cli_in  # imported after the finder: nothing blocked is loaded before

    results = []
    for args in job["runs"]:
        try:
            r = run_cli_in(job["cwd"], *args)
        except Exception:  # what a user's terminal would show: the traceback (with the run's output noted)
            results.append({"args": args, "returncode": 1, "stdout": "", "stderr": traceback.format_exc()})
            continue
        results.append({"args": args, "returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr})
    with open(job["output"], "w", encoding="utf-8") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
