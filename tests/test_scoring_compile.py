"""`cheems score --compile`: every decoder layer of the loaded model is compiled, the flag reaches it."""

from __future__ import annotations

import pytest

from cheems.models.kernels import decoder_layers
from tests.conftest import run_cli_in

pytest.importorskip("torch")


def test_compile_compiles_every_decoder_layer(cli_tiny_model):
    from cheems.scoring.transformers_rm import load_reward_model

    plain = load_reward_model(cli_tiny_model)
    compiled = load_reward_model(cli_tiny_model, compile=True)
    assert all(getattr(layer, "_compiled_call_impl", None) is None for layer in decoder_layers(plain.model))
    layers = decoder_layers(compiled.model)
    assert layers and all(getattr(layer, "_compiled_call_impl", None) is not None for layer in layers)


def test_the_flag_is_offered(tmp_path):
    r = run_cli_in(tmp_path, "score", "--help")
    assert r.returncode == 0 and "--compile" in r.stdout and "--token-budget" in r.stdout
