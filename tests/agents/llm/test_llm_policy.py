"""LLMPolicy on a tiny randomly initialised LLaMA (fast): log-probs, reference, sampling, update."""

from __future__ import annotations

import pytest
import torch

from agents.grpo import grpo_loss
from agents.llm.policy import LLMPolicy, extract_code

torch.set_num_threads(1)


class Spec:
    task_id = "demo"
    overview = "Binary classification of noisy records."
    metric = "roc_auc"
    higher_is_better = True
    starter_code = "import pandas as pd\nfrom sklearn.linear_model import LogisticRegression\nmodel = LogisticRegression()\nprint('ok')\n"

    def starter_code_with(self, line):
        return self.starter_code.replace("model = LogisticRegression()", line)


def naive_logprobs(model, prompt_ids, comp, temperature):
    ids = torch.tensor([list(prompt_ids) + list(comp)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(comp).unsqueeze(-1)).squeeze(-1)


def test_group_logprobs_match_full_forward_and_reference_is_base(tokenizer, tiny_model):
    pol = LLMPolicy(tiny_model(tokenizer), tokenizer, temperature=0.7, max_new_tokens=8)
    with torch.no_grad():  # make the adapters non-trivial
        for n, p in pol.model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    prompt = pol.build_prompt({"prompt": "x"}, Spec())
    assert prompt.endswith("model =")
    pids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    comps = [[100, 200, 300], [400, 500], [600]]
    lp, mask, ent = pol.group_logprobs(pids, comps, with_entropy=True)
    assert lp.shape == mask.shape == ent.shape == (3, 3)
    assert mask.tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0]]
    for i, c in enumerate(comps):
        torch.testing.assert_close(lp[i, : len(c)].detach(), naive_logprobs(pol.model, pids, c, 0.7), atol=1e-4, rtol=1e-4)
    ref, _, _ = pol.group_logprobs(pids, comps, reference=True)
    with pol.model.disable_adapter():
        base = naive_logprobs(pol.model, pids, comps[0], 0.7)
    torch.testing.assert_close(ref[0], base, atol=1e-4, rtol=1e-4)
    assert (ref[0] - lp[0].detach()).abs().max() > 1e-3  # adapters change the policy


def test_sample_shapes_and_actions(tokenizer, tiny_model):
    pol = LLMPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=6, seed=3)
    prompts = [pol.build_prompt({}, Spec()), pol.build_prompt({}, Spec())]
    s = pol.sample(prompts, 3)
    assert len(s.completion_ids) == 2 and all(len(g) == 3 for g in s.completion_ids)
    assert all(1 <= len(c) <= 6 for g in s.completion_ids for c in g)
    assert s.new_tokens == sum(len(c) for g in s.completion_ids for c in g)
    action = pol.completion_to_action(" RandomForestClassifier()\nextra", Spec())
    assert "model = RandomForestClassifier()" in action and "extra" not in action
    assert "LogisticRegression()" not in action.split("\n")[2]
    # same seed -> same samples
    pol2 = LLMPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=6, seed=3)
    assert pol2.sample(prompts, 3).completion_ids == s.completion_ids


def test_one_update_changes_only_adapters(tokenizer, tiny_model):
    pol = LLMPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=6)
    base_before = {n: p.detach().clone() for n, p in pol.model.named_parameters() if not p.requires_grad}
    lora_before = pol.adapter_state_dict()
    opt = torch.optim.AdamW(pol.trainable_parameters(), lr=1e-2)
    pids = tokenizer(pol.build_prompt({}, Spec()), add_special_tokens=False)["input_ids"]
    comps = [[100, 200], [300, 400]]
    lp, mask, _ = pol.group_logprobs(pids, comps)
    ref, _, _ = pol.group_logprobs(pids, comps, reference=True)
    out = grpo_loss(lp, lp.detach(), ref, torch.tensor([1.0, -1.0]), mask)
    out.loss.backward()
    opt.step()
    after = pol.adapter_state_dict()
    assert any((after[n] - lora_before[n]).abs().max() > 0 for n in after)
    for n, p in pol.model.named_parameters():
        if not p.requires_grad:
            assert torch.equal(p, base_before[n])
    # the positive-advantage completion became more likely
    lp2, _, _ = pol.group_logprobs(pids, comps)
    assert lp2[0].sum() > lp[0].detach().sum()
    assert lp2[1].sum() < lp[1].detach().sum()
    # adapter state round-trip
    pol.load_adapter_state_dict(lora_before)
    lp3, _, _ = pol.group_logprobs(pids, comps)
    torch.testing.assert_close(lp3.detach(), lp.detach())


