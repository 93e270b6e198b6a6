"""WMRL inside verl (0.9.1): a reward manager, a reward function and an advantage estimator.

verl's public seams are used as they are, nothing of verl is patched (``docs/verl.md`` has the
configuration, the data flow and the resume rules; the math is in ``docs/method.md``):

* :func:`compute_score` — the custom reward function (``reward.custom_reward_function``,
  ``path=pkg://agents.adapters.verl``, ``name=compute_score``). For one rollout it asks the hub
  for its group's route (whole groups: every rollout of a ``uid`` gets the first one's route),
  scores it with the world model (always while training, for the anchor pairs) and, on anchor
  groups, executes it for real, then hands both to the hub, which returns the training reward:
  the real score on anchor groups, the calibrated ``f̂(r̂)`` on world-model groups. The result
  dict carries ``wmrl_raw``, ``wmrl_real``, ``wmrl_route`` (and the cause of an ungraded
  rollout) into verl's ``reward_extra_info``.
* :class:`WMRLRewardManager` — verl's reward functions are not given the group ``uid``
  (verl 0.9.1 ``experimental/reward_loop/reward_manager/limited.py``, ``run_single``: only
  ``data_source``, ``solution_str``, ``ground_truth``, ``extra_info``), so this subclass of
  verl's ``RateLimitedRewardManager`` (``reward.reward_manager.source=importlib``,
  ``module.path=pkg://agents.adapters.verl``, ``name=WMRLRewardManager``) puts the ``uid``,
  the rollout's ``session_id``, ``global_steps`` and the response length into ``extra_info``
  and keeps verl's rate limits and time-out. A call verl times out or that raises comes back from
  verl as ``0.0`` with a ``timeout``/``error`` flag: the manager records that rollout as
  **ungraded** (cause ``verl_timeout``/``verl_error``), never as a real 0. It also creates the
  hub (:func:`~agents.adapters.verl_core.connect_hub`) from verl's configuration.
* :func:`compute_wmrl_grpo_advantage` — registered as ``algorithm.adv_estimator=wmrl_grpo``
  (by the ``verl.plugins`` entry point, :mod:`agents.adapters.verl_plugin`, in every process
  that imports verl): GRPO advantages over each group's graded rows, times ρ on anchor rows.
  It gets only the rewards, the response mask, the config and the ``uid`` of each row, so it asks
  the hub (:meth:`~agents.adapters.verl_core.WMRLHub.advantage_plan`) for each row's weight
  and whether it is graded; that call also ends the step: the hub's state is saved to
  ``<trainer.default_local_dir>/wmrl_state/step_<n>.json`` for a resume.
* :func:`autoresearch_scorer`, :class:`RolloutScorer` — what a reward worker scores with (the
  AutoResearch env in its sandbox, a world model, the completion → script mapping), and
  :func:`write_autoresearch_dataset` — the verl parquet files of the AutoResearch tasks.

Validation rows are recognised by ``extra_info["split"]`` (``"test"``, ``"val"``,
``"validation"``, ``"heldout"``, ``"eval"``: verl's data preprocessors write it): they are routed to
``eval_route`` (real execution) and update nothing.
"""

from __future__ import annotations

import asyncio
import importlib
import math
import os
import threading
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.limited import RateLimitedRewardManager
from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est

from wmrl_envs.core import ANCHOR, WORLD_MODEL, CostLedger, Stopwatch, predict_checked
from wmrl_envs.core.group import real_score
from wmrl_envs.core.ledger import WORLD_MODEL_SOURCE, execution_cpu_seconds

from .verl_core import (
    ESTIMATOR_NAME,
    STATE_DIR,
    UNGRADED_SCORE,
    WMRLHub,
    hub_name,
    call_hub,
    call_hub_async,
    connect_hub,
    get_hub,
    use_local_hub,
    wmrl_grpo_advantages,
)

__all__ = [
    "ESTIMATOR_NAME",
    "EVAL_SPLITS",
    "RolloutScorer",
    "WMRLHub",
    "WMRLRewardManager",
    "autoresearch_scorer",
    "check_trainer_mode",
    "compute_score",
    "hub_name",
    "compute_wmrl_grpo_advantage",
    "hub_kwargs_from_config",
    "resume_step_from_config",
    "use_local_hub",
    "write_autoresearch_dataset",
]

