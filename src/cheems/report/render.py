"""The report page's renderers: a `Report` written as one self-contained HTML document (`render_html`) and as
Markdown with its plots as PNG files (`render_markdown`).

HTML: text is escaped, each number is ``<span class="num" data-src data-path data-value data-fmt title>`` (see
`cheems.report.page_content.Num`; ``data-negated="true"`` where it shows minus the file's number, and ``title`` names
the file and the field for readers), each table cell carries the key a sortable column sorts it by, plots are inline
SVG with text drawn as paths, the sorting script and styles are inline, and a Content-Security-Policy (`CSP`)
forbids every fetch. Markdown: ``|`` and ``\\`` are escaped in cells, numbers are their text, and each plot is a
PNG linked from a folder beside the Markdown file.
"""

from __future__ import annotations

import html
import re

from cheems.report.page_content import DASH, Block, Cell, Figure, Num, Report, Table

__all__ = ["CSP", "SORT_SCRIPT", "STYLE", "render_html", "render_markdown"]

STYLE = """
body{font-family:"Noto Sans CJK SC","Source Han Sans SC","PingFang SC","Microsoft YaHei","WenQuanYi Micro Hei",
 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222;line-height:1.45}
h1{margin-bottom:.2em} h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
nav a{margin-right:1em} table{border-collapse:collapse;margin:1em 0;font-size:14px}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;white-space:nowrap}
td.n{text-align:right} th{background:#f4f4f4}
table.sortable th{cursor:pointer;user-select:none} table.sortable th:hover{background:#e8e8f4}
th[aria-sort=ascending]::after{content:" ▲"} th[aria-sort=descending]::after{content:" ▼"}
caption{text-align:left;font-weight:bold;padding:4px 0;white-space:nowrap} .num{font-variant-numeric:tabular-nums}
figure{margin:1em 0} figure svg{max-width:100%;height:auto} figcaption{color:#555;font-size:13px}
.wide{overflow-x:auto} p.note{color:#555;font-size:13px;margin-top:0}
"""

SORT_SCRIPT = """
document.querySelectorAll('table.sortable').forEach(function (table) {
  table.querySelectorAll('thead th').forEach(function (th, col) {
    th.addEventListener('click', function () {
      var descending = th.getAttribute('aria-sort') === 'ascending';
      table.querySelectorAll('thead th').forEach(function (o) { o.removeAttribute('aria-sort'); });
      th.setAttribute('aria-sort', descending ? 'descending' : 'ascending');
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var cell = row.cells[col], v = cell ? cell.getAttribute('data-sort') : null;
        return v === null || v === '' ? null : (isNaN(Number(v)) ? v : Number(v));
      }
      rows.sort(function (x, y) {
        var a = key(x), b = key(y);
        if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
        var order = (typeof a === 'number' && typeof b === 'number') ? a - b : String(a).localeCompare(String(b));
        return descending ? -order : order;
      });
      rows.forEach(function (row) { body.appendChild(row); });
    });
  });
});
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"


def _cell_parts(cell: Cell) -> tuple:
    return cell if isinstance(cell, tuple) else (cell,)


def _cell_text(cell: Cell) -> str:
    return "".join(p.text if isinstance(p, Num) else str(p) for p in _cell_parts(cell))


# ----------------------------------------------------------------------------- HTML

def _cell_html(cell: Cell, files: list[str]) -> str:
    out = []
    for part in _cell_parts(cell):
        if isinstance(part, Num):
            where = html.escape(f"{files[part.src]}: {part.data_path}" + (" (×−1)" if part.negated else ""))
            negated = ' data-negated="true"' if part.negated else ""
            out.append(f'<span class="num" data-src="{part.src}" data-path="{html.escape(part.data_path)}" '
                       f'data-value="{html.escape(part.data_value)}" data-fmt="{part.fmt}"{negated} '
                       f'title="{where}">{part.text}</span>')
        else:
            out.append(html.escape(str(part)))
    return "".join(out)


def _sort_key(cell: Cell) -> str:
    """What a sortable column sorts a cell by: its first number's value, else its text."""
    parts = _cell_parts(cell)
    first = next((p for p in parts if isinstance(p, Num)), None)
    if first is not None:
        return first.data_value
    text = _cell_text(cell)
    return "" if text == DASH else text


