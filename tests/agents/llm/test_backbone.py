"""Any backbone on any device (agents/llm/backbone.py; issue: the main job at GPU scale).

A tiny random LLaMA written into a folder the way ``save_pretrained`` writes any hub model stands
in for "another backbone" (no download here); it carries SmolLM2's real tokenizer and chat
template. The policy's full fine-tuning and gradient checkpointing are checked on it against
the paths they replace.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types

import numpy as np
import pytest
import torch

from agents.llm.backbone import load_backbone, resolve_device, resolve_dtype


@pytest.fixture(scope="module")
def tiny_folder(tiny_llama_folder):
    return tiny_llama_folder


def test_devices_and_dtypes_resolve_and_bad_values_say_what_is_accepted():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    assert resolve_dtype("float16", "cpu") == torch.float16
    with pytest.raises(ValueError, match="device must be one of auto, cpu, cuda"):
        resolve_device("tpu")
    with pytest.raises(ValueError, match="dtype must be one of"):
        resolve_dtype("fp8", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="sees none.*--device cpu or auto"):
            resolve_device("cuda")


def test_a_local_folder_loads_on_the_device_in_the_dtype(tiny_folder):
    model, tok = load_backbone(str(tiny_folder), device="cpu", dtype="bfloat16")
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.num_hidden_layers == 2
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert {p.device.type for p in model.parameters()} == {"cpu"} and not model.training
    assert tok.padding_side == "left" and tok.pad_token_id is not None and tok.chat_template
    model, _ = load_backbone(str(tiny_folder), device="cpu")  # auto dtype on the CPU: float32
    assert {p.dtype for p in model.parameters()} == {torch.float32}


def test_bad_models_fail_with_what_to_do(tiny_folder, tmp_path):
    with pytest.raises(ValueError, match="looks like a path but no such folder"):
        load_backbone("./no-such-model", device="cpu")
    with pytest.raises(ValueError, match="^--judge-model './nope' looks like a path"):
        load_backbone("./nope", device="cpu", flag="--judge-model")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="has no config.json"):
        load_backbone(str(empty), device="cpu")
    # a base model's tokenizer without a chat template
    bare = tmp_path / "bare"
    bare.mkdir()
    for f in tiny_folder.iterdir():
        (bare / f.name).write_bytes(f.read_bytes())
    tc = json.loads((bare / "tokenizer_config.json").read_text())
    tc.pop("chat_template", None)
    (bare / "tokenizer_config.json").write_text(json.dumps(tc))
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ValueError, match="no chat template"):
        load_backbone(str(bare), device="cpu")


def _samples(policy, n_groups=2, g=3):
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    specs = [get_task(t) for t in list_tasks("train")[:n_groups]]
    return policy.sample([policy.build_prompt({}, s) for s in specs], g)


def test_full_finetuning_trains_every_weight_against_a_frozen_copy(tiny_folder):
    from agents.grpo import GRPOUpdateConfig, grpo_step
    from agents.llm.policy import LLMPolicy

    model, tok = load_backbone(str(tiny_folder), device="cpu")
    n_weights = sum(p.numel() for p in model.parameters())
    policy = LLMPolicy(model, tok, finetune="full", max_new_tokens=6, temperature=1.0, seed=0)
    assert sum(p.numel() for p in policy.trainable_parameters()) == n_weights  # every weight, no adapters
    assert policy.reference_model is not None and policy.reference_model is not policy.model
    assert not any(p.requires_grad for p in policy.reference_model.parameters())
    samples = _samples(policy)
    rows = list(range(len(samples)))
    ref0, mask, _ = policy.grpo_logprobs(samples, rows, reference=True)
    pol0, _, _ = policy.grpo_logprobs(samples, rows)
    torch.testing.assert_close(pol0.detach(), ref0)  # before any update they are the same weights
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    adv = np.array([1.0, -1.0, 0.0] * 2, dtype=np.float32)
    grpo_step(policy, opt, samples, np.array(rows), adv, config=GRPOUpdateConfig(kl_coef=0.04))
    ref1, _, _ = policy.grpo_logprobs(samples, rows, reference=True)
    pol1, _, _ = policy.grpo_logprobs(samples, rows)
    torch.testing.assert_close(ref1, ref0)  # the reference stayed frozen
    assert (pol1.detach() - pol0.detach()).abs().max() > 1e-3  # the policy moved
    with pytest.raises(ValueError, match="finetune must be 'lora'"):
        LLMPolicy(model, tok, finetune="qlora")


def test_gradient_checkpointing_gives_the_same_logprobs_and_gradients(tiny_folder):
    from agents.llm.policy import LLMPolicy

    grads, lps = [], []
    for ckpt in (False, True):
        model, tok = load_backbone(str(tiny_folder), device="cpu")
        torch.manual_seed(0)  # the same LoRA initialisation
        policy = LLMPolicy(model, tok, lora_r=4, max_new_tokens=6, seed=0, gradient_checkpointing=ckpt)
        for n, p in policy.model.named_parameters():  # LoRA B starts at 0: give it weight so gradients reach A
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.1, generator=torch.Generator().manual_seed(len(n)))
        flag = getattr(policy.model, "is_activation_checkpointing", None)
        assert (flag if flag is not None else policy.model.is_gradient_checkpointing) == ckpt
        samples = _samples(policy)
        lp, mask, _ = policy.grpo_logprobs(samples, list(range(len(samples))))
        (lp.sum()).backward()
        lps.append(lp.detach())
        grads.append(torch.cat([p.grad.flatten() for p in policy.trainable_parameters()]))
    torch.testing.assert_close(lps[1], lps[0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(grads[1], grads[0], atol=1e-4, rtol=1e-3)
    assert grads[0].abs().sum() > 0


@pytest.mark.slow
def test_wmrl_train_on_another_backbone_full_finetuning_with_its_own_judge(tiny_folder, tmp_path):
    """The main job end to end on a backbone given as a folder: fully fine-tuned, judged by the
    frozen copy of its initial weights, real sandboxed execution on the anchor groups; the run
    folder records the backbone and resumes onto it."""
    from agents.cli import main

    run = tmp_path / "run"
    args = ["train", "--preset", "tiny", "--model", str(tiny_folder), "--finetune", "full", "--device", "cpu",
            "--gradient-checkpointing", "--report-to", "tensorboard", "--run-dir", str(run), "--quiet"]
    assert main(args) == 0
    cfg = json.loads((run / "config.json").read_text())
    assert (cfg["model"], cfg["finetune"], cfg["device"], cfg["gradient_checkpointing"]) == (
        str(tiny_folder), "full", "cpu", True)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["rollouts"] == 8 and summary["world_model_predictions"] == 8
    assert summary["real_executions"] == 2 * summary["anchor_groups"] >= 4
    weights = torch.load(run / "checkpoint" / "weights.pt", weights_only=False)
    n_weights = sum(t.numel() for t in weights["adapter"].values())
    assert not any("lora" in k for k in weights["adapter"]) and n_weights > 1_000_000  # every weight saved
    # the tracker mirrors metrics.jsonl: ρ and the realised anchor fraction per step, held-out before/after
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    ev = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert ev["train/rho"] == [(r["step"], pytest.approx(r["rho"])) for r in lines] and len(lines) == 2
    assert [s for s, _ in ev["train/realised_anchor_fraction"]] == [0, 1]
    assert [s for s, _ in ev["eval/mean_score"]] == [0, 2]
    (image,) = acc.Images("calibration")  # the calibration plot, at the last step
    assert image.step == 2 and image.width > 100 and image.height > 100
    assert main(["train", "--preset", "tiny", "--device", "tpu", "--run-dir", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()


def test_a_turns_feedback_is_in_the_next_turns_prompt(tiny_folder):
    """LLMPolicy.build_prompt(history=...) and the trainer's episode loop: what the wrapper returns
    as the observation's feedback (real or predicted) is what the next turn is prompted with."""
    from agents.llm.policy import LLMPolicy
    from agents.train.rollout import rollout_episode
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    model, tok = load_backbone(str(tiny_folder), device="cpu")
    policy = LLMPolicy(model, tok, max_new_tokens=4, seed=0)
    spec = get_task(list_tasks("train")[0])
    first = policy.build_prompt({}, spec)
    second = policy.build_prompt({}, spec, history=[(" Ridge(alpha=3.0)\ntrailing", "status: valid | score 0.61")])
    assert second.startswith(first[: first.index("<|im_start|>assistant")])
    assert "model = Ridge(alpha=3.0)\n```" in second  # the earlier turn as the assistant wrote it
    assert "trailing" not in second  # line mode: only the line the action used
    assert "Result of running it:\nstatus: valid | score 0.61" in second and second.endswith("model =")

    class Wrapper:  # the per-episode API, scripted: three turns, each with its own feedback
        def __init__(self):
            self.turn, self.actions = 0, []

        def reset(self, options):
            return {"task_id": options["task_id"], "feedback": "", "turn": 0, "prompt": "p"}, {}

        def step(self, action):
            self.turn += 1
            self.actions.append(action)
            obs = {"task_id": "t", "feedback": f"feedback of turn {self.turn}", "turn": self.turn, "prompt": "p"}
            return obs, 0.0, self.turn == 3, False, {"status": "valid", "wmrl": {}}

    prompts = []
    real_build = policy.build_prompt
    policy.build_prompt = lambda obs, task, history=(): prompts.append(list(history)) or real_build(obs, task, history)
    turns, infos, _ = rollout_episode(w := Wrapper(), policy, spec.task_id, spec)
    assert len(turns) == len(infos) == len(w.actions) == 3
    assert [[f for _, f in h] for h in prompts] == [[], ["feedback of turn 1"], ["feedback of turn 1", "feedback of turn 2"]]
    assert [t[2] for t in turns] == [h[0] for h in prompts[2]] + [turns[2][2]]  # each turn's own completion


