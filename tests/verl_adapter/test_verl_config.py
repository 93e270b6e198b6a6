"""The example verl configuration, composed through verl's own Hydra configuration, and the real
AutoResearch reward path (bubblewrap sandbox, embedding world model) through the reward manager."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from verl import DataProto
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.reward import get_custom_reward_fn, resolve_reward_manager_cls
from verl.utils.config import omega_conf_to_dataclass

import agents.adapters.verl as wv
from wmrl_envs.core import CorrectionConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "verl"


@pytest.fixture(autouse=True)
def _no_local_hub():
    yield
    wv.use_local_hub(None)


def compose_example(*overrides):
    with initialize_config_dir(config_dir=str(EXAMPLES), version_base=None):
        return compose(config_name="wmrl_autoresearch", overrides=list(overrides))


def test_example_config_composes_with_verl_and_names_wmrl_parts():
    cfg = compose_example()
    assert cfg.algorithm.adv_estimator == "wmrl_grpo"
    assert get_adv_estimator_fn(cfg.algorithm.adv_estimator) is wv.compute_wmrl_grpo_advantage
    algo = omega_conf_to_dataclass(cfg.algorithm)  # verl's own typed config accepts it
    assert algo.adv_estimator == "wmrl_grpo" and algo.use_kl_in_reward is False
    assert cfg.actor_rollout_ref.actor.use_kl_loss is True
    assert resolve_reward_manager_cls(cfg) is wv.WMRLRewardManager
    fn = get_custom_reward_fn(cfg)
    assert fn.args[0] is wv.compute_score  # verl wraps it with the reward_kwargs
    kw = wv.hub_kwargs_from_config(cfg)
    assert (kw["group_size"], kw["groups_per_step"], kw["resume_step"]) == (8, 16, None)
    assert CorrectionConfig(**kw["correction"]).anchor_fraction == 0.1
    rk = cfg.reward.custom_reward_function.reward_kwargs
    assert callable(wv._load_callable(rk.scorer))
    assert set(rk.scorer_kwargs) <= set(wv.autoresearch_scorer.__kwdefaults__)
    # verl's checks of the whole trainer config (batch sizes vs GPUs, micro batches, ...)
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))


def test_example_data_files_are_what_verl_reads(tmp_path):
    paths = wv.write_autoresearch_dataset(tmp_path)
    import pandas as pd

    train, test = pd.read_parquet(paths["train"]), pd.read_parquet(paths["test"])
    from wmrl_envs.envs.autoresearch.tasks import list_tasks

    assert list(train["reward_model"].map(lambda r: r["ground_truth"])) == list_tasks("train") * 16
    # verl drops an incomplete last batch: the example's batch must fit in the file it is given
    assert len(train) >= compose_example().data.train_batch_size
    assert list(test["reward_model"].map(lambda r: r["ground_truth"])) == list_tasks("heldout")
    row = train.iloc[0]
    assert row["prompt"][-1]["role"] == "user" and "submission.csv" in row["prompt"][-1]["content"]
    assert row["reward_model"]["ground_truth"] == row["extra_info"]["task_id"]
    assert set(test["extra_info"].map(lambda e: e["split"])) == {"test"}  # validation rows


def test_only_the_synchronous_trainer_is_accepted():
    wv.check_trainer_mode(compose_example())
    with pytest.raises(ValueError, match="trainer_mode='separate_async'"):
        wv.check_trainer_mode(compose_example("trainer.v1.trainer_mode=separate_async"))


def test_resume_step_is_read_as_verl_reads_it(tmp_path):
    auto = compose_example(f"trainer.default_local_dir={tmp_path}")
    assert wv.resume_step_from_config(auto) is None
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("4")
    assert wv.resume_step_from_config(auto) is None  # no global_step_4 folder: verl starts fresh
    (tmp_path / "global_step_4").mkdir()
    assert wv.resume_step_from_config(auto) == 4
    assert wv.resume_step_from_config(compose_example("trainer.resume_mode=resume_path",
                                                      f"trainer.resume_from_path={tmp_path}/global_step_2")) == 2
    with pytest.raises(ValueError, match="resume_from_path"):
        wv.resume_step_from_config(compose_example("trainer.resume_mode=resume_path"))


def test_real_autoresearch_rewards_through_the_manager(tmp_path):
    """Real sandboxed executions of two scripts of one task on an anchor group (the starter script
    and one that crashes: graded, not ungraded), then a world-model group."""
    from omegaconf import OmegaConf

    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks
    from wmrl_envs.sandbox import available_backends
    from wmrl_envs.world_models.smollm2 import load_smollm2_tokenizer

    if "bubblewrap" not in available_backends():
        pytest.skip("bubblewrap cannot run here")
    task = list_tasks("train")[0]
    starter = get_task(task).starter_code
    tok = load_smollm2_tokenizer()
    cfg = OmegaConf.create({
        "reward": {"timeout": 300, "max_concurrent": 1,
                   "custom_reward_function": {"path": "pkg://agents.adapters.verl", "name": "compute_score",
                                              "reward_kwargs": {"scorer_kwargs": {"exec_wall_time_s": 120.0}}}},
        "actor_rollout_ref": {"rollout": {"n": 2}}, "data": {"train_batch_size": 1},
        "trainer": {"default_local_dir": str(tmp_path), "resume_mode": "disable"}})
    hub = wv.WMRLHub(2, 1, CorrectionConfig(anchor_fraction=1.0))
    wv.use_local_hub(hub)
    mgr = wv.WMRLRewardManager(cfg, tok, get_custom_reward_fn(cfg))

    def run(text, uid, j):
        prompt = torch.tensor(tok("Solve the task.")["input_ids"])
        resp = torch.tensor(tok(text)["input_ids"])
        ids = torch.cat([prompt, resp]).unsqueeze(0)
        data = DataProto.from_dict(
            tensors={"prompts": prompt.unsqueeze(0), "responses": resp.unsqueeze(0), "input_ids": ids,
                     "attention_mask": torch.ones_like(ids), "position_ids": torch.arange(ids.shape[1]).unsqueeze(0)},
            non_tensors={"uid": np.array([uid], dtype=object), "session_id": np.array([j], dtype=object),
                         "data_source": np.array(["wmrl/autoresearch"], dtype=object),
                         "reward_model": np.array([{"ground_truth": task}], dtype=object),
                         "extra_info": np.array([{"split": "train", "task_id": task}], dtype=object)})
        return mgr.loop.run_until_complete(mgr.run_single(data))

    good = run(f"```python\n{starter}\n```", "a", 0)
    bad = run("```python\nraise SystemExit(3)\n```", "a", 1)
    for out in (good, bad):
        assert out["reward_extra_info"]["wmrl_route"] == "anchor"
        assert np.isfinite(out["reward_extra_info"]["wmrl_raw"])  # the world model scored it too
    assert good["reward_score"] >= 0.5 and good["reward_extra_info"]["wmrl_ungraded"] == 0.0  # a valid submission
    # the agent's runtime error: 0.1 on AutoResearch's scale, graded (not an infrastructure failure)
    assert bad["reward_score"] == pytest.approx(0.1) and bad["reward_extra_info"]["wmrl_ungraded"] == 0.0
    assert hub.loop.corrector.debiaser.n_pairs == 2 and hub.stats()["real_executions"] == 2
    assert hub.stats()["execution_cpu_s"] > 0  # measured CPU-seconds of the sandboxed runs
    hub.loop.set_anchor_fraction(0.0)
    hub.loop.router.min_anchor_groups = 0
    wm = run(f"```python\n{starter}\n```", "b", 0)
    assert wm["reward_extra_info"]["wmrl_route"] == "world_model"
    assert wm["reward_score"] == pytest.approx(wm["reward_extra_info"]["wmrl_raw"])  # f̂ is the identity before its fit
    assert hub.stats()["real_executions"] == 2
