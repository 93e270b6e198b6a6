"""The LLM judge's decoding (``wmrl_envs.envs.autoresearch.llm_judge.decoding``): batching and
padding on a tiny LLaMA, the JSON constraint against random and adversarial logits, the feedback
budget, expected decoding against hand-computed probabilities, and PEFT adapters disabled while
the judge decodes (the backbone's modes restored).
"""

from __future__ import annotations

import copy

import pytest
import torch

from wmrl_envs.envs.autoresearch.grading import BUCKET_POSITIONS, QUALITY_BUCKETS, STATUSES
from wmrl_envs.envs.autoresearch.llm_judge import PREFILL, LLMJudgeWorldModel, parse_judge_output

from llm_judge_helpers import GOOD_CODE, BUGGY_CODE, NO_SUB_CODE, _obs, _tiny_llama, _schema_valid

__all__: list[str] = []


# ----------------------------------------------------------------------------- tiny LLaMA


@pytest.mark.parametrize("constrained", [False, True])
def test_tiny_llama_batching_padding_and_parse_errors(tokenizer, next_observation, constrained):
    model = _tiny_llama(tokenizer)
    ctxs = [_obs(i) for i in range(5)]
    acts = [GOOD_CODE, "x = (", BUGGY_CODE, NO_SUB_CODE, "print('hi')\n"]
    budget = 40 if constrained else 10

    def run(batch_size):
        judge = LLMJudgeWorldModel(model, tokenizer, max_new_tokens=budget, batch_size=batch_size, temperature=0.0,
                                   stop_at_brace=False, constrained=constrained)
        return judge, judge.predict(ctxs, acts)

    j1, p1 = run(1)
    j3, p3 = run(3)
    assert j1.constrained is constrained
    assert j1.n_generate_calls == 4 and j3.n_generate_calls == 2
    # greedy decoding: left-padded batches give the same text as one-by-one
    assert [p.raw_output for p in p1] == [p.raw_output for p in p3]
    for p in p3:
        assert p.status in STATUSES
        if not p.model_called:
            assert p.status == "syntax_err"
            continue
        parsed = parse_judge_output(p.raw_output)
        assert p.extras["parse_error"] is (parsed is None)
        if parsed is None:
            assert p.status == "runtime_err" and p.score == pytest.approx(0.1) and p.extras["bucket"] is None
            assert p.extras["parse_reason"]
        assert 0 < p.extras["new_tokens"] <= budget
    if constrained:  # the same random model can only write predictions under the constraint
        assert j3.n_parse_errors == 0 and all(p.raw_output.startswith(PREFILL) for p in p3 if p.model_called)
    else:  # a random tiny model produces garbage: the no-prediction path is taken
        assert j3.n_parse_errors >= 1


@pytest.mark.parametrize("seed,extra_vocab", [(0, 0), (1, 0), (2, 64)])
def test_constrained_sampling_from_random_models_is_always_a_prediction(tokenizer, next_observation, seed, extra_vocab):
    """Hot sampling (temperature 1.5, no top-k/top-p) from random weights: every answer is one schema object
    (also when the model has more logits than the tokenizer has tokens)."""
    model = _tiny_llama(tokenizer, seed=seed, extra_vocab=extra_vocab)
    if extra_vocab:  # make the model prefer the ids no token has
        bias = torch.zeros(len(tokenizer) + extra_vocab)
        bias[len(tokenizer):] = 40.0
        model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    judge = LLMJudgeWorldModel(model, tokenizer, max_new_tokens=40, batch_size=4, temperature=1.5, top_p=1.0, top_k=0,
                               seed=seed)
    acts = [GOOD_CODE, BUGGY_CODE, NO_SUB_CODE, "print('x' * 10**6)\n"]
    preds = judge.predict([_obs(i) for i in range(4)], acts)
    assert judge.constrained and judge.n_parse_errors == 0
    for p in preds:
        obj = _schema_valid(p.raw_output)
        assert p.raw_output.startswith(PREFILL) and p.extras["parse_error"] is False
        assert p.status == obj["status"] and p.score == parse_judge_output(p.raw_output).score
        assert p.extras["bucket"] == (obj["bucket"] if obj["status"] == "valid" else None)