def test_grpo_logprobs_index_flat_rows_and_the_one_grpo_step_trains_the_policy(tokenizer, tiny_model):
    """LLMPolicy is an agents.grpo.GRPOPolicy: flat rows (group after group) map to the groups'
    completions; grpo_update with one backward per group equals the hand-written per-group step."""
    from agents.grpo import GRPOPolicy, GRPOUpdateConfig, group_advantages, grpo_update
    from agents.llm.policy import PolicySamples

    pol = LLMPolicy(tiny_model(tokenizer), tokenizer, temperature=0.7)
    assert isinstance(pol, GRPOPolicy)
    p0 = tokenizer(pol.build_prompt({}, Spec()), add_special_tokens=False)["input_ids"]
    p1 = p0[:-3]
    samples = PolicySamples([p0, p1], [[[100, 200, 300], [400]], [[500, 600], [700, 800]]], [["a", "b"], ["c", "d"]], 9)
    assert len(samples) == 4 and samples.row_positions([3, 0, 1]) == [(1, 1), (0, 0), (0, 1)]
    with pytest.raises(IndexError):
        samples.row_positions([4])
    lp, mask, ent = pol.grpo_logprobs(samples, [1, 2, 3], with_entropy=True)
    assert lp.shape == mask.shape == ent.shape == (3, 2)  # padded to the longest completion of the rows
    assert mask.tolist() == [[1, 0], [1, 1], [1, 1]]
    g0, _, _ = pol.group_logprobs(p0, [[400]])
    g1, _, _ = pol.group_logprobs(p1, [[500, 600], [700, 800]])
    torch.testing.assert_close(lp[0, :1], g0[0])
    torch.testing.assert_close(lp[1:], g1)
    ref, _, none = pol.grpo_logprobs(samples, [0], reference=True)
    assert none is None and not ref.requires_grad

    rewards = [[1.0, 0.0], [0.0, 1.0]]
    twin = LLMPolicy(tiny_model(tokenizer), tokenizer, temperature=0.7)
    opts = [torch.optim.AdamW(p.trainable_parameters(), lr=1e-2) for p in (pol, twin)]
    cfg = GRPOUpdateConfig(kl_coef=0.04, micro_batch_per_group=True, max_grad_norm=1.0)
    stats = grpo_update(pol, opts[0], samples, rewards, [2.0, 1.0], config=cfg)
    assert stats["n_rows"] == 4 and stats["n_groups_used"] == 2
    # by hand: per group, reference then policy log-probs, loss weighted by the group's share of rows
    opts[1].zero_grad()
    for prompt, comps, rw, w in ((p0, samples.completion_ids[0], rewards[0], 2.0), (p1, samples.completion_ids[1], rewards[1], 1.0)):
        r, _, _ = twin.group_logprobs(prompt, comps, reference=True)
        l, m, _ = twin.group_logprobs(prompt, comps)
        adv = torch.tensor((group_advantages(rw) * w).tolist(), dtype=torch.float32)
        out = grpo_loss(l, l.detach(), r, adv, m, kl_coef=0.04)
        (out.loss * 2 / 4).backward()
    torch.nn.utils.clip_grad_norm_(twin.trainable_parameters(), 1.0)
    opts[1].step()
    for k, v in pol.adapter_state_dict().items():
        torch.testing.assert_close(v, twin.adapter_state_dict()[k])


@pytest.mark.parametrize(
    "text,expected",
    [
        ("```python\nprint(1)\n```\nthanks", "print(1)"),
        ("print(2)", "print(2)"),
        ("Here:\n```py\nx = 1\n", "x = 1"),
    ],
)
def test_extract_code(text, expected):
    assert extract_code(text) == expected


def test_bad_arguments(tokenizer, tiny_model):
    with pytest.raises(ValueError):
        LLMPolicy(tiny_model(tokenizer), tokenizer, mode="poem")
    with pytest.raises(ValueError):
        LLMPolicy(tiny_model(tokenizer), tokenizer, temperature=0.0)
    pol = LLMPolicy(tiny_model(tokenizer), tokenizer)
    with pytest.raises(ValueError, match="task spec"):
        pol.build_prompt({}, None)


