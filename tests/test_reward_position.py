"""Where the reward is read (cheems.models.reward_position): one place for `cheems train`,
`cheems score` and every route of `cheems serve`.

The same conversations in each RLHF client's exact text form (docs/serving.md, "Where the reward
is read") score within 1e-5 of what `cheems score` gives the rows, through every text route of
the server's app (in this process, FastAPI's TestClient), for a ChatML model (``<|im_end|>\\n``)
that records no rule (template_end) or records end_of_turn (as `cheems train` writes it), and for
a Llama-3 shaped template (``<|eot_id|>``, no newline, BOS written by the template and added by
the tokenizer). The rule itself on irregular ends (padding, EOS, whitespace, doubled or missing
BOS, nothing but special tokens) against the row's own encoding; a bad record is one line.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from tests.client_texts import client_forms, turns
from tests.conftest import run_cli_in
from tests.tiny_models import copy_checkpoint, require_models_extra

require_models_extra()
pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from cheems.models.reward_position import (CONFIG_KEY, REWARD_POSITIONS, RewardPosition,  # noqa: E402
                                           find_turn_end)
from cheems.models.sequences import EncodeStats, encode_conversations  # noqa: E402
from cheems.records import CheemsInputError  # noqa: E402
from cheems.scoring.model_settings import ModelSettings  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_torch_thread")

ATOL = 1e-5  # a client's text form vs `cheems score` of the row, fp32 CPU


# ----------------------------------------------------------------------------- the client forms

@pytest.fixture(scope="module")
def rows(tiny_prompts):
    """Three prompts (one of chat messages) with two responses each."""
    chats = [p for p in tiny_prompts if not isinstance(p.prompt, str)][:1]
    texts = [p for p in tiny_prompts if isinstance(p.prompt, str) and len(p.responses) >= 2][:2]
    return [dataclasses.replace(p, responses=p.responses[:2]) for p in chats + texts]


def route_scores(client, texts: list[str]) -> dict[str, list[float]]:
    """``texts`` through every text route of the app, as each route's own clients post them."""
    def post(path, body):
        reply = client.post(path, json=body)
        assert reply.status_code == 200, (path, reply.text)
        return reply.json()

    return {
        "/get_reward": post("/get_reward", {"query": texts})["rewards"],
        "/v1/score/evaluation": post("/v1/score/evaluation", {"model": "m", "messages": texts})["scores"],
        "/classify as given": [d["probs"][0] for d in post("/classify", {"input": texts, "add_special_tokens": False,
                                                                         "use_activation": False})["data"]],
        "/classify (vLLM)": [d["probs"][-1] for d in post("/classify", {"input": texts, "activation": False})["data"]],
        "/classify (SGLang)": [d["embedding"][0] for d in post("/classify", {"text": texts})],
        "/pooling": [d["data"][0] for d in post("/pooling", {"input": texts, "use_activation": False})["data"]],
        "/v1/embeddings": [d["embedding"][-1] for d in post("/v1/embeddings", {"model": "m", "input": texts})["data"]],
    }


# ----------------------------------------------------------------------------- every client, every route

@pytest.fixture(scope="module", params=["chatml", "chatml-trained", "eot"])
def served(request, tmp_path_factory, rows):
    """(which model, the tokenizer, where the app says it reads, `cheems score`'s scores of
    ``rows`` in order, an in-process client of the app `cheems serve` builds)."""
    import torch
    from fastapi.testclient import TestClient
    from transformers import AutoTokenizer

    from cheems.scoring.run import score_with_model
    from cheems.serving.engine import EngineSettings
    from cheems.serving.server import build_reward_app
    from cheems.serving.settings import ServeSettings

    if request.param == "eot":
        model = request.getfixturevalue("eot_template_model")
    else:
        model = request.getfixturevalue("seq_cls_model")
    if request.param == "chatml-trained":  # config.json records the rule, as `cheems train` writes it
        model = copy_checkpoint(model, tmp_path_factory.mktemp("trained") / "rm")
        config = json.loads((model / "config.json").read_text(encoding="utf-8"))
        (model / "config.json").write_text(json.dumps({**config, CONFIG_KEY: "end_of_turn"}), encoding="utf-8")
    scored = score_with_model(model, rows, ModelSettings()).scores
    expected = [scored[(p.id, r.id)] for p in rows for r in p.responses]
    built = build_reward_app(model, ModelSettings(), EngineSettings(max_wait_ms=0), ServeSettings())
    torch.set_num_threads(1)  # loading sets the machine's cores; the tiny model runs best on one
    with TestClient(built.app) as client:
        yield request.param, AutoTokenizer.from_pretrained(model), built.reward_position, expected, client