def _boost(model, tokenizer, words, by=40.0):
    """Make the model prefer the first token of each word by ``by`` logits (a forward hook on lm_head)."""
    ids = sorted({tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in words})
    bias = torch.zeros(len(tokenizer))
    bias[ids] = by
    return model.lm_head.register_forward_hook(lambda m, i, o: o + bias)


@pytest.mark.parametrize(
    "words",
    [
        ["<|im_end|>"],  # wants to stop at once
        ["}", "{", '"', "\\"],  # wants to close, open a second object, escape
        ["Valid", "VALID", "success", "excellent", " valid"],  # wrong case, synonyms
        ["\ufffd", "\x00"],  # garbage bytes
    ],
    ids=["eos", "braces-quotes", "synonyms", "garbage"],
)
def test_constrained_decoding_against_adversarial_logits(tokenizer, next_observation, words):
    model = _tiny_llama(tokenizer, seed=5)
    handle = _boost(model, tokenizer, words)
    try:
        judge = LLMJudgeWorldModel(model, tokenizer, max_new_tokens=32, batch_size=2, temperature=0.0)
        preds = judge.predict([_obs(0), _obs(1)], [GOOD_CODE, BUGGY_CODE])
    finally:
        handle.remove()
    assert judge.n_parse_errors == 0
    for p in preds:
        _schema_valid(p.raw_output)


def test_constrained_feedback_is_closed_at_the_budget_and_limited(tokenizer, next_observation):
    """A model that would write 'x' forever: the feedback is closed before the budget runs out,
    and ``max_feedback_chars`` bounds it in characters."""
    model = _tiny_llama(tokenizer, seed=6)
    handle = _boost(model, tokenizer, ["x"], by=60.0)
    try:
        judge = LLMJudgeWorldModel(model, tokenizer, max_new_tokens=30, batch_size=2, temperature=0.0)
        preds = judge.predict([_obs(0), _obs(1)], [GOOD_CODE, BUGGY_CODE])
        short = LLMJudgeWorldModel(model, tokenizer, max_new_tokens=40, temperature=0.0, max_feedback_chars=5)
        limited = short.predict([_obs(0)], [GOOD_CODE])[0]
    finally:
        handle.remove()
    assert judge.n_parse_errors == 0 and judge.n_forced_close == 2
    for p in preds:
        obj = _schema_valid(p.raw_output)
        assert obj["feedback"].count("x") >= 5 and p.raw_output.endswith('"}')
        assert p.extras["new_tokens"] <= 30
    assert short.json_schema["properties"]["feedback"]["maxLength"] == 5
    assert len(_schema_valid(limited.raw_output, 5)["feedback"]) == 5  # it would write more
    assert short.n_forced_close == 0  # the schema itself ended the string


