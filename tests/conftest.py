"""Shared fixtures: writing test files, running the CLI as a user would, the bundled sample, and
(registered from tests/tiny_models.py) the tiny real models.

Two ways to run the ``cheems`` command line:

- ``run_cli_in`` / the ``run_cli`` fixture run it in this process: ``cheems.cli.main`` itself,
  with stdin, stdout and stderr captured by typer's test runner, the working directory set, and
  whatever a fresh process would start without put back afterwards. Most tests use this: it
  checks what the command prints, writes and exits with, without paying Python's start-up and
  ``import torch`` again for every command.
- ``run_cli_process`` starts ``python -m cheems.cli`` in a fresh process. Only for what needs a
  real process: the entry point itself, exit codes and bytes through a real pipe, signals,
  ``kill -9`` and resume, several processes at once.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable, Iterable, Iterator, Mapping

import pytest
from typer.testing import CliRunner

pytest_plugins = ["tests.tiny_models"]

# Caches the code writes by default (judge replies, model fingerprints) go to a folder of this test
# session, never into the user's ~/.cache; tests of the default location set the variable themselves.
if "CHEEMS_CACHE_DIR" not in os.environ:  # pytest-xdist's workers inherit the main process's folder
    os.environ["CHEEMS_CACHE_DIR"] = tempfile.mkdtemp(prefix="cheems-test-cache-")
    atexit.register(shutil.rmtree, os.environ["CHEEMS_CACHE_DIR"], True)

# Password hashes. The annotation tests create and log in hundreds of accounts, and argon2 at the
# cost cheems ships (argon2-cffi's defaults: 3 passes over 64 MiB, 4 lanes) takes about 0.16 s for
# each hash and each check on a 2-core machine. The accounts made in this process use argon2id at
# its lowest cost instead: the same algorithm, hash format and checks, only cheaper, as test
# settings of web frameworks do. The processes the tests start (servers, ``kill -9`` runs) hash
# at the shipped cost, and tests/test_annotate_auth_cost.py checks that cost in a fresh process.
try:
    import argon2  # cheap (a C binding); cheems.annotate.auth takes the class from here
except ModuleNotFoundError:  # the annotate extra is not installed (or tests/without_extras.py hides it)
    argon2 = None

if argon2 is not None:
    class _CheapPasswordHasher(argon2.PasswordHasher):
        def __init__(self, time_cost: int = 1, memory_cost: int = 8, parallelism: int = 1, **kw) -> None:
            super().__init__(time_cost=time_cost, memory_cost=memory_cost, parallelism=parallelism, **kw)

    if "cheems.annotate.auth" in sys.modules:  # imported before this file: too late to hash cheaply
        raise RuntimeError("tests/conftest.py must be imported before cheems.annotate.auth")
    argon2.PasswordHasher = _CheapPasswordHasher

# Under pytest-xdist each worker is one of several test processes sharing the machine's cores:
# torch gets one intra-op thread in each (and in the processes they start), as OMP_NUM_THREADS
# tells cheems.models.threads, so that the workers' threads do not wait on each other.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def pytest_configure(config) -> None:
    # Most tests train tiny runs of a few steps on purpose, without a notify callback: the
    # few-steps note would be a warning in each. tests/test_step_plan.py checks the note itself.
    config.addinivalue_line("filterwarnings", "ignore::cheems.training.step_plan.FewStepsWarning")


# The modules whose tests start processes (servers, launches, the example scripts) or compile,
# each several to tens of seconds. They run first: pytest-xdist's workers then share out the many
# short tests that remain, and no worker starts a long test while the others have run dry.
LONG_MODULES = ("test_examples", "test_distributed_train", "test_experiments", "test_kill_data_loss",
                "test_ray_scoring", "test_serve_replicas",
                "test_scoring_fixed_shapes", "test_annotate_kill", "test_annotate_postgres",
                "test_annotate_browser", "test_serve_api", "test_serve_robust", "test_serve_clients")


def pytest_collection_modifyitems(config, items) -> None:
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))  # stable: each module keeps its order


# A real process that runs longer than this has hung: a safety net, never a measure of speed.
HANG_TIMEOUT_S = 600
REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"

# The consoles of cheems.cli.console decide at import whether they print to a terminal (width,
# colours). The in-process runs stand for runs whose output goes to a pipe, so import them while
# stdout and stderr are not terminals, whatever pytest's capture mode (`-s` included).
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    import cheems.cli


def write_jsonl_rows(path: Path, rows: Iterable) -> Path:
    """Write rows as UTF-8 JSONL; a ``str`` row is written as-is (for broken lines)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def write_rows(tmp_path: Path) -> Callable[..., Path]:
    """``write_rows(rows, name="data.jsonl")`` -> path of a JSONL file in tmp_path."""

    def write(rows: Iterable, name: str = "data.jsonl") -> Path:
        return write_jsonl_rows(tmp_path / name, rows)

    return write