@pytest.mark.slow
def test_wmrl_train_multi_turn_episodes(tiny_folder, tmp_path):
    """--max-turns 2 end to end: every episode takes two turns (the world model scores each; an
    anchor group's turns are executed), an episode is one rollout, every turn a row of the loss."""
    from agents.cli import main

    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--model", str(tiny_folder), "--max-turns", "2", "--device", "cpu",
                 "--run-dir", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert summary["rollouts"] == 8  # 2 steps x 2 groups x G = 2 episodes
    assert summary["world_model_predictions"] == 16  # one per turn, on every route while training
    ungraded = sum(r["ungraded_rows"] for r in lines)
    assert summary["real_executions"] == 2 * 2 * summary["anchor_groups"]  # two turns per anchor episode
    # what real GRPO would have cost: all 16 turns executed, at this run's CPU-s per execution
    cost = summary["cost_vs_real_grpo"]["cpu_s"]
    led = json.loads((run / "checkpoint" / "state.json").read_text())["wrapper"]["ledger"]
    common = sum(led[k]["cpu_seconds"] for k in ("generation", "update") if k in led)
    assert cost["real_grpo"] == pytest.approx(16 * cost["seconds_per_execution"] + common, rel=1e-6)
    # rows are turns: a kept episode brings both of its turns (groups whose episodes all scored
    # alike carry no signal and are dropped, as in single-turn runs)
    assert ungraded == 0 and all(r["rows_trained"] % 2 == 0 and r["rows_trained"] <= 8 for r in lines)
    assert main(["train", "--preset", "tiny", "--max-turns", "0", "--run-dir", str(tmp_path / "bad")]) == 2