def test_peft_adapters_disabled_and_modes_restored(tokenizer, next_observation):
    from peft import LoraConfig, get_peft_model

    base = _tiny_llama(tokenizer, seed=1)
    reference = copy.deepcopy(base)
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "o_proj"]))
    torch.manual_seed(2)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 1.0)  # non-zero B: the adapted model differs from the base
    peft_model.train()
    grads_before = {n: p.requires_grad for n, p in peft_model.named_parameters()}

    ids = tokenizer("hello world", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        adapted_logits = peft_model(ids).logits
        base_logits = reference(ids).logits
    assert not torch.allclose(adapted_logits, base_logits, atol=1e-4)

    def first_logits(judge_model, lm_head):
        captured = []
        handle = lm_head.register_forward_hook(lambda m, i, o: captured.append(o.detach().clone()))
        judge = LLMJudgeWorldModel(judge_model, tokenizer, max_new_tokens=4, temperature=0.0, constrained=False)
        judge.predict([_obs()], [GOOD_CODE])
        handle.remove()
        return captured[0]

    judged = first_logits(peft_model, peft_model.get_base_model().lm_head)
    expected = first_logits(reference, reference.lm_head)
    torch.testing.assert_close(judged, expected, rtol=1e-5, atol=1e-5)

    # modes, grads and adapters are restored afterwards
    assert peft_model.training is True
    assert all(m.training for m in peft_model.modules())
    assert {n: p.requires_grad for n, p in peft_model.named_parameters()} == grads_before
    with torch.no_grad():
        peft_model.eval()
        torch.testing.assert_close(peft_model(ids).logits, adapted_logits)

    # with disable_adapters=False the judge sees the adapted model
    with_adapters = LLMJudgeWorldModel(peft_model, tokenizer, max_new_tokens=4, temperature=0.0, disable_adapters=False,
                                       constrained=False)
    captured = []
    h = peft_model.get_base_model().lm_head.register_forward_hook(lambda m, i, o: captured.append(o.detach().clone()))
    with_adapters.predict([_obs()], [GOOD_CODE])
    h.remove()
    assert not torch.allclose(captured[0], expected, atol=1e-4)


def test_injected_adapters_disabled(tokenizer, next_observation):
    """A plain transformers model with LoRA layers injected in place (no PeftModel wrapper)."""
    from peft import LoraConfig, inject_adapter_in_model

    model = _tiny_llama(tokenizer, seed=4)
    reference = copy.deepcopy(model)
    model = inject_adapter_in_model(LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False), model)
    ids = tokenizer("hello", return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert not torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-4)
    judge = LLMJudgeWorldModel(model, tokenizer, max_new_tokens=6, temperature=0.0, constrained=False)
    ref_judge = LLMJudgeWorldModel(reference, tokenizer, max_new_tokens=6, temperature=0.0, constrained=False)
    assert [p.raw_output for p in judge.predict([_obs()], [GOOD_CODE])] == [
        p.raw_output for p in ref_judge.predict([_obs()], [GOOD_CODE])
    ]
    with torch.no_grad():  # adapters are back on
        assert not torch.allclose(model(ids).logits, reference(ids).logits, atol=1e-4)


def test_expected_decoding_matches_manual_probabilities(tokenizer, next_observation):
    """decoding='expected': score = Σ p(status)·score(status), valid via the bucket distribution."""
    from wmrl_envs.envs.autoresearch.grading import BUCKET_POSITIONS, QUALITY_BUCKETS, score_from_status

    model = _tiny_llama(tokenizer, seed=1)
    acts = [GOOD_CODE, "x = (", BUGGY_CODE]
    judge = LLMJudgeWorldModel(model, tokenizer, decoding="expected", batch_size=2)
    preds = judge.predict([_obs(0)] * 3, acts)
    assert preds[1].model_called is False and preds[1].score == 0.0  # pre-check still first
    first = lambda w: tokenizer(w, add_special_tokens=False)["input_ids"][0]  # noqa: E731
    for code, p in ((GOOD_CODE, preds[0]), (BUGGY_CODE, preds[2])):
        prompt = judge.build_prompt(_obs(0), code)
        ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
        bridge = tokenizer('valid", "bucket": "', add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            ps = torch.softmax(model(input_ids=ids).logits[0, -1, [first(w) for w in STATUSES]], -1)
            full = torch.cat([ids, bridge], dim=1)
            pb = torch.softmax(model(input_ids=full).logits[0, -1, [first(w) for w in QUALITY_BUCKETS]], -1)
        valid = 0.5 + 0.5 * sum(float(pb[k]) * BUCKET_POSITIONS[w] for k, w in enumerate(QUALITY_BUCKETS))
        expected = sum(float(ps[k]) * (valid if w == "valid" else score_from_status(w)) for k, w in enumerate(STATUSES))
        assert p.score == pytest.approx(expected, abs=1e-4)
        assert p.status == STATUSES[int(ps.argmax())]
        assert sum(p.extras["probs"][w] for w in STATUSES) == pytest.approx(1.0, abs=1e-5)
        assert p.observation["feedback"] == p.feedback
    with pytest.raises(ValueError, match="decoding"):
        LLMJudgeWorldModel(model, tokenizer, decoding="beam")