def kill_when(proc: subprocess.Popen, reached: Callable[[], bool], timeout: float = HANG_TIMEOUT_S) -> None:
    """SIGKILL ``proc`` as soon as ``reached()`` holds; fail if it ended on its own first."""
    try:
        deadline = time.monotonic() + timeout
        while not reached() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


# ----------------------------------------------------------------------------- the CLI in a fresh process

def run_cli_process(cwd: Path | None, *args: str | Path, input: str | None = None,
                    env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m cheems.cli ARGS`` in a fresh process and capture its text output.

    ``env``: variables set on top of this process's environment."""
    return subprocess.run([sys.executable, "-m", "cheems.cli", *map(str, args)], cwd=cwd, input=input,
                          capture_output=True, text=True, encoding="utf-8", timeout=HANG_TIMEOUT_S,
                          env=None if env is None else {**os.environ, **env})


# ----------------------------------------------------------------------------- the CLI in this process

@dataclass(frozen=True)
class CliRun:
    """A finished in-process run, read like ``subprocess.CompletedProcess``."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


_one_run_at_a_time = threading.Lock()  # sys.stdout, the environment and the cwd are process-wide


def _all_loggers() -> list[logging.Logger]:
    return [logging.getLogger(), *(x for x in logging.Logger.manager.loggerDict.values()
                                   if isinstance(x, logging.Logger))]


def _console_handlers() -> list[logging.StreamHandler]:
    """Handlers that print to a stream (not to a file): where a fresh process's log lines show.
    ``logging.lastResort`` (which some libraries add to their loggers) is left out: it always
    prints to the current ``sys.stderr`` and has no stream to set."""
    return [h for log in _all_loggers() for h in log.handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
            and not isinstance(h, type(logging.lastResort))]


@contextlib.contextmanager
def _logging_as_in_a_fresh_process(outer: tuple, inner: tuple) -> Iterator[None]:
    """Log lines of the run land in its captured streams, as they would in a fresh process.

    ``outer``: (stdout, stderr) before the run; ``inner``: the run's. The root logger loses its
    handlers (pytest's) for the run: with none, ``logging.lastResort`` prints warnings to the
    run's stderr. Handlers of libraries that print to stdout or stderr (made at import, before or
    during the run) print to the run's streams during it and to the outer ones after it. Filters
    the run adds (``main`` adds one each time) are taken off again."""
    real = (sys.__stdout__, sys.__stderr__)
    root = logging.getLogger()
    root_handlers, root.handlers = root.handlers, []
    filters = {log: list(log.filters) for log in _all_loggers()}
    moved = []
    for h in _console_handlers():
        for k in (0, 1):
            if h.stream is outer[k] or h.stream is real[k]:
                moved.append((h, h.stream))
                h.setStream(inner[k])
    try:
        yield
    finally:
        for h in _console_handlers():
            for k in (0, 1):
                if h.stream is inner[k]:
                    h.setStream(outer[k])
        for h, stream in moved:
            h.setStream(stream)
        root.handlers = root_handlers + root.handlers
        for log in _all_loggers():
            log.filters[:] = filters.get(log, [])


@contextlib.contextmanager
def _warnings_as_in_a_fresh_process() -> Iterator[None]:
    """The warning filters Python starts with (pytest's show DeprecationWarnings a user never
    sees), and warnings printed to stderr, which is the run's."""
    with warnings.catch_warnings():
        warnings.resetwarnings()
        # Python's default filters without -W or PYTHONWARNINGS; each call puts its filter first
        warnings.simplefilter("ignore", ResourceWarning)
        warnings.simplefilter("ignore", ImportWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield


def _reset_accelerate() -> None:
    """Forget accelerate's process-wide state (a fresh process has none), when accelerate is loaded."""
    state = sys.modules.get("accelerate.state")
    if state is not None:
        state.AcceleratorState._reset_state(reset_partial_state=True)
        state.GradientState._reset_state()


@contextlib.contextmanager
def _process_state_kept() -> Iterator[None]:
    """Put back what a run may change for the whole process: environment, working directory,
    sys.argv, the random number generators and torch's thread count, accelerate's state."""
    environ, cwd, argv = dict(os.environ), os.getcwd(), sys.argv[:]
    numpy, torch = sys.modules.get("numpy"), sys.modules.get("torch")
    python_rng = random.getstate()
    numpy_rng = numpy.random.get_state() if numpy is not None else None
    torch_rng, threads = (torch.random.get_rng_state(), torch.get_num_threads()) if torch is not None else (None, 0)
    _reset_accelerate()
    gc.freeze()
    try:
        yield
    finally:
        # What a run leaves unreachable would vanish with its process. Collect it now, in this thread:
        # left to a later collection, finalizers (SQLAlchemy's pooled connections) can run in the
        # middle of an ast.parse, which Python 3.11 before 3.11.8 answers with "SystemError: AST
        # constructor recursion depth mismatch" (python/cpython#106905). What lived before the run
        # is frozen meanwhile, so the collection looks at the run's own objects only.
        gc.collect()
        gc.unfreeze()
        _reset_accelerate()
        os.chdir(cwd)
        sys.argv[:] = argv
        for key in set(os.environ) - set(environ):
            del os.environ[key]
        os.environ.update(environ)
        random.setstate(python_rng)
        if numpy is not None:
            numpy.random.set_state(numpy_rng)
        if torch is not None:
            torch.random.set_rng_state(torch_rng)
            torch.set_num_threads(threads)


def run_cli_in(cwd: Path | None, *args: str | Path, input: str | None = None,
               env: Mapping[str, str] | None = None) -> CliRun:
    """Run ``cheems ARGS`` in this process, in the folder ``cwd``, and capture its text output.

    It is ``cheems.cli.main`` as the console script runs it (the same argument expansion, stream
    settings and log filter) inside typer's ``CliRunner`` isolation: ``input`` is stdin, stdout and
    stderr are captured apart, ``env`` is set on top of the environment for the run. An exception
    the command does not handle fails the calling test with its traceback (in a user's terminal
    it would be a bug too), with the run's output attached."""
    argv = ["cheems", *map(str, args)]
    if not _one_run_at_a_time.acquire(blocking=False):
        raise RuntimeError("one in-process cheems run at a time; use run_cli_process for runs side by side")
    try:
        with _process_state_kept():
            outer = (sys.stdout, sys.stderr)
            with CliRunner().isolation(input=input, env=env) as (out, err, _), \
                    _logging_as_in_a_fresh_process(outer, (sys.stdout, sys.stderr)), \
                    _warnings_as_in_a_fresh_process():
                if cwd is not None:
                    os.chdir(cwd)
                sys.argv[:] = argv
                try:
                    code = _exit_code_of_main()
                except Exception as e:
                    e.add_note(f"{' '.join(argv)}\n--- stdout:\n{_text(out, 'replace')}\n"
                               f"--- stderr:\n{_text(err, 'replace')}")
                    raise
                return CliRun(argv, code, _text(out), _text(err))
    finally:
        _one_run_at_a_time.release()


def _text(stream: io.BytesIO, errors: str = "strict") -> str:
    """What was written to a captured stream so far, decoded as subprocess.run(text=True) does."""
    for wrapper in (sys.stdout, sys.stderr):
        wrapper.flush()
    return stream.getvalue().decode("utf-8", errors)


def _exit_code_of_main() -> int:
    """Run ``cheems.cli.main()`` (it ends in SystemExit, as click's standalone mode does) and
    return the exit status the interpreter would give that SystemExit."""
    try:
        cheems.cli.main()
    except SystemExit as e:
        if e.code is None:
            return 0
        if isinstance(e.code, int):
            return e.code
        sys.stderr.write(f"{e.code}\n")  # sys.exit("message"): the interpreter prints it and exits 1
        return 1
    return 0


@pytest.fixture
def run_cli(tmp_path: Path) -> Callable[..., CliRun]:
    """``run_cli(*args)`` runs the cheems CLI in this process with tmp_path as working directory."""

    def run(*args: str | Path, input: str | None = None, env: Mapping[str, str] | None = None) -> CliRun:
        return run_cli_in(tmp_path, *args, input=input, env=env)

    return run


# ----------------------------------------------------------------------------- the bundled sample

@pytest.fixture(scope="session")
def sample_annotations() -> Path:
    """Folder of the bundled sample annotations (open.jsonl and human.jsonl)."""
    folder = resources.files("cheems") / "data" / "sample" / "annotations"
    path = Path(str(folder))
    for name in ("open.jsonl", "human.jsonl"):
        assert (path / name).is_file(), f"bundled sample file missing: {path / name}"
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The optional folder of real public preference data next to the repository."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"optional data folder {SHARED_DATA} is absent")
    return SHARED_DATA
