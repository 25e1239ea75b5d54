"""Data preparation of the largest catalogue entries: `cheems data get` (``get_dataset``) vs the
plain way, a ``datasets.load_dataset`` and a ``for row in dataset:`` loop through the same
converter writing each row with ``json.dumps``.

Usage:
  python benchmarks/bench_catalog.py                  # 50,000 rows per entry, two rounds
  python benchmarks/bench_catalog.py --quick          # 5,000 rows per entry
  python benchmarks/bench_catalog.py --rows 161000 --entries hh-rlhf,nectar
  python benchmarks/bench_catalog.py --profile prof   # also cProfile each approach once (prof/<entry>.<way>.txt)

Each entry's rows are made up here (varied texts of realistic lengths, in the hub's schema)
and written into a temp folder laid out like the hub repository: HH-RLHF's four data folders
of ``train.jsonl.gz`` and ``test.jsonl.gz`` (test 5% of train), Nectar's ``data/rlaif.parquet``,
COIG-P's ``data/train-*.parquet`` shards, UltraFeedback's ``train_prefs`` and ``test_prefs``
parquet files with a README ``configs:`` card. Both ways read that folder through
``datasets.load_dataset`` (``force_redownload``, each run with an empty ``HF_DATASETS_CACHE``,
so the Arrow preparation of every split the folder holds is in both times) and convert the
read split. Each run is a fresh process; its peak RSS is that process's own (the ``VmHWM`` it
reports; ``ru_maxrss`` of ``os.wait4`` only where /proc is missing, as Linux counts the
parent's peak into it). The two ways run in alternating order; rows/s is the best round, peak
memory the largest. Times are from just before ``load_dataset`` to the output file closed
(imports excluded). The texts are built from a few dozen sentences, so the files compress far
better than real ones; decompressing is a small share of either time.
Both outputs are parsed back and compared row by row.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mfu import own_peak_kib  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("cheems", "plain")
ENTRIES = ("hh-rlhf", "nectar", "coig-p", "ultrafeedback")

# ----------------------------------------------------------------------------- texts

ENGLISH = [
    "The short answer is that it depends on how much time you can set aside each week.",
    "Start by writing down what you already know, then list the questions you still have.",
    "Most people find it easier to keep a habit when it is attached to something they already do every day.",
    "If the pain lasts more than a few days or gets worse, please see a doctor rather than waiting.",
    "A simple way to check the result is to plug the value back into the original equation.",
    "Here is a rough plan you could follow, adjusting it to your own schedule.",
    "Keep the soil moist but not soaked, and move the pot somewhere with indirect light.",
    "The function returns None when the key is missing, so check for that before you use the value.",
    "In the nineteenth century the railway changed how quickly news and goods could cross the country.",
    "You might also ask the landlord to put the agreement in writing, so both of you have a record.",
    "I can't help with that, but I can explain how to stay safe and where to find support.",
    "Compound interest means you earn interest on the interest you have already earned.",
    "Try to sleep and wake at the same time every day, even on weekends.",
    "A good cover letter is short, specific, and explains why you want this particular job.",
    "The recipe works just as well with chickpeas instead of lentils if that is what you have.",
    "When two sources disagree, look at when each was written and who paid for the research.",
    "Use a list comprehension here; it is shorter and usually a little faster than the loop.",
    "The museum is closed on Mondays, so plan the visit for later in the week.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "It is normal to feel nervous before a presentation; practising out loud helps a lot.",
    "To be honest, I'm not sure, and I would rather not guess about something this important.",
    "The second law of thermodynamics says the entropy of an isolated system never decreases.",
    "Ask yourself what you would do differently if you had to start the project again tomorrow.",
    "Bake it for twenty-five minutes, or until a skewer pushed into the middle comes out clean.",
    "Each step of the proof follows from the one before, so read them in order.",
    "Many cities now have bike lanes that are separated from traffic by a low curb.",
    "Sure! Here are a few ideas that usually work well for a group of that size.",
    "Remember to back up your files before you upgrade the operating system.",
    "The word comes from Latin, where it originally meant something closer to 'to gather'.",
    "A budget only works if it matches how you actually spend, so track a month first.",
    "Dogs usually pick up a new command faster with short sessions and small rewards.",
    "The treaty was signed in 1648 and ended decades of war across central Europe.",
    "You can set the timeout in the configuration file instead of passing it every time.",
    "Water boils at a lower temperature at high altitude, so pasta takes a little longer.",
    "That sounds frustrating; it might help to talk it through with someone you trust.",
    "Sort the list first, then a binary search finds any value in logarithmic time.",
]
QUESTIONS = [
    "How do I", "What is the best way to", "Can you explain why", "Is it safe to", "Write a short note about how to",
    "What should I know before I", "Why does my code fail when I", "Give me some tips to", "How long does it take to",
]
TOPICS = [
    "grow tomatoes on a balcony", "pay off a credit card faster", "learn Spanish in a year", "train for a 10k race",
    "speed up a slow Python script", "write a resignation letter", "clean a cast iron pan", "read a nutrition label",
    "prepare for a job interview", "explain recursion to a beginner", "negotiate a higher salary",
    "keep a sourdough starter alive", "fix a leaking tap", "choose a laptop for video editing",
    "talk to my teenager about social media", "calm down before an exam", "invest a small amount each month",
]
MODELS = ["gpt-4", "gpt-3.5-turbo", "gpt-3.5-turbo-instruct", "llama-2-7b-chat", "mistral-7b-instruct",
          "vicuna-33b", "claude-1", "claude-instant-1", "wizardlm-13b", "mpt-30b-chat"]
SOURCES = ["sharegpt", "anthropic-hh", "lmsys-chat-1m", "ultrachat", "evol_instruct", "flan_v2_niv2"]
DOMAINS = ["Chat", "Code", "Math", "Logic", "Novel", "Role"]


class Texts:
    """Random texts of about a given length: English sentences joined, Chinese windows cut
    from the bundled annotation sample (prompts and responses kept apart)."""

    def __init__(self, seed: int) -> None:
        from cheems.formats import read_prompts

        folder = ROOT / "src/cheems/data/sample/annotations"
        sample = read_prompts(folder / "open.jsonl").prompts + read_prompts(folder / "human.jsonl").prompts
        self.rng = random.Random(seed)
        self.zh_prompts = "".join(p.prompt_text.replace("\n", "") for p in sample)
        self.zh_answers = "".join(r.content for p in sample for r in p.responses)

    def length(self, mean: int) -> int:
        return max(8, int(self.rng.gauss(mean, mean / 3)))

    def english(self, mean: int) -> str:
        target, parts, n = self.length(mean), [], 0
        while n < target:
            parts.append(self.rng.choice(ENGLISH))
            n += len(parts[-1]) + 1
        return " ".join(parts)

    def question(self, mean: int) -> str:
        head = f"{self.rng.choice(QUESTIONS)} {self.rng.choice(TOPICS)}?"
        return head if mean <= len(head) else head + " " + self.english(mean - len(head))

    def chinese(self, mean: int, prompt: bool = False) -> str:
        pool = self.zh_prompts if prompt else self.zh_answers
        n = min(self.length(mean), len(pool) - 1)
        start = self.rng.randrange(0, len(pool) - n)
        return pool[start:start + n]


# ----------------------------------------------------------------------------- hub-like folders

def hh_transcript(texts: Texts, turns: list[tuple[str, str]], last: str) -> str:
    body = "".join(f"\n\nHuman: {h}\n\nAssistant: {a}" for h, a in turns[:-1])
    return body + f"\n\nHuman: {turns[-1][0]}\n\nAssistant: {last}"


def hh_rows(texts: Texts, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        turns = [(texts.question(110), texts.english(380)) for _ in range(texts.rng.choice((1, 1, 1, 2, 2, 3)))]
        rows.append({"chosen": hh_transcript(texts, turns, texts.english(380)),
                     "rejected": hh_transcript(texts, turns, texts.english(300))})
    return rows


def write_hh_rlhf(folder: Path, texts: Texts, n: int) -> None:
    shares = {"harmless-base": 42_537, "helpful-base": 43_835, "helpful-online": 22_007,
              "helpful-rejection-sampled": 52_421}  # the real train sizes, scaled to n
    total = sum(shares.values())
    counts = [n * s // total for s in shares.values()]
    counts[-1] += n - sum(counts)
    for (sub, _), count in zip(shares.items(), counts):
        (folder / sub).mkdir(parents=True)
        for split, k in (("train", count), ("test", max(1, count // 20))):
            with gzip.open(folder / sub / f"{split}.jsonl.gz", "wt", encoding="utf-8") as f:
                for row in hh_rows(texts, k):
                    f.write(json.dumps(row) + "\n")
    (folder / "README.md").write_text("---\nlicense: mit\n---\n# HH-RLHF (benchmark copy)\n", encoding="utf-8")


def nectar_rows(texts: Texts, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        turns = texts.rng.choice((1, 1, 1, 1, 2, 3))
        prompt = "".join(f"\n\nHuman: {texts.question(150)}\n\nAssistant: {texts.english(400)}"
                         for _ in range(turns - 1)) + f"\n\nHuman: {texts.question(150)}\n\nAssistant:"
        ranks = [float(r) for r in texts.rng.sample(range(1, 8), 7)]
        if texts.rng.random() < 0.05:  # a tie now and then
            ranks[ranks.index(2.0)] = 1.0
        models = texts.rng.sample(MODELS, 7)
        rows.append({"prompt": prompt, "answers": [{"answer": texts.english(550), "model": m, "rank": r}
                                                   for m, r in zip(models, ranks)],
                     "turns": turns, "num_responses": 7, "source": [texts.rng.choice(SOURCES)],
                     "good_natured": texts.rng.random() < 0.9})
    return rows


def write_nectar(folder: Path, texts: Texts, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    answer = pa.struct([("answer", pa.string()), ("model", pa.string()), ("rank", pa.float64())])
    schema = pa.schema([("prompt", pa.string()), ("answers", pa.list_(answer)), ("turns", pa.int64()),
                        ("num_responses", pa.int64()), ("source", pa.list_(pa.string())),
                        ("good_natured", pa.bool_())])
    (folder / "data").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(nectar_rows(texts, n), schema=schema), folder / "data/rlaif.parquet")
    _card(folder, {"train": "data/rlaif.parquet"})


def coig_rows(texts: Texts, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        conversations = [{"from": "human", "value": texts.chinese(60, prompt=True)}]
        if texts.rng.random() < 0.1:
            conversations += [{"from": "gpt", "value": texts.chinese(300)},
                              {"from": "human", "value": texts.chinese(60, prompt=True)}]
        rows.append({"conversations": conversations, "chosen": {"from": "gpt", "value": texts.chinese(300)},
                     "rejected": {"from": "gpt", "value": texts.chinese(300)},
                     "domain": texts.rng.choice(DOMAINS)})
    return rows


def write_coig_p(folder: Path, texts: Texts, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    schema = pa.schema([("conversations", pa.list_(turn)), ("chosen", turn), ("rejected", turn),
                        ("domain", pa.string())])
    (folder / "data").mkdir(parents=True)
    shards = max(1, -(-n // 20_000))
    for k in range(shards):
        rows = coig_rows(texts, n // shards + (k < n % shards))
        pq.write_table(pa.Table.from_pylist(rows, schema=schema),
                       folder / f"data/train-{k:05d}-of-{shards:05d}.parquet")
    _card(folder, {"train": "data/train-*"})


def ultrafeedback_rows(texts: Texts, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        prompt = texts.question(260)
        chosen = [{"content": prompt, "role": "user"}, {"content": texts.english(900), "role": "assistant"}]
        rejected = [{"content": prompt, "role": "user"}, {"content": texts.english(750), "role": "assistant"}]
        good = texts.rng.choice((6.0, 7.0, 7.5, 8.0, 8.5, 9.0, 10.0))
        bad = good if texts.rng.random() < 0.08 else texts.rng.choice([s for s in (2.0, 3.0, 4.0, 5.0, 6.0)
                                                                         if s < good])
        rows.append({"prompt": prompt, "prompt_id": hashlib.sha256(prompt.encode()).hexdigest(), "chosen": chosen,
                     "rejected": rejected, "messages": chosen, "score_chosen": good, "score_rejected": bad})
    return rows


def write_ultrafeedback(folder: Path, texts: Texts, n: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    messages = pa.list_(pa.struct([("content", pa.string()), ("role", pa.string())]))
    schema = pa.schema([("prompt", pa.string()), ("prompt_id", pa.string()), ("chosen", messages),
                        ("rejected", messages), ("messages", messages), ("score_chosen", pa.float64()),
                        ("score_rejected", pa.float64())])
    (folder / "data").mkdir(parents=True)
    for split, k in (("train_prefs", n), ("test_prefs", max(1, n // 30))):
        pq.write_table(pa.Table.from_pylist(ultrafeedback_rows(texts, k), schema=schema),
                       folder / f"data/{split}-00000-of-00001.parquet")
    _card(folder, {"train_prefs": "data/train_prefs-*", "test_prefs": "data/test_prefs-*"})


def _card(folder: Path, splits: dict[str, str]) -> None:
    lines = ["---", "configs:", "- config_name: default", "  data_files:"]
    for split, path in splits.items():
        lines += [f"  - split: {split}", f"    path: {path}"]
    (folder / "README.md").write_text("\n".join(lines + ["---", "# benchmark copy", ""]), encoding="utf-8")


WRITERS = {"hh-rlhf": write_hh_rlhf, "nectar": write_nectar, "coig-p": write_coig_p,
           "ultrafeedback": write_ultrafeedback}


# ----------------------------------------------------------------------------- one run (a child process)

def child(way: str, name: str, folder: str, split: str, out: str, profile: str | None) -> None:
    """Convert ``split`` of the folder one way; print the seconds (and load seconds) as JSON."""
    import datasets  # noqa: F401  (imported before the clock starts, as cheems imports it)
    import orjson  # noqa: F401

    from cheems.catalog.get import get_dataset
    from cheems.catalog.registry import find_entry

    entry = find_entry(name)
    timing: dict = {}

    def work() -> None:
        start = time.perf_counter()
        if way == "cheems":
            timing["rows"] = get_dataset(name, out, source=folder, split=split)["rows"]
        else:
            timing["rows"], timing["load"] = plain(entry, folder, split, out)
        timing["seconds"] = time.perf_counter() - start

    if profile:
        import cProfile
        import io
        import pstats

        prof = cProfile.Profile()
        prof.runcall(work)
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(25)
        Path(profile).write_text(text.getvalue(), encoding="utf-8")
    else:
        work()
    timing["peak_kib"] = own_peak_kib()
    print(json.dumps(timing))


def plain(entry, folder: str, split: str, out: str) -> tuple[int, float]:
    """The plain way: load_dataset, then a Python loop over the rows through the entry's converter."""
    import datasets

    from cheems.catalog.entry import Conversion

    start = time.perf_counter()
    kwargs = {"data_files": entry.data_files} if entry.data_files is not None else {}
    ds = datasets.load_dataset(folder, split=split, download_mode="force_redownload", **kwargs)
    load = time.perf_counter() - start
    conv = Conversion(entry.name, split, entry.config, None)
    n = 0
    with open(out, "w", encoding="utf-8") as f:
        for i, row in enumerate(ds):
            for p in entry.convert(row, i, conv):
                f.write(json.dumps(p.to_dict(), ensure_ascii=False) + "\n")
                n += 1
    return n, load