EVAL_SPLITS = ("test", "val", "validation", "heldout", "eval")
"""``extra_info["split"]`` values scored as validation (no route drawn, nothing updated)."""
DEFAULT_SCORER = "agents.adapters.verl:autoresearch_scorer"
"""The scorer factory used when ``reward_kwargs.scorer`` is not set."""

# keys the manager adds to extra_info for compute_score
UID_KEY, ROLLOUT_KEY, STEP_KEY, TRAINING_KEY, LENGTH_KEY = (
    "wmrl_uid", "wmrl_rollout", "wmrl_step", "wmrl_training", "wmrl_length")
EXTRA_KEYS = ("wmrl_route", "wmrl_raw", "wmrl_real", "wmrl_rho", "wmrl_ungraded", "wmrl_cause")
"""The keys every row's ``reward_extra_info`` gets (besides ``score``)."""


# ---------------------------------------------------------------------- scoring one rollout
class RolloutScorer:
    """Scores one rollout in a reward worker: the world model's raw score and, on anchor
    groups, the real execution's score, with their costs.

    Args:
        env: a single-step Gymnasium env whose ``reset(options=...)`` sets the task and whose
            ``step(action)`` executes for real (e.g. ``AutoResearchEnv`` in its sandbox).
        world_model: object with ``predict(contexts, actions) -> [WorldModelPrediction]``.
        to_action: ``to_action(completion_text, extra_info) -> action``.
        reset_options: ``reset_options(ground_truth, extra_info) -> options`` of the env's reset
            (default ``{"task_id": ground_truth}``).
        world_model_timeout_s: seconds one prediction may take (``None``: no limit).

    One rollout at a time per scorer (a lock): a reward worker scores its rollouts in turn;
    verl's ``reward.num_workers`` sets how many run at once.
    """

    def __init__(
        self,
        env: Any,
        world_model: Any,
        to_action: Callable[[str, Mapping[str, Any]], Any],
        *,
        reset_options: Callable[[Any, Mapping[str, Any]], dict[str, Any] | None] | None = None,
        world_model_timeout_s: float | None = None,
    ) -> None:
        self.env, self.world_model, self.to_action = env, world_model, to_action
        self.reset_options = reset_options or (lambda gt, info: {"task_id": str(gt)})
        self.world_model_timeout_s = world_model_timeout_s
        self._lock = threading.Lock()

    def score(self, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any], route: str,
              training: bool) -> dict[str, Any]:
        """Score one completion on ``route``.

        Returns:
            The keyword arguments of :meth:`WMRLHub.submit` for it: ``raw``, ``wm_cause``,
            ``wm_seconds``, ``wm_cpu_seconds``, ``world_model_called``, and on anchors ``real``,
            ``exec_cause``, ``exec_seconds``, ``exec_cpu_seconds``.
        """
        from wmrl_envs.wrappers.anchored import real_step

        with self._lock:
            ctx, _ = self.env.reset(options=self.reset_options(ground_truth, extra_info))
            action = self.to_action(solution_str, extra_info)
            out: dict[str, Any] = {"raw": None, "wm_cause": None, "world_model_called": False}
            if training or route == WORLD_MODEL:
                spent = CostLedger()
                pred = predict_checked(self.world_model, [ctx], [action], spent, timeout_s=self.world_model_timeout_s)[0]
                out.update(raw=pred.score, wm_cause=pred.ungraded_cause if pred.score is None else None,
                           world_model_called=True, wm_seconds=spent.seconds(WORLD_MODEL_SOURCE),
                           wm_cpu_seconds=spent.cpu_seconds(WORLD_MODEL_SOURCE))
            if route == ANCHOR:
                sw = Stopwatch()
                _obs, reward, _t, _tr, info = real_step(self.env, action, ctx)
                wall, cpu = sw.read()
                real, cause, _msg = real_score(reward, info)  # info["step_score"] where the env gives one
                out.update(real=real, exec_cause=cause, exec_seconds=wall,
                           exec_cpu_seconds=execution_cpu_seconds(info, cpu))
            return out


