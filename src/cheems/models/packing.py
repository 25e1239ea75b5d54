"""Padding-free forward batches: a batch's sequences concatenated into one row (the ``[models]`` extra).

A right-padded batch of n sequences costs n x (longest) tokens; a packed batch costs the sum of
their lengths. :func:`pack_sequences` lays the sequences of a batch end to end in one row of
``T`` tokens, positions restarting at each sequence, and records where each one lies; the
model runs with the ``cheems_packed`` attention (:func:`use_packed_attention`), which keeps
every query inside its own sequence, and the reward is read at each sequence's last token
(:func:`rewards_at`). Rewards, loss and gradients equal the padded batch's within float
tolerance (tests/test_packing.py).

Shared prompt prefixes (scoring): the responses of one prompt start with the same tokens (the
chat template and the prompt). With ``groups``, the longest common token prefix of a group's
sequences is laid down once, followed by each sequence's remaining tokens; those continue the
prefix's positions and attend to the prefix and to their own earlier tokens only, which is the
attention each full sequence would have had alone, so the scores do not change (a cascade of
the packed row). CheemsBench-like prompts are about a quarter of the tokens.

Attention backends, chosen by :func:`packed_backend`:

- ``segments``: PyTorch SDPA once per segment (CPU; exact, O(sum of squared lengths)).
- ``flash``: flash-attention's variable-length kernel (GPU, ``flash-attn`` installed).
- ``varlen``: the same kind of kernel as PyTorch ships it (``torch.nn.attention.varlen``,
  PyTorch 2.9 or later, GPU), when flash-attn is not installed.
- ``flex``: PyTorch flex attention with a block-sparse mask (GPU; any PyTorch 2.5 or later).

The two variable-length kernels see a shared prefix as keys: every segment of the row (a
prefix, or a member's own tokens) is one query sequence, and a member's keys are its group's
prefix followed by its own tokens, gathered into one key row; the kernels' causal mask is
aligned to the end of the keys, so a member's j-th token sees the whole prefix and its own
first j tokens, as it would in its full sequence.

Fixed shapes (``pad_to``, :mod:`cheems.models.fixed_shapes`): the row is padded to a given
length by one trailing padding segment, a lone sequence of pad tokens that attends to itself
only and is never read, and the variable-length kernels' tables are padded with zero-length
segments to a bucketed count; the kernel is then called outside any compiled graph, so the
compiled layers meet the row's length as their only changing shape.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from dataclasses import dataclass, field
from typing import Callable, Sequence

from cheems.models.checkpoints import require_torch, unwrap_peft
from cheems.models.fixed_shapes import table_length
from cheems.models.sequences import apply_head, device_tensor
from cheems.records import CheemsInputError

__all__ = ["ATTENTION_NAME", "BACKENDS", "Group", "PackedBatch", "common_prefix", "pack_sequences",
           "packed_attention", "packed_backend", "packed_cost", "padded_attention", "prepare_attention",
           "rewards_at", "use_packed_attention"]

ATTENTION_NAME = "cheems_packed"
BACKENDS = ("segments", "flash", "varlen", "flex")


@dataclass(frozen=True)
class Group:
    """One block of the packed row: a shared prefix of ``prefix`` tokens starting at ``start``
    (0 for a lone sequence), then the members' own tokens as ``(start, length)`` spans."""

    start: int
    prefix: int
    members: tuple[tuple[int, int], ...]


@dataclass
class PackedBatch:
    """A packed forward batch: ``input_ids`` and ``position_ids`` (1, T), ``last`` (n,) the row
    position of each input sequence's last token (input order), ``groups`` the layout (with
    ``padding``, its last group is the padding segment), and the attention ``backend``.
    ``cache`` keeps per-batch attention metadata (built on first use)."""

    input_ids: object
    position_ids: object
    last: object
    groups: list[Group]
    backend: str
    real_tokens: int  # tokens of the input sequences, counted whole
    row_tokens: int  # tokens in the row, T (fewer than real when prefixes are shared; padding included)
    padding: int = 0  # of row_tokens, the trailing padding segment's
    fixed_shapes: bool = False  # padded to a given length (pad_to): attention tables bucketed too
    cache: dict = field(default_factory=dict)

    def sequence_groups(self) -> list[Group]:
        """The groups holding input sequences: ``groups`` without the padding segment."""
        return self.groups[:-1] if self.padding else self.groups

    def forward_kwargs(self) -> dict:
        """Keyword arguments for the base model's forward: ids, positions, the layout."""
        return {"input_ids": self.input_ids, "position_ids": self.position_ids, "cheems_packing": self}