# ----------------------------------------------------------------------------- the parent

def run_child(way: str, name: str, folder: Path, split: str, out: Path, work: Path,
              profile: Path | None = None) -> dict:
    """One run in a fresh process with its own empty datasets cache; its seconds and peak RSS."""
    cache = Path(tempfile.mkdtemp(prefix="hf-cache-", dir=work))
    env = dict(os.environ, HF_DATASETS_CACHE=str(cache), HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_DATASETS_DISABLE_PROGRESS_BARS="1", CHEEMS_CACHE_DIR=str(cache / "cheems"))
    cmd = [sys.executable, __file__, "--child", way, name, str(folder), split, str(out)]
    if profile is not None:
        cmd += ["--profile", str(profile)]
    with open(work / "child.out", "w+b") as so, open(work / "child.err", "w+b") as se:
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, env=env, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read().decode(), se.read().decode()
    shutil.rmtree(cache, ignore_errors=True)
    if proc.returncode != 0:
        raise SystemExit(f"{way} run of {name} failed ({proc.returncode}):\n{stderr[-3000:]}")
    result = json.loads(stdout.strip().splitlines()[-1])
    result["peak_mib"] = (result.pop("peak_kib") or usage.ru_maxrss) / 1024  # KiB on Linux
    return result


def same_rows(a: Path, b: Path) -> tuple[int, str | None]:
    """The number of rows and the first difference (None when every row parses to the same JSON)."""
    n = 0
    with open(a, encoding="utf-8") as fa, open(b, encoding="utf-8") as fb:
        for n, (la, lb) in enumerate(zip(fa, fb), 1):
            x, y = json.loads(la), json.loads(lb)
            if x != y:
                return n, f"row {n} differs: id {x.get('id')!r} vs {y.get('id')!r}"
        rest_a, rest_b = fa.read(), fb.read()
    if rest_a or rest_b:
        return n, "one file has more rows than the other"
    return n, None