_SCORERS: dict[tuple, RolloutScorer] = {}
_SCORERS_LOCK = threading.Lock()


def _freeze(x: Any) -> Any:
    if isinstance(x, Mapping):
        return tuple(sorted((str(k), _freeze(v)) for k, v in x.items()))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


def _load_callable(spec: str) -> Callable[..., Any]:
    mod, sep, name = str(spec).partition(":")
    if not sep or not mod or not name:
        raise ValueError(f"a scorer is named 'package.module:function', got {spec!r}")
    return getattr(importlib.import_module(mod), name)


def get_scorer(spec: str, scorer_kwargs: Mapping[str, Any] | None = None, **context: Any) -> RolloutScorer:
    """The process's :class:`RolloutScorer` built by the factory ``spec`` (``"module:function"``)
    with ``scorer_kwargs`` and ``context`` (e.g. ``reward_router_address``), built once per
    process and arguments."""
    kwargs = {**dict(scorer_kwargs or {}), **{k: v for k, v in context.items() if v is not None}}
    key = (spec, _freeze(kwargs))
    with _SCORERS_LOCK:
        if key not in _SCORERS:
            _SCORERS[key] = _load_callable(spec)(**kwargs)
        return _SCORERS[key]


def _to_container(x: Any) -> Any:
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(x, (DictConfig, ListConfig)):
            return OmegaConf.to_container(x, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf comes with verl
        pass
    return x


def _num(x: Any) -> float:
    return float("nan") if x is None else float(x)


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    *,
    scorer: str = DEFAULT_SCORER,
    scorer_kwargs: Mapping[str, Any] | None = None,
    reward_router_address: str | None = None,
    **unused: Any,
) -> dict[str, Any]:
    """verl custom reward function: route the rollout's group, score it, return the training reward.

    Args:
        data_source, solution_str, ground_truth, extra_info: verl's arguments (``extra_info``
            must hold the keys :class:`WMRLRewardManager` adds).
        scorer, scorer_kwargs: the :class:`RolloutScorer` factory and its arguments
            (``reward_kwargs.scorer`` / ``scorer_kwargs``; default :func:`autoresearch_scorer`).
        reward_router_address: verl's reward-model router, passed to the factory (an LLM judge
            served by verl's reward model).
        **unused: other ``reward_kwargs`` read by the manager (``correction``, ``seed``, ...).

    Returns:
        ``{"score": float, "wmrl_route": str, "wmrl_raw": float, "wmrl_real": float,
        "wmrl_rho": float, "wmrl_ungraded": float, "wmrl_cause": str}`` — ``score`` is the
        real score on anchor groups, ``f̂(r̂)`` on world-model groups, :data:`UNGRADED_SCORE` for
        an ungraded rollout (``wmrl_ungraded`` 1.0, ``wmrl_cause`` its cause); a missing score
        is NaN.

    Raises:
        ValueError: ``extra_info`` lacks the group id (the reward manager is not
            :class:`WMRLRewardManager`).
    """
    info = extra_info or {}
    uid = info.get(UID_KEY)
    if uid is None:
        raise ValueError(
            "compute_score got no group id in extra_info: verl gives reward functions no uid, so WMRL needs its "
            "reward manager: reward.reward_manager.source=importlib, reward.reward_manager.module.path="
            "pkg://agents.adapters.verl, reward.reward_manager.name=WMRLRewardManager")
    training = bool(info.get(TRAINING_KEY, True))
    hub = get_hub()
    ticket = await call_hub_async(hub, "route", str(uid), info.get(STEP_KEY), training)
    route = ticket["route"]
    s = get_scorer(scorer, scorer_kwargs, reward_router_address=reward_router_address)
    scored = await asyncio.to_thread(s.score, solution_str, ground_truth, info, route, training)
    out = await call_hub_async(hub, "submit", str(uid), info.get(ROLLOUT_KEY), route=route,
                               length=info.get(LENGTH_KEY), training=training, **scored)
    cause = "" if out["reward"] is not None else (scored.get("exec_cause") if route == ANCHOR else scored.get("wm_cause")) or "ungraded"
    return {"score": float(out["score"]), "wmrl_route": route, "wmrl_raw": _num(scored.get("raw")),
            "wmrl_real": _num(scored.get("real")), "wmrl_rho": float(ticket["rho"]),
            "wmrl_ungraded": float(out["reward"] is None), "wmrl_cause": cause}


