"""The report page: one static HTML file (and the same content as Markdown with PNG plots) from any mix
of result files of the statistics commands.

Inputs are told apart by their content (their ``"kind"`` key, or their shape):

- ``eval``: ``cheems eval --json``; a judge eval (scorer ``generative``) may add ``position_consistency``
  and ``first_position_rate``;
- ``bon``: ``cheems bon --json``; ``compare``: ``cheems compare --json``; ``correlate``: ``cheems correlate --json``;
- ``curate``: the ``OUT.report.json`` of a ``cheems curate`` stage (a ``"stage"`` key);
- ``bias``: ``cheems analyze bias --json`` (group name -> `cheems.curation.bias.bias_table`);
- ``train_log``: a training run's ``train_log.jsonl`` (one JSON object with an integer ``step`` per line);
- ``experiment``: an experiment folder of ``cheems experiment run`` (its ``results.jsonl``): the study's tables
  in the shape of the paper's Tables 3 and 4 and its scaling plots, Figures 6 and 7 (`cheems.report.study`).

The page shows a leaderboard in the shape of the paper's Table 2 (discriminative and generative reward models,
Acc./Exact per subset, Overall with its CI; sortable by clicking a header), per-category accuracy (Figure 4),
judge position consistency, the length diagnostic, a pairwise significance matrix and the compare details,
best-of-n curves, correlation heat maps (Figure 5), annotator bias (Figure 15), curation counts and training
curves.

Every number shown carries its source: ``<span class="num" data-src="I" data-path="subsets/open/accuracy"
data-value="0.7296705534401701" data-fmt="f3" title="eval.json: subsets/open/accuracy">0.730</span>``:
``data-src`` indexes the list of inputs (`Report.sources`, listed at the top of the page from 1), ``data-path``
is the value's place in that file as JSON-pointer segments joined by ``/`` (``~`` written ``~0`` and ``/`` written
``~1`` inside a key; a list position is its index; in a training log the first segment is the record's position
among the log's records), ``data-value`` the value shown as JSON, ``data-fmt`` how it is written (see `format_number`); a number shown as minus the file's value (a
difference read the other way round) carries ``data-negated="true"``. Missing values show as ``–``.

Its words are English or Chinese (`cheems.report.wording`): as asked, or else Chinese when any of the data's own
text (model names, subsets, categories, annotator groups, downstream metrics) is Chinese; a line under the title
says which and how to switch (``--lang``).

The HTML needs nothing outside itself: plots are inline SVG with text drawn as paths, the sorting script and
styles are inline, and a Content-Security-Policy forbids every fetch.

This module assembles the page from its parts: inputs (`cheems.report.page_inputs`: reading and checking the
files), sections (`cheems.report.sections`: what each part of the page shows, built of the numbers, tables and
figures of `cheems.report.page_content`) and renderers (`cheems.report.render`: HTML and Markdown), and writes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence
from urllib.parse import quote

from cheems.io import atomic_open, check_output_folder, check_outputs, outputs_together
from cheems.records import CheemsInputError
from cheems.report.page_content import (DASH, FORMATS, Figure, Num, Report, Section, Source, Table, auto_format,
                                        format_number)
from cheems.report.page_inputs import KINDS, classify, data_texts, label_sources, read_result
from cheems.report.render import render_html, render_markdown
from cheems.report.sections import page_sections
from cheems.report.wording import LANGUAGES, chinese_text, language_note

__all__ = ["DASH", "FORMATS", "KINDS", "LANGUAGES", "Figure", "Num", "Report", "Section", "Source", "Table",
           "build_report",
           "auto_format", "classify", "format_number", "read_result", "render_html", "render_markdown", "write_report"]


def build_report(paths: Sequence[str | Path], *, title: str | None = None, lang: str | None = None) -> Report:
    """Read every result file of ``paths`` (any mix of `KINDS`, told apart by content) and lay out the page.

    ``lang``: ``en`` or ``zh`` (`LANGUAGES`); None picks it from the data: Chinese when any of its own text
    (`data_texts`: names, subsets, categories, groups) holds Chinese, else English. The page says which and how
    to switch (`Report.lang_note`).
    ``title``: the page's title (default: "Reward model report" in its language).

    A file that cannot be read, is not JSON, or is no known result is one CheemsInputError naming the file.
    Nothing is drawn yet: the plots are made by `render_html` / `render_markdown` (and `write_report`)."""
    if not paths:
        raise CheemsInputError("no result files given: the report needs at least one")
    if lang is not None and lang not in LANGUAGES:
        raise CheemsInputError(f"must be one of {', '.join(LANGUAGES)}, got {lang!r}", field="lang")
    sources = [read_result(p, i) for i, p in enumerate(paths)]
    label_sources(sources)
    example = chinese_text(data_texts(sources))
    chosen = lang or ("zh" if example is not None else "en")
    report = Report(sources, [], lang=chosen, lang_note=language_note(chosen, lang is not None, example))
    report.title = title or report.say("title")
    report.sections.extend(page_sections(report))
    return report


def _unique_figure_names(report: Report) -> None:
    """Give each figure of the page its own name (its PNG's stem): a repeated name gets ``_2``, ``_3``, ..."""
    seen: set[str] = set()
    for section in report.sections:
        for block in section.blocks:
            if isinstance(block, Figure):
                base, k = block.name, 2
                while block.name in seen:
                    block.name = f"{base}_{k}"
                    k += 1
                seen.add(block.name)


def write_report(report: Report, html_path: str | Path, markdown_path: str | Path | None = None) -> list[Path]:
    """Write the page of ``report`` (from `build_report`) to ``html_path``, and with ``markdown_path`` the same
    content as Markdown, its plots as PNG files in the folder ``<markdown stem>_files`` beside it.

    Outputs are checked first (`cheems.io.check_outputs`): one that is an input, a folder, or cannot be written
    is one CheemsInputError naming it, and nothing is written. The PNGs are written one by one, each
    atomically; the HTML and the Markdown appear together at the end or not at all. Returns the paths written,
    the HTML first."""
    from cheems.report.plots import plotting

    html_path = Path(html_path)
    markdown_path = Path(markdown_path) if markdown_path is not None else None
    inputs = [s.path for s in report.sources]
    check_outputs([html_path, markdown_path], inputs)
    files_dir = markdown_path.with_name(markdown_path.stem + "_files") if markdown_path else None
    if files_dir is not None:
        check_output_folder(files_dir, inputs)
    _unique_figure_names(report)
    with plotting():  # the HTML's figures and the Markdown's: one font lookup, one warning without a CJK font
        page = render_html(report).encode("utf-8")
        text, images = render_markdown(report, quote(files_dir.name)) if files_dir is not None else ("", {})
    written: list[Path] = []
    markdown = b""
    if files_dir is not None:
        markdown = text.encode("utf-8")
        for name, data in images.items():
            with atomic_open(files_dir / name) as f:
                f.write(data)
            written.append(files_dir / name)
    with outputs_together(html_path, markdown_path) as (html_tmp, md_tmp):
        with atomic_open(html_tmp) as f:
            f.write(page)
        if md_tmp is not None:
            with atomic_open(md_tmp) as f:
                f.write(markdown)
    return [html_path, *([markdown_path] if markdown_path else []), *written]