def common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of ``seqs``, kept at least one token short of the
    shortest, so every sequence keeps a token of its own to read the reward at. Slices are
    compared whole (in C); a sequence that departs from the prefix found so far is searched
    by halving. O(total + log of the longest per sequence) list comparisons."""
    if len(seqs) < 2:
        return 0
    k = min(map(len, seqs)) - 1
    first = list(seqs[0][:k])
    for s in seqs[1:]:
        other = list(s[:k])
        if other == first[:k]:
            continue
        same, differs = 0, k  # other[:same] == first[:same], other[:differs] != first[:differs]
        while differs - same > 1:
            mid = (same + differs) // 2
            if other[same:mid] == first[same:mid]:
                same = mid
            else:
                differs = mid
        k = same
    return k


def packed_cost(seqs: Sequence[Sequence[int]], share_prefix: bool) -> int:
    """Tokens the group ``seqs`` takes in a packed row."""
    total = sum(len(s) for s in seqs)
    return total - (len(seqs) - 1) * common_prefix(seqs) if share_prefix else total


def pack_sequences(seqs: Sequence[Sequence[int]], device, *, groups: Sequence[Sequence[int]] | None = None,
                   backend: str = "segments", pad_to: int | Callable[[int], int] | None = None,
                   pad_id: int = 0) -> PackedBatch:
    """One row holding ``seqs`` (see the module docs). ``groups`` lists indices into ``seqs``
    whose common prefix is laid down once (every index in exactly one group); without it each
    sequence stands alone. ``pad_to`` (a length, or a function of the unpadded row's length
    giving it, e.g. its bucket): the row is filled up to that many tokens by one padding
    segment (``pad_id`` tokens, positions from 0, a group of its own that no ``last`` points
    into), and the attention tables are bucketed (`PackedBatch.fixed_shapes`). O(T)."""
    require_torch()
    if backend not in BACKENDS:
        raise CheemsInputError(f"packed attention backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    if not seqs or any(len(s) == 0 for s in seqs):
        raise CheemsInputError("a packed batch needs at least one sequence, none of them empty")
    if groups is None:
        groups = [[i] for i in range(len(seqs))]
    ids: list[int] = []
    pos: list[int] = []
    last = [0] * len(seqs)
    layout: list[Group] = []
    for members in groups:
        p = common_prefix([seqs[i] for i in members])
        start = len(ids)
        ids.extend(seqs[members[0]][:p])
        pos.extend(range(p))
        spans = []
        for i in members:
            own = seqs[i][p:]
            spans.append((len(ids), len(own)))
            ids.extend(own)
            pos.extend(range(p, p + len(own)))
            last[i] = len(ids) - 1
        layout.append(Group(start, p, tuple(spans)))
    padding = 0
    if pad_to is not None:
        if callable(pad_to):
            pad_to = pad_to(len(ids))
        if pad_to < len(ids):
            raise CheemsInputError(f"a packed row of {len(ids)} tokens cannot be padded to {pad_to}")
        padding = pad_to - len(ids)
        if padding:
            layout.append(Group(len(ids), 0, ((len(ids), padding),)))
            ids.extend([pad_id] * padding)
            pos.extend(range(padding))
    return PackedBatch(device_tensor([ids], device), device_tensor([pos], device), device_tensor(last, device),
                       layout, backend, real_tokens=sum(len(s) for s in seqs), row_tokens=len(ids), padding=padding,
                       fixed_shapes=pad_to is not None)


def rewards_at(hidden, batch: PackedBatch, head):
    """One reward per input sequence: ``head`` at its last token in the row (hidden (1, T, h))."""
    return apply_head(head, hidden[0, batch.last])  # (n,)


def packed_backend(device) -> str:
    """``segments`` on CPU; on CUDA ``flash`` when flash-attn imports, else ``varlen`` when
    PyTorch has it, else ``flex`` (``CHEEMS_PACKED_ATTENTION`` overrides)."""
    forced = os.environ.get("CHEEMS_PACKED_ATTENTION")
    if forced:
        if forced not in BACKENDS:
            raise CheemsInputError(f"CHEEMS_PACKED_ATTENTION must be one of {', '.join(BACKENDS)}, got {forced!r}")
        return forced
    if not str(device).startswith("cuda"):
        return "segments"
    try:
        import flash_attn  # noqa: F401
    except ImportError:
        return "varlen" if _torch_varlen() is not None else "flex"
    return "flash"


# ---------------------------------------------------------------------------- attention

def _segment_lengths(batch: PackedBatch) -> list[int]:
    """Lengths of the row's segments in row order: each group's prefix (when it has one), then
    its members' own tokens. They tile the row (`pack_sequences` lays them end to end)."""
    lengths = batch.cache.get("segments")
    if lengths is None:
        lengths = batch.cache["segments"] = [n for g in batch.groups
                                             for n in ([g.prefix] if g.prefix else []) + [m for _, m in g.members]]
    return lengths


