"""`cheems annotate`: the human annotation server (init, study, add-user, import, serve, status, export).

One database holds several studies side by side; ``--study NAME`` (default ``default``) picks the
one that `add-user`, `import`, `status` and `export` work on, and `serve` serves them all."""

from __future__ import annotations

import functools
import json
import sys
from pathlib import Path
from typing import Optional

import typer

import cheems
from cheems.annotate.settings import DatabaseSettings, ServerSettings, WorkflowSettings
from cheems.cli.app import app
from cheems.cli.console import data_paths, out, print_skipped, reports_input_errors
from cheems.cli.flags import build_settings, settings_flags
from cheems.common_settings import ExtraOutputs, OutputSettings, ReadSettings, StatisticsSettings
from cheems.records import CheemsInputError

__all__ = ["annotate_app"]

annotate_app = typer.Typer(no_args_is_help=True, help="The CheemsBench human annotation protocol as a web app "
                           "(paper §3.2): triple-wise tasks, double-blind overlap, alignment, review, export.")


study_app = typer.Typer(no_args_is_help=True, help="Studies: several annotation projects in one database, each "
                        "with its own prompts, tasks, roles, workflow settings and export.")
annotate_app.add_typer(study_app, name="study")


def _db_as_flag(fn):
    """The library's errors about its ``db`` argument shown under the flag the user typed, --db."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except CheemsInputError as e:
            if e.field != "db":
                raise
            raise CheemsInputError(e.message, file=e.file, line=e.line, field="--db") from None

    return wrapper


@annotate_app.command("init")
@reports_input_errors
@_db_as_flag
@settings_flags(DatabaseSettings, into="db_flags", only=("db",))
def init(db_flags: dict = None):
    """Create (or upgrade) the database schema."""
    done = cheems.annotate_init(build_settings(DatabaseSettings, db_flags).db)
    out.print(f"database ready: {done['database']} (schema {done['schema']})")


@annotate_app.command("add-user")
@reports_input_errors
@_db_as_flag
@settings_flags(DatabaseSettings, into="db_flags")
def add_user(name: str = typer.Argument(..., help="Login name."),
             role: str = typer.Option("annotator", "--role", help="annotator, reviewer or admin."),
             categories: Optional[str] = typer.Option(None, "--categories",
                                                      help="Comma-separated main categories of expertise "
                                                           "(their tasks come first), e.g. 数学,代码."),
             password_stdin: bool = typer.Option(False, "--password-stdin", help="Read the password from stdin."),
             db_flags: dict = None):
    """Add an account with its role in a study, or give an existing account (with its own password)
    a role in another study (the password is asked twice on a terminal, or read from stdin)."""
    def password() -> str:  # asked once the database is open
        if password_stdin:
            return sys.stdin.readline().rstrip("\r\n")
        return typer.prompt("password", hide_input=True, confirmation_prompt=True)

    cats = [c.strip() for c in (categories or "").replace("，", ",").split(",") if c.strip()]
    where = build_settings(DatabaseSettings, db_flags)
    user = cheems.annotate_add_user(name, password, role=role, categories=cats, study=where.study, db=where.db)
    out.print(f"added {user.role} {user.name}" + (f" ({', '.join(cats)})" if cats else "")
              + (f" in study {user.study}" if user.study != "default" else ""))


@annotate_app.command("import")
@reports_input_errors
@_db_as_flag
@settings_flags(DatabaseSettings, into="db_flags")
@settings_flags(ReadSettings, into="read_flags", only=("skip_invalid", "format"))
@settings_flags(StatisticsSettings, into="stats_flags", only=("seed",), helps={"seed": "Where gold tasks land in "
                                                                                       "the queue"})
def import_file(file: Path = typer.Argument(..., help="Prompts with responses, in any format cheems reads."),
                overlap: int = typer.Option(2, "--overlap", help="Annotators per task."),
                gold: Optional[Path] = typer.Option(None, "--gold", help="Ranked prompts with known answers, "
                                                    "mixed into the annotation and review streams."),
                db_flags: dict = None, read_flags: dict = None, stats_flags: dict = None):
    """Turn every prompt into its triple-wise tasks (as `cheems tasks`), keeping id, category and subset."""
    where, read = build_settings(DatabaseSettings, db_flags), build_settings(ReadSettings, read_flags)
    counts = cheems.annotate_import(data_paths(file), overlap=overlap, gold=data_paths(gold), read=read,
                                    statistics=build_settings(StatisticsSettings, stats_flags), study=where.study,
                                    db=where.db)
    print_skipped(counts["errors"])
    out.print(f"imported {counts['prompts']} prompts ({counts['tasks']} tasks, overlap {overlap})"
              + (f", {counts['gold_prompts']} gold prompts ({counts['gold_tasks']} tasks)" if gold else "")
              + (f"; {counts['skipped']} already there" if counts["skipped"] else ""))


@annotate_app.command("serve")
@reports_input_errors
@_db_as_flag
@settings_flags(ServerSettings, into="server_flags")
@settings_flags(WorkflowSettings, into="workflow_flags", exclude=("agreement_window",),
                names={"claim_timeout_s": "--claim-timeout"})
@settings_flags(DatabaseSettings, into="db_flags", only=("db",))
def serve(db_flags: dict = None, workflow_flags: dict = None, server_flags: dict = None):
    """Run the web app for every study: annotators at http://HOST:PORT/, the dashboard at /dashboard.

    The workflow flags hold in the study ``default``; every other study runs on the settings
    stored with it by `cheems annotate study add`.

    Prints one line when it is ready, then one access line per request (method, path, status,
    milliseconds, user id) to stderr."""
    workflow = build_settings(WorkflowSettings, workflow_flags)
    server = build_settings(ServerSettings, server_flags)
    db = build_settings(DatabaseSettings, db_flags).db
    cheems.annotate_serve(db, workflow, server, on_ready=_say_ready, log=sys.stderr)


def _say_ready(r: dict) -> None:
    hint = " (add accounts with `cheems annotate add-user` first)" if not r["users"] else ""
    print(f"cheems annotate: ready at {r['url']} (dashboard: {r['url']}dashboard); database {r['database']}; "
          f"{r['users']} users{hint}; Ctrl+C stops", file=sys.stderr, flush=True)


@annotate_app.command("status")
@reports_input_errors
@_db_as_flag
@settings_flags(DatabaseSettings, into="db_flags")
def status(as_json: bool = typer.Option(False, "--json", help="Print the dashboard numbers as JSON."),
           db_flags: dict = None):
    """Progress, agreement, gold accuracy and bias of one study: the numbers of the dashboard."""
    where = build_settings(DatabaseSettings, db_flags)
    st = cheems.annotate_status(where.study, where.db)
    if as_json:
        out.print_json(json.dumps(st, ensure_ascii=False))
        return
    t = st["tasks"]
    out.print(f"tasks: {t['total']} ({', '.join(f'{k} {v}' for k, v in t.items() if k not in ('total', 'gold'))}); "
              f"gold tasks: {t['gold']}")
    for cat, n in st["by_category"].items():
        out.print(f"  {cat}: {n.get('done', 0)}/{n['tasks']} done, {n.get('answers', 0)} answers")
    a = st["agreement"]
    pct = "-" if a["percent"] is None else f"{a['percent']:.1%}"
    k = st["krippendorff"]
    out.print(f"agreement: {pct} over {a['tasks']} tasks; Krippendorff alpha: scores "
              f"{_alpha(k['scores_ordinal'])}, pairs {_alpha(k['pairs_nominal'])}")
    for name, u in st["by_annotator"].items():
        out.print(f"  {name} ({u['role']}): {u['answers']} answers, {u['open']} open, {u['reviews']} reviews")
    cr = st["conflict_ratio"]
    out.print(f"conflict ratio after resolution: {'-' if cr is None else f'{cr:.3f}'}")


def _alpha(a: dict) -> str:
    return f"{a['value']:.3f}" if a["value"] is not None else f"- ({a['note']})"


@annotate_app.command("export")
@reports_input_errors
@_db_as_flag
@settings_flags(DatabaseSettings, into="db_flags")
@settings_flags(OutputSettings, into="out_flags", only=("output",), short={"output": "-o"}, required=("output",),
                helps={"output": "Benchmark file (JSONL) for `cheems eval`"})
@settings_flags(ExtraOutputs, into="extra_flags", only=("raw", "report"),
                helps={"report": "Conflict statistics (JSON)"})
def export(db_flags: dict = None, out_flags: dict = None, extra_flags: dict = None):
    """One study's standing answers of settled tasks -> comparisons -> conflict resolution -> a ranked benchmark."""
    where, output = build_settings(DatabaseSettings, db_flags), build_settings(OutputSettings, out_flags).output
    raw, report = extra_flags.get("raw"), extra_flags.get("report")
    result = cheems.annotate_export(output, raw=raw, report=report, study=where.study, db=where.db)
    total = result["conflicts"].get("total", {})
    out.print(f"wrote {result['prompts']} ranked prompts -> {output}"
              + (f" (conflict ratio {total['conflict_ratio']:.3f})" if total else "")
              + (f"; {result['prompts_waiting']} prompts without a settled task yet"
                 if result["prompts_waiting"] else "")
              + (f"; {result['raw_rows']} answers -> {raw}" if raw else ""))


