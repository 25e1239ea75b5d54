"""One scorer interface (cheems.scoring.scorer): every back-end that builds on a CPU names itself,
its limits and its resolved token budget the same way, and no scoring or serving code probes a
scorer with getattr/hasattr."""

from __future__ import annotations

import ast
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cheems.scoring.baselines import BASELINES, BaselineScorer
from cheems.scoring.batching import resolve_token_budget
from cheems.scoring.remote_scorer import RemoteScorer
from cheems.scoring.scorer import RewardScorer, RowStats, Scorer, ScorerDefaults, SequenceScorer

SRC = Path(__file__).resolve().parents[1] / "src" / "cheems"
SCORER_NAMES = {"rm", "scorer", "judge"}  # what scoring and serving code call a loaded scorer (model: the network)


def _interface_attributes(scorer) -> dict:
    return {name: getattr(scorer, name) for name in ("name", "layout", "max_length", "token_budget",
                                                     "token_budget_auto", "packing", "share_prefix",
                                                     "fixed_shapes", "stats", "row_stats")}


def test_resolving_a_token_budget():
    assert resolve_token_budget(None, 1024) == (1024, False)
    assert resolve_token_budget(4096, 1024) == (4096, False)
    assert resolve_token_budget("auto", 1024) == (1024, True)  # nothing to probe: the default
    assert resolve_token_budget("auto", 1024, lambda: 9000) == (9000, True)


def test_the_defaults_say_does_not_apply():
    values = _interface_attributes(ScorerDefaults())
    assert values == {"name": "", "layout": None, "max_length": None, "token_budget": None,
                      "token_budget_auto": False, "packing": False, "share_prefix": False, "fixed_shapes": False,
                      "stats": None, "row_stats": None}
    assert ScorerDefaults().max_batch(7) == 7


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_baselines_are_reward_scorers(name, tiny_prompts):
    scorer = BaselineScorer(name, seed=3)
    assert isinstance(scorer, RewardScorer) and not isinstance(scorer, SequenceScorer)
    assert scorer.name == name and scorer.token_budget is None and scorer.stats is None
    rows = [row for batch in scorer.score_prompts(tiny_prompts[:4]) for row in batch]
    assert {(p, r): s for p, r, s in rows} == BASELINES[name](tiny_prompts[:4], 3)
    done = {rows[0][:2]}
    assert [row for batch in scorer.score_prompts(tiny_prompts[:4], done=done) for row in batch] == rows[1:]


@pytest.mark.parametrize("packing", [True, False])
def test_the_transformers_model_resolves_its_budget_at_load(seq_cls_model, tiny_prompts, packing):
    from cheems.models.sequences import EncodeStats, default_token_budget
    from cheems.scoring.transformers_rm import load_reward_model

    rm = load_reward_model(seq_cls_model, packing=packing)
    assert isinstance(rm, RewardScorer) and isinstance(rm, SequenceScorer)
    assert rm.name == Path(seq_cls_model).resolve().name and rm.layout == "seq-cls" and rm.max_length == 2048
    assert rm.token_budget == default_token_budget("cpu") and not rm.token_budget_auto
    assert rm.packing is packing and isinstance(rm.stats, EncodeStats) and isinstance(rm.row_stats, RowStats)
    assert rm.max_batch(5) == 5
    given = load_reward_model(seq_cls_model, packing=packing, token_budget=512)
    assert given.token_budget == 512 and not given.token_budget_auto
    auto = load_reward_model(seq_cls_model, packing=packing, token_budget="auto")  # on a CPU: the default
    assert type(auto.token_budget) is int and auto.token_budget == default_token_budget("cpu")
    assert auto.token_budget_auto
    rows = [row for batch in rm.score_prompts(tiny_prompts[:3], batch_size=4) for row in batch]
    assert len(rows) == sum(len(p.responses) for p in tiny_prompts[:3])


def test_the_local_judge_resolves_its_budget_at_load(causal_lm_model):
    from cheems.scoring.local_judge import load_local_judge
    from cheems.scoring.model_settings import ModelSettings

    judge = load_local_judge(causal_lm_model, ModelSettings(token_budget=2048))
    assert isinstance(judge, SequenceScorer) and not isinstance(judge, RewardScorer)
    assert judge.token_budget == 2048 and judge.name == Path(causal_lm_model).resolve().name
    assert judge.layout is None and judge.row_stats is None and not judge.fixed_shapes


class _Server(BaseHTTPRequestHandler):
    """A stand-in for `cheems serve`: /health names the model, /v1/score scores by length."""

    def _answer(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._answer({"model": "served-rm"})

    def do_POST(self):
        rows = json.loads(self.rfile.read(int(self.headers["content-length"])))["rows"]
        self._answer({"scores": [{"prompt_id": row["id"], "response_id": r["id"], "score": len(r["content"])}
                                 for row in rows for r in row["responses"]]})

    def log_message(self, *args) -> None:
        pass


def test_the_remote_scorer_is_a_reward_scorer(tiny_prompts):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        scorer = RemoteScorer(f"http://127.0.0.1:{server.server_address[1]}", retries=0)
        assert isinstance(scorer, RewardScorer) and not isinstance(scorer, SequenceScorer)
        assert scorer.name == "served-rm" and scorer.layout is None and scorer.token_budget is None
        rows = [row for batch in scorer.score_prompts(tiny_prompts[:2], batch_size=8) for row in batch]
        assert {(p, r): s for p, r, s in rows} == BASELINES["length"](tiny_prompts[:2])
    finally:
        server.shutdown()
        server.server_close()


def _probes(tree: ast.AST) -> list[int]:
    """Lines of getattr/hasattr calls whose object is a scorer (``rm``, ``self.rm``, ...)."""
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr") and node.args):
            continue
        target = node.args[0]
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
        if name in SCORER_NAMES:
            lines.append(node.lineno)
    return lines


def test_no_scoring_or_serving_module_probes_a_scorer():
    offenders = [f"{path.relative_to(SRC)}:{line}" for folder in ("scoring", "serving")
                 for path in sorted((SRC / folder).glob("*.py"))
                 for line in _probes(ast.parse(path.read_text(encoding="utf-8")))]
    assert not offenders, offenders


def test_the_probe_check_sees_a_probe():
    planted = "def f(rm, self):\n    getattr(rm, 'packing', False)\n    hasattr(self.rm, 'layout')\n" \
              "    getattr(rm.model.config, 'vocab_size', 0)\n"
    assert _probes(ast.parse(planted)) == [2, 3]


def test_every_protocol_is_runtime_checkable():
    for protocol in (Scorer, RewardScorer, SequenceScorer):
        assert isinstance(ScorerDefaults(), Scorer)
        assert getattr(protocol, "_is_runtime_protocol", False)
