"""World models and the trainer under the ungraded-rollout contract (issue 9, item 6).

Robometer: an input without frames is un-scorable (counted, silent); an exception of the model
is a failure of the machinery (warned, counted toward the stop rule). The trainer's held-out
evaluation leaves ungraded trajectories out of avg@k; its summary reports them; the CLI has
the flags.
"""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from wmrl_envs import AnchoredWorldModelWrapper
from wmrl_envs.core import TooManyUngradedError
from wmrl_envs.core.ungraded import SANDBOX_UNAVAILABLE, UNSCORABLE, WORLD_MODEL_ERROR
from wmrl_envs.envs.guess import GuessEnv
from wmrl_envs.world_models.base import Trajectory, WorldModelPrediction
from wmrl_envs.core import CorrectionConfig

torch.set_num_threads(1)


# ---------------------------------------------------------------------- Robometer
@pytest.fixture(scope="module")
def tiny_robometer():
    from wmrl_envs.envs.libero.robometer import RobometerWorldModel, build_tiny_robometer

    return RobometerWorldModel(*build_tiny_robometer(seed=0), batch_size=2)


def _traj(n: int = 4) -> Trajectory:
    obs = [{"agentview_image": np.full((32, 32, 3), 10 * i, np.uint8)} for i in range(n)]
    return Trajectory(obs, [0] * (n - 1), True)


