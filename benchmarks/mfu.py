"""Shared pieces of the throughput benchmarks: model shapes, random-weight checkpoints, the
FLOP count of a token and the device's peak, for model FLOPs utilisation (MFU); a process's
own peak memory.

MFU = model FLOPs per token x tokens per second / the device's peak FLOP/s.

FLOPs of one token through a decoder (forward), written out:
    2 x N                              every non-embedding weight is one multiply-add
  + 4 x layers x heads x head_dim x C  attention: Q.K and A.V over the C keys it sees
where N counts the non-embedding weights (q, k, v, o with their biases, the three MLP
matrices and the norms, per layer), and C is the mean number of keys a query attends to: a
causal sequence of L tokens gives (L + 1) / 2 on average, so C = sum L(L+1)/2 / sum L. The
embedding lookup and the one-output reward head are left out (no LM head is ever computed).
Training counts 3 x forward (forward, gradients of activations, gradients of weights); with
LoRA the frozen weights get no weight gradients, so 2 x forward, plus nothing for the
adapters (small). Recomputation under gradient checkpointing is not counted (it is overhead).

Peaks: the dense bf16 tensor-core figure of known GPUs (H100/H200 SXM 989 TFLOP/s, A100
312); on a CPU (or an unknown GPU) the peak is measured in the same run as the best float32
(bfloat16 on GPU) matrix multiply throughput, so CPU MFU reads "share of what this CPU's GEMM
reaches".
"""

from __future__ import annotations

import time
from pathlib import Path


def own_peak_kib() -> int | None:
    """This process's peak resident set (``VmHWM``), in KiB; None where /proc does not say.
    Not ``ru_maxrss``: Linux carries the parent's peak over a fork and exec into it, so a worker
    started by a benchmark that built a model would report the builder's peak."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None

SHAPES = {
    # hidden, layers, heads, kv heads, intermediate, vocab (None: the local tokenizer's)
    "tiny": (64, 2, 4, 2, 128, None),
    "small": (256, 4, 8, 2, 704, None),
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936),
    "qwen2.5-7b": (3584, 28, 28, 4, 18944, 152064),
}

GPU_PEAKS = {"H100": 989e12, "H200": 989e12, "GH200": 989e12, "A100": 312e12, "L40S": 362e12}


def build(folder: Path, shape: str, texts: list[str], device: str) -> Path:
    """A Qwen2ForSequenceClassification checkpoint of ``shape`` with random weights and a
    tokenizer trained on ``texts``, saved to ``folder`` (bf16 on CUDA, float32 on CPU). A
    folder that already holds a checkpoint (``--model-dir`` of an earlier run) is used as it is."""
    import torch

    if (folder / "config.json").exists():
        return folder
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from cheems.training.init_model import train_tokenizer

    tok = train_tokenizer(texts, vocab_size=3000)
    hidden, layers, heads, kv, inter, vocab = SHAPES[shape]
    config = Qwen2Config(vocab_size=vocab or len(tok), hidden_size=hidden, num_hidden_layers=layers,
                         num_attention_heads=heads, num_key_value_heads=kv, intermediate_size=inter,
                         max_position_embeddings=32768, num_labels=1, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=False, architectures=["Qwen2ForSequenceClassification"])
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    with torch.device(device):
        model = Qwen2ForSequenceClassification(config).to(dtype)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    del model
    return folder


def non_embedding_parameters(shape: str) -> int:
    """N of the module docs for a Qwen2 ``shape`` (q, k, v with biases; o, MLP; two norms per layer, one final)."""
    hidden, layers, heads, kv, inter, _ = SHAPES[shape]
    head_dim = hidden // heads
    attention = hidden * hidden + hidden + 2 * (hidden * kv * head_dim + kv * head_dim) + hidden * hidden
    return layers * (attention + 3 * hidden * inter + 2 * hidden) + hidden


def mean_context(lengths) -> float:
    """C of the module docs: mean keys per query over causal sequences of these lengths."""
    return sum(n * (n + 1) / 2 for n in lengths) / sum(lengths)


def shared_prefix_context(groups) -> float:
    """C of the module docs for the tokens computed when each group's common prefix is laid
    down once: ``groups`` lists ``(prefix length P, [lengths L_i of its sequences])``. The
    prefix's P tokens attend causally to each other (P(P+1)/2 keys); a sequence's own tokens,
    at positions P+1..L_i, attend to the prefix and to their own earlier tokens (L_i(L_i+1)/2
    - P(P+1)/2 keys). The mean is over the computed tokens, P + sum (L_i - P) per group."""
    keys = tokens = 0
    for prefix, lengths in groups:
        head = prefix * (prefix + 1) / 2
        keys += head + sum(n * (n + 1) / 2 - head for n in lengths)
        tokens += prefix + sum(n - prefix for n in lengths)
    return keys / tokens


def forward_flops_per_token(shape: str, context: float) -> float:
    hidden, layers, heads, _, _, _ = SHAPES[shape]
    return 2 * non_embedding_parameters(shape) + 4 * layers * hidden * context


def flops_formula(shape: str, context: float, factor: int) -> str:
    n = non_embedding_parameters(shape)
    hidden, layers, _, _, _, _ = SHAPES[shape]
    per = forward_flops_per_token(shape, context)
    return (f"{factor} x (2 x {n / 1e6:,.1f} M + 4 x {layers} layers x {hidden} x {context:,.0f} keys) "
            f"= {factor * per / 1e9:,.3f} GFLOP/token")


def device_peak(device: str) -> tuple[float, str]:
    """(peak FLOP/s, where the figure comes from) for ``device`` (see module docs)."""
    import torch

    if device.startswith("cuda"):
        name = torch.cuda.get_device_name(torch.device(device))
        for key, peak in GPU_PEAKS.items():
            if key in name:
                return peak, f"{name}: dense bf16 {peak / 1e12:,.0f} TFLOP/s (datasheet)"
        return measured_gemm(device), f"{name}: measured bf16 GEMM"
    return measured_gemm(device), f"CPU ({torch.get_num_threads()} threads): measured float32 GEMM"


def measured_gemm(device: str, size: int = 2048, repeat: int = 5) -> float:
    """Best FLOP/s of a ``size``-cubed matrix multiply (bf16 on CUDA, float32 on CPU)."""
    import torch

    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeat + 1):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t = time.perf_counter()
        (a @ b).sum().item()
        best = min(best, time.perf_counter() - t)
    return 2 * size ** 3 / best


def profiler_activities(device: str) -> list:
    """torch.profiler's activities for ``device``: the host, and the GPU on CUDA."""
    import torch

    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.startswith("cuda"):
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