def _segments_attention(query, key, value, batch: PackedBatch, scaling, dropout: float):
    """SDPA per block: a prefix attends causally to itself; a member's tokens attend to their
    group's prefix and causally to their own earlier tokens. (1, H, T, D) in, (1, T, H, D) out.

    The row is cut into its segments with one ``split`` per tensor, so the backward joins the
    segments' gradients with one concatenation; slicing each segment out of the row instead
    gives every slice's backward a zero tensor of the whole row (quadratic in segments)."""
    torch = require_torch()
    import torch.nn.functional as F

    gqa = query.shape[1] != key.shape[1]
    cascade = _cpu_cascade_op(query)
    lengths = _segment_lengths(batch)
    qs, ks, vs = (iter(t.split(lengths, dim=2)) for t in (query, key, value))
    pieces = []

    def attend(q, keys, values, mask=None):
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=mask is None,
                                             dropout_p=dropout, scale=scaling, enable_gqa=gqa)
        pieces.append(out.transpose(1, 2))  # (1, n, H, D): the concatenation below is the only copy

    for g in batch.groups:
        p = g.prefix
        if not p:
            for _ in g.members:
                attend(next(qs), next(ks), next(vs))
            continue
        qp, kp, vp = next(qs), next(ks), next(vs)
        attend(qp, kp, vp)
        if cascade is not None:
            members = [(next(qs), next(ks), next(vs)) for _ in g.members]
            pieces.append(_cascade_members(cascade, qp, kp, vp, members, scaling).transpose(1, 2))
            continue
        for _, n in g.members:
            masks = batch.cache.setdefault("masks", {})
            mask = masks.get((p, n))
            if mask is None:  # the prefix, then a causal triangle of the member's own tokens
                own = torch.ones(n, n, dtype=torch.bool, device=query.device).tril()
                mask = masks[(p, n)] = torch.cat([torch.ones(n, p, dtype=torch.bool, device=query.device), own], 1)
            q, k, v = next(qs), next(ks), next(vs)
            attend(q, torch.cat([kp, k], 2), torch.cat([vp, v], 2), mask)
    return torch.cat(pieces, dim=1)


def _cpu_cascade_op(query):
    """PyTorch's CPU flash-attention op that also returns the log-sum-exp of each query's
    scores, when a shared prefix can use it: CPU, no gradients wanted (scoring); else None."""
    import torch

    if query.is_cuda or (torch.is_grad_enabled() and query.requires_grad):
        return None
    return getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def _cascade_members(op, qp, kp, vp, members, scaling):
    """A group's member tokens attending to the prefix and causally to themselves, as a cascade:
    every member query against the prefix keys ``kp``, ``vp`` in one call, each member against
    its own keys (causal), the two softmaxes merged by their log-sum-exps. ``members`` holds
    each member's (query, key, value) segment; ``qp`` the prefix's queries (for the shape
    only). (1, H, sum of lengths, D)."""
    import torch

    rep = qp.shape[1] // kp.shape[1]
    widen = (lambda t: t.repeat_interleave(rep, 1)) if rep > 1 else (lambda t: t)  # noqa: E731
    queries = torch.cat([q for q, _, _ in members], dim=2)
    to_prefix, lse_prefix = op(queries, widen(kp), widen(vp), 0.0, False, scale=scaling)
    merged, at = [], 0
    for q, k, v in members:
        n = q.shape[2]
        own, lse_own = op(q, widen(k), widen(v), 0.0, True, scale=scaling)
        o1, l1 = to_prefix[:, :, at:at + n], lse_prefix[:, :, at:at + n]
        top = torch.maximum(l1, lse_own)
        w1, w2 = (l1 - top).exp().unsqueeze(-1), (lse_own - top).exp().unsqueeze(-1)
        merged.append((o1 * w1 + own * w2) / (w1 + w2))
        at += n
    return torch.cat(merged, dim=2)


