"""Score a benchmark across every GPU (or node) of a Ray cluster (the ``[ray]`` extra).

The (prompt, response) pairs still to score become a Ray Data dataset; a fixed pool of
actors, one model replica each (one GPU each by default), scores it block by block, and
the driver appends each block of results to the SCORES file as it streams back. The file
is the same one :func:`cheems.scoring.run.score_to_file` writes in a single process: same
rows, same ``meta`` sidecar, same resuming, so either way can pick up what the other began.

Scores match the single-process ones because each replica scores the block it receives
with :meth:`TransformersRewardModel.score`, the same length-sorted, token-budget batching,
and that batching does not change scores (``check_batch_invariance``). Rows are sorted by
length before they are cut into blocks, so each block holds sequences of similar length
and little padding is computed. Row order in the file differs between runs; its content
does not.
"""

from __future__ import annotations

import contextlib
import json
import math
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

from cheems.io import ResumableJsonl
from cheems.records import CheemsInputError, Prompt

__all__ = ["RAY_PROBE_TIMEOUT_S", "RewardModelReplica", "check_ray_address", "score_with_ray"]

MISSING_EXTRA = "scoring with Ray needs the ray extra: pip install 'cheems[ray]'"

FORWARD_BATCHES_PER_BLOCK = 8
"""A block holds up to this many forward batches (of ``batch_size``): enough for the
length sorting inside a replica to pay off, small enough that results reach the file
(and a resumed run) often and every replica gets work."""


def _require_ray():
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise CheemsInputError(MISSING_EXTRA) from None
    return ray


def score_with_ray(prompts: Sequence[Prompt], model_path: str | Path, output: str | Path, *, meta: dict,
                   load_kwargs: dict, batch_size: int = 64,
                   replicas: int | None = None, num_gpus_per_replica: float | None = None,
                   overwrite: bool = False, address: str | None = None,
                   progress: Callable[[int, int], None] | None = None) -> dict:
    """Score every response of ``prompts`` with the reward model at ``model_path`` on a Ray
    cluster, appending rows ``{prompt_id, response_id, score}`` to ``output`` as they come.

    ``load_kwargs`` go to :func:`~cheems.scoring.transformers_rm.load_reward_model` in every
    replica (``dtype``, ``max_length``, ``truncation``, ``trust_remote_code``, ``token_budget``:
    each replica resolves it as it loads, ``auto`` probing its own GPU); the device is chosen
    here: ``cuda`` (the GPU Ray assigned) for GPU replicas, else ``cpu``.

    Connection: when this process is already connected to Ray, that connection is used and
    kept. Otherwise ``address`` goes to ``ray.init``: ``None`` means ``RAY_ADDRESS`` if set,
    else the cluster started with ``ray start`` on this machine, else a new local instance;
    ``"auto"`` insists on an existing cluster; ``"local"`` always starts a new instance. A
    connection opened here is closed (and a local instance stopped) before returning.

    Replicas: ``num_gpus_per_replica`` defaults to 1 when the cluster has GPUs, else 0 (CPU
    replicas); ``replicas`` defaults to as many as the cluster's GPUs hold, or on a cluster
    without GPUs to one per node, each reserving an equal share of its node's CPUs.

    Pairs already in ``output`` are skipped (``meta`` must match the run that wrote them;
    ``overwrite`` starts again). ``progress(done, total)`` is called as results arrive.
    Returns ``{"scored", "resumed", "total", "replicas", "stats"}``, ``stats`` being the
    replicas' :class:`~cheems.scoring.transformers_rm.EncodeStats` added together.
    """
    ray = _require_ray()
    from cheems.models.checkpoints import detect_layout
    from cheems.models.sequences import EncodeStats

    _check_options(load_kwargs, replicas, num_gpus_per_replica)
    # every node reads the model from this path: make it absolute (workers run elsewhere)
    model_path = Path(model_path).resolve()
    detect_layout(model_path)  # a bad folder fails here, not inside every replica

    total = sum(len(p.responses) for p in prompts)
    stats = EncodeStats()
    with ResumableJsonl(output, meta, overwrite=overwrite) as out:
        done = {(r["prompt_id"], r["response_id"]) for r in out.rows}
        todo = [{"prompt_id": p.id, "response_id": r.id,
                 "prompt": json.dumps(p.prompt, ensure_ascii=False), "content": r.content}
                for p in prompts for r in p.responses if (p.id, r.id) not in done]
        if progress:
            progress(0, len(todo))
        if not todo:
            return {"scored": 0, "resumed": len(done), "total": total, "replicas": 0, "stats": stats}

        scored = 0
        with _connected(ray, address), _ray_data_settings(ray):
            gpus_each, n_replicas, cpus_each = _plan_replicas(ray, replicas, num_gpus_per_replica)
            n_replicas = min(n_replicas, len(todo))
            replica_kwargs = {"model_path": str(model_path), "device": "cuda" if gpus_each else "cpu",
                              "load_kwargs": dict(load_kwargs), "batch_size": batch_size}
            ds = _scoring_dataset(ray, todo, replica_kwargs, n_replicas=n_replicas, gpus_each=gpus_each,
                                  cpus_each=cpus_each, batch_size=batch_size)
            try:
                for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                    scored += _append_block(out, batch, stats)
                    if progress:
                        progress(scored, len(todo))
            except Exception as e:  # a replica's bad-input error, under Ray's wrappers
                cause = _input_error_in(e)
                if cause is None:
                    raise
                raise cause from None
    return {"scored": scored, "resumed": len(done), "total": total, "replicas": n_replicas, "stats": stats}


