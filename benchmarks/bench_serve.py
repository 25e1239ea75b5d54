"""`cheems serve` under concurrent clients: dynamic batching against one sequence per forward pass.

The script builds a random-weight reward model (mfu.py's shapes), starts the real server on the
loopback (`python -m cheems serve MODEL --port 0`, a subprocess), and drives --clients threads,
each with its own keep-alive HTTP connection, posting OpenRLHF-style /get_reward requests of
--queries-per-request chat-formatted conversations, --requests in all (or until --max-seconds).
It reports requests/s, tokens/s (the server's own count, from /metrics), client-side latency
percentiles and the batch fill (sequences per forward pass, from /metrics), then does the same
against the same server restarted with `--max-batch 1` (every sequence its own forward pass) and
prints the ratio of requests/s. Where the time goes: the share of the wall time the model was
running (forward seconds / wall) and the mean forward pass.

With --replicas N the two runs are instead one replica and `--replicas N` (both batched, each
replica with --threads torch threads), and the ratio printed is N replicas' requests/s over one
replica's, measured in the same run; /metrics is then read from every replica (fresh connections
until each replica's pid was seen) and summed.

The clients use the standard library's http.client: on a 2-core machine they share the cores
with the server, and a heavier client (httpx in 16 threads) spent enough of them to hide half
the gain. On CPU the default is the tiny shape with short conversations and one server thread:
batching pays where a forward pass costs more in fixed overhead than in arithmetic (as on a GPU);
with --shape small a single 60-token sequence already keeps the CPU's matrix units busy and
batching gains less (about 1.7x on two cores). On CUDA the model FLOP utilisation (MFU) of each
run is printed from the server's own token count.

Usage:
  python benchmarks/bench_serve.py                                    # CPU, tiny model, 16 clients
  python benchmarks/bench_serve.py --clients 32 --requests 1000 --queries-per-request 8
  python benchmarks/bench_serve.py --device cuda --shape qwen2.5-0.5b --requests 2000
  python benchmarks/bench_serve.py --replicas 2 --requests 400                  # 1 replica vs 2
  python benchmarks/bench_serve.py --device cuda --replicas 2 --requests 2000   # one replica per GPU
The goal (CPU, 16 clients): batched requests/s >= 3x those of --max-batch 1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_scoring import benchmark_prompts  # noqa: E402
from mfu import SHAPES, build  # noqa: E402

JSON = {"content-type": "application/json"}
READY = re.compile(r"cheems serve: ready at (http://127\.0\.0\.1:\d+)/")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")
REPLICA = re.compile(r'^cheems_serve_replica\{index="\d+",pid="(\d+)"\} 1$', re.M)


def chat_text(prompt: str, response: str) -> str:
    """One conversation as an RLHF trainer sends it to /get_reward: the chat template applied, EOS included."""
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n{response}<|im_end|>\n"


def request_bodies(n_requests: int, per_request: int, chars: int) -> list[dict]:
    """``n_requests`` /get_reward bodies of ``per_request`` queries cut from the bundled sample."""
    from cheems.formats import read_prompts

    annotations = Path(__file__).resolve().parents[1] / "src/cheems/data/sample/annotations"
    sample = read_prompts(annotations / "open.jsonl").prompts + read_prompts(annotations / "human.jsonl").prompts
    prompts = benchmark_prompts(sample, n_requests, per_request, chars)
    return [{"query": [chat_text(p.prompt_text, r.content) for r in p.responses],
             "prompts": [p.prompt_text] * len(p.responses)} for p in prompts]


def start_server(folder: Path, device: str, threads: int, log: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    cmd = [sys.executable, "-m", "cheems.cli", "serve", str(folder), "--port", "0", "--device", device, *extra]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        found = READY.search(log.read_text(errors="replace"))
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            raise SystemExit(f"the server exited {proc.returncode}:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("the server did not say it was ready within 600 s")


def metrics(url: str, replicas: int = 1) -> dict[str, float]:
    """Every sample of /metrics summed over its labels, by name (enough for totals and histogram
    sums), and over the ``replicas`` replicas: scraped on fresh connections until each replica's
    pid (``cheems_serve_replica``) was seen, one scrape each."""
    import httpx

    texts: dict[str, str] = {}
    for _ in range(100 * replicas):
        text = httpx.get(url + "/metrics", timeout=300.0).text
        texts[REPLICA.search(text).group(1) if replicas > 1 else ""] = text
        if len(texts) == replicas:
            break
    if len(texts) < replicas:
        raise SystemExit(f"only {len(texts)} of {replicas} replicas answered /metrics")
    out: dict[str, float] = {}
    for line in (x for text in texts.values() for x in text.splitlines()):
        m = SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(3))
    return out


def drive(url: str, bodies: list[dict], clients: int, max_seconds: float) -> tuple[list[float], float, int]:
    """Post ``bodies`` from ``clients`` threads (one keep-alive connection each) until all are
    answered or ``max_seconds`` pass; (latencies in seconds, wall seconds, failed requests)."""
    host, port = urllib.parse.urlsplit(url).hostname, urllib.parse.urlsplit(url).port
    lock, latencies, failed = threading.Lock(), [], [0]
    payloads = [json.dumps(b, ensure_ascii=False).encode() for b in bodies]  # encoded once, not in the timing
    todo = iter(range(len(bodies)))
    stop_at = time.perf_counter() + max_seconds

    def worker() -> None:
        # the standard library's client: a load generator should spend little of the shared CPU itself
        conn = http.client.HTTPConnection(host, port, timeout=300)
        try:
            while time.perf_counter() < stop_at:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                t = time.perf_counter()
                conn.request("POST", "/get_reward", body=payloads[i], headers=JSON)
                reply = conn.getresponse()
                data = reply.read()
                took = time.perf_counter() - t
                ok = reply.status == 200 and len(json.loads(data)["rewards"]) == len(bodies[i]["query"])
                with lock:
                    latencies.append(took) if ok else None
                    failed[0] += not ok
        finally:
            conn.close()

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        for f in [pool.submit(worker) for _ in range(clients)]:
            f.result()
    return latencies, time.perf_counter() - start, failed[0]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def run_one(name: str, folder: Path, args, bodies: list[dict], extra: list[str], log_dir: Path,
            replicas: int = 1) -> dict:
    """Start the server with ``extra`` flags, warm it up, drive it, read /metrics; one result row."""
    import httpx

    started = time.perf_counter()
    proc, url = start_server(folder, args.device, args.threads, log_dir / f"{name.replace(' ', '-')}.log", extra)
    print(f"{name}: the server is ready after {time.perf_counter() - started:.1f} s", flush=True)
    try:
        warm = 4 * args.replicas  # the same requests driven in both runs
        with ThreadPoolExecutor(replicas) as pool:  # warm-up: first forward passes, allocator, tokenizer caches
            for reply in pool.map(lambda b: httpx.post(url + "/get_reward", json=b, timeout=300.0), bodies[:warm]):
                reply.raise_for_status()
        print(f"{name}: warmed up after {time.perf_counter() - started:.1f} s", flush=True)
        before = metrics(url, replicas)
        latencies, wall, failed = drive(url, bodies[warm:], args.clients, args.max_seconds)
        after = metrics(url, replicas)
    finally:
        proc.terminate()
        proc.wait(timeout=120)
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    batches = d.get("cheems_serve_batch_sequences_count", 0.0)
    return {"name": name, "requests": len(latencies), "failed": failed, "wall": wall,
            "rps": len(latencies) / wall, "tokens_s": d.get("cheems_serve_tokens_total", 0.0) / wall,
            "p50": percentile(latencies, 50), "p95": percentile(latencies, 95), "p99": percentile(latencies, 99),
            "fill": d.get("cheems_serve_batch_sequences_sum", 0.0) / batches if batches else 0.0,
            "busy": d.get("cheems_serve_forward_seconds_sum", 0.0) / wall,
            "forward_ms": 1e3 * d.get("cheems_serve_forward_seconds_sum", 0.0) / batches if batches else 0.0,
            "per_seq_ms": 1e3 * d.get("cheems_serve_forward_seconds_sum", 0.0)
            / max(1.0, d.get("cheems_serve_sequences_total", 0.0)),
            "tokens_per_seq": d.get("cheems_serve_tokens_total", 0.0) / max(1.0, d.get("cheems_serve_sequences_total", 0.0)),
            "mean_latency": statistics.fmean(latencies)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=16, help="concurrent clients (threads, one connection each)")
    ap.add_argument("--requests", type=int, default=1000, help="requests in all, per server run")
    ap.add_argument("--queries-per-request", type=int, default=4, help="conversations in one /get_reward request")
    ap.add_argument("--chars", type=int, default=None, help="about this many characters per response "
                    "(default: 30 on CPU, 200 on CUDA)")
    ap.add_argument("--shape", default=None, choices=list(SHAPES), help="model shape (default: tiny on CPU, "
                    "qwen2.5-0.5b on CUDA)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="the server's torch threads (OMP_NUM_THREADS; "
                    "default 1 on CPU, leaving the other cores to the clients, 4 on CUDA)")
    ap.add_argument("--max-seconds", type=float, default=120.0, help="stop sending after this long, per run")
    ap.add_argument("--server-args", default="", help="more `cheems serve` flags for both runs, one string "
                    "(\"--no-packing --token-budget 8192\")")
    ap.add_argument("--model-dir", default=None, help="build the random-weight model here, or reuse the one there")
    ap.add_argument("--replicas", type=int, default=1, help="N > 1: compare one replica with `--replicas N` "
                    "(instead of batched with --max-batch 1)")
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    shape = args.shape or ("qwen2.5-0.5b" if cuda else "tiny")
    args.chars = args.chars or (200 if cuda else 30)
    args.threads = args.threads or (4 if cuda else 1)
    bodies = request_bodies(args.requests + 4 * args.replicas, args.queries_per_request, args.chars)
    with tempfile.TemporaryDirectory() as d:
        texts = [q for b in bodies for q in b["query"]]
        folder = build(Path(args.model_dir) if args.model_dir else Path(d) / "model", shape, texts, args.device)
        common = shlex.split(args.server_args)
        print(f"{shape} on {args.device} ({args.threads} server threads{', ' + args.server_args if common else ''}): "
              f"{args.clients} clients, {args.requests} requests of {args.queries_per_request} queries "
              f"(~{args.chars} characters each)")
        if args.replicas > 1:
            rows = [run_one("1 replica", folder, args, bodies, common, Path(d)),
                    run_one(f"{args.replicas} replicas", folder, args, bodies,
                            [*common, "--replicas", str(args.replicas)], Path(d), args.replicas)]
        else:
            rows = [run_one("batched", folder, args, bodies, common, Path(d)),
                    run_one("max-batch 1", folder, args, bodies, [*common, "--max-batch", "1"], Path(d))]
    for r in rows:
        print(f"{r['name']:>12}: {r['requests']:5d} requests in {r['wall']:6.2f} s  {r['rps']:8.1f} requests/s  "
              f"{r['tokens_s']:10,.0f} tokens/s  latency p50 {1e3 * r['p50']:7.1f} ms  p95 {1e3 * r['p95']:7.1f} ms  "
              f"p99 {1e3 * r['p99']:7.1f} ms  batch fill {r['fill']:5.1f} sequences  model busy {r['busy']:5.1%} "
              f"(forward {r['forward_ms']:.1f} ms a batch, {r['per_seq_ms']:.2f} ms a sequence)"
              f"{'  FAILED ' + str(r['failed']) if r['failed'] else ''}")
    if cuda:
        print(mfu_line(shape, args.device, rows))
    if args.replicas > 1:
        print(f"{args.replicas} replicas vs 1: {rows[1]['rps'] / rows[0]['rps']:.2f}x the requests/s (model busy "
              f"sums the replicas' forward time; {os.cpu_count()} CPU cores for the replicas and the clients)")
        return
    ratio = rows[0]["rps"] / rows[1]["rps"]
    print(f"batched vs --max-batch 1: {ratio:.2f}x the requests/s "
          f"({'meets' if ratio >= 3 else 'misses'} the 3x goal for {args.clients} clients)")
    print(where_the_time_goes(*rows))


def mfu_line(shape: str, device: str, rows: list[dict]) -> str:
    """Each run's model FLOP utilisation: forward FLOPs per token (causal context taken as half
    the mean sequence length, from the server's own counts) x tokens scored per second of wall
    time, over the device's dense bf16 peak."""
    import torch

    from mfu import device_peak, mfu

    peak, source = device_peak(device)
    parts = []
    for r in rows:
        context = (r["tokens_per_seq"] + 1) / 2
        parts.append(f"{r['name']} {mfu(shape, context, 1, r['tokens_s'], peak):.1%}")
    return f"MFU, forward only ({source}; {torch.cuda.get_device_name()}): " + ", ".join(parts)


def where_the_time_goes(batched: dict, alone: dict) -> str:
    """What bounds the gain: batching shortens only the model's work, by the forward cost of a
    sequence alone over its cost inside a batch; the time the model waits for requests to be read,
    parsed and tokenized (and for the clients, on the same cores) it does not shorten."""
    gain = alone["per_seq_ms"] / batched["per_seq_ms"] if batched["per_seq_ms"] else float("inf")
    return (f"where the time goes: a sequence's forward pass took {alone['per_seq_ms']:.2f} ms alone and "
            f"{batched['per_seq_ms']:.2f} ms in batches of {batched['fill']:.1f} (batching made the model {gain:.2f}x "
            f"as fast a sequence); the model was busy {alone['busy']:.0%} of the wall time with --max-batch 1 and "
            f"{batched['busy']:.0%} batched, the rest waiting on HTTP, JSON and tokenizing in the server and on the "
            f"clients ({os.cpu_count()} CPU cores for all of them)")

if __name__ == "__main__":
    main()