def test_every_client_form_scores_as_cheems_score_on_every_route(served, rows):
    which, tok, described, expected, client = served
    got = client.post("/v1/score", json={"rows": [{"id": p.id, "prompt": p.prompt, "responses": [
        {"id": r.id, "content": r.content} for r in p.responses]} for p in rows]})
    assert [s["score"] for s in got.json()["scores"]] == pytest.approx(expected, abs=ATOL)
    for form, texts in client_forms(tok, rows).items():
        for route, scores in route_scores(client, texts).items():
            assert scores == pytest.approx(expected, abs=ATOL), (form, route)
    rule = "end_of_turn" if which == "chatml-trained" else "template_end"
    token = "<|eot_id|>" if which == "eot" else "<|im_end|>"
    assert described.startswith(f"{rule} ") and token in described  # the ready line's words


def test_the_trained_rule_reads_another_token_than_the_template_end(seq_cls_model, rows):
    """A ChatML checkpoint recording end_of_turn scores at ``<|im_end|>``, one token before where
    a checkpoint recording nothing (template_end, the newline after it) is read: the record matters."""
    from cheems.scoring.transformers_rm import load_reward_model

    legacy = load_reward_model(seq_cls_model)
    trained = dataclasses.replace(legacy, reward_position="end_of_turn")
    items = [(p.prompt, r.content) for p in rows for r in p.responses]
    assert legacy.reward_position == "template_end" and legacy.encode(*items[0])[-1] == 202  # "\n"
    assert max(abs(a - b) for a, b in zip(legacy.score(items), trained.score(items))) > 1e-3


# ----------------------------------------------------------------------------- the rule on irregular ends

@pytest.fixture(scope="module")
def tokenizers(seq_cls_model, eot_template_model, bos_template_model):
    from transformers import AutoTokenizer

    return {name: AutoTokenizer.from_pretrained(d) for name, d in
            (("chatml", seq_cls_model), ("eot", eot_template_model), ("bos-template", bos_template_model))}


def test_the_template_end_is_found_from_the_template(tokenizers):
    chatml, eot = find_turn_end(tokenizers["chatml"]), find_turn_end(tokenizers["eot"])
    tok = tokenizers["chatml"]
    assert (chatml.token, chatml.suffix, chatml.bos) == (tok.convert_tokens_to_ids("<|im_end|>"),
                                                         tuple(tok("\n", add_special_tokens=False)["input_ids"]), None)
    tok = tokenizers["eot"]
    assert (eot.token, eot.suffix, eot.bos) == (tok.convert_tokens_to_ids("<|eot_id|>"), (), tok.bos_token_id)


@pytest.mark.parametrize("name", ["chatml", "eot", "bos-template"])
@pytest.mark.parametrize("rule", REWARD_POSITIONS[:2])
def test_irregular_ends_and_starts_give_the_rows_sequence(tokenizers, rows, name, rule):
    tok = tokenizers[name]
    position = RewardPosition.of(tok, rule)
    p, r = rows[1], rows[1].responses[0]
    row = encode_conversations(tok, [(p.prompt, r.content)], max_length=1 << 30, truncation="left",
                               stats=EncodeStats(), reward_position=rule)[0]
    template = tok.apply_chat_template(turns(p.prompt) + [{"role": "assistant", "content": r.content}],
                                       tokenize=False)
    eot = tok.decode([position.end.token])
    bare = template[:template.rindex(eot)]  # the reply's turn, not closed
    bos = tok.bos_token if position.end.bos is not None else ""
    pad, eos = tok.pad_token, tok.eos_token
    forms = {"the template": template, "padded": template + pad * 3, "EOS then padding": bare + eot + eos + pad,
             "a blank line after": template + "\n\n", "left padding": pad * 2 + template,
             "a run of end-of-turn tokens": bare + eot * 3, "open": bare, "open, EOS": bare + eos + pad,
             "BOS written twice": bos + template if bos else template,
             "BOS missing": template[len(bos):]}
    for what, text in forms.items():
        assert position.sequence(tok(text, add_special_tokens=False)["input_ids"]) == row, what
    assert position.sequence(tok(template[len(bos):])["input_ids"]) == row  # verl: the tokenizer adds BOS back