# ---------------------------------------------------------------------- the reward manager
def resume_step_from_config(config: Any) -> int | None:
    """The training step a verl run resumes from, read the way verl 0.9.1 reads it
    (``verl.utils.checkpoint.checkpoint_manager.find_latest_ckpt_path``).

    ``trainer.resume_mode``: ``"disable"`` → ``None``; ``"auto"`` → the number n in
    ``<trainer.default_local_dir>/latest_checkpointed_iteration.txt`` when its folder
    ``global_step_<n>`` exists (``None`` otherwise: verl starts fresh); ``"resume_path"`` → the
    ``global_step_<n>`` of ``trainer.resume_from_path``.

    Raises:
        ValueError: ``resume_mode="resume_path"`` without a ``resume_from_path`` ending in
            ``global_step_<n>``.
    """
    tr = config.trainer
    mode = str(tr.get("resume_mode", "auto"))
    if mode == "disable":
        return None
    if mode == "resume_path":
        name = Path(str(tr.get("resume_from_path") or "")).name
        if name.startswith("global_step_") and name[len("global_step_"):].isdigit():
            return int(name[len("global_step_"):])
        raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path ending in global_step_<n>, "
                         f"got {tr.get('resume_from_path')!r}")
    root = Path(str(tr.default_local_dir))
    tracker = root / "latest_checkpointed_iteration.txt"
    if tracker.is_file():
        text = tracker.read_text().strip()
        if text.isdigit() and (root / f"global_step_{int(text)}").is_dir():
            return int(text)
    return None


def check_trainer_mode(config: Any) -> None:
    """Refuse verl trainers the hub does not follow: it routes, closes and saves per training
    step, so it needs verl's synchronous v1 trainer (``trainer.v1.trainer_mode=sync``, the
    default), whose estimator call is once per step.

    Raises:
        ValueError: an asynchronous ``trainer.v1.trainer_mode``.
    """
    v1 = config.trainer.get("v1") if hasattr(config.trainer, "get") else None
    mode = v1.get("trainer_mode", "sync") if v1 is not None and config.trainer.get("use_v1", True) else "sync"
    if str(mode) != "sync":
        raise ValueError(f"trainer.v1.trainer_mode={mode!r} is not supported by wmrl (steps overlap there: routes, the "
                         "stop rule and the per-step state would not follow verl's steps); use trainer_mode=sync")


def hub_kwargs_from_config(config: Any) -> dict[str, Any]:
    """:class:`WMRLHub` arguments from a verl configuration: ``group_size`` =
    ``actor_rollout_ref.rollout.n``, ``groups_per_step`` = ``data.train_batch_size``,
    ``state_dir`` = ``<trainer.default_local_dir>/wmrl_state``, ``resume_step`` from
    :func:`resume_step_from_config`, and from ``reward.custom_reward_function.reward_kwargs``:
    ``correction`` (a dict of :class:`~wmrl_envs.core.CorrectionConfig` fields), ``seed``
    (default ``data.seed`` or 0) and ``max_ungraded_share`` (default 0.5)."""
    rk = _to_container(config.reward.custom_reward_function.get("reward_kwargs") or {}) or {}
    seed = rk.get("seed", config.data.get("seed", 0) if hasattr(config.data, "get") else 0)
    return {
        "group_size": int(config.actor_rollout_ref.rollout.n),
        "groups_per_step": int(config.data.train_batch_size),
        "correction": dict(rk.get("correction") or {}),
        "seed": int(seed if seed is not None else 0),
        "state_dir": str(Path(str(config.trainer.default_local_dir)) / STATE_DIR),
        "resume_step": resume_step_from_config(config),
        "max_ungraded_share": rk.get("max_ungraded_share", 0.5),
    }


