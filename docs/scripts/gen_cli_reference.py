"""Write the site's command-line reference (reference/cli.md) from the `cheems` Typer app.

mkdocs-gen-files runs this file on every `mkdocs build`: it walks the command tree that
`typer.main.get_command(cheems.cli.app)` builds, the same objects `cheems ... --help` prints, so
every command, sub-command, argument and option on the page comes from the code and nothing is
typed twice. Hidden commands (old names kept for compatibility) are left out.

`python docs/scripts/gen_cli_reference.py` prints the page instead of writing it.
"""

from __future__ import annotations

import re

import typer

from cheems.cli import app

PAGE = "reference/cli.md"

_SPECIAL = re.compile(r"([\\*_\[\]|<>#])")


def escape(text: str) -> str:
    """Markdown-safe text: characters outside `code spans` that Markdown would read as markup
    (emphasis, links, HTML tags, table cells) are escaped; code spans are kept as they are."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: escape it too rather than open a code span
        return _SPECIAL.sub(r"\\\1", text).replace("`", r"\`")
    return "`".join(part if i % 2 else _SPECIAL.sub(r"\\\1", part) for i, part in enumerate(parts))


def anchor(path: list[str]) -> str:
    """The heading id of a command: `cheems curate sample` -> `cheems-curate-sample`."""
    return "-".join(path)


def help_text(command) -> str:
    """A command's help as Markdown paragraphs (click's no-rewrap marker removed)."""
    text = (command.help or "").replace("\b\n", "").replace("\b", "")
    return "\n\n".join(escape(" ".join(p.split())) for p in re.split(r"\n\s*\n", text.strip()) if p.strip())


def summary(command) -> str:
    """The first paragraph of a command's help, on one line (what the tables of commands show)."""
    text = (command.help or "").replace("\b", "").strip()
    return escape(" ".join(re.split(r"\n\s*\n", text)[0].split())) if text else ""


def subcommands(command, ctx) -> list[tuple[str, object]]:
    """The visible sub-commands of a group, in the order its help lists them."""
    found = []
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        if sub is not None and not sub.hidden:
            found.append((name, sub))
    return found


def parameters(command, ctx) -> tuple[list[str], list[str]]:
    """Bullet lines for the arguments and for the options of a command (``--help`` left out)."""
    arguments, options = [], []
    help_names = set(command.get_help_option_names(ctx))
    for param in command.get_params(ctx):
        if getattr(param, "hidden", False) or help_names & set(param.opts):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, text = record
        line = f"- `{names}`" + (f": {escape(' '.join(text.split()))}" if text.strip() else "")
        (arguments if param.param_type_name == "argument" else options).append(line)
    return arguments, options


def document(command, ctx, path: list[str], lines: list[str]) -> None:
    """Append the section of one command, then of each of its sub-commands, to ``lines``."""
    level = min(len(path), 6)
    lines += [f"{'#' * level} `{' '.join(path)}` {{#{anchor(path)}}}", ""]
    if command.help:
        lines += [help_text(command), ""]
    lines += ["```text", command.get_usage(ctx).strip(), "```", ""]
    arguments, options = parameters(command, ctx)
    for title, items in (("Arguments", arguments), ("Options", options)):
        if items:
            lines += [f"**{title}**", "", *items, ""]
    children = subcommands(command, ctx) if hasattr(command, "list_commands") else []
    if children:
        lines += ["**Commands**", ""]
        lines += [f"- [`{name}`](#{anchor(path + [name])}): {summary(sub)}"
                  for name, sub in children]
        lines.append("")
        for name, sub in children:
            document(sub, sub.context_class(sub, info_name=name, parent=ctx), path + [name], lines)


def cli_reference() -> str:
    """The whole page: every visible command of `cheems`, depth first, in help order."""
    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="cheems")
    lines = [
        "# Command line reference",
        "",
        "This page is generated from the `cheems` command itself each time the site is built: the",
        "texts are those of `cheems COMMAND --help`. Every command also takes `--help`.",
        "",
        help_text(root),
        "",
    ]
    lines += ["| command | what it does |", "|---|---|"]
    lines += [f"| [`cheems {name}`](#{anchor(['cheems', name])}) | {summary(sub)} |"
              for name, sub in subcommands(root, ctx)]
    lines.append("")
    for name, sub in subcommands(root, ctx):
        document(sub, sub.context_class(sub, info_name=name, parent=ctx), ["cheems", name], lines)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    print(cli_reference(), end="")
else:  # run by mkdocs-gen-files during `mkdocs build`
    import mkdocs_gen_files

    with mkdocs_gen_files.open(PAGE, "w") as page:
        page.write(cli_reference())