def bench_entry(name: str, rows: int, rounds: int, work: Path, texts: Texts, profile: Path | None) -> dict:
    from cheems.catalog.registry import find_entry

    split = find_entry(name).split
    folder = work / name
    start = time.perf_counter()
    WRITERS[name](folder, texts, rows)
    size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    print(f"{name}: {rows:,} rows made up in {time.perf_counter() - start:.1f} s ({size / 2**20:,.1f} MiB of files)",
          flush=True)
    runs: dict[str, list[dict]] = {w: [] for w in WAYS}
    outs = {w: work / f"{name}.{w}.jsonl" for w in WAYS}
    for r in range(rounds):
        for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
            res = run_child(way, name, folder, split, outs[way], work)
            runs[way].append(res)
            load = f" (load_dataset {res['load']:.1f} s)" if "load" in res else ""
            print(f"  round {r + 1} {way:>6}: {res['seconds']:7.2f} s  {res['rows'] / res['seconds']:9,.0f} rows/s  "
                  f"peak {res['peak_mib']:7,.0f} MiB{load}", flush=True)
    n, diff = same_rows(outs["cheems"], outs["plain"])
    if profile is not None:
        profile.mkdir(parents=True, exist_ok=True)
        for way in WAYS:
            run_child(way, name, folder, split, outs[way], work, profile / f"{name}.{way}.txt")
        print(f"  profiles: {profile}/{name}.cheems.txt, {profile}/{name}.plain.txt")
    shutil.rmtree(folder)
    for out in outs.values():
        out.unlink(missing_ok=True)
    best = {w: min(x["seconds"] for x in runs[w]) for w in WAYS}
    return {"name": name, "rows": runs["cheems"][0]["rows"], "plain_rows": runs["plain"][0]["rows"],
            "rate": {w: runs[w][0]["rows"] / best[w] for w in WAYS},
            "peak": {w: max(x["peak_mib"] for x in runs[w]) for w in WAYS},
            "same": diff is None and n == runs["cheems"][0]["rows"], "diff": diff, "compared": n}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=50_000)
    ap.add_argument("--quick", action="store_true", help="5,000 rows per entry")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each way, alternating which goes first")
    ap.add_argument("--entries", default=",".join(ENTRIES))
    ap.add_argument("--profile", default=None, metavar="DIR", help="also one cProfile run of each way per entry")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--child", nargs=5, metavar=("WAY", "NAME", "FOLDER", "SPLIT", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(*args.child, args.profile)
    from cheems.catalog.registry import CATALOG

    rows = 5_000 if args.quick else args.rows
    names = [n for n in args.entries.split(",") if n in CATALOG and n in WRITERS]
    missing = [n for n in args.entries.split(",") if n not in names]
    print(f"{os.cpu_count()} CPU cores; Python {sys.version.split()[0]}; {rows:,} rows per entry, "
          f"{args.rounds} rounds" + (f"; not in the catalogue, skipped: {', '.join(missing)}" if missing else ""))
    texts = Texts(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-catalog-") as d:
        for name in names:
            results.append(bench_entry(name, rows, args.rounds, Path(d), texts,
                                       Path(args.profile) if args.profile else None))
    print()
    print(f"{'entry':<14} {'rows':>8} {'cheems rows/s':>14} {'plain rows/s':>13} {'speed':>7} "
          f"{'cheems MiB':>11} {'plain MiB':>10}  same rows")
    for r in results:
        print(f"{r['name']:<14} {r['rows']:>8,} {r['rate']['cheems']:>14,.0f} {r['rate']['plain']:>13,.0f} "
              f"{r['rate']['cheems'] / r['rate']['plain']:>6.2f}x {r['peak']['cheems']:>11,.0f} "
              f"{r['peak']['plain']:>10,.0f}  " + ("yes" if r["same"] else f"NO: {r['diff']}"))
    if all(r["same"] for r in results):
        print("both ways wrote the same rows (every line parsed and compared) for every entry")


if __name__ == "__main__":
    main()