def profile_tables(prof, device: str) -> str:
    """A finished torch.profiler run as two tables: operators by device time (host time on a
    CPU), then by host time."""
    table = prof.key_averages()
    sort = "self_cuda_time_total" if device.startswith("cuda") else "self_cpu_time_total"
    return table.table(sort_by=sort, row_limit=40) + "\n\n" + table.table(sort_by="self_cpu_time_total",
                                                                         row_limit=40) + "\n"


def mfu(shape: str, context: float, factor: int, tokens_per_s: float, peak: float) -> float:
    return factor * forward_flops_per_token(shape, context) * tokens_per_s / peak


MFU_GOALS = {
    ("train", "qwen2.5-0.5b"): 0.25,  # full fine-tuning
    ("train-lora", "qwen2.5-7b"): 0.30,  # LoRA with gradient checkpointing
    ("score", "qwen2.5-0.5b"): 0.40,
}
"""The project's MFU goals on an H100-class GPU (dense bf16 peak), by work and model shape."""


def mfu_goal_line(work: str, shape: str, device: str, value: float) -> str | None:
    """The line a benchmark prints for the MFU goal of ``work`` on ``shape`` (None where the
    project sets none, or off a GPU): the goal, whether ``value`` meets it, the value."""
    goal = MFU_GOALS.get((work, shape))
    if goal is None or not device.startswith("cuda"):
        return None
    verdict = "meets" if value >= goal else "misses"
    return f"goal: {work} {shape} >= {goal:.0%} MFU on an H100-class GPU: {verdict} ({value:.1%})"