def test_last_token_reads_as_given_and_nothing_but_special_tokens_is_nothing(tokenizers, no_template_model):
    from transformers import AutoTokenizer

    tok = tokenizers["chatml"]
    ids = tok("<|im_start|>user\n你好<|im_end|>\n<|endoftext|>", add_special_tokens=False)["input_ids"]
    assert RewardPosition.of(tok, "last_token").sequence(ids) == ids
    nothing = {"chatml": ("", "<|endoftext|><|im_end|>\n", "<|im_end|><|im_end|>"),
               "eot": ("<s>", "<s><s><|eot_id|>\n")}
    for name, texts in nothing.items():
        for rule in REWARD_POSITIONS[:2]:
            for text in texts:
                ids = tokenizers[name](text, add_special_tokens=False)["input_ids"]
                assert RewardPosition.of(tokenizers[name], rule).sequence(ids) == [], (name, rule, text)
    plain = AutoTokenizer.from_pretrained(no_template_model)  # role-prefixed lines: no end-of-turn token
    assert find_turn_end(plain).token is None
    ids = plain("user: 你好\nassistant: 好", add_special_tokens=False)["input_ids"]
    assert RewardPosition.of(plain, "end_of_turn").sequence(ids) == ids


def test_only_special_tokens_are_refused_naming_the_text(served):
    _, tok, _, _, client = served
    for text in ("", tok.pad_token + tok.eos_token):
        reply = client.post("/get_reward", json={"query": ["好", text]})
        assert reply.status_code == 422 and reply.json()["error"]["field"] == "query[1]", reply.text
        assert "no tokens" in reply.json()["error"]["message"]


# ----------------------------------------------------------------------------- bad records and settings

def test_a_bad_record_or_setting_is_one_line(tmp_path, seq_cls_model, sample_annotations):
    model = copy_checkpoint(seq_cls_model, tmp_path / "odd")
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    (model / "config.json").write_text(json.dumps({**config, CONFIG_KEY: "middle"}), encoding="utf-8")
    from cheems.scoring.transformers_rm import load_reward_model

    with pytest.raises(CheemsInputError) as err:
        load_reward_model(model)
    assert err.value.field == CONFIG_KEY and err.value.file.endswith("config.json") and "middle" in err.value.message
    r = run_cli_in(tmp_path, "score", sample_annotations / "open.jsonl", "--model", "odd", "-o", "s.jsonl")
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(errors) == 1, r.stderr
    assert CONFIG_KEY in errors[0] and "end_of_turn, template_end, last_token" in errors[0]
    r = run_cli_in(tmp_path, "score", sample_annotations / "open.jsonl", "--model", "odd", "-o", "s.jsonl",
                   "--reward-position", "first")
    assert r.returncode == 2 and "Traceback" not in r.stderr and "reward" in r.stderr, r.stderr


def test_a_run_reads_where_its_checkpoint_read(tmp_path):
    """A new run trains at end_of_turn; a resumed run goes on with its checkpoint's record
    (trainer_state.json first: a LoRA checkpoint holds the adapter alone, no config.json), and a
    checkpoint an earlier cheems wrote (no record anywhere) at template_end."""
    from cheems.training.recipe_setup import run_reward_position

    def checkpoint(name: str, state_record=None, config_record=None, config=True):
        folder = tmp_path / name
        folder.mkdir()
        state = {"step": 2, **({"reward_position": state_record} if state_record else {})}
        (folder / "trainer_state.json").write_text(json.dumps(state), encoding="utf-8")
        if config:
            model_config = {"model_type": "qwen2", **({CONFIG_KEY: config_record} if config_record else {})}
            (folder / "config.json").write_text(json.dumps(model_config), encoding="utf-8")
        return folder

    assert run_reward_position(None) == "end_of_turn"
    assert run_reward_position(checkpoint("lora-new", "last_token", config=False)) == "last_token"
    assert run_reward_position(checkpoint("lora-old", config=False)) == "template_end"
    assert run_reward_position(checkpoint("state-first", "end_of_turn", "last_token")) == "end_of_turn"
    for record, rule in ((None, "template_end"), ("end_of_turn", "end_of_turn"), ("last_token", "last_token")):
        assert run_reward_position(checkpoint(f"full-{record}", config_record=record)) == rule
    with pytest.raises(CheemsInputError) as err:
        run_reward_position(checkpoint("bad-config", config_record=3))
    assert err.value.field == CONFIG_KEY
    with pytest.raises(CheemsInputError) as err:
        run_reward_position(checkpoint("bad-state", state_record="middle", config=False))
    assert err.value.field == CONFIG_KEY and err.value.file.endswith("trainer_state.json")