def test_the_prompt_shows_the_chosen_baseline_as_the_current_model(tokenizer, tiny_model):
    from wmrl_envs.envs.autoresearch.tasks import get_task

    task = get_task("land-cover")
    starter = LLMPolicy(tiny_model(tokenizer), tokenizer).build_prompt({}, task)
    boosting = LLMPolicy(tiny_model(tokenizer), tokenizer, baseline="boosting").build_prompt({}, task)
    assert task.starter_model_line in starter and "HistGradientBoostingClassifier(max_iter=200" not in starter
    assert "model = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.1)" in boosting
    assert task.starter_model_line not in boosting and boosting.endswith("model =")
    with pytest.raises(ValueError, match="unknown baseline 'xgboost'"):
        LLMPolicy(tiny_model(tokenizer), tokenizer, baseline="xgboost").build_prompt({}, task)


def test_llm_bench_agent_trains_snapshots_and_reseeds(tokenizer, monkeypatch, tiny_model):
    """`wmrl bench --agent llm` adapter: line-mode actions, a GRPO step changes only LoRA,
    snapshot/restore round-trips, reseed gives common random numbers."""
    import wmrl_envs.world_models.smollm2 as sm
    from agents.experiments.bench_agents import LLMBenchAgent

    monkeypatch.setattr(sm, "load_smollm2", lambda **kw: (tiny_model(tokenizer), tokenizer))
    agent = LLMBenchAgent(seed=0, lr=1e-2, max_new_tokens=6)
    actions, handle = agent.sample(["house-prices", "digits-shifted"], 3)
    assert [len(a) for a in actions] == [3, 3]
    assert all("model =" in a and "submission.csv" in a for g in actions for a in g)  # starter script with the line
    snap = agent.snapshot()
    from agents.grpo import group_batch, group_step
    from agents.protocol import BenchAgent

    assert isinstance(agent, BenchAgent)
    batch = group_batch([[1.0, 0.0, 0.4], [0.2, 0.9, 0.4]], None, agent.update_config)
    assert group_step(agent.policy, agent.optimizer, handle, batch, config=agent.update_config)["n_rows"] == 6
    after = agent.snapshot()
    assert any(not torch.equal(snap[k], after[k]) for k in snap)
    agent.restore(snap)
    assert all(torch.equal(snap[k], v) for k, v in agent.snapshot().items())
    agent.reseed(7)
    first, _ = agent.sample(["house-prices"], 4)
    agent.sample(["house-prices"], 4)
    agent.reseed(7)
    assert agent.sample(["house-prices"], 4)[0] == first


def test_line_mode_cuts_at_any_line_boundary(tokenizer, tiny_model):
    from wmrl_envs.envs.autoresearch.tasks import get_task

    policy = LLMPolicy(tiny_model(tokenizer), tokenizer, mode="line")
    task = get_task("house-prices")
    for sep in ("\r", "\n", "\u2028", "\r\n"):
        code = policy.completion_to_action(" Ridge(alpha=2.0)" + sep + "junk", task)
        assert "model = Ridge(alpha=2.0)\n" in code and "junk" not in code


def test_sample_leaves_the_global_rng_alone_and_is_reproducible(tokenizer, tiny_model):
    """Item 13: sampling uses a local torch.Generator, never the global RNG."""
    pol = LLMPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=6, seed=3)
    prompts = [pol.build_prompt({}, Spec())]
    torch.manual_seed(123)
    state = torch.get_rng_state()
    first = pol.sample(prompts, 4)
    assert torch.equal(torch.get_rng_state(), state)  # neither reseeded nor consumed
    torch.manual_seed(999)  # the global RNG does not steer the samples
    again = LLMPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=6, seed=3).sample(prompts, 4)
    assert again.completion_ids == first.completion_ids
    other = LLMPolicy(tiny_model(tokenizer), tokenizer, max_new_tokens=6, seed=4).sample(prompts, 4)
    assert other.completion_ids != first.completion_ids
    assert pol.sample(prompts, 4).completion_ids != first.completion_ids  # the k-th call has its own stream


def test_draw_follows_the_tempered_softmax():
    """The sampler's Gumbel-max draw (agents/llm/sampling.py) samples softmax(logits / T)."""
    from agents.llm.sampling import _draw, row_generators

    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, -30.0])
    for temperature in (0.5, 1.0, 2.0):
        n = 20_000
        gens = row_generators(7, range(n))
        drawn = torch.tensor(_draw(logits.repeat(n, 1), temperature, gens, [True] * n))
        freq = torch.bincount(drawn, minlength=5).float() / n
        expected = torch.softmax(logits / temperature, -1)
        assert (freq - expected).abs().sum() < 0.03, (temperature, freq, expected)
