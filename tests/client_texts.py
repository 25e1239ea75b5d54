"""Each RLHF client's exact text form of a conversation, as its framework builds it (the sources
are named in docs/serving.md, "Where the reward is read"): what the serving tests post."""

from __future__ import annotations


def turns(prompt) -> list[dict]:
    """A prompt (text or chat messages) as the turns cheems renders before the reply."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)


def client_forms(tok, rows) -> dict[str, list[str]]:
    """Each response of ``rows`` (cheems Prompts) with its prompt, as each client sends it through
    ``tok`` (the reward model's tokenizer): ``template``, ``openrlhf``, ``verl``, ``trl``, each a
    list in row and response order."""
    forms: dict[str, list[str]] = {"template": [], "openrlhf": [], "verl": [], "trl": []}
    for p in rows:
        prompt = tok.apply_chat_template(turns(p.prompt), tokenize=False, add_generation_prompt=True)
        for r in p.responses:
            template = tok.apply_chat_template(turns(p.prompt) + [{"role": "assistant", "content": r.content}],
                                               tokenize=False)
            forms["template"].append(template)  # what cheems renders: ChatML ends "<|im_end|>\n"
            # OpenRLHF SingleTurnAgentExecutor: decode(prompt ids + generated ids), the generation's EOS kept
            ids = (tok(prompt, add_special_tokens=False)["input_ids"] + tok(r.content, add_special_tokens=False)
                   ["input_ids"] + [tok.eos_token_id])
            forms["openrlhf"].append(tok.decode(ids, skip_special_tokens=False))
            # verl compute_score_disrm: the rendering with the BOS text stripped (vLLM adds special tokens)
            bos = tok.bos_token
            forms["verl"].append(template[len(bos):] if bos and template.startswith(bos) else template)
            # TRL GRPOTrainer: the rendered prompt + the completion decoded without special tokens
            forms["trl"].append(prompt + r.content)
    return forms
