"""The Cheems paper's own releases: CheemsBench and CheemsPreference, Git LFS files of the GitHub
repository AlignRM/CheemsRM (read by :mod:`cheems.catalog.lfs`, not through the Hugging Face hub).

Their rows are in the official CheemsRM format, which cheems reads natively
(:mod:`cheems.formats.official`): a benchmark row is ``{input, responses: [{id, content}],
rank: {id: int}, category: [main, sub]}`` (lower rank = better, equal ranks a tie), and a
preference row holds the official trainer's annotations, either as a pairwise row ``{input,
answer1, answer2, preference: 1|2}`` or as ``{input, responses, annotations: [[id1, id2, "1"]]}``;
the trainer's nested variant ``{input, annotations: [{answer1, answer2, preference}]}`` is read
too. The converters only check the columns, hand the row to the official reader and set the
benchmark's subset to its split (``open`` or ``human``).
"""

from __future__ import annotations

from typing import Iterable

from cheems.catalog.entry import Conversion, Entry, need_columns
from cheems.formats.detect import parse_row
from cheems.records import CheemsInputError, Prompt, response_id

__all__ = ["CHEEMS_BENCH", "CHEEMS_PREFERENCE", "CHEEMS_REPOSITORY", "CHEEMS_REVISION", "ENTRIES",
           "convert_bench", "convert_preference"]

CHEEMS_REPOSITORY = "github:AlignRM/CheemsRM"
CHEEMS_REVISION = "53a64c54d1c7557933da7c809749718f3cdc4ff9"
"""The commit the pointers below were read at (``.gitattributes`` puts ``data/***.jsonl`` under LFS)."""
LICENCE = "see the repository (no licence stated)"


def _prompt_column(row: dict, dataset: str) -> None:
    """The official rows' prompt is ``input`` (``prompt`` is read too): one error naming it when neither is there."""
    if "input" not in row and "prompt" not in row:
        need_columns(row, ("input",), dataset=dataset)


def convert_bench(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """One CheemsBench row ``{input, responses, rank, category}`` as it is, its subset the split
    (``open``, ``human``) where the row names none."""
    _prompt_column(row, conv.name)
    need_columns(row, ("responses", "rank"), dataset=conv.name)
    p = parse_row(row, "cheems")
    if p.subset is None:
        p.subset = conv.split
    return [p]


def convert_preference(row: dict, index: int, conv: Conversion) -> Iterable[Prompt]:
    """One CheemsPreference row, pairwise or with ``responses`` and ``annotations``, as the
    official reader reads it (comparisons, and rank where the row has one)."""
    _prompt_column(row, conv.name)
    if "responses" not in row:
        if _nested_annotations(row):
            row = _flatten_annotations(row)
        elif "annotations" in row:
            need_columns(row, ("responses",), dataset=conv.name)
        else:
            need_columns(row, ("answer1", "answer2", "preference"), dataset=conv.name)
    return [parse_row(row)]


def _nested_annotations(row: dict) -> bool:
    annotations = row.get("annotations")
    return isinstance(annotations, list) and bool(annotations) and all(
        isinstance(a, dict) and {"answer1", "answer2", "preference"} <= a.keys() for a in annotations)


def _flatten_annotations(row: dict) -> dict:
    """``{input, annotations: [{answer1, answer2, preference}]}`` as an official row with
    ``responses`` (ids the md5 of the content, as the official loader makes them) and
    ``annotations: [[id1, id2, "1"|"2"]]``."""
    responses: dict[str, dict] = {}
    annotations = []
    for i, a in enumerate(row["annotations"]):
        ids = []
        for key in ("answer1", "answer2"):
            content = a[key]
            if not isinstance(content, str):
                raise CheemsInputError("must be a string", field=f"annotations[{i}].{key}")
            ids.append(response_id(content))
            responses.setdefault(ids[-1], {"id": ids[-1], "content": content})
        annotations.append([ids[0], ids[1], str(a["preference"])])
    return {k: v for k, v in row.items() if k != "annotations"} | {"responses": list(responses.values()),
                                                                   "annotations": annotations}


CHEEMS_BENCH = Entry(
    name="cheemsbench", title="CheemsBench", hub_id=CHEEMS_REPOSITORY, language="zh", licence=LICENCE,
    size="~2.5k prompts x ~5", convert=convert_bench,
    columns=("input", "responses", "rank", "category"),
    description="The Cheems benchmark: Chinese prompts with several responses ranked by human triple-wise "
                "annotation (ties kept). Split `open` (open-source prompts, the default) or split `human` "
                "(human-written prompts); each row's subset is its split.",
    splits=("open", "human"), split="open", revision=CHEEMS_REVISION, loader="lfs",
    files={"open": {"path": "data/cheems_bench/open.jsonl",
                    "sha256": "a8f16d6abe5cb384aab1dc9022b0fefb98a5b35064942dd611839cbd068b0190", "size": 9333907},
           "human": {"path": "data/cheems_bench/human.jsonl",
                     "sha256": "d37eb490a27f47e161672038bb151a4e2624da58a1bb7ea10359eb3eb9dfd2ce", "size": 11474262}})

CHEEMS_PREFERENCE = Entry(
    name="cheems-preference", title="CheemsPreference", hub_id=CHEEMS_REPOSITORY, language="zh", licence=LICENCE,
    size="365 MB", convert=convert_preference,
    columns=("input", "responses", "annotations"),
    description="The Cheems training set: Chinese prompts with responses and preference annotations "
                "(official rows with responses and annotations, or pairwise rows answer1/answer2/preference).",
    splits=("train",), split="train", revision=CHEEMS_REVISION, loader="lfs",
    files={"train": {"path": "data/cheems_preference.jsonl",
                     "sha256": "21e9155e51686193dd33804985eb559c55affe1f141e39b6559367c7a91d0f89",
                     "size": 365514502}})

ENTRIES: list[Entry] = [CHEEMS_BENCH, CHEEMS_PREFERENCE]