class WMRLRewardManager(RateLimitedRewardManager):
    """verl's ``RateLimitedRewardManager`` that gives :func:`compute_score` the group id and
    records the calls verl times out or that raise as ungraded.

    Constructed by verl (``reward.reward_manager.source=importlib``,
    ``module.path=pkg://agents.adapters.verl``, ``name=WMRLRewardManager``) with verl's
    arguments. verl's ``reward.max_concurrent``, ``max_rpm``, ``timeout`` apply as usual.

    Raises:
        ValueError: no custom reward function is configured (``compute_score`` is needed).
    """

    def __init__(self, config: Any, tokenizer: Any, compute_score: Any = None, reward_router_address: Any = None,
                 reward_model_tokenizer: Any = None) -> None:
        if compute_score is None:
            raise ValueError("WMRLRewardManager needs reward.custom_reward_function.path=pkg://agents.adapters.verl "
                             "and reward.custom_reward_function.name=compute_score")
        check_trainer_mode(config)
        super().__init__(config, tokenizer, compute_score, reward_router_address, reward_model_tokenizer)
        self.hub = connect_hub(**hub_kwargs_from_config(config))

    async def run_single(self, data: DataProto) -> dict:
        """Score the last sequence of ``data`` (verl's contract) through :func:`compute_score`.

        Returns:
            ``{"reward_score": float, "reward_extra_info": dict}`` with ``score`` and the keys
            :data:`EXTRA_KEYS` on every row.
        """
        data = data[-1:]
        item = data[0]
        nt = item.non_tensor_batch
        if "uid" not in nt:
            raise ValueError("WMRLRewardManager needs the group uid of every rollout (verl's trainers set it)")
        uid = str(nt["uid"])
        responses = item.batch["responses"]
        length = int(item.batch["attention_mask"][-responses.shape[-1]:].sum())
        info = dict(nt.get("extra_info") or {})
        training = str(info.get("split", "train")).lower() not in EVAL_SPLITS
        session = nt.get("session_id")
        step = nt.get("global_steps")
        info.update({UID_KEY: uid, ROLLOUT_KEY: None if session is None else str(session),
                     STEP_KEY: None if step is None else int(step), TRAINING_KEY: training, LENGTH_KEY: length})
        data.non_tensor_batch["extra_info"] = np.array([info], dtype=object)
        out = await super().run_single(data)
        extra = dict(out.get("reward_extra_info") or {})
        failed = "verl_timeout" if extra.get("timeout") else ("verl_error" if "error" in extra else None)
        if failed is None and "wmrl_route" not in extra:
            raise ValueError("the custom reward function did not return WMRL's result: set "
                             "reward.custom_reward_function.path=pkg://agents.adapters.verl and name=compute_score")
        if failed is not None:
            ticket = await call_hub_async(self.hub, "route", uid, info[STEP_KEY], training)
            sub = await call_hub_async(self.hub, "submit", uid, info[ROLLOUT_KEY], route=ticket["route"],
                                       wm_cause=failed, exec_cause=failed, length=length,
                                       world_model_called=False, training=training)
            extra = {"score": sub["score"], "wmrl_route": ticket["route"], "wmrl_raw": math.nan,
                     "wmrl_real": math.nan, "wmrl_rho": float(ticket["rho"]), "wmrl_ungraded": 1.0,
                     "wmrl_cause": failed}
        row = {"score": float(extra["score"]), "acc": float(extra["score"])}
        row.update({k: extra[k] for k in EXTRA_KEYS})
        return {"reward_score": float(extra["score"]), "reward_extra_info": row}