def _check_options(load_kwargs: dict, replicas: int | None, num_gpus_per_replica: float | None) -> None:
    """Refuse a device in ``load_kwargs`` (each replica has its own) and impossible replica counts."""
    if "device" in load_kwargs:
        raise CheemsInputError("the device is not chosen with Ray: each replica uses its own GPU, or the CPU "
                               "on a cluster without GPUs", field="device")
    if replicas is not None and replicas < 1:
        raise CheemsInputError(f"replicas must be at least 1, not {replicas}", field="replicas")
    if num_gpus_per_replica is not None and num_gpus_per_replica < 0:
        raise CheemsInputError(f"num_gpus_per_replica must be 0 or more, not {num_gpus_per_replica}",
                               field="num_gpus_per_replica")


def _scoring_dataset(ray, todo: list[dict], replica_kwargs: dict, *, n_replicas: int, gpus_each: float,
                     cpus_each: float, batch_size: int):
    """The rows ``todo`` as a Ray Data dataset scored by a pool of ``n_replicas``
    `RewardModelReplica` actors (``replica_kwargs`` build each), one block at a time."""
    # longest first, so each block holds similar lengths and pads little
    rows = sorted(todo, key=lambda row: -(len(row["prompt"]) + len(row["content"])))
    rows_per_block = max(1, min(FORWARD_BATCHES_PER_BLOCK * batch_size, math.ceil(len(rows) / n_replicas)))
    ds = ray.data.from_items(rows, override_num_blocks=math.ceil(len(rows) / rows_per_block))
    return ds.map_batches(
        RewardModelReplica,
        fn_constructor_kwargs=replica_kwargs,
        batch_size=rows_per_block, batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(size=n_replicas),
        num_gpus=gpus_each, num_cpus=cpus_each,
    )


def _append_block(out: ResumableJsonl, batch: dict, stats) -> int:
    """Append a scored block's rows to ``out`` and add its encoding counts to ``stats``;
    returns the number of rows."""
    pids, rids, scores = (batch[k].tolist() for k in ("prompt_id", "response_id", "score"))
    out.append({"prompt_id": str(p), "response_id": str(r), "score": float(s)}
               for p, r, s in zip(pids, rids, scores))
    stats.sequences += len(scores)
    stats.truncated += int(batch["truncated"].sum())
    stats.doubled_bos += int(batch["doubled_bos"].sum())
    stats.no_chat_template |= bool(batch["no_chat_template"].any())
    return len(scores)


class RewardModelReplica:
    """One copy of the reward model inside a Ray actor: a block of rows in, their scores out.

    Besides the scores, a block's output carries how many of its sequences were truncated
    or had a doubled BOS (on its first row, zeros elsewhere) so the driver can add them up.
    """

    def __init__(self, model_path: str, device: str, load_kwargs: dict, batch_size: int):
        from cheems.scoring.transformers_rm import load_reward_model

        self.batch_size = batch_size
        # A bad option is reported from the first call: an error raised here would kill the
        # actor and reach the driver only as text inside an ActorDiedError.
        self.error = None
        try:
            self.rm = load_reward_model(model_path, device=device, **load_kwargs)
        except CheemsInputError as e:
            self.error = e

    def __call__(self, batch: dict) -> dict:
        import numpy as np

        if self.error is not None:
            raise self.error
        items = [(json.loads(p), str(c)) for p, c in zip(batch["prompt"], batch["content"])]
        before = replace(self.rm.stats)
        scores = self.rm.score(items, batch_size=self.batch_size)
        after = self.rm.stats
        counts = {"truncated": after.truncated - before.truncated,
                  "doubled_bos": after.doubled_bos - before.doubled_bos}
        n = len(items)
        result = {"prompt_id": batch["prompt_id"], "response_id": batch["response_id"],
                  "score": np.asarray(scores, dtype=np.float64),
                  "no_chat_template": np.full(n, after.no_chat_template)}
        for name, count in counts.items():
            column = np.zeros(n, dtype=np.int64)
            column[0] = count
            result[name] = column
        return result