def _numeric_class(cell: Cell) -> str:
    return ' class="n"' if cell == DASH or any(isinstance(p, Num) for p in _cell_parts(cell)) else ""


def _table_html(table: Table, files: list[str]) -> str:
    out = ['<div class="wide"><table' + (' class="sortable"' if table.sortable else "") + ">"]
    if table.caption:
        out.append(f"<caption>{html.escape(table.caption)}</caption>")
    out.append("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in table.header) + "</tr></thead><tbody>")
    for row in table.rows:
        cells = "".join(f'<td{_numeric_class(c)} data-sort="{html.escape(_sort_key(c))}">'
                        f"{_cell_html(c, files)}</td>" for c in row)
        out.append(f"<tr>{cells}</tr>")
    out.append("</tbody></table></div>")
    return "\n".join(out)


def _figure_html(figure: Figure) -> str:
    from cheems.report.plots import figure_svg

    svg = figure_svg(figure.draw, figure.texts, figure.size)
    return (f'<figure id="fig-{html.escape(figure.name)}">{svg}<figcaption>{html.escape(figure.title)}'
            "</figcaption></figure>")


def _block_html(block: Block, files: list[str]) -> str:
    if isinstance(block, Table):
        return _table_html(block, files)
    if isinstance(block, Figure):
        return _figure_html(block)
    return f"<p>{html.escape(block)}</p>"


def _note_html(note: str) -> str:
    """The line under the title, its `backquoted` parts as code; nothing without one."""
    if not note:
        return ""
    return '<p class="note">' + re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(note)) + "</p>"


def render_html(report: Report) -> str:
    """The whole page as one HTML document (plots drawn now, as inline SVG, in one `cheems.report.plots.plotting`
    session)."""
    from cheems.report.plots import plotting

    title = html.escape(report.title)
    nav = " ".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in report.sections)
    files = [s.path.name for s in report.sources]
    body = []
    with plotting():
        for section in report.sections:
            body.append(f'<section id="{section.anchor}"><h2>{html.escape(section.title)}</h2>')
            body.extend(_block_html(b, files) for b in section.blocks)
            body.append("</section>")
    return "\n".join([
        "<!DOCTYPE html>", f'<html lang="{report.say("html_lang")}"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title><style>{STYLE}</style></head><body>",
        f"<h1>{title}</h1>{_note_html(report.lang_note)}<nav>{nav}</nav>", *body, f"<script>{SORT_SCRIPT}</script>",
        "</body></html>", ""])


# ----------------------------------------------------------------------------- Markdown

def _md_cell(text: str) -> str:
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())


def _table_markdown(table: Table) -> str:
    out = [f"**{_md_cell(table.caption)}**", ""] if table.caption else []
    out.append("| " + " | ".join(_md_cell(h) for h in table.header) + " |")
    out.append("|" + "|".join(":---" if i == 0 else "---:" for i in range(len(table.header))) + "|")
    out.extend("| " + " | ".join(_md_cell(_cell_text(c)) for c in row) + " |" for row in table.rows)
    return "\n".join(out)


def render_markdown(report: Report, files_dir: str) -> tuple[str, dict[str, bytes]]:
    """The page as Markdown and its plots as PNG: ``(markdown, {file name: PNG bytes})``; the Markdown links each
    plot as ``files_dir/NAME.png`` (``files_dir``: the folder's path relative to the Markdown file)."""
    from cheems.report.plots import plotting

    with plotting():
        return _markdown(report, files_dir)


def _markdown(report: Report, files_dir: str) -> tuple[str, dict[str, bytes]]:
    from cheems.report.plots import figure_png

    out = [f"# {report.title}", "", *([report.lang_note, ""] if report.lang_note else []),
           " · ".join(f"[{s.title}](#{s.anchor})" for s in report.sections), ""]
    images: dict[str, bytes] = {}
    for section in report.sections:
        out += [f"## {section.title}", ""]
        for block in section.blocks:
            if isinstance(block, Table):
                out.append(_table_markdown(block))
            elif isinstance(block, Figure):
                name = f"{block.name}.png"
                images[name] = figure_png(block.draw, block.texts, block.size)
                out.append(f"![{block.title}]({files_dir}/{name})")
            else:
                out.append(block)
            out.append("")
    return "\n".join(out), images
