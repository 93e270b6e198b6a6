"""Tests of ``agents.grammar.programs`` and ``agents.grammar.policy``: grammar, exact log-probabilities, sampling, code, GRPO.

Most tests use a tiny hand-made grammar with random parameters (so probabilities can be
computed by hand); the code tests use the default grammars on real tasks, and one test runs a
dozen emitted programs in the real bubblewrap sandbox (two at a time).
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from agents.grammar.programs import (
    CONTEXT_FEATURES,
    GRAMMARS,
    Family,
    Grammar,
    Option,
    Slot,
    build_program,
    task_context,
)
from agents.grammar.policy import GrammarPolicy
from agents.grpo import GRPOPolicy, GRPOUpdateConfig, grpo_step, grpo_update

torch.set_num_threads(1)

CLF_TASK = "hastie-noisy"  # binary, 4500 training rows, no preprocessing: a cheap classification task to execute
REG_TASK = "house-prices"  # the cheapest task overall


def _tiny_grammar() -> Grammar:
    return Grammar("classification", Slot("preprocess", (Option("none"), Option("standard", "StandardScaler()"))), (
        Family("logistic", "LogisticRegression", (
            Slot("C", (Option("C0.1", "C=0.1"), Option("C1"), Option("C10", "C=10.0"))),
        )),
        Family("knn", "KNeighborsClassifier", (
            Slot("k", (Option("k1", "n_neighbors=1"), Option("k5"))),
            Slot("weights", (Option("uniform"), Option("distance", "weights='distance'"))),
        ), random_state=False),
        Family("nb", "GaussianNB", (), random_state=False),
    ))


def _tiny_policy(seed: int = 0) -> GrammarPolicy:
    pol = GrammarPolicy({"classification": _tiny_grammar()}, init="uniform", seed=seed)
    g = torch.Generator().manual_seed(123)
    with torch.no_grad():
        pol.bias_classification.copy_(torch.randn(pol.bias_classification.shape, generator=g))
        pol.weight_classification.copy_(torch.randn(pol.weight_classification.shape, generator=g) * 0.5)
    return pol


def _slot_probs_by_hand(pol: GrammarPolicy, task: str) -> list[np.ndarray]:
    """softmax(bias + W @ phi) per slot, computed with numpy."""
    g = pol.grammars["classification"]
    phi = task_context(task).features.astype(np.float64)
    b = pol.bias_classification.detach().numpy().astype(np.float64)
    w = pol.weight_classification.detach().numpy().astype(np.float64)
    out = []
    for s, opts in enumerate(g.slot_options):
        z = b[s, : len(opts)] + w[s, : len(opts)] @ phi
        e = np.exp(z - z.max())
        out.append(e / e.sum())
    return out


# ------------------------------------------------------------------------------------ grammar


def test_grammar_layout_and_context_features():
    g = _tiny_grammar()
    assert g.slot_keys == ("preprocess", "family", "logistic.C", "knn.k", "knn.weights")
    assert g.max_options == 3 and g.n_programs() == 2 * (3 + 4 + 1)
    assert len(list(g.combinations())) == g.n_programs()
    ctx = task_context("credit-default")
    assert ctx.problem_type == "classification" and ctx.n_classes == 2 and ctx.has_categoricals and ctx.has_missing
    assert ctx.features.shape == (len(CONTEXT_FEATURES),) and ctx.features.dtype == np.float32
    assert task_context({"task_id": "credit-default"}) is ctx
    assert task_context("land-cover").features[0] == 1.0  # multiclass
    with pytest.raises(ValueError):
        task_context("no-such-task")
    with pytest.raises(ValueError):
        Option("x", fails="sometimes")


def test_default_grammars_have_mistakes_of_both_kinds():
    for pt, g in GRAMMARS.items():
        fails = [o.fails for opts in g.slot_options for o in opts]
        assert "always" in fails and "data" in fails, pt
        assert {f.name for f in g.families} >= {"knn", "decision_tree", "random_forest", "extra_trees", "hist_gb", "gradient_boosting"}
    pol = GrammarPolicy(seed=0)
    m = pol.mistake_probability(REG_TASK)
    assert 0.05 < m["always"] < 0.25 and 0.0 < m["data"] < 0.15
    # the exact probability matches the sampled frequency
    progs = pol.sample([REG_TASK], 3000)[0]
    freq = np.mean([p.fails == "always" for p in progs])
    assert abs(freq - m["always"]) < 4 * math.sqrt(m["always"] * (1 - m["always"]) / 3000)


# ------------------------------------------------------------------------------ probabilities


def test_log_prob_equals_product_of_chosen_option_probabilities():
    pol = _tiny_policy()
    probs = _slot_probs_by_hand(pol, CLF_TASK)
    g = pol.grammars["classification"]
    progs = [build_program(CLF_TASK, ch, 5, grammar=g) for ch in g.combinations()]
    lp = pol.log_probs(progs).detach().numpy()
    for prog, value in zip(progs, lp):
        by_hand = sum(math.log(probs[s][k]) for s, k in zip(prog.slot_ids, prog.option_ids))
        assert value == pytest.approx(by_hand, abs=1e-5)
    # the program probabilities sum to 1 (a proper distribution over the tree)
    assert np.exp(lp).sum() == pytest.approx(1.0, abs=1e-5)
    # exact entropy = -sum p log p over all programs
    assert float(pol.entropy([CLF_TASK])[0].detach()) == pytest.approx(float(-(np.exp(lp) * lp).sum()), abs=1e-5)
    # token layout: (B, L) with a mask of the real choices; nb programs have only 2 choices
    tok, mask = pol.token_logprobs(progs)
    assert tok.shape == mask.shape == (len(progs), 4)
    assert mask.sum(1).tolist() == [len(p.slot_ids) for p in progs]
    # a sampled program carries the same per-choice log-probs as its old_logprobs
    s = pol.sample([CLF_TASK], 4)[0]
    tok, mask = pol.token_logprobs(s)
    for i, p in enumerate(s):
        assert tok[i, : len(p.slot_ids)].detach().numpy() == pytest.approx(np.array(p.old_logprobs), abs=1e-6)


def _chi2_pvalue(counts, probs) -> float:
    """Chi-square p-value of ``counts`` against probabilities ``probs`` (float32 sums are
    renormalised so that expected and observed totals agree, as scipy requires)."""
    counts, probs = np.asarray(counts, dtype=float), np.asarray(probs, dtype=float)
    return chisquare(counts, probs / probs.sum() * counts.sum()).pvalue


def test_sampling_matches_softmax_probabilities():
    pol = _tiny_policy(seed=7)
    probs = _slot_probs_by_hand(pol, CLF_TASK)
    n = 12000
    progs = pol.sample([CLF_TASK], n)[0]
    g = pol.grammars["classification"]
    fam_counts = np.bincount([p.option_ids[1] for p in progs], minlength=3)
    assert _chi2_pvalue(fam_counts, probs[1]) > 1e-3
    pre_counts = np.bincount([p.option_ids[0] for p in progs], minlength=2)
    assert _chi2_pvalue(pre_counts, probs[0]) > 1e-3
    # a conditional slot, among programs of its family
    knn_w = [p.option_ids[3] for p in progs if p.family == "knn"]
    s = g.slot_index("knn.weights")
    assert _chi2_pvalue(np.bincount(knn_w, minlength=2), probs[s]) > 1e-3
    # whole-program frequencies against exact probabilities
    exact = {tuple(sorted(ch.items())): float(np.exp(pol.log_probs([build_program(CLF_TASK, ch, grammar=g)]).item()))
             for ch in g.combinations()}
    counts = {k: 0 for k in exact}
    for p in progs:
        counts[tuple(sorted(p.choices.items()))] += 1
    keys = list(exact)
    assert _chi2_pvalue([counts[k] for k in keys], [exact[k] for k in keys]) > 1e-3


def test_sampling_is_seeded_and_state_dict_round_trips(tmp_path):
    a, b = GrammarPolicy(seed=3), GrammarPolicy(seed=3)
    pa = a.sample([CLF_TASK, REG_TASK], 5)
    pb = b.sample([CLF_TASK, REG_TASK], 5)
    assert [p.code for g in pa for p in g] == [p.code for g in pb for p in g]
    assert len({p.random_state for g in pa for p in g}) > 5  # drawn per rollout
    # perturb, save, load into a fresh policy: same log-probs and same next samples
    with torch.no_grad():
        a.weight_regression.add_(0.3 * torch.randn_like(a.weight_regression))
    torch.save(a.state_dict(), tmp_path / "p.pt")
    c = GrammarPolicy(seed=99)
    c.load_state_dict(torch.load(tmp_path / "p.pt", weights_only=False))
    flat = [p for g in pa for p in g]
    assert torch.allclose(a.log_probs(flat), c.log_probs(flat))
    assert [p.code for p in a.sample([REG_TASK], 3)[0]] == [p.code for p in c.sample([REG_TASK], 3)[0]]


def test_gradients_flow_to_the_chosen_slots():
    pol = _tiny_policy()
    g = pol.grammars["classification"]
    prog = build_program(CLF_TASK, {"preprocess": "standard", "family": "knn", "knn.k": "k1", "knn.weights": "distance"}, grammar=g)
    pol.log_probs([prog]).sum().backward()
    gb = pol.bias_classification.grad
    assert gb is not None
    assert gb[g.slot_index("logistic.C")].abs().sum() == 0  # not chosen: no gradient
    for key in ("preprocess", "family", "knn.k", "knn.weights"):
        assert gb[g.slot_index(key)].abs().sum() > 0
    phi = torch.from_numpy(task_context(CLF_TASK).features)
    gw = pol.weight_classification.grad[g.slot_index("family")]
    assert torch.allclose(gw, gb[g.slot_index("family")].unsqueeze(-1) * phi)  # d logit / d W = phi
    pol.zero_grad()
    pol.entropy([CLF_TASK]).sum().backward()
    assert pol.bias_classification.grad.abs().sum() > 0


def test_sampling_and_log_prob_are_batched_per_problem_type(monkeypatch):
    """What keeps sampling and log-probs cheap (milliseconds for 32 programs, thousands of times
    less than their executions; timed, not asserted, by ``benchmarks/grammar_policy_speed.py``):
    one log-probability table per problem type per
    call, whatever the number of programs, and task contexts derived once, then cached."""
    import agents.grammar.programs as gp

    pol = GrammarPolicy(seed=0)
    tasks = [CLF_TASK, REG_TASK, "land-cover", "credit-default"]  # 3 classification, 1 regression
    pol.sample(tasks, 8)  # derives (and caches) the four task contexts
    tables = []
    log_table = pol._log_table
    monkeypatch.setattr(pol, "_log_table", lambda pt, phi: tables.append((pt, tuple(phi.shape))) or log_table(pt, phi))
    misses = gp._task_context_cached.cache_info().misses
    groups = pol.sample(tasks, 8)
    assert [len(g) for g in groups] == [8] * 4
    assert tables == [("classification", (3, len(CONTEXT_FEATURES))), ("regression", (1, len(CONTEXT_FEATURES)))]
    flat = [p for g in groups for p in g]
    tables.clear()
    lp = pol.log_probs(flat)
    lp.sum().backward()
    assert sorted(pt for pt, _ in tables) == ["classification", "regression"]  # 2 tables for 32 programs
    assert {pt: shape[0] for pt, shape in tables} == {"classification": 24, "regression": 8}
    assert gp._task_context_cached.cache_info().misses == misses  # no task derived again
    # the batch is exact: each program's log-probability alone, and the sampler's own
    alone = torch.stack([pol.log_probs([p])[0] for p in flat]).detach()
    assert torch.allclose(lp.detach(), alone, atol=1e-6)
    assert torch.allclose(lp.detach(), torch.tensor([sum(p.old_logprobs) for p in flat]), atol=1e-5)


# ------------------------------------------------------------------------------------- code


@pytest.mark.parametrize("task", [CLF_TASK, REG_TASK])
def test_every_choice_combination_compiles(task):
    g = GRAMMARS[task_context(task).problem_type]
    n = 0
    for ch in g.combinations():
        prog = build_program(task, ch, 12345)
        compile(prog.code, "solution.py", "exec")
        assert prog.code.count("\nmodel = ") == 1 and prog.model_line in prog.code
        n += 1
    assert n == g.n_programs() > 1000


def test_emitted_code_adds_missing_imports_only():
    prog = build_program("credit-default", {"preprocess": "quantile", "family": "gradient_boosting",
                                            "gradient_boosting.n_estimators": "n20", "gradient_boosting.learning_rate": "lr0.1",
                                            "gradient_boosting.max_depth": "d2", "gradient_boosting.extra": "none"}, 42)
    assert prog.model_line == ("model = make_pipeline(QuantileTransformer(output_distribution='normal', random_state=42), "
                               "GradientBoostingClassifier(n_estimators=20, max_depth=2, random_state=42))")
    assert prog.imports == ("from sklearn.ensemble import GradientBoostingClassifier",
                            "from sklearn.preprocessing import QuantileTransformer")
    assert prog.fails is None and prog.family == "gradient_boosting"
    plain = build_program("credit-default", {"preprocess": "none", "family": "naive_bayes", "naive_bayes.variant": "gaussian"})
    assert plain.model_line == "model = GaussianNB()" and plain.imports == ()
    with pytest.raises(KeyError, match="lack slot"):
        build_program(REG_TASK, {"preprocess": "none", "family": "ridge"})
    with pytest.raises(KeyError, match="no option"):
        build_program(REG_TASK, {"preprocess": "none", "family": "ridge", "ridge.alpha": "a7", "ridge.extra": "none"})
    with pytest.raises(KeyError, match="known 'family'"):
        build_program(REG_TASK, {"preprocess": "none", "family": "logistic"})


# Cheap working programs, one per family, and mistakes (expected: runtime_err).
_CHEAP = {
    "logistic": {"logistic.C": "C1", "logistic.max_iter": "it100", "logistic.solver": "lbfgs", "logistic.class_weight": "none"},
    "knn": {"knn.n_neighbors": "k15", "knn.weights": "uniform", "knn.extra": "none"},
    "naive_bayes": {"naive_bayes.variant": "gaussian"},
    "decision_tree": {"decision_tree.max_depth": "d8", "decision_tree.min_samples_leaf": "l20", "decision_tree.extra": "none"},
    "random_forest": {"random_forest.n_estimators": "n20", "random_forest.max_depth": "d10",
                      "random_forest.max_features": "sqrt", "random_forest.extra": "none"},
    "extra_trees": {"extra_trees.n_estimators": "n50", "extra_trees.max_features": "sqrt",
                    "extra_trees.min_samples_leaf": "l3", "extra_trees.extra": "none"},
    "hist_gb": {"hist_gb.learning_rate": "lr0.1", "hist_gb.max_iter": "it100", "hist_gb.max_leaf_nodes": "m15", "hist_gb.extra": "none"},
    "gradient_boosting": {"gradient_boosting.n_estimators": "n20", "gradient_boosting.learning_rate": "lr0.3",
                          "gradient_boosting.max_depth": "d2", "gradient_boosting.extra": "none"},
    "ridge": {"ridge.alpha": "a1", "ridge.extra": "none"},
    "lasso": {"lasso.alpha": "a0.1", "lasso.max_iter": "it1000", "lasso.extra": "none"},
}


def _cheap(family: str, pre: str = "standard", **override: str) -> dict[str, str]:
    return {"preprocess": pre, "family": family, **_CHEAP[family], **override}


def test_emitted_programs_run_in_the_real_sandbox():
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.sandbox import SandboxLimits, available_backends

    if "bubblewrap" not in available_backends():
        pytest.skip("needs bubblewrap (apt-get install bubblewrap)")
    clf_families = ["logistic", "knn", "naive_bayes", "decision_tree", "random_forest", "extra_trees", "hist_gb", "gradient_boosting"]
    cases = [(CLF_TASK, _cheap(f), "valid") for f in clf_families]
    cases += [(REG_TASK, _cheap(f), "valid") for f in ("ridge", "lasso")]
    cases += [
        (CLF_TASK, _cheap("hist_gb", **{"hist_gb.extra": "n_estimators"}), "runtime_err"),  # unexpected keyword
        (REG_TASK, _cheap("decision_tree", **{"decision_tree.extra": "mse"}), "runtime_err"),  # removed criterion
        (CLF_TASK, _cheap("naive_bayes", pre="none", **{"naive_bayes.variant": "multinomial"}), "runtime_err"),  # negative X
        (REG_TASK, _cheap("ridge", pre="pca100"), "runtime_err"),  # PCA(100) on 36 columns
    ]
    progs = [(build_program(t, ch, 11), want) for t, ch, want in cases]
    assert [p.fails for p, want in progs if want == "runtime_err"] == ["always", "always", "data", "data"]
    limits = SandboxLimits(wall_time_s=90, cpu_time_s=90)
    envs = [AutoResearchEnv(tasks=[CLF_TASK, REG_TASK], sandbox="bubblewrap", limits=limits) for _ in range(2)]

    def run(i: int) -> dict:
        env = envs[i % 2]
        prog = progs[i][0]
        env.reset(options={"task_id": prog.task_id})
        return env.step(prog.code)[4]

    try:
        # two workers, each always on its own environment (i % 2 with a pool of 2 alternates)
        with ThreadPoolExecutor(2) as pool:
            infos = list(pool.map(lambda k: [run(i) for i in range(k, len(progs), 2)], [0, 1]))
    finally:
        for e in envs:
            e.close()
    by_index = {}
    for k, chunk in enumerate(infos):
        for j, info in enumerate(chunk):
            by_index[k + 2 * j] = info
    for i, (prog, want) in enumerate(progs):
        info = by_index[i]
        assert info["status"] == want, (prog.model_line, info["status"], info["stderr_tail"][-400:])
        if want == "valid":
            assert info["score"] >= 0.5
        else:
            assert info["score"] == pytest.approx(0.1)


# ------------------------------------------------------------------------------------- GRPO


def test_grpo_updates_increase_the_rewarded_family():
    pol = GrammarPolicy(seed=0)
    assert isinstance(pol, GRPOPolicy)
    ref = pol.freeze_reference()
    tasks = [CLF_TASK, REG_TASK, "land-cover"]
    before = {t: pol.family_probs(t)["random_forest"] for t in tasks + ["sensor-fault"]}
    opt = torch.optim.Adam(pol.parameters(), lr=0.05)
    cfg = GRPOUpdateConfig(kl_coef=0.04, max_grad_norm=None, drop_zero_advantage=False)
    for step in range(12):
        groups = pol.sample(tasks, 16)
        rewards = [[1.0 if p.family == "random_forest" else 0.0 for p in g] for g in groups]
        flat = [p for g in groups for p in g]
        stats = grpo_update(pol, opt, flat, rewards, None, config=cfg, old_logprobs=pol.sampling_logprobs(flat))
        assert math.isfinite(stats["loss"])
    after = {t: pol.family_probs(t)["random_forest"] for t in before}
    for t in tasks:
        assert after[t] > before[t] + 0.25, (t, before[t], after[t])
    assert after["sensor-fault"] > before["sensor-fault"]  # an unseen (held-out) task moves too
    # the reference stayed frozen, outside the policy's parameters
    assert ref.family_probs(CLF_TASK)["random_forest"] == pytest.approx(before[CLF_TASK])
    assert all(not p.requires_grad for p in ref.parameters())
    assert len(list(pol.parameters())) == len(list(ref.parameters())) and "_reference" not in dict(pol.named_modules())
    with pytest.raises(ValueError, match="advantages"):
        grpo_step(pol, opt, flat, [0, 1, 2], [1.0, 2.0], config=cfg)
    with pytest.raises(RuntimeError, match="freeze_reference"):
        GrammarPolicy(seed=0).grpo_logprobs(flat, [0], reference=True)


def test_grpo_logprobs_and_sampling_logprobs():
    pol = _tiny_policy()
    g = pol.grammars["classification"]
    groups = pol.sample([CLF_TASK, CLF_TASK], 3)
    built = build_program(CLF_TASK, {"preprocess": "standard", "family": "knn", "knn.k": "k1", "knn.weights": "distance"}, grammar=g)
    flat = [p for grp in groups for p in grp] + [built]
    lp, mask, ent = pol.grpo_logprobs(flat, [4, 0, 6], with_entropy=True)
    tok, tmask = pol.token_logprobs([flat[4], flat[0], flat[6]])
    assert torch.equal(lp, tok) and torch.equal(mask, tmask)
    assert torch.equal(ent, pol.token_entropy([flat[4], flat[0], flat[6]]))
    assert pol.grpo_logprobs(flat, [1])[2] is None
    old = pol.sampling_logprobs(flat)
    assert old.shape == (7, max(len(p.slot_ids) for p in flat))
    for i, p in enumerate(flat[:6]):
        assert old[i, : len(p.old_logprobs)].tolist() == pytest.approx(list(p.old_logprobs), abs=0)
        assert (old[i, len(p.old_logprobs):] == 0).all()
    assert torch.isnan(old[6]).all()  # built, not sampled: no recorded log-probs
    with pytest.raises(ValueError, match="empty"):
        pol.sampling_logprobs([])