def test_wmrl_train_ends_cleanly_when_its_execution_budget_is_spent(tiny_folder, tmp_path):
    """--execution-budget is a cap by default (on_budget_spent='stop', issue 25): training ends within
    one group of the budget, then the run evaluates and writes its summary (before: the floor kept
    executing one anchor group per step past the budget)."""
    from agents.cli import main

    run = tmp_path / "run"
    with pytest.warns(UserWarning):  # auto cannot adapt in so short a run: said at the start
        assert main(["train", "--preset", "tiny", "--model", str(tiny_folder), "--device", "cpu", "--steps", "5",
                     "--anchor-fraction", "auto", "--execution-budget", "2", "--run-dir", str(run), "--quiet"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    stop = [r for r in lines if r.get("stopped") == "execution_budget_spent"]
    assert len(stop) == 1 and stop[0]["step"] < 5
    assert summary["real_executions"] <= 2 + 2  # the budget plus one group of G = 2
    assert summary["heldout_after"] is not None


class _ScriptedScorer:
    """An AsyncAnchoredScorer stand-in: groups of ``anchor_task`` are anchors that arrive when
    their ids are released (in any order); the others are world-model groups, ready at once."""

    def __init__(self, anchor_task):
        self.anchor_task, self.next_id, self.ready, self.released = anchor_task, 0, [], set()

    def submit(self, actions, options):
        gid, self.next_id = self.next_id, self.next_id + 1
        route = "anchor" if options["task_id"] == self.anchor_task else "world_model"
        g = types.SimpleNamespace(group_id=gid, route=route, rewards=[0.1 * gid, 0.5], advantage_weight=1.0)
        self.ready.append(g)
        return types.SimpleNamespace(group_id=gid, route=route)

    def poll(self):
        out = [g for g in self.ready if g.route == "world_model" or g.group_id in self.released]
        self.ready = [g for g in self.ready if g not in out]
        return out


def test_late_anchor_groups_train_with_their_recorded_logprobs_or_are_dropped_when_stale(tiny_folder):
    """executor='ray' bookkeeping (agents.train.rollout.async_groups) with a scripted scorer: an anchor
    group that arrives a step late trains with the log-probabilities recorded when it was sampled;
    one older than max_staleness only feeds the corrections."""
    from agents.llm.policy import LLMPolicy
    from agents.train.build import Components
    from agents.train.config import PRESETS
    from agents.train.rollout import async_groups
    from wmrl_envs.core import CostLedger
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    model, tok = load_backbone(str(tiny_folder), device="cpu")
    policy = LLMPolicy(model, tok, max_new_tokens=5, seed=0)

    tasks = list_tasks("train")[:2]
    specs = [get_task(t) for t in tasks]
    cfg = dataclasses.replace(PRESETS["tiny"], group_size=2, max_staleness=1)
    c = Components(policy, None, None, types.SimpleNamespace(loop=types.SimpleNamespace(ledger=CostLedger())), None, tasks, [], get_task,
                    scorer=_ScriptedScorer(tasks[0]))
    s0 = policy.sample([policy.build_prompt({}, sp) for sp in specs], 2)
    recorded, _, _ = policy.grpo_logprobs(s0, [0, 1])
    groups, merged, old, rec = async_groups(c, cfg, 0, tasks, specs, s0)
    assert [g.group_id for g in groups] == [1] and old is None  # the world-model group; the anchor is out
    assert merged.completion_ids == [s0.completion_ids[1]] and list(c.in_flight) == [0]
    assert rec == {"anchors_submitted": 1, "anchors_arrived": 0, "anchor_staleness": [], "anchors_stale_dropped": 0,
                   "anchors_in_flight": 1}
    with torch.no_grad():  # the policy moves before the anchor arrives
        for p in policy.trainable_parameters():
            p.add_(0.05)
    c.scorer.released.add(0)
    s1 = policy.sample([policy.build_prompt({}, specs[1])], 2)
    groups, merged, old, rec = async_groups(c, cfg, 1, tasks[1:], specs[1:], s1)
    assert [g.group_id for g in groups] == [0, 2] and rec["anchor_staleness"] == [1] and not c.in_flight
    assert merged.completion_ids == [s0.completion_ids[0], s1.completion_ids[0]]
    t0 = recorded.shape[1]
    torch.testing.assert_close(old[:2, :t0], recorded)  # the sampling policy's, not today's
    assert torch.isnan(old[2:]).all()  # this step's group: on-policy
    # two steps late with max_staleness = 1: dropped (not trained), counted
    s2 = policy.sample([policy.build_prompt({}, sp) for sp in specs], 2)
    async_groups(c, cfg, 2, tasks, specs, s2)  # anchor group 3 goes out
    c.scorer.released.add(3)
    groups, _, _, rec = async_groups(c, cfg, 4, tasks[1:], specs[1:], s1)
    assert [g.group_id for g in groups] == [5] and rec["anchors_stale_dropped"] == 1 and rec["anchor_staleness"] == []


@pytest.mark.slow
def test_wmrl_train_with_anchor_groups_on_a_ray_pool(tiny_folder, tmp_path):
    """--executor ray end to end (real Ray actors, real sandboxed executions): every anchor group is
    executed once, arrives, and is either trained (within max_staleness), dropped as stale, or
    collected after the last step; its pairs feed the debiaser in every case."""
    from agents.cli import main

    run = tmp_path / "run"
    assert main(["train", "--preset", "tiny", "--steps", "3", "--model", str(tiny_folder), "--executor", "ray",
                 "--ray-workers", "2", "--run-dir", str(run), "--quiet"]) == 0
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    steps, tail = lines[:3], lines[3:]
    summary = json.loads((run / "summary.json").read_text())
    n_anchor = summary["anchor_groups"]
    assert sum(r["anchors_submitted"] for r in steps) == n_anchor >= 3  # >= one anchor group per step
    late = tail[0]["anchors_arrived_after_training"] if tail else 0
    assert sum(r["anchors_arrived"] for r in steps) + late == n_anchor  # every one came back
    assert all(0 <= a <= 9 for r in steps for a in r["anchor_staleness"])
    assert summary["real_executions"] == 2 * n_anchor and summary["world_model_predictions"] == 12
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    assert len(state["wrapper"]["corrector"]["debiaser"]["raw"]) == 2 * n_anchor  # all pairs, late ones too
    assert main(["train", "--preset", "tiny", "--executor", "ray", "--max-turns", "2",
                 "--run-dir", str(tmp_path / "bad")]) == 2


def test_auto_fraction_says_when_it_cannot_adapt():
    from agents.train.config import PRESETS, TrainConfig, auto_fraction_notes
    from wmrl_envs.core import CorrectionConfig

    assert auto_fraction_notes(PRESETS["default"]) == []  # a fixed fraction: nothing to say
    short = TrainConfig(steps=7, correction=CorrectionConfig(anchor_fraction="auto"))  # 7 steps x 4 groups
    notes = auto_fraction_notes(short)
    assert len(notes) == 2 and "keeps the start fraction throughout" in notes[0] and "about 7" in notes[0]
    assert "realises at least 0.25" in notes[1] and "--anchor-window 13" in notes[1]
    assert auto_fraction_notes(TrainConfig(steps=40, groups_per_step=10,
                                           correction=CorrectionConfig(anchor_fraction="auto", anchor_window=5))) == []


@pytest.mark.slow
def test_the_fraction_in_force_is_in_every_metrics_line_and_the_state_is_strict_json(tiny_folder, tmp_path):
    from agents.cli import main

    run = tmp_path / "run"
    with pytest.warns(UserWarning, match="keeps the start fraction throughout"):
        assert main(["train", "--preset", "tiny", "--model", str(tiny_folder), "--anchor-fraction", "auto",
                     "--run-dir", str(run), "--quiet"]) == 0
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["anchor_fraction"], r["auto_gamma"]) for r in lines] == [(0.1, None), (0.1, None)]
    assert all("auto_r" in r for r in lines)
    state = json.loads((run / "checkpoint" / "state.json").read_text(),
                       parse_constant=lambda c: pytest.fail(f"state.json holds {c}: not strict JSON"))
    assert [h[0] for h in state["wrapper"]["adaptive"]["history"]] == [0, 1]
    run2 = tmp_path / "fixed"
    assert main(["train", "--preset", "tiny", "--model", str(tiny_folder), "--run-dir", str(run2), "--quiet"]) == 0
    assert [json.loads(x)["anchor_fraction"] for x in (run2 / "metrics.jsonl").read_text().splitlines()] == [0.1, 0.1]