# ---------------------------------------------------------------------- the advantage estimator
def compute_wmrl_grpo_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **unused: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """verl advantage estimator ``wmrl_grpo``: GRPO on graded rows, ρ on anchor rows.

    Called by verl's ``compute_advantage`` with ``token_level_rewards`` (B, T) float,
    ``response_mask`` (B, T), ``index`` (B group ``uid`` s) and ``config`` (``algorithm``);
    ``config.norm_adv_by_std_in_grpo`` is honoured. The hub (:func:`~agents.adapters.verl_core.hub_name`)
    gives each row's weight and graded flag
    (:meth:`~agents.adapters.verl_core.WMRLHub.advantage_plan`, which also saves the step's
    state); :func:`~agents.adapters.verl_core.wmrl_grpo_advantages` computes the advantages.

    Returns:
        ``(advantages, returns)``: (B, T) float tensors.

    Raises:
        ValueError: no ``index``; ``algorithm.use_kl_in_reward`` is on (the KL penalty changes the
            rewards the ungraded rows are recognised by: use the KL loss, ``actor.use_kl_loss``).
        TooManyUngradedError: the stop rule fired.
    """
    if index is None:
        raise ValueError("the wmrl_grpo estimator needs the group uid of every row (index)")
    if config is not None:
        if bool(config.get("use_kl_in_reward", False)):
            raise ValueError("algorithm.use_kl_in_reward=True is not supported with wmrl_grpo: the KL penalty changes "
                             "the rewards ungraded rows are recognised by; use actor_rollout_ref.actor.use_kl_loss=True")
        norm_adv_by_std_in_grpo = bool(config.get("norm_adv_by_std_in_grpo", norm_adv_by_std_in_grpo))
    hub = get_hub()
    uids = [str(u) for u in index]
    scores = token_level_rewards.sum(dim=-1).tolist()
    lengths = [int(x) for x in response_mask.sum(dim=-1).tolist()]
    plan = call_hub(hub, "advantage_plan", uids, scores, lengths)
    return wmrl_grpo_advantages(token_level_rewards, response_mask, uids, plan.weights, plan.graded,
                                epsilon=epsilon, norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo)


def register_estimator() -> None:
    """Register :func:`compute_wmrl_grpo_advantage` under ``wmrl_grpo`` (idempotent)."""
    if ADV_ESTIMATOR_REGISTRY.get(ESTIMATOR_NAME) is not compute_wmrl_grpo_advantage:
        ADV_ESTIMATOR_REGISTRY.pop(ESTIMATOR_NAME, None)  # a reloaded module's earlier function
        register_adv_est(ESTIMATOR_NAME)(compute_wmrl_grpo_advantage)


register_estimator()


# ---------------------------------------------------------------------- AutoResearch
def completion_to_script(text: str, task_id: str, mode: str = "script") -> str:
    """The Python script a completion stands for: the code it contains (``"script"``), or the
    task's starter script with its ``model = ...`` line replaced by the completion's first line
    that starts with ``model =`` (``"line"``; the first line otherwise)."""
    from agents.llm.policy import extract_code
    from wmrl_envs.envs.autoresearch.tasks import get_task

    if mode == "script":
        return extract_code(text)
    if mode != "line":
        raise ValueError(f"mode must be 'script' or 'line', got {mode!r}")
    lines = [ln.strip() for ln in extract_code(text).splitlines() if ln.strip()]
    line = next((ln for ln in lines if ln.startswith("model =") or ln.startswith("model=")), lines[0] if lines else "")
    rhs = line.split("=", 1)[1] if line.startswith("model") and "=" in line else line
    return get_task(task_id).starter_code_with("model = " + rhs.strip())


