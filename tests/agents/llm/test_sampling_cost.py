"""Issue 28: sampling encodes each group's prompt once, the update skips the prompt's logits and
re-uses the frozen reference's prompt encoding; none of it changes what is sampled or scored."""

from __future__ import annotations

import torch

from agents.llm.policy import LLMPolicy

torch.set_num_threads(1)


def _prompts(pol):
    from wmrl_envs.envs.autoresearch.tasks import get_task

    # prompts of different lengths: the batch is left-padded
    return [pol.build_prompt({}, get_task(t)) for t in ("house-prices", "credit-default", "digits-shifted")]


def test_batched_sampler_gives_the_same_tokens_as_the_unbatched_one(tokenizer, tiny_model):
    """Issue 28's test: the same seed gives the same completions, all rows in one batch (each prompt
    encoded once, left-padded, its cache repeated G times) or one row at a time."""
    from agents.llm.sampling import sample_groups

    pol = LLMPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=12, temperature=1.0, seed=5)
    prompts = _prompts(pol)
    enc = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    assert len({len(e) for e in enc}) == 3
    s = pol.sample(prompts, 4)
    one_by_one = sample_groups(pol.model, tokenizer, enc, 4, seed=5 * 1_000_003 + 0, max_new_tokens=12,
                               temperature=1.0, stop=["\n"], batched=False)
    assert [c for g in s.completion_ids for c in g] == one_by_one
    assert len({tuple(c) for c in one_by_one}) > 6  # the rows are not copies of each other
    # a group's completions do not depend on the other groups in the call (same seed, same call index)
    alone = LLMPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=12, temperature=1.0, seed=5).sample(prompts[:1], 4)
    assert alone.completion_ids[0] == s.completion_ids[0]


def test_sampled_rows_stop_after_the_stop_string_and_are_not_padded(tokenizer, tiny_model):
    """A row ends with the token that completes "\\n" (line mode), and carries no padding/EOS it did not draw."""
    pol = LLMPolicy(tiny_model(tokenizer, seed=3), tokenizer, max_new_tokens=24, temperature=1.0, seed=0)
    nl = {i for i in range(len(tokenizer)) if "\n" in tokenizer.decode([i])}
    bias = torch.zeros(len(tokenizer))
    bias[sorted(nl)] = 4.0  # make "\n" tokens likely, so that rows stop at different lengths
    pol.model.get_output_embeddings().bias = torch.nn.Parameter(bias, requires_grad=False)
    s = pol.sample(_prompts(pol), 4)
    rows = [c for g in s.completion_ids for c in g]
    stopped = [c for c in rows if len(c) < 24]
    assert stopped and len({len(c) for c in rows}) > 1
    for c in rows:
        # the stop string or a drawn EOS ends a row, at the token that completes it (kept) ...
        assert "\n" not in tokenizer.decode(c[:-1]) and tokenizer.eos_token_id not in c[:-1]
        if len(c) < 24:
            assert c[-1] == tokenizer.eos_token_id or "\n" in tokenizer.decode(c[-1:])
    # ... and no row carries an EOS after its stop string (generate padded finished rows with the
    # pad token, which is SmolLM2's EOS, and that token entered the loss as if drawn)
    assert not any(len(c) >= 2 and c[-1] == tokenizer.eos_token_id and "\n" in tokenizer.decode(c[-2:-1]) for c in rows)


def _count_lm_head_positions(model):
    seen = []
    head = model.get_output_embeddings()
    h = head.register_forward_hook(lambda m, i, o: seen.append(int(i[0].shape[0] * i[0].shape[1])))
    return seen, h


