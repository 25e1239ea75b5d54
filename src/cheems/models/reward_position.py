"""Where a reward model's reward is read: one rule for training, scoring and every route of `cheems serve`.

A chat template closes the assistant's turn with an end-of-turn token (ChatML's ``<|im_end|>``,
Llama-3's ``<|eot_id|>``) and may write more after it (ChatML: a newline). The clients of a
reward server send one conversation ending in different ways (docs/serving.md lists them with
their sources): the template's rendering (``...<|im_end|>\\n``); the policy's prompt and reply
token ids decoded with the special tokens, which ends at the end-of-turn token, maybe followed
by EOS or padding (OpenRLHF); a rendered prompt plus a completion decoded without special
tokens, with no end-of-turn token at all (TRL). Read at each text's last token as given, the
reward would be read at a different token for each.

:meth:`RewardPosition.sequence` turns any of them into the one sequence the model reads, ending
at the token the reward is read at, and every sequence a reward model is given goes through it:
:func:`cheems.models.sequences.encode_conversations` (what `cheems train` trains on and `cheems
score` scores) and the text routes of `cheems serve`. The rules (``reward_position``):

- ``end_of_turn``: at the end-of-turn token that closes the last assistant turn. What follows
  it (the template's newline, EOS, padding, whitespace) is dropped, a run of end-of-turn tokens
  (padding that is that token) is read at its first, and a turn left open (a completion decoded
  without special tokens) is closed with the token, as the template would close it. What `cheems
  train` trains with, recorded in the model's ``config.json`` as ``cheems_reward_position``.
- ``template_end``: the same turn, read at the last token of the template's closing: the
  end-of-turn token and what the template writes after it (ChatML's newline; nothing for
  Llama-3, where it equals ``end_of_turn``). Where `cheems train` read rewards before the record
  existed, and where tools that train on the template's rendering as it is read them: the rule of
  a checkpoint that records none, so that it scores as it always did.
- ``last_token``: the last token as given (for a model trained on texts no template wrote).

Whatever the rule, the start is mended as :func:`~cheems.models.sequences.encode_conversations`
writes it: left padding dropped, and the BOS token the template's encoding starts with present
once (a BOS written by the client and added again by the tokenizer, or stripped by the client
and not added back, as verl strips it for vLLM).

The end-of-turn token comes from the template itself (:func:`find_turn_end`): a one-turn
conversation whose reply is a marker is rendered, and the first special token after the marker
closes the turn; the tokens after it in the conversation's encoding are the template's closing
suffix. A template whose closing holds no special token (or no template at all: cheems then
writes role-prefixed lines) has no end-of-turn token, and every rule reads the last token as
given.

Core module: no torch; the tokenizer is only called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from cheems.records import CheemsInputError

__all__ = ["CONFIG_KEY", "END_OF_TURN", "LAST_TOKEN", "REWARD_POSITIONS", "TEMPLATE_END", "TRAINED", "UNRECORDED",
           "RewardPosition", "TurnEnd", "check_rule", "find_turn_end", "record_reward_position",
           "recorded_reward_position", "special_ids"]

REWARD_POSITIONS = ("end_of_turn", "template_end", "last_token")
END_OF_TURN, TEMPLATE_END, LAST_TOKEN = REWARD_POSITIONS
TRAINED = END_OF_TURN
"""The rule `cheems train` trains with (and records in the checkpoint)."""
UNRECORDED = TEMPLATE_END
"""The rule of a checkpoint whose config.json records none: where cheems read rewards before the
record existed (the last token of the template's rendering)."""
CONFIG_KEY = "cheems_reward_position"
"""The ``config.json`` key recording a model's rule."""
MARKER = "cheems0reply0marker"  # the reply of the conversation find_turn_end renders; no template alters it


@dataclass(frozen=True)
class TurnEnd:
    """How a tokenizer's chat template ends an assistant turn and starts a conversation:
    ``token`` the end-of-turn token (None: the template closes a turn with no special token),
    ``suffix`` the tokens the template writes after it (ChatML: the newline), ``bos`` the BOS
    token the encoded conversation starts with (None: it starts without one)."""

    token: int | None
    suffix: tuple[int, ...] = ()
    bos: int | None = None


def find_turn_end(tokenizer) -> TurnEnd:
    """The end of an assistant turn in ``tokenizer``'s chat template (see the module docs):
    ``[user "1", assistant MARKER]`` is rendered and encoded as
    :func:`cheems.models.sequences.encode_conversations` encodes a conversation; the first
    special token of the text after the marker is the end-of-turn token, and what follows its
    last occurrence in the encoding is the suffix. O(one short conversation)."""
    messages = [{"role": "user", "content": "1"}, {"role": "assistant", "content": MARKER}]
    text = None
    if getattr(tokenizer, "chat_template", None):
        try:
            text = tokenizer.apply_chat_template(messages, tokenize=False)
        except Exception:  # a template that refuses this conversation refuses real ones too, saying why there
            text = None
    ids = _encoded(tokenizer, text if isinstance(text, str) else "user: 1\nassistant: " + MARKER)
    bos = tokenizer.bos_token_id if ids and ids[0] == tokenizer.bos_token_id else None
    if not isinstance(text, str) or MARKER not in text:
        return TurnEnd(None, (), bos)
    closing = tokenizer(text[text.rindex(MARKER) + len(MARKER):], add_special_tokens=False)["input_ids"]
    specials = special_ids(tokenizer)
    token = next((t for t in closing if t in specials), None)
    if token is None or token not in ids:
        return TurnEnd(None, (), bos)
    last = len(ids) - 1 - ids[::-1].index(token)
    return TurnEnd(token, tuple(ids[last + 1:]), bos)


def _encoded(tokenizer, text: str) -> list[int]:
    """``text`` tokenized with the special tokens added, a BOS written twice kept once (as
    :func:`cheems.models.sequences.encode_conversations` keeps it)."""
    ids = list(tokenizer(text, add_special_tokens=True)["input_ids"])
    bos = tokenizer.bos_token_id
    if bos is not None and len(ids) > 1 and ids[0] == bos and ids[1] == bos:
        ids = ids[1:]
    return ids


def special_ids(tokenizer) -> set[int]:
    """Every special token id of ``tokenizer``: the named ones (BOS, EOS, pad, the additional
    special tokens) and the added tokens marked special (a template's ``<|im_start|>`` need not
    be named anywhere else)."""
    ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(i for i, token in added.items() if getattr(token, "special", False))
    return ids


@dataclass
class RewardPosition:
    """A reward model's ``rule`` (one of REWARD_POSITIONS) for its tokenizer's template end
    ``end``; :meth:`sequence` applies it. Build it with :meth:`of`."""

    rule: str
    end: TurnEnd
    eos: int | None = None
    pad: int | None = None
    tokenizer: Any = field(default=None, repr=False)
    _blank: dict = field(default_factory=dict, repr=False)  # token id -> whether it decodes to whitespace only

    @classmethod
    def of(cls, tokenizer, rule: str) -> "RewardPosition":
        """``rule`` for ``tokenizer`` (its template's end found once, :func:`find_turn_end`)."""
        check_rule(rule)
        return cls(rule, find_turn_end(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer)

    def sequence(self, ids: Sequence[int]) -> list[int]:
        """``ids`` as the model reads them: the start mended (left padding dropped, the
        template's BOS present once) and the end placed by the rule, so that the reward is read
        at the last token (see the module docs). Empty when nothing is left but padding, BOS,
        EOS or an end-of-turn token: no reply to read a reward at. O(len(ids)) (a copy; the
        end is found scanning back over the trailing tokens only)."""
        ids = self._mended_start(ids)
        token = self.end.token
        if self.rule == LAST_TOKEN or token is None or not ids:
            return ids
        k = len(ids)
        while k and ids[k - 1] != token and self._trails(ids[k - 1]):
            k -= 1
        if k and ids[k - 1] == token:  # a closed turn: read at the first of a run of end-of-turn tokens
            while k > 1 and ids[k - 2] == token:
                k -= 1
            ended = ids[:k]
        else:  # an open turn (no end-of-turn token after the reply): EOS and padding dropped, the turn closed
            k = len(ids)
            while k and ids[k - 1] in (self.eos, self.pad):
                k -= 1
            ended = ids[:k] + [token]
        if len(ended) <= 1 + (self.end.bos is not None):
            return []  # the end-of-turn token alone (after BOS): nothing was said
        return ended if self.rule == END_OF_TURN else ended + list(self.end.suffix)

    def _mended_start(self, ids: Sequence[int]) -> list[int]:
        """``ids`` without leading padding, starting with the template's BOS once (when it has one)."""
        bos, pad = self.end.bos, self.pad
        start = 0
        while start < len(ids) and ids[start] in (pad, bos):
            start += 1
        if start == len(ids):
            return []
        if bos is None:
            return list(ids[start:]) if start else list(ids)
        if start == 1 and ids[0] == bos:
            return list(ids)
        return [bos, *ids[start:]]

    def _trails(self, t: int) -> bool:
        """Whether token ``t`` may follow an end-of-turn token without being read: the
        template's suffix, EOS, padding, or whitespace."""
        if t in self.end.suffix or t == self.eos or t == self.pad:
            return True
        blank = self._blank.get(t)
        if blank is None:
            blank = self._blank[t] = self.tokenizer is not None and not self.tokenizer.decode([t]).strip()
        return blank

    def describe(self) -> str:
        """The rule and the token(s) it reads at, for a status line: ``end_of_turn '<|im_end|>'``."""
        if self.rule == LAST_TOKEN:
            return LAST_TOKEN
        if self.end.token is None:
            return f"{self.rule}: the template closes a turn with no special token, so the last token as given"
        read = [self.end.token] + (list(self.end.suffix) if self.rule == TEMPLATE_END else [])
        text = self.tokenizer.decode(read) if self.tokenizer is not None else str(read)
        return f"{self.rule} {text!r}"


def check_rule(rule: str, *, file: str | None = None, field: str = "reward_position") -> str:
    """``rule``, refused (one line naming ``field``) unless it is one of REWARD_POSITIONS."""
    if rule not in REWARD_POSITIONS:
        raise CheemsInputError(f"unknown reward position {rule!r}; known: {', '.join(REWARD_POSITIONS)}",
                               file=file, field=field)
    return rule


def recorded_reward_position(config, *, file: str | None = None) -> str:
    """The rule a model's config (a transformers config, or config.json as a dict) records
    under CONFIG_KEY; UNRECORDED when it records none. A value that is not a rule is refused,
    naming ``file`` and the key."""
    value = config.get(CONFIG_KEY) if isinstance(config, dict) else getattr(config, CONFIG_KEY, None)
    if value is None:
        return UNRECORDED
    if not isinstance(value, str):
        raise CheemsInputError(f"must be one of {', '.join(REWARD_POSITIONS)}, got {value!r}"[:200], file=file,
                               field=CONFIG_KEY)
    return check_rule(value, file=file, field=CONFIG_KEY)


def record_reward_position(config, rule: str) -> None:
    """Record ``rule`` in a transformers ``config``: saved with it into config.json."""
    setattr(config, CONFIG_KEY, check_rule(rule))