def _varlen_layout(batch: PackedBatch, device):
    """The row as variable-length segments (see the module docs): cumulative query and key
    lengths (int32), the longest of each, and the row positions gathered into the key row
    (None when no group shares a prefix: the keys are the row itself). Cached on the batch.

    With ``batch.fixed_shapes`` the tables have a bucketed length (`table_length`): zero-length
    segments follow the row's, the last of them holding no queries and, with shared prefixes,
    the keys that fill the key row up to its bucketed length (gathered from row position 0,
    never attended to)."""
    cached = batch.cache.get("varlen")
    if cached is not None:
        return cached
    torch = require_torch()
    q_lens, k_lens, gather = [], [], []
    shared = any(g.prefix for g in batch.groups)
    for g in batch.groups:
        s, p = g.start, g.prefix
        if p:
            q_lens.append(p)
            k_lens.append(p)
            gather.extend(range(s, s + p))
        for a, n in g.members:
            q_lens.append(n)
            k_lens.append(p + n)
            if shared:
                gather.extend(range(s, s + p))
                gather.extend(range(a, a + n))
    if batch.fixed_shapes:
        spare = table_length(len(q_lens) + 1) - len(q_lens)  # at least one: it takes the filler keys
        filler = table_length(len(gather)) - len(gather) if shared else 0
        q_lens.extend([0] * spare)
        k_lens.extend([0] * (spare - 1) + [filler])
        gather.extend([0] * filler)

    def cumulative(lens):
        return device_tensor([0, *itertools.accumulate(lens)], device, torch.int32)

    index = device_tensor(gather, device) if shared else None
    cached = batch.cache["varlen"] = (cumulative(q_lens), cumulative(k_lens), max(q_lens), max(k_lens), index)
    return cached


def _torch_varlen():
    """PyTorch's own variable-length attention function, or None before PyTorch 2.9."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


@functools.lru_cache(maxsize=None)
def _varlen_kernel(backend: str):
    """``kernel(q, k, v, cu_q, cu_k, max_q, max_k, scale, dropout)`` for ``backend`` (``flash`` or
    ``varlen``): (T, heads, D) queries and (T_k, kv heads, D) keys and values in, (T, heads, D)
    out, causal aligned to each key sequence's end. PyTorch's signature moved between releases
    (is_causal, then window_size; scale and enable_gqa added later); the wrapper asks for the
    same attention through whichever it has; only flash-attn's has dropout. Both run in
    half precision only: the kernel's ``dtypes``."""
    torch = require_torch()
    half = frozenset({torch.float16, torch.bfloat16})
    if backend == "flash":
        from flash_attn import flash_attn_varlen_func

        def flash(q, k, v, cu_q, cu_k, max_q, max_k, scale, dropout):
            return flash_attn_varlen_func(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p=dropout, softmax_scale=scale,
                                          causal=True)

        flash.dtypes = half
        return flash
    import inspect

    fn = _torch_varlen()
    if fn is None:
        raise CheemsInputError("this PyTorch has no torch.nn.attention.varlen (2.9 or later); "
                               "set CHEEMS_PACKED_ATTENTION=flex")
    params = inspect.signature(fn).parameters
    causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}

    def varlen(q, k, v, cu_q, cu_k, max_q, max_k, scale, dropout):
        if dropout:
            raise CheemsInputError("PyTorch's variable-length attention has no dropout; set the model's "
                                   "attention_dropout to 0, or install flash-attn")
        extra = dict(causal)
        if "scale" in params:
            extra["scale"] = scale
        elif scale is not None:
            q = q * (scale * q.shape[-1] ** 0.5)  # the kernel's own scale is 1/sqrt(D)
        if k.shape[1] != q.shape[1]:
            if "enable_gqa" in params:
                extra["enable_gqa"] = True
            else:
                rep = q.shape[1] // k.shape[1]
                k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        return fn(q, k, v, cu_q, cu_k, max_q, max_k, **extra)

    varlen.dtypes = half
    return varlen