def autoresearch_scorer(
    *,
    world_model: str = "embedding",
    mode: str = "script",
    sandbox: str = "bubblewrap",
    exec_wall_time_s: float = 90.0,
    exec_memory_mb: int = 3072,
    judge_url: str | None = None,
    judge_model: str | None = None,
    world_model_timeout_s: float | None = 120.0,
    reward_router_address: str | None = None,
) -> RolloutScorer:
    """A :class:`RolloutScorer` for AutoResearch: the env in its sandbox (all tasks: a verl
    dataset may hold train and held-out tasks) and a world model.

    Args:
        world_model: ``"embedding"`` (:class:`~wmrl_envs.envs.autoresearch.EmbeddingWorldModel`,
            fitted leave-one-task-out on the shipped execution log; CPU) or ``"judge"``
            (:class:`~wmrl_envs.envs.autoresearch.LLMJudgeWorldModel` on an OpenAI-compatible
            server: ``judge_url``, else verl's reward-model router ``http://<address>/v1``,
            serving ``judge_model``).
        mode: ``"script"`` (the completion holds the whole script) or ``"line"`` (its
            ``model = ...`` line), see :func:`completion_to_script`.
        sandbox, exec_wall_time_s, exec_memory_mb: the sandbox backend and its limits.

    Raises:
        ValueError: unknown ``world_model``; ``"judge"`` without a server or model name.
    """
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.sandbox import SandboxLimits, make_sandbox

    limits = SandboxLimits(wall_time_s=exec_wall_time_s, cpu_time_s=exec_wall_time_s, memory_mb=exec_memory_mb)
    env = AutoResearchEnv(tasks="all", sandbox=make_sandbox(sandbox, limits, hidden_paths=sandbox_hidden_paths()),
                          limits=limits)
    if world_model == "embedding":
        from wmrl_envs.envs.autoresearch import EmbeddingWorldModel, load_execution_log

        wm: Any = EmbeddingWorldModel().fit_leave_one_task_out(load_execution_log())
    elif world_model == "judge":
        from transformers import AutoTokenizer

        from wmrl_envs.envs.autoresearch import LLMJudgeWorldModel

        url = judge_url or (f"http://{reward_router_address}/v1" if reward_router_address else None)
        if url is None or not judge_model:
            raise ValueError("world_model='judge' needs judge_model and judge_url (or verl's reward model enabled)")
        wm = LLMJudgeWorldModel.from_server(url, judge_model, AutoTokenizer.from_pretrained(judge_model))
    else:
        raise ValueError(f"world_model must be 'embedding' or 'judge', got {world_model!r}")
    return RolloutScorer(env, wm, lambda text, info: completion_to_script(text, str(info["task_id"]), mode),
                         world_model_timeout_s=world_model_timeout_s)


def write_autoresearch_dataset(out_dir: str | os.PathLike, *, mode: str = "script", repeat: int = 16) -> dict[str, Path]:
    """Write verl's parquet files for AutoResearch: ``train.parquet`` (each training task
    ``repeat`` times, ``split="train"``: verl drops the last incomplete batch, so the file must
    hold at least ``data.train_batch_size`` rows) and ``test.parquet`` (the held-out tasks once,
    ``split="test"``: validation).

    Each row: ``data_source`` ``"wmrl/autoresearch"``, ``prompt`` (chat messages), ``ability``
    ``"ml"``, ``reward_model`` ``{"style": "rule", "ground_truth": task_id}``, ``extra_info``
    ``{"split", "index", "task_id"}``.

    Returns:
        ``{"train": path, "test": path}``.
    """
    import pandas as pd

    from wmrl_envs.envs.autoresearch.observation import build_prompt
    from wmrl_envs.envs.autoresearch.tasks import get_task, list_tasks

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {}
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat must be an integer >= 1, got {repeat!r}")
    for split, tasks in (("train", list_tasks("train") * repeat), ("test", list_tasks("heldout"))):
        rows = []
        for i, tid in enumerate(tasks):
            if mode == "line":
                task = get_task(tid)
                current = next(ln for ln in task.starter_code.splitlines() if ln.startswith("model ="))
                user = (f"Task: {' '.join(str(task.overview).split())[:400]}\nMetric: {task.metric} "
                        f"({'higher' if task.higher_is_better else 'lower'} is better).\nThe script's model is:\n"
                        f"```python\n{current}\n```\nReply with one better line `model = ...` (scikit-learn).")
            else:
                user = (f"{build_prompt(tid)}\n\nWrite a complete Python script that solves the task and writes "
                        "submission.csv. Reply with the code only.")
            rows.append({"data_source": "wmrl/autoresearch",
                         "prompt": [{"role": "system", "content": "You are an expert machine-learning engineer."},
                                    {"role": "user", "content": user}],
                         "ability": "ml", "reward_model": {"style": "rule", "ground_truth": tid},
                         "extra_info": {"split": split, "index": i, "task_id": tid}})
        paths[split] = out / f"{split}.parquet"
        pd.DataFrame(rows).to_parquet(paths[split])
    return paths


__all__ += ["completion_to_script", "get_scorer", "register_estimator", "WORLD_MODEL", "UNGRADED_SCORE"]