def test_shared_prefix_logprobs_equal_the_full_forward_and_the_reference_prompt_is_encoded_once(tokenizer, tiny_model):
    """The update's log-probs (prompt encoded once, its cache repeated for the G completions, the
    LM head run only where a log-prob is needed) equal one full forward per completion within 1e-5
    in float32, with the gradient; the frozen reference encodes a prompt once across calls."""
    pol = LLMPolicy(tiny_model(tokenizer), tokenizer, temperature=0.7, max_new_tokens=8)
    with torch.no_grad():  # non-trivial adapters
        for n, p in pol.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    prompt = _prompts(pol)[0]
    pids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    comps = [[100, 200, 300, 13], [400, 500], [600]]
    pol.model.train()

    def full(c, reference=False):
        ids = torch.tensor([pids + c])
        ctx = pol.model.disable_adapter() if reference else torch.enable_grad()
        with ctx:
            logits = pol.model(input_ids=ids).logits[0, len(pids) - 1: -1].float() / 0.7
        return torch.log_softmax(logits, -1).gather(-1, torch.tensor(c).unsqueeze(-1)).squeeze(-1)

    seen, hook = _count_lm_head_positions(pol.model)
    lp, mask, _ = pol.group_logprobs(pids, comps)
    hook.remove()
    assert sum(seen) == 1 + 3 * 4  # the prompt's last position, then the completions' positions: not the prompt's
    lp.sum().backward()
    g_shared = {n: p.grad.clone() for n, p in pol.model.named_parameters() if p.requires_grad}
    pol.model.zero_grad()
    ref_full = sum(full(c).sum() for c in comps)
    ref_full.backward()
    for i, c in enumerate(comps):
        torch.testing.assert_close(lp[i, : len(c)].detach(), full(c).detach(), atol=1e-5, rtol=0)
    for n, p in pol.model.named_parameters():
        if p.requires_grad:
            # float32 sums of a different order: 1.1e-5 apart on one element of 512 with transformers 5.x here
            torch.testing.assert_close(g_shared[n], p.grad, atol=5e-5, rtol=1e-3)
    # the reference: equal to the adapters-off forward; its prompt encoded on the first call only
    seen, hook = _count_lm_head_positions(pol.model)
    ref1, _, _ = pol.group_logprobs(pids, comps, reference=True)
    ref2, _, _ = pol.group_logprobs(pids, comps[:2], reference=True)
    hook.remove()
    assert seen == [1, 3 * 4, 2 * 4]  # second call: no prompt pass
    assert torch.equal(ref2, ref1[:2, :4])
    for i, c in enumerate(comps):
        torch.testing.assert_close(ref1[i, : len(c)], full(c, reference=True).detach(), atol=1e-5, rtol=0)


def test_the_line_prompt_keeps_what_the_agent_needs(tokenizer, tiny_model):
    """The line-mode prompt shows the task's description, the metric and its direction, the
    script's sklearn imports and current model line, and pre-fills the imports up to ``model =``
    (issue 28 measured a shorter prompt without the imports here; the untrained policy wrote fewer
    valid lines with it, so it was not kept). Same as the benchmark's copy of the old prompt."""
    import importlib.util
    from pathlib import Path

    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    spec_ = importlib.util.spec_from_file_location(
        "sampling_cost", Path(__file__).resolve().parents[3] / "benchmarks" / "sampling_cost.py")
    bench = importlib.util.module_from_spec(spec_)
    spec_.loader.exec_module(bench)
    pol = LLMPolicy(tiny_model(tokenizer), tokenizer)
    for t in list_tasks("train") + list_tasks("heldout"):
        spec = get_task(t)
        p = pol.build_prompt({"task_id": t}, spec)
        assert p == bench.build_prompt_before(pol, spec)
        overview = " ".join(spec.overview.split())
        assert overview.split(" Evaluation:")[0][:300] in p
        assert f"Metric: {spec.metric} ({'higher' if spec.higher_is_better else 'lower'} is better)" in p
        current = next(ln for ln in spec.starter_code.splitlines() if ln.startswith("model ="))
        assert current in p
        imports = [ln for ln in spec.starter_code.splitlines() if ln.startswith(("from sklearn", "import sklearn"))]
        assert imports and p.endswith("```python\n" + "\n".join(imports) + "\nmodel =")