def _autocast_dtype(torch, kind: str):
    """The dtype autocast runs in on device ``kind``, or None when autocast is off there."""
    try:
        return torch.get_autocast_dtype(kind) if torch.is_autocast_enabled(kind) else None
    except (AttributeError, TypeError):  # PyTorch before 2.4: CUDA only
        return torch.get_autocast_gpu_dtype() if kind == "cuda" and torch.is_autocast_enabled() else None


def _kernel_takes(query, key, value, backend: str) -> bool:
    """Whether the variable-length kernel of ``backend`` runs on these inputs: they are in its
    dtypes, or autocast casts them to one (a float32 model outside autocast runs flex instead)."""
    dtypes = getattr(_varlen_kernel(backend), "dtypes", None)
    return (not dtypes or {query.dtype, key.dtype, value.dtype} <= dtypes
            or _autocast_dtype(require_torch(), query.device.type) in dtypes)


def _varlen_attention(query, key, value, batch: PackedBatch, scaling, dropout: float):
    """A variable-length kernel (flash-attn's or PyTorch's) over the row's segments, shared
    prefixes gathered into each member's keys (module docs). (1, H, T, D) in, (1, T, H, D) out.

    The kernels run in half precision: under autocast (mixed-precision training, where the
    rotary embedding leaves queries and keys in float32) the inputs are cast to autocast's
    dtype; a float32 model outside autocast runs flex attention instead."""
    torch = require_torch()
    if not _kernel_takes(query, key, value, batch.backend):
        return _flex_attention(query, key, value, batch, scaling, dropout)
    kernel = _varlen_kernel(batch.backend)
    dtypes = getattr(kernel, "dtypes", None)
    if dtypes and not {query.dtype, key.dtype, value.dtype} <= dtypes:
        target = _autocast_dtype(torch, query.device.type)
        query, key, value = query.to(target), key.to(target), value.to(target)
    cu_q, cu_k, max_q, max_k, index = _varlen_layout(batch, query.device)
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))  # (T, heads, D)
    if index is not None:
        k, v = k.index_select(0, index), v.index_select(0, index)
    out = kernel(q, k, v, cu_q, cu_k, max_q, max_k, scaling, dropout)
    return out.unsqueeze(0)  # (1, T, H, D)


def _token_labels(batch: PackedBatch, device):
    """Per row token: its block, its segment (the prefix is a segment) and whether it is a prefix token."""
    torch = require_torch()
    block, segment, prefix = [], [], []
    seg = 0
    for b, g in enumerate(batch.groups):
        if g.prefix:
            block += [b] * g.prefix
            segment += [seg] * g.prefix
            prefix += [True] * g.prefix
            seg += 1
        for _, n in g.members:
            block += [b] * n
            segment += [seg] * n
            prefix += [False] * n
            seg += 1
    as_tensor = lambda xs, dt: device_tensor(xs, device, dt)  # noqa: E731
    return as_tensor(block, torch.int32), as_tensor(segment, torch.int32), as_tensor(prefix, torch.bool)


_FLEX = {}


