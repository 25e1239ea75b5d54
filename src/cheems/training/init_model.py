"""Small randomly initialised models and tokenizers trained on local Chinese text.

They let the whole score -> train -> eval loop run on a laptop CPU, and they are what the
tests load through the same ``from_pretrained`` path users take with real checkpoints.
Needs the ``[models]`` extra (torch, transformers, tokenizers).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Iterable, Sequence

from cheems.records import CheemsInputError

__all__ = ["CHAT_TEMPLATE", "SIZES", "SPECIAL_TOKENS", "init_model", "tiny_config", "tokenizer_texts",
           "train_tokenizer"]

# ChatML-style turns; the same shape Qwen-family chat models use.
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<s>"]

SIZES = {
    # hidden, layers, heads, kv heads, intermediate
    "tiny": (64, 2, 4, 2, 128),
    "small": (256, 4, 8, 2, 704),
}


def tokenizer_texts(paths: Sequence[str | os.PathLike], *, skip_invalid: bool = False,
                    errors: list | None = None) -> list[str]:
    """The texts to train a tokenizer on: each non-blank line of a ``.txt`` file, and every
    prompt and response of any other cheems data file (two responses of identical text are
    two texts, as written). With ``skip_invalid`` a bad row of a data file is left out (its
    CheemsInputError appended to ``errors`` when given) instead of raising. No text at all is
    an error."""
    from cheems.formats import read_prompts

    texts: list[str] = []
    for f in map(Path, paths):
        if f.suffix == ".txt":
            if not f.is_file():
                raise CheemsInputError("no such file", file=str(f))
            try:
                lines = f.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as e:
                raise CheemsInputError(f"not valid UTF-8 (byte {e.start}); save the file as UTF-8",
                                       file=str(f)) from None
            texts.extend(line for line in lines if line.strip())
        else:
            res = read_prompts(f, skip_invalid=skip_invalid)
            if errors is not None:
                errors.extend(res.errors)
            for p in res.prompts:
                texts.append(p.prompt_text)
                texts.extend(r.content for r in p.responses)
    if not texts:
        raise CheemsInputError("no text to train the tokenizer on", field="tokenizer_from")
    return texts


def train_tokenizer(texts: Iterable[str], *, vocab_size: int = 3000, add_bos: bool = False,
                    chat_template: str = CHAT_TEMPLATE):
    """A byte-level BPE tokenizer trained on ``texts``, with a chat template.

    ``add_bos`` makes it prepend ``<s>`` to every encoded text (as Llama-style tokenizers do).
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    if add_bos:
        bos = tok.token_to_id("<s>")
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                           special_tokens=[("<s>", bos)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", padding_side="right")
    fast.chat_template = chat_template
    return fast


def tiny_config(tokenizer, size: str = "tiny", *, architecture: str = "Qwen2ForSequenceClassification"):
    """A Qwen2 config of the given size whose vocabulary and special ids match ``tokenizer``."""
    from transformers import Qwen2Config

    hidden, layers, heads, kv, inter = SIZES[size]
    return Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        num_key_value_heads=kv, intermediate_size=inter, max_position_embeddings=4096, num_labels=1,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False, architectures=[architecture],
    )


def init_model(output: str | Path, texts: Iterable[str], *, size: str = "tiny", seed: int = 0,
               vocab_size: int = 3000, head: str = "seq-cls", add_bos: bool = False) -> Path:
    """Write a randomly initialised model and its tokenizer to ``output``.

    ``head="seq-cls"``: a ``Qwen2ForSequenceClassification`` with one label (the reward
    head every tool loads). ``head="causal-lm"``: a plain ``Qwen2ForCausalLM`` backbone.
    """
    import torch
    from transformers import Qwen2ForCausalLM, Qwen2ForSequenceClassification
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose from {', '.join(SIZES)}")
    output = Path(output)
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size, add_bos=add_bos)
    torch.manual_seed(seed)
    if head == "seq-cls":
        model = Qwen2ForSequenceClassification(tiny_config(tokenizer, size))
    elif head == "causal-lm":
        model = Qwen2ForCausalLM(tiny_config(tokenizer, size, architecture="Qwen2ForCausalLM"))
    else:
        raise ValueError(f"unknown head {head!r}; choose seq-cls or causal-lm")
    _save_whole(output, model, tokenizer)
    return output


def _save_whole(output: Path, model, tokenizer) -> None:
    """Save the model and tokenizer into a temp folder beside ``output``, then put it in place:
    renamed to ``output`` (or its files moved into an existing folder). A save that fails (a
    full disk) leaves nothing behind and is one CheemsInputError naming ``output``."""
    from cheems.io import remove_stale_temps, temp_name, writes_into

    tmp = temp_name(output)
    try:
        with writes_into(output):
            output.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_temps(output)
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            if not output.exists():
                os.replace(tmp, output)
                return
            for f in sorted(tmp.iterdir(), key=lambda f: f.suffix == ".safetensors"):  # the weights last
                os.replace(f, output / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
