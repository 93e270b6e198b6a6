"""Sampling G completions per prompt with each prompt encoded once (:func:`sample_groups`).

``transformers``' ``generate`` on a batch of ``n_prompts · G`` rows encodes every prompt G times
(one row each); here the distinct prompts are encoded once, in one left-padded forward pass, and
their key/value cache is repeated G times before the rows decode together. With prompts of ~370
tokens and completions of ~20, encoding the prompts is most of the cost, so this divides it by G.

Each row draws its tokens from its own stream: row ``r`` of a call seeded ``s`` draws token ``t``
by the Gumbel-max trick, ``argmax(logits / temperature + Gumbel noise)``, with the noise from the
``t``-th block of V uniforms of a ``torch.Generator`` seeded from ``(s, r)``
(:func:`row_generators`). A row's tokens therefore depend on its prompt, the model and
``(s, r)``, not on which other rows share its batch: sampling the rows one at a time
(``batched=False``) gives the same tokens, up to a tie between the two best perturbed logits
within the float32 difference of the two forward passes (~1e-5; inverse-CDF draws were not
robust: their boundaries move with every probability summed before them).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

__all__ = ["row_generators", "sample_groups"]


def row_generators(seed: int, rows: Sequence[int]) -> list[torch.Generator]:
    """Each row's stream: a CPU ``torch.Generator`` seeded ``(seed * 1_000_033 + r) mod 2**63`` for row ``r``."""
    return [torch.Generator().manual_seed((int(seed) * 1_000_033 + int(r)) % (2**63)) for r in rows]


def _draw(logits: torch.Tensor, temperature: float, gens: Sequence[torch.Generator], active: Sequence[bool]) -> list[int]:
    """Gumbel-max draw of one token per active row from ``softmax(logits / temperature)``.

    Args:
        logits: (B, V) float logits.
        temperature: > 0.
        gens: B CPU generators; an active row takes V float32 uniforms from its own.
        active: B flags; inactive rows draw nothing (their entry is -1).

    Returns:
        B token ids (int).
    """
    scaled = logits.float().cpu() / temperature
    out = [-1] * len(gens)
    for r, g in enumerate(gens):
        if active[r]:
            u = torch.rand(scaled.shape[-1], generator=g)
            out[r] = int(torch.argmax(scaled[r] - torch.log(-torch.log(u))))
    return out


@torch.no_grad()
def _sample_batch(model: Any, tokenizer: Any, prompt_ids: Sequence[Sequence[int]], group_size: int,
                  gens: Sequence[torch.Generator], *, max_new_tokens: int, temperature: float, stop: Sequence[str],
                  pad_token_id: int, eos_token_id: int | None) -> list[list[int]]:
    """One batch: encode the prompts once (left-padded), repeat the cache G times, decode all rows."""
    dev = next(model.parameters()).device
    n_p = len(prompt_ids)
    width = max(len(x) for x in prompt_ids)
    lengths = torch.tensor([len(x) for x in prompt_ids], device=dev)
    ids = torch.tensor([[pad_token_id] * (width - len(x)) + list(x) for x in prompt_ids], device=dev)
    attn = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in prompt_ids], device=dev)
    pos = (attn.cumsum(-1) - 1).clamp_(min=0)
    out = model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=True, logits_to_keep=1)
    cache = out.past_key_values if getattr(out, "cache", None) is None else out.cache
    logits = out.logits[:, -1, :]
    if group_size > 1:
        cache.batch_repeat_interleave(group_size)
        logits = logits.repeat_interleave(group_size, dim=0)
        attn = attn.repeat_interleave(group_size, dim=0)
        lengths = lengths.repeat_interleave(group_size, dim=0)
    b = n_p * group_size
    gen: list[list[int]] = [[] for _ in range(b)]
    done = [False] * b
    for t in range(max_new_tokens):
        tok = _draw(logits, temperature, gens, [not d for d in done])
        for r in range(b):
            if done[r]:
                continue
            gen[r].append(tok[r])
            if eos_token_id is not None and gen[r][-1] == eos_token_id:
                done[r] = True
            elif stop and any(s in tokenizer.decode(gen[r][-8:], skip_special_tokens=False) for s in stop):
                done[r] = True
        if all(done) or t == max_new_tokens - 1:
            break
        nxt = torch.tensor([[max(x, 0)] for x in tok], device=dev)
        attn = torch.cat([attn, torch.ones(b, 1, dtype=attn.dtype, device=dev)], dim=1)
        out = model(input_ids=nxt, attention_mask=attn, position_ids=(lengths + t).unsqueeze(-1), cache=cache,
                    use_cache=True, logits_to_keep=1)
        cache = out.past_key_values if getattr(out, "cache", None) is None else out.cache
        logits = out.logits[:, -1, :]
    return gen


def sample_groups(model: Any, tokenizer: Any, prompt_ids: Sequence[Sequence[int]], group_size: int, *,
                  seed: int, max_new_tokens: int, temperature: float, stop: Sequence[str] = (),
                  batched: bool = True) -> list[list[int]]:
    """Sample ``group_size`` completions of each prompt, each prompt encoded once.

    Args:
        model: a ``transformers`` causal LM (or a peft model around one), in eval mode.
        tokenizer: its tokenizer (``decode`` checks the stop strings; ``pad_token_id`` pads prompts).
        prompt_ids: one token-id list per group (unpadded; no list may be empty).
        group_size: G, completions per prompt.
        seed: the call's seed; row ``r`` (prompt ``r // G``, completion ``r % G``) draws from the
            stream :func:`row_generators` gives it (Gumbel-max draws).
        max_new_tokens: tokens per completion at most.
        temperature: > 0; tokens are drawn from ``softmax(logits / temperature)``.
        stop: a row stops after the token that completes one of these strings in its decoded
            completion (the token is kept), as ``generate``'s ``stop_strings``; it also stops
            after the tokenizer's EOS token (kept).
        batched: True: all rows in one batch; False: one row at a time (the same tokens, slower;
            the reference the tests compare with).

    Returns:
        ``n_prompts · G`` lists of sampled token ids (prompt after prompt), each 1 to
        ``max_new_tokens`` long, without padding.

    Raises:
        ValueError: an empty prompt, ``group_size`` < 1, ``max_new_tokens`` < 1 or
            ``temperature`` <= 0.
    """
    if group_size < 1 or max_new_tokens < 1 or temperature <= 0:
        raise ValueError(f"need group_size >= 1, max_new_tokens >= 1 and temperature > 0; got {group_size}, "
                         f"{max_new_tokens}, {temperature}")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every prompt needs at least one token (an empty prompt has nothing to continue)")
    n_rows = len(prompt_ids) * group_size
    if n_rows == 0:
        return []
    gens = row_generators(seed, range(n_rows))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    kw = dict(max_new_tokens=max_new_tokens, temperature=temperature, stop=list(stop), pad_token_id=pad,
              eos_token_id=tokenizer.eos_token_id)
    if batched:
        return _sample_batch(model, tokenizer, prompt_ids, group_size, gens, **kw)
    return [_sample_batch(model, tokenizer, [prompt_ids[r // group_size]], 1, gens[r: r + 1], **kw)[0]
            for r in range(n_rows)]
