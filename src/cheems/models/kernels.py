"""Faster kernels for a loaded model: Liger's fused Triton kernels and ``torch.compile``.

- `use_liger_kernels`: Liger's RMSNorm, SwiGLU and RoPE in place of transformers' modules, on
  one model instance (CUDA only; ``pip install 'cheems[gpu]'``). Exact kernels: scores and
  gradients agree with the plain modules within bf16 rounding. No cross-entropy kernel: a
  reward model never computes an LM head.
- `compile_layers`: ``torch.compile`` on each decoder layer (one compiled graph reused by all
  layers of a shape); the packed attention's per-segment loop stays eager.
"""

from __future__ import annotations

import inspect

from cheems.models.checkpoints import require_torch, unwrap_peft
from cheems.records import CheemsInputError

__all__ = ["LIGER_MISSING", "compile_layers", "decoder_layers", "use_liger_kernels"]

LIGER_MISSING = "Liger kernels need the gpu extra (a CUDA machine): pip install 'cheems[gpu]'"


def use_liger_kernels(model) -> list[str]:
    """Patch ``model`` in place with Liger's RoPE, RMSNorm and SwiGLU kernels; returns the
    kernels applied. One clear error without CUDA, without liger-kernel, or for an
    architecture Liger does not cover."""
    torch = require_torch()
    if not torch.cuda.is_available():
        raise CheemsInputError("Liger kernels run on CUDA GPUs only", field="liger_kernels",
                               remedy=("liger_kernels", "leave {} off on this machine"))
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN
    except ImportError:
        raise CheemsInputError(LIGER_MISSING, field="liger_kernels") from None
    core = unwrap_peft(model)
    model_type = getattr(core.config, "model_type", None)
    apply = MODEL_TYPE_TO_APPLY_LIGER_FN.get(model_type)
    if apply is None:
        raise CheemsInputError(f"Liger has no kernels for {model_type!r} models", field="liger_kernels")
    wanted = {"rope": True, "rms_norm": True, "swiglu": True, "cross_entropy": False,
              "fused_linear_cross_entropy": False, "model": core}
    accepted = inspect.signature(apply).parameters
    apply(**{k: v for k, v in wanted.items() if k in accepted})
    return [k for k in ("rope", "rms_norm", "swiglu") if k in accepted]


def decoder_layers(model):
    """The decoder layers (a ModuleList) of a transformers decoder, inside any wrapper."""
    core = unwrap_peft(model)
    base = getattr(core, getattr(core, "base_model_prefix", ""), core)
    layers = getattr(base, "layers", None)
    if layers is None:
        raise CheemsInputError(f"cannot find the decoder layers of {type(core).__name__}", field="compile")
    return layers


def compile_layers(model, *, dynamic: bool = True) -> int:
    """``torch.compile`` each decoder layer of ``model`` in place; returns how many were compiled.

    ``dynamic``: sequence lengths vary from batch to batch, so the graphs take symbolic lengths.
    With fixed shapes (:mod:`cheems.models.fixed_shapes`) the rows take one of a few lengths and
    ``dynamic=False`` compiles one graph per length, specialised to it, within torch.compile's
    default limit of 8 versions. The default mode is kept, not ``reduce-overhead`` (CUDA
    graphs): the packed attention (the CPU loop, and with fixed shapes the variable-length
    kernels) runs outside the graph, cutting each layer's graph in two, and CUDA graphs would
    record each piece of each layer at each row length with static buffers of its own: much
    memory, for launch overhead that is small beside a forward of thousands of tokens (CUDA
    graphs pay off on small, launch-bound batches)."""
    require_torch()
    layers = decoder_layers(model)
    for layer in layers:
        layer.compile(dynamic=dynamic)
    return len(layers)
