"""`cheems data list`, `data info` and `data get`: public preference datasets by name."""

from __future__ import annotations

from typing import Optional

import typer

import cheems
from cheems.cli.app import app
from cheems.cli.console import out, print_skipped, progress, reports_input_errors, say
from cheems.cli.flags import build_settings, settings_flags
from cheems.common_settings import OutputSettings, ReadSettings

__all__ = ["data_app", "get", "info", "list_entries"]

data_app = typer.Typer(no_args_is_help=True, help="Public preference datasets by name: list them, read about one, "
                       "convert one to a cheems file. Every command that takes a data file also takes a name "
                       "(NAME[:CONFIG][@SPLIT][+OPTION]) or hf:OWNER/NAME[:CONFIG][@SPLIT].")


@data_app.command("list")
def list_entries():
    """Every catalogue entry on one line: name, hub id, language, size, licence."""
    entries = cheems.list_datasets()
    widths = [max(len(e.name) for e in entries), max(len(e.hub_id) for e in entries), 2,
              max(len(e.size) for e in entries)]
    for e in entries:
        cells = (e.name, e.hub_id, e.language, e.size)
        marks = (" (non-commercial)" if e.non_commercial else "") + (" (gated)" if e.gated else "")
        line = "  ".join(c.ljust(w) for c, w in zip(cells, widths))
        out.print(f"{line}  {e.licence}{marks}", soft_wrap=True)


@data_app.command()
@reports_input_errors
def info(name: str = typer.Argument(..., help="A catalogue name (see `cheems data list`).")):
    """Everything the catalogue knows about one dataset: hub id, revision, licence, splits,
    configs, option, the columns its conversion reads, and the files a local copy (a mirror
    folder or a --source folder) must hold."""
    e = cheems.dataset_info(name)
    facts = [("title", e.title), ("hub id", e.hub_id), ("revision", e.revision or "latest (none pinned; --revision pins one)"),
             ("language", e.language), ("size", e.size),
             ("licence", e.licence + ("  (not for commercial use)" if e.non_commercial else "")),
             ("access", "gated: accept the terms on the hub and log in" if e.gated else "open"),
             ("splits", ", ".join(e.files or e.splits) + f"  (default {e.split})"),
             ("configs", (", ".join(e.configs) + f"  (default {e.config or 'all'})") if e.configs else "-"),
             ("option", f"{e.option.name}: {', '.join(e.option.choices)} (default {e.option.default}); "
                        f"{e.option.help}" if e.option else "-"),
             ("columns read", ", ".join(e.columns) or "-"),
             ("mirror folder", f"$CHEEMS_HUB_MIRROR/{e.mirror_folder} (or a --source folder laid out the same)"),
             ("files read", e.layout()),
             ("same schema", ", ".join(e.alternatives) or "-"), ("about", e.description or "-")]
    for key, value in facts:
        out.print(f"{key:>13}: {value}", soft_wrap=True)


@data_app.command()
@reports_input_errors
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "The cheems JSONL file to write"})
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid",),
                helps={"skip_invalid": "Skip rows that cannot be converted"})
def get(name: str = typer.Argument(..., help="A catalogue name or hf:OWNER/NAME[:CONFIG][@SPLIT]."),
        split: Optional[str] = typer.Option(None, "--split", help="The split to read (default: the entry's)."),
        config: Optional[str] = typer.Option(None, "--config", help="The hub config (or folder) to read."),
        option: Optional[str] = typer.Option(None, "--option", help="The entry's option (see `cheems data info`)."),
        revision: Optional[str] = typer.Option(None, "--revision", help="A hub revision: a branch, tag or commit "
                                               "(default: the entry's pinned one where it has one, else the latest)."),
        limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Stop after this many rows."),
        source: Optional[str] = typer.Option(None, "--source", help="Read a local folder laid out like the hub "
                                             "repository, or another hub id with the same schema."),
        out_flags: dict = None, read_flags: dict = None):
    """Download a dataset (once, into the datasets cache) and convert it to cheems rows."""
    output, read = build_settings(OutputSettings, out_flags).output, build_settings(ReadSettings, read_flags)
    with progress(f"converting {name}") as bar:
        summary = cheems.load_dataset(name, output, split=split, config=config, option=option, revision=revision,
                                      limit=limit, source=source, read=read, progress=bar, notify=say)
    print_skipped(summary["errors"])
    rate = summary["rows"] / summary["seconds"] if summary["seconds"] > 0 else 0.0
    out.print(f"wrote {summary['rows']} rows -> {output} ({rate:,.0f} rows/s)")


app.add_typer(data_app, name="data")