def _flex_attention(query, key, value, batch: PackedBatch, scaling, dropout: float):
    """PyTorch flex attention with the row's block-sparse mask (compiled on CUDA)."""
    torch = require_torch()
    from torch.nn.attention.flex_attention import flex_attention

    if dropout:
        raise CheemsInputError("packed flex attention has no dropout; set the model's attention_dropout to 0")
    block_mask = _flex_block_mask(batch, query.device)
    fn = flex_attention
    if query.is_cuda:
        fn = _FLEX.get("compiled") or _FLEX.setdefault("compiled", torch.compile(flex_attention, dynamic=True))
    out = fn(query, key, value, block_mask=block_mask, scale=scaling, enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous()


def _flex_block_mask(batch: PackedBatch, device):
    """The row's block-sparse mask for flex attention (module docs). Cached on the batch."""
    block_mask = batch.cache.get("block_mask")
    if block_mask is None:
        from torch.nn.attention.flex_attention import create_block_mask

        block, segment, prefix = _token_labels(batch, device)

        def mask_mod(b, h, q, kv):
            return (block[q] == block[kv]) & (kv <= q) & (prefix[kv] | (segment[q] == segment[kv]))

        t = batch.row_tokens
        block_mask = batch.cache["block_mask"] = create_block_mask(mask_mod, None, None, t, t, device=str(device))
    return block_mask


def prepare_attention(batch: PackedBatch) -> None:
    """Build ``batch``'s attention metadata for its backend now (segment lengths, the
    variable-length tables, or the flex mask), before the forward, so that a compiled layer
    reads them ready-made instead of tracing the Python that builds them."""
    device = batch.input_ids.device
    if batch.backend == "segments":
        _segment_lengths(batch)
    elif batch.backend == "flex":
        _flex_block_mask(batch, device)
    else:
        _varlen_layout(batch, device)


def packed_attention(module, query, key, value, attention_mask, scaling=None, dropout: float = 0.0,
                     sliding_window=None, cheems_packing: PackedBatch | None = None, **kwargs):
    """The ``cheems_packed`` attention function (transformers' AttentionInterface signature):
    query (1, heads, T, D), key and value (1, kv heads, T, D) of a packed row; returns
    (attention output (1, T, heads, D), None)."""
    if cheems_packing is None:
        raise CheemsInputError("the model runs packed attention but was called without a packed batch")
    if sliding_window is not None:  # the padding segment is never read: its length does not matter
        longest = max(g.prefix + n for g in cheems_packing.sequence_groups() for _, n in g.members)
        if longest > sliding_window:
            raise CheemsInputError("packing does not support sliding-window attention over sequences longer than "
                                   f"the window ({sliding_window}); run without packing")
    backend = cheems_packing.backend
    if backend == "segments":  # a compiled layer breaks its graph here: the loop runs eagerly
        run = _outside_graphs("segments")
    elif backend == "flex":
        run = _flex_attention
    elif cheems_packing.fixed_shapes and _kernel_takes(query, key, value, backend):
        run = _outside_graphs("varlen")  # the kernel outside the compiled graph (module docs)
    else:  # traced (dynamic shapes), or flex attention for float32 inputs
        run = _varlen_attention
    return run(query, key, value, cheems_packing, scaling, dropout), None


_EAGER: dict = {}


def _outside_graphs(kind: str):
    """``_segments_attention`` or ``_varlen_attention`` (``kind`` "segments" or "varlen") wrapped
    to run eagerly inside a compiled layer (``torch.compiler.disable``), wrapped once: the compiled
    layer then sees the same function every call. Each graph of a compiled layer is then cut in
    two at the attention, and the pieces' shapes depend on the row's length alone (fixed shapes:
    one of a few). The wrappers are made by `use_packed_attention`, outside any compiled graph."""
    run = _EAGER.get(kind)
    if run is None:
        import torch

        run = _EAGER[kind] = torch.compiler.disable(_segments_attention if kind == "segments" else _varlen_attention)
    return run


def use_packed_attention(model) -> bool:
    """Switch ``model`` (a transformers model, or one inside a peft wrapper) to the packed
    attention and return True; it must then be called with a `PackedBatch`'s
    ``forward_kwargs``, and no attention mask is built (the layout travels with the batch).
    False, and the model unchanged, for an architecture whose attention cannot be switched."""
    require_torch()
    from transformers import AttentionInterface

    core = unwrap_peft(model)
    if not getattr(core, "_supports_attention_backend", False):
        return False
    AttentionInterface.register(ATTENTION_NAME, packed_attention)
    for kind in ("segments", "varlen"):
        _outside_graphs(kind)
    if core.config._attn_implementation != ATTENTION_NAME:
        core._cheems_padded_attention = core.config._attn_implementation  # for padded_attention
    core.config._attn_implementation = ATTENTION_NAME
    return True


@contextlib.contextmanager
def padded_attention(model):
    """Within the block, ``model`` runs the attention it had before `use_packed_attention`
    (right-padded batches with a mask); a model never switched is left as it is."""
    core = unwrap_peft(model)
    config = getattr(core, "config", None)
    if config is None or getattr(config, "_attn_implementation", None) != ATTENTION_NAME:
        yield
        return
    config._attn_implementation = getattr(core, "_cheems_padded_attention", None) or "sdpa"
    try:
        yield
    finally:
        config._attn_implementation = ATTENTION_NAME