def _input_error_in(exc: BaseException) -> CheemsInputError | None:
    """The CheemsInputError a replica raised, found through Ray's exception wrappers."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if type(e) is CheemsInputError:  # the original, not Ray's RayTaskError(CheemsInputError)
            return e
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return None


def _plan_replicas(ray, replicas: int | None, num_gpus_per_replica: float | None) -> tuple[float, int, float]:
    """(GPUs per replica, number of replicas, CPUs per replica) for the connected cluster.

    Asking for more replicas than fit would leave Ray Data waiting for ever, so it is refused.
    """
    nodes = [node["Resources"] for node in ray.nodes() if node.get("Alive")]
    gpus = sum(r.get("GPU", 0) for r in nodes)
    gpus_each = (1.0 if gpus else 0.0) if num_gpus_per_replica is None else float(num_gpus_per_replica)
    if gpus_each:
        if not gpus:
            raise CheemsInputError("GPU replicas asked for, but the Ray cluster has no GPU",
                                   field="num_gpus_per_replica")
        fits = sum(int(r.get("GPU", 0) / gpus_each + 1e-9) for r in nodes)  # a replica stays on one node
        n = fits if replicas is None else replicas
        if n < 1 or n > fits:
            raise CheemsInputError(f"{n} replica(s) of {gpus_each:g} GPU each do not fit on the cluster's "
                                   f"{gpus:g} GPU(s) (at most {fits})", field="replicas")
        return gpus_each, n, 1.0
    # CPU replicas: by default one per node; each reserves an equal share of the smallest node
    node_cpus = [r.get("CPU", 0) for r in nodes]
    node_cpus = [c for c in node_cpus if c >= 1] or [1]
    n = len(node_cpus) if replicas is None else replicas
    if n > sum(int(c) for c in node_cpus):
        raise CheemsInputError(f"{n} CPU replicas do not fit on the cluster's {sum(node_cpus):g} CPUs",
                               field="replicas")
    per_node = math.ceil(n / len(node_cpus))
    return 0.0, n, float(max(1, int(min(node_cpus) // per_node)))


RAY_PROBE_TIMEOUT_S = 5.0
"""Seconds a Ray address may take to accept a TCP connection before it counts as not answering."""


def check_ray_address(address: str | None, *, field: str = "address", timeout_s: float = RAY_PROBE_TIMEOUT_S) -> None:
    """Refuse a Ray address ``HOST:PORT`` (or ``ray://HOST:PORT``) where nothing accepts a TCP
    connection within ``timeout_s``: ``ray.init`` would retry it for minutes. Needs no Ray
    (call it before importing Ray); ``auto``, ``local``, ``None`` and other forms are Ray's to resolve."""
    import socket

    if not address or address in ("auto", "local"):
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except (OSError, OverflowError, ValueError) as e:
        reason = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise CheemsInputError(f"the Ray address {address} does not answer ({reason}); start the cluster there "
                               "(`ray start --head`), or give auto (the running cluster) or local",
                               field=field) from None


@contextlib.contextmanager
def _connected(ray, address: str | None) -> Iterator[None]:
    """Use this process's Ray connection, or open one for the duration and close it after."""
    if ray.is_initialized():
        yield
        return
    import logging

    check_ray_address(address)

    try:
        # log_to_driver=False: replicas' own output stays in the Ray logs, not on our stderr
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as e:
        raise CheemsInputError(f"cannot reach a Ray cluster ({e})", field="address") from None
    try:
        yield
    finally:
        ray.shutdown()


@contextlib.contextmanager
def _ray_data_settings(ray) -> Iterator[None]:
    """Keep Ray Data's progress bars and informational lines off the terminal while scoring:
    the caller draws its own progress. Warnings and errors still show; Ray Data's own log
    file (in the Ray session folder) is untouched. A replica's exception reaches the driver
    as itself (wrapped by Ray), not as a bare "UDF failed", so bad input stays readable."""
    import logging

    ctx = ray.data.DataContext.get_current()
    wanted = {"enable_progress_bars": False, "print_on_execution_start": False,
              "raise_original_map_exception": True}
    saved = {k: getattr(ctx, k) for k in wanted if hasattr(ctx, k)}
    for k in saved:
        setattr(ctx, k, wanted[k])
    quiet = _OnlyProblems()
    consoles = [h for h in logging.getLogger("ray.data").handlers if isinstance(h, logging.StreamHandler)]
    for h in consoles:
        h.addFilter(quiet)
    try:
        yield
    finally:
        for h in consoles:
            h.removeFilter(quiet)
        for k, v in saved.items():
            setattr(ctx, k, v)


class _OnlyProblems:
    """A logging filter passing warnings and errors, except the notice that progress bars are
    off (on purpose) and the traceback of a failed block (it reaches the caller as the
    exception ``score_with_ray`` raises)."""

    def filter(self, record) -> bool:
        import logging

        if record.levelno < logging.WARNING or record.exc_info:
            return False
        return not record.getMessage().startswith("Progress bars disabled")