def test_robometer_unscorable_input_is_silent_but_a_model_exception_warns(tiny_robometer, monkeypatch, caplog):
    wm = tiny_robometer
    ctx = {"instruction": "open the drawer"}
    with caplog.at_level(logging.WARNING):
        preds = wm.predict([ctx, ctx], [Trajectory([], [], True), _traj()])
    assert preds[0].score is None and preds[0].ungraded_cause == UNSCORABLE
    assert preds[1].score is not None and preds[1].ungraded_cause is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]

    def broken(queries, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(wm, "score_frames", broken)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        preds = wm.predict([ctx, ctx], [_traj(), _traj(5)])
    assert [p.ungraded_cause for p in preds] == [WORLD_MODEL_ERROR] * 2
    assert all("CUDA out of memory" in p.extras["error"] for p in preds)
    assert any("CUDA out of memory" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_robometer_exceptions_count_toward_the_stop_rule_unscorable_inputs_do_not(tiny_robometer, monkeypatch):
    wm = tiny_robometer
    ctx = {"instruction": "open the drawer"}
    w = AnchoredWorldModelWrapper(GuessEnv(), wm, correction=CorrectionConfig(anchor_fraction=0.0), group_size=2, mode="reward", groups_per_step=1)
    for _ in range(2):  # un-scorable every time: counted, never stops
        out = w.score_trajectories([ctx, ctx], [Trajectory([], [], True)] * 2, [None, None])
        assert out.rewards == [None, None]
    assert w.loop.ledger.ungraded_counts() == {UNSCORABLE: 4}

    def broken(queries, **kwargs):
        raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(wm, "score_frames", broken)
    with pytest.raises(TooManyUngradedError) as e:
        w.score_trajectories([ctx, ctx], [_traj(), _traj()], [None, None])
    assert e.value.causes == {WORLD_MODEL_ERROR: 2}


# ---------------------------------------------------------------------- the trainer
class _BrokenSandbox:
    name = "broken"
    isolates = True

    def __init__(self, broken_every: int) -> None:
        self.calls = 0
        self.broken_every = broken_every

    def run_python(self, source, workdir, *, limits=None, env=None, filename="solution.py"):
        from wmrl_envs.sandbox.base import ExecutionResult, SandboxUnavailableError

        self.calls += 1
        if self.calls % self.broken_every == 0:
            raise SandboxUnavailableError("bwrap: setting up uid map: Permission denied")
        return ExecutionResult(exit_code=1, stdout="", stderr="Traceback: boom", wall_time_s=0.01)

    def close(self) -> None:
        pass


class _FakePolicy:
    def build_prompt(self, obs, spec):
        return obs["prompt"][:10]

    def sample(self, prompts, k):
        return SimpleNamespace(texts=[["print(1)"] * k for _ in prompts])

    def completion_to_action(self, text, spec):
        return text


def _components(sandbox, tmp_path, tasks):
    from agents.train.build import Components
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.tasks import get_task

    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fake sandbox hides nothing: no real program runs here
        env = AutoResearchEnv(tasks=tasks, sandbox=sandbox, workdir_root=str(tmp_path))
    return Components(_FakePolicy(), None, env, None, None, [], list(tasks), get_task)


def test_trainer_evaluation_leaves_ungraded_trajectories_out(tmp_path):
    from agents.train.config import TrainConfig
    from agents.train.evaluation import evaluate
    from wmrl_envs.envs.autoresearch.tasks import list_tasks

    tasks = list_tasks("heldout")[:2]
    cfg = TrainConfig(eval_k=2)
    c = _components(_BrokenSandbox(broken_every=4), tmp_path, tasks)  # 4 runs: the 4th breaks
    res = evaluate(c, cfg)
    assert res["ungraded"] == {SANDBOX_UNAVAILABLE: 1}
    assert res["statuses"] == {"runtime_err": 3, "ungraded": 1}
    assert res["mean_score"] == pytest.approx(0.1)  # the three graded runtime errors, not a 0 among them
    assert res["overall"] == 0.0 and res["n_tasks_ungraded"] == 0
    # the graded trajectories, per task, for the held-out spread (issue 28): 2 + 1 of them
    assert sorted(len(v["positions"]) for v in res["trajectories"].values()) == [1, 2]
    assert all(len(v["scores"]) == len(v["positions"]) for v in res["trajectories"].values())
    c2 = _components(_BrokenSandbox(broken_every=2), tmp_path, tasks)  # half of them break: stop
    with pytest.raises(TooManyUngradedError, match="Permission denied"):
        evaluate(c2, cfg)
    c3 = _components(_BrokenSandbox(broken_every=2), tmp_path, tasks)
    assert evaluate(c3, dataclasses.replace(cfg, max_ungraded_share=None))["ungraded"] == {SANDBOX_UNAVAILABLE: 2}


def test_trainer_summary_reports_ungraded_counts(make_summary):
    from agents.train.summary import summary_markdown

    ev = {"k": 2, "overall": 10.0, "mean_score": 0.3, "ungraded": {SANDBOX_UNAVAILABLE: 1}}
    s = make_summary(
        configured_anchor_fraction=0.1, debiaser_fitted=False, ungraded_rollouts=3,
        ungraded_by_cause={"world_model_timeout": 2, SANDBOX_UNAVAILABLE: 1},
        ungraded_scores_by_cause={"world_model_timeout": 2, SANDBOX_UNAVAILABLE: 1},
        heldout_before=ev, heldout_after={**ev, "ungraded": {}},
    )
    md = summary_markdown(s)
    assert "| ungraded rollouts (training; by cause) | 3 (sandbox_unavailable: 1, world_model_timeout: 2) |" in md
    assert "| ungraded held-out trajectories before / after | 1 / 0 |" in md


def test_cli_flags_for_the_stop_rule_and_the_world_model_timeout():
    import tyro

    from agents.train.config import PRESETS, TrainConfig, validate

    cfg = tyro.cli(TrainConfig, default=PRESETS["tiny"], args=["--max-ungraded-share", "0.25",
                                                               "--world-model-timeout-s", "30"])
    assert (cfg.max_ungraded_share, cfg.world_model_timeout_s) == (0.25, 30.0)
    assert TrainConfig().max_ungraded_share == 0.5
    with pytest.raises(ValueError, match="max_ungraded_share"):
        validate(dataclasses.replace(cfg, max_ungraded_share=1.5))
    with pytest.raises(ValueError, match="world_model_timeout_s"):
        validate(dataclasses.replace(cfg, world_model_timeout_s=0.0))


def test_train_stops_with_a_clear_error_and_records_it(tmp_path, monkeypatch):
    """``wmrl train``'s loop: the stop rule ends the run at the failing step, the reason is in
    metrics.jsonl, the last checkpoint stays for a resume."""
    import json

    import agents.train.loop as trainer
    from agents.train.build import Components
    from agents.train.config import TrainConfig
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    class RaisingJudge:
        def predict(self, contexts, actions):
            raise TimeoutError("judge server did not answer")

    class Policy(_FakePolicy):
        n_sample_calls = 0

        def adapter_state_dict(self):
            return {}

    tasks = list_tasks("heldout")[:1]

    def build(cfg):
        c = _components(_BrokenSandbox(broken_every=10**6), tmp_path / "jobs", tasks + list_tasks("train")[:2])
        wrapper = AnchoredWorldModelWrapper(c.env, RaisingJudge(), correction=CorrectionConfig(anchor_fraction=cfg.correction.anchor_fraction),
                                            group_size=cfg.group_size, groups_per_step=cfg.groups_per_step,
                                            max_ungraded_share=cfg.max_ungraded_share)
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        return Components(Policy(), None, c.env, wrapper, opt, list_tasks("train")[:2], tasks, get_task)

    monkeypatch.setattr(trainer, "build_components", build)
    cfg = TrainConfig(steps=2, groups_per_step=2, group_size=2, eval_k=1)
    with pytest.raises(TooManyUngradedError, match="judge server did not answer") as e:
        trainer.train(cfg, tmp_path / "run", quiet=True)
    assert e.value.causes == {WORLD_MODEL_ERROR: 2} and e.value.n_rollouts == 4
    (line,) = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert line["step"] == 0 and line["stopped"] == "too_many_ungraded"
    assert line["ungraded_step"] == {WORLD_MODEL_ERROR: 2} and "judge server" in line["error"]
    assert line["ledger"]["ungraded:world_model_error"]["count"] >= 2
    assert (tmp_path / "run" / "checkpoint" / "state.json").exists()  # the initial checkpoint: resumable
    assert not (tmp_path / "run" / "summary.json").exists()


def test_train_summary_counts_ungraded_rollouts(tmp_path, monkeypatch):
    import json

    import agents.train.loop as trainer
    from agents.train.build import Components
    from agents.train.config import TrainConfig
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    class FlakyJudge:  # the first call raises, later ones predict a constant
        calls = 0

        def predict(self, contexts, actions):
            self.calls += 1
            if self.calls == 1:
                raise RuntimeError("judge crashed once")
            return [WorldModelPrediction(score=0.1, status="runtime_err") for _ in actions]

    class Policy(_FakePolicy):
        n_sample_calls = 0

        def adapter_state_dict(self):
            return {}

        def sample(self, prompts, k):
            return SimpleNamespace(texts=[["print(1)"] * k for _ in prompts], new_tokens=0)

    heldout = list_tasks("heldout")[:1]
    train_tasks = list_tasks("train")[:2]

    def build(cfg):
        c = _components(_BrokenSandbox(broken_every=10**6), tmp_path / "jobs", heldout + train_tasks)
        wrapper = AnchoredWorldModelWrapper(c.env, FlakyJudge(), correction=CorrectionConfig(anchor_fraction=cfg.correction.anchor_fraction),
                                            group_size=cfg.group_size, groups_per_step=cfg.groups_per_step,
                                            max_ungraded_share=cfg.max_ungraded_share, seed=cfg.seed)
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        return Components(Policy(), None, c.env, wrapper, opt, train_tasks, heldout, get_task)

    monkeypatch.setattr(trainer, "build_components", build)
    # no KL or entropy term: its fake policy has nothing to train (with either, flat groups stay in the loss)
    cfg = TrainConfig(steps=1, groups_per_step=2, group_size=2, eval_k=1, max_ungraded_share=None, kl_coef=0.0,
                      entropy_coef=0.0)
    summary = trainer.train(cfg, tmp_path / "run", quiet=True)
    assert summary["ungraded_rollouts"] == 2 and summary["ungraded_by_cause"] == {WORLD_MODEL_ERROR: 2}
    assert summary["ungraded_scores_by_cause"] == {WORLD_MODEL_ERROR: 2}
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["ungraded_rollouts"] == 2
    assert "| ungraded rollouts (training; by cause) | 2 (world_model_error: 2) |" in (tmp_path / "run" / "summary.md").read_text()
    (rec,) = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rec["ungraded_rows"] == 2 and rec["ungraded_by_cause_step"] == {WORLD_MODEL_ERROR: 2}