def test_the_update_builds_every_tensor_on_the_models_device(tiny_folder):
    """With torch's default device set to ``meta``, any tensor made without an explicit device has
    no data, so one that reaches the computation fails it: the whole GRPO update (log-probs of
    policy and reference, loss, backward, step) runs on the model's device with the default
    elsewhere. For sampling the test checks that every tensor the sampler hands the model is on the
    model's device."""
    from agents.grpo import GRPOUpdateConfig, grpo_update
    from agents.llm.policy import LLMPolicy
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    model, tok = load_backbone(str(tiny_folder), device="cpu")
    policy = LLMPolicy(model, tok, max_new_tokens=4, seed=0)
    seen = []
    forward = policy.model.forward  # the sampler (agents/llm/sampling.py) calls the model itself

    def spy(*args, **kw):
        seen.extend(v.device for v in (*args, *kw.values()) if isinstance(v, torch.Tensor))
        return forward(*args, **kw)

    policy.model.forward = spy
    prompts = [policy.build_prompt({}, get_task(t)) for t in list_tasks("train")[:2]]
    samples = policy.sample(prompts, 2)
    assert seen and set(seen) == {policy.device}
    before = [p.detach().clone() for p in policy.trainable_parameters()]
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    with torch.device("meta"):
        stats = grpo_update(policy, opt, samples, [[0.1, 0.5], [0.2, 0.9]], [1.0, 2.0],
                            config=GRPOUpdateConfig(kl_coef=0.04, entropy_coef=0.0, num_iterations=2))
    assert stats["n_rows"] == 4 and math.isfinite(stats["loss"])
    assert all(p.device.type == "cpu" for p in policy.trainable_parameters())
    assert any((p.detach() - b).abs().max() > 0 for p, b in zip(policy.trainable_parameters(), before))