@study_app.command("add")
@reports_input_errors
@_db_as_flag
@settings_flags(WorkflowSettings, into="workflow_flags", exclude=("agreement_window",),
                names={"claim_timeout_s": "--claim-timeout"})
@settings_flags(DatabaseSettings, into="db_flags", only=("db",))
def study_add(name: str = typer.Argument(..., help="Name of the new study."), db_flags: dict = None,
              workflow_flags: dict = None):
    """Add an empty study, with the workflow settings it runs on under `serve`."""
    settings = build_settings(WorkflowSettings, workflow_flags)
    study = cheems.annotate_add_study(name, settings, build_settings(DatabaseSettings, db_flags).db)
    out.print(f"added study {study.name}")


@study_app.command("list")
@reports_input_errors
@_db_as_flag
@settings_flags(DatabaseSettings, into="db_flags", only=("db",))
def study_list(as_json: bool = typer.Option(False, "--json", help="Print the studies as JSON."),
               db_flags: dict = None):
    """The studies in the database, with their prompts, tasks and members."""
    studies = cheems.annotate_list_studies(build_settings(DatabaseSettings, db_flags).db)
    if as_json:
        out.print_json(json.dumps(studies, ensure_ascii=False))
        return
    for st in studies:
        out.print(f"{st['name']}: {st['prompts']} prompts, {st['tasks']} tasks, {st['members']} members "
                  f"(created {st['created_at'][:19]})")


app.add_typer(annotate_app, name="annotate")
