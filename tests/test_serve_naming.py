"""The reward server's refusals and log lines name its settings in the caller's words: the
settings' own names when the server runs from Python (``cheems.serve``), the flags of
``cheems serve`` when it runs from the command line (:mod:`cheems.serving.naming`)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("fastapi")

from cheems.serving import naming  # noqa: E402
from cheems.serving.contracts import ContractError, checked_texts  # noqa: E402
from cheems.serving.engine import EngineSettings  # noqa: E402
from cheems.serving.settings import ServeSettings  # noqa: E402

SERVING = Path(naming.__file__).parent


def named_settings() -> dict[str, set[str]]:
    """Every setting the serving modules name through ``named("...")``, with the modules naming it."""
    found: dict[str, set[str]] = {}
    for path in sorted(SERVING.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "named":
                assert isinstance(node.args[0], ast.Constant), f"{path.name}: named() takes a setting's name"
                found.setdefault(node.args[0].value, set()).add(path.name)
    return found


def test_every_named_setting_is_a_setting_of_the_server_and_a_flag_of_cheems_serve():
    from cheems.cli.serve import flag_names

    fields = {f.name for cls in (ServeSettings, EngineSettings) for f in dataclasses.fields(cls)}
    named = named_settings()
    assert {"max_body_bytes", "max_queries", "max_query_chars", "shutdown_timeout_s", "truncate"} <= set(named)
    assert set(named) - fields == set(), "named() takes the name of a ServeSettings or EngineSettings field"
    flags = flag_names()
    assert {s: flags.get(s) for s in named if not (flags.get(s) or "").startswith("--")} == {}
    assert flags["max_body_bytes"] == "--max-body-bytes" and flags["truncate"] == "--truncation left"
    assert flags["truncation"] == "--truncation"  # the flag, not the hidden old spelling --truncate


def refusal(limits: ServeSettings) -> str:
    with pytest.raises(ContractError) as err:
        checked_texts(["问"] * (limits.max_queries + 1), "query", limits, allow_single=False)
    return err.value.message


def test_from_python_the_settings_own_names_and_under_the_cli_its_flags():
    from cheems.cli.serve import flag_names

    limits = ServeSettings(max_queries=2)
    assert "more than 2 in one request (max_queries)" in refusal(limits)
    before = naming.setting_names()
    naming.use_setting_names(flag_names())
    try:
        assert "more than 2 in one request (--max-queries)" in refusal(limits)
    finally:
        naming.use_setting_names(before)
    assert "(max_queries)" in refusal(limits)


def test_cheems_serve_puts_back_the_names_it_found(monkeypatch):
    """A server started from Python names settings as asked while it runs, and leaves the process's
    names as they were (the next server of the process is not named by the last one's caller)."""
    import cheems
    from cheems.serving import server

    seen = []

    def fake_build(*args, **kwargs):
        seen.append(naming.named("max_queries"))
        raise RuntimeError("stop here")

    monkeypatch.setattr(server, "build_reward_app", fake_build)
    monkeypatch.setattr(server, "run_server", lambda *a, **k: None)
    with pytest.raises(RuntimeError, match="stop here"):
        cheems.serve("no-model", setting_names={"max_queries": "--max-queries"})
    assert seen == ["--max-queries"] and naming.named("max_queries") == "max_queries"