@pytest.mark.slow
def test_the_throughput_script_runs_on_a_tiny_shape(tmp_path):
    """benchmarks/train_throughput.py --shape tiny --device cpu (CI's run of the GPU check): a short
    wmrl train on a random Qwen2 model, and the judge, update and execution on valid actions."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "train_throughput.py"
    spec = importlib.util.spec_from_file_location("train_throughput", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = mod.main(["--shape", "tiny", "--device", "cpu", "--steps", "2", "--groups-per-step", "2", "--group-size", "2",
                    "--max-new-tokens", "8", "--out", str(tmp_path / "tp.json")])
    assert json.loads((tmp_path / "tp.json").read_text()) == json.loads(json.dumps(out))
    assert (out["device"], out["dtype"], out["steps"]) == ("cpu", "float32", 2)
    assert 0 < out["sampled_tokens"] <= 2 * 2 * 2 * 8 and out["sampling_tokens_per_s"] > 0
    assert set(out["seconds_per_step"]) == {"execution", "world_model", "generation", "update", "all"}
    c = out["components_on_valid_actions"]
    assert c["judge_model_calls"] == 2 and c["update_rows"] == 4  # G valid scripts judged; 2 groups x G trained
    assert c["judge_s_per_prediction"] > 0 and c["update_s"] > 0 and c["execution_s_per_rollout"] > 0
    assert out["peak_memory"]["gib"] > 0 and 1e6 < out["parameters"] < 1e7


def test_anchor_groups_that_complete_out_of_order_each_train_with_their_own_logprobs(tiny_folder):
    from agents.llm.policy import LLMPolicy
    from agents.train.build import Components
    from agents.train.config import PRESETS
    from agents.train.rollout import async_groups
    from wmrl_envs.core import CostLedger
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    model, tok = load_backbone(str(tiny_folder), device="cpu")
    policy = LLMPolicy(model, tok, max_new_tokens=5, seed=0)
    task = list_tasks("train")[0]
    spec = get_task(task)
    cfg = dataclasses.replace(PRESETS["tiny"], group_size=2, max_staleness=9)
    c = Components(policy, None, None, types.SimpleNamespace(loop=types.SimpleNamespace(ledger=CostLedger())), None, [task], [], get_task,
                    scorer=_ScriptedScorer(task))
    recorded = []
    for step in (0, 1):  # anchor group 0 at step 0, anchor group 1 at step 1, the policy moving between
        s = policy.sample([policy.build_prompt({}, spec)], 2)
        recorded.append((s.completion_ids[0], policy.grpo_logprobs(s, [0, 1])[0].detach()))
        groups, _, _, rec = async_groups(c, cfg, step, [task], [spec], s)
        assert groups == [] and rec["anchors_in_flight"] == step + 1
        with torch.no_grad():
            for p in policy.trainable_parameters():
                p.add_(0.05)
    c.scorer.released.add(1)  # the later group finishes first
    s = policy.sample([policy.build_prompt({}, spec)], 2)
    groups, merged, old, rec = async_groups(c, cfg, 2, [task], [spec], s)  # group 2 goes out
    assert [g.group_id for g in groups] == [1] and rec["anchor_staleness"] == [1]
    assert merged.completion_ids == [recorded[1][0]]
    torch.testing.assert_close(old[:, : recorded[1][1].shape[1]], recorded[1][1])
    c.scorer.released.update({0, 2})
    groups, merged, old, rec = async_groups(c, cfg, 3, [], [], s)
    assert sorted(g.group_id for g in groups) == [0, 2] and sorted(rec["anchor_staleness"]) == [1, 3]
    row = [g.group_id for g in groups].index(0) * 2
    torch.testing.assert_close(old[row: row + 2, : recorded[0][1].shape[1]], recorded[0][1])  # its own, from step 0
