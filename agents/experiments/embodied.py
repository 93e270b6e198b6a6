"""The embodied experiment at CPU scale: the paper's VLA table (the paper's LIBERO experiment; ``docs/method.md``, "Reward mode") on MuJoCo Reacher.

The paper post-trains a VLA on LIBERO-Long with GRPO under three reward sources — the
simulator's sparse success, a frozen learned progress model (Robometer), and WMRL (the
progress model with a thin stream of anchor groups scored by the real success, online
isotonic debiasing and the anchor weight ρ) — starting from a supervised (SFT) warm start.
This module runs the same protocol on gymnasium's ``Reacher-v5`` (2-link planar arm, 50 steps
of 0.02 s per episode), small enough to learn on one CPU core in minutes:

* **task kit** (:mod:`agents.experiments.reacher`): success (fingertip within
  ``success_threshold`` of the target after the last step), the Gaussian MLP policy, the
  scripted IK + PD controller, lock-step rollouts, demonstrations and the behaviour-cloning
  warm start (the SFT stand-in).
* **initial states**: determined by the reset seed. Training states: seeds
  ``train_state_offset + 0 … n_train_states − 1``; held-out states: ``eval_state_offset + 0 …
  n_eval_states − 1``; demonstrations and the predictor's offline data use their own
  disjoint seed ranges (per experiment seed).
* **world model** (Robometer stand-in): :class:`~wmrl_envs.world_models.progress.ProgressWorldModel`
  — an MLP on the states of 8 uniformly sampled frames → success probability (and per-frame
  progress), fitted BEFORE RL on offline rollouts of the scripted controller with several
  noise levels and of the warm-started policy, frozen during RL.
* **GRPO** (:func:`agents.grpo.grpo_update`; the policy is an :class:`agents.grpo.GRPOPolicy`):
  per step, ``groups_per_step`` training states × G rollouts; the per-step Gaussian log-probs
  are the "tokens" (per-step ratios against the log-probs recorded at sampling, clipped
  surrogate, k3 KL to the warm-start policy, ``grpo.num_iterations`` epochs per step).
* **methods** — all through :class:`wmrl_envs.AnchoredWorldModelWrapper` in reward mode and its
  group API :meth:`~wmrl_envs.AnchoredWorldModelWrapper.score_trajectories`:
  ``real`` (sparse real success: ``anchor_fraction=1``, no world model), ``wm_only`` (the
  frozen predictor only: ``anchor_fraction=0``, ``min_anchor_groups=0``) and ``wmrl``
  (predictor + ``correction.anchor_fraction`` anchor groups + online isotonic debiasing + ρ).
* **evaluation**: success rate on the held-out states, before RL, every ``eval_every`` steps
  and after: one rollout per state with the policy's mean action (deterministic; the primary
  metric by default) and ``eval_sampled_rollouts`` rollouts per state with sampled actions
  (the policy GRPO actually trains; the noise is seeded per seed and step, so every method
  sees the same noise).

:func:`run_experiment` runs it all (several experiment seeds; within one seed all methods
share the demonstrations, the warm start, the predictor and the training-state schedule);
:func:`results_table` and :func:`plot_curves` render the results. The CLI is
``benchmarks/embodied_reacher.py``.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import torch

from agents.experiments.reacher import (
    GaussianMLPPolicy,
    RolloutBatch,
    ScriptedReacher,
    behaviour_cloning,
    collect_demonstrations,
    controller_actor,
    evaluate,
    final_distance,
    make_envs,
    policy_actor,
    rollout,
    rollout_chunked,
)
from agents.grpo import GRPOUpdateConfig, grpo_update
from wmrl_envs.core.config import CorrectionConfig

__all__ = [
    "METHOD_LABELS",
    "EmbodiedConfig",
    "collect_offline_dataset",
    "fit_progress_model",
    "make_wrapper",
    "train_grpo",
    "run_experiment",
    "results_table",
    "plot_curves",
]

METHOD_LABELS = {
    "real": "GRPO, sparse real success",
    "wm_only": "GRPO, learned predictor only",
    "wmrl": "WMRL (predictor + anchors + debias + ρ)",
}


# ---------------------------------------------------------------------------- configuration
@dataclass
class EmbodiedConfig:
    """Every setting of the experiment (defaults: the documented run, about 8 min on a busy 2-core machine).

    Units: distances in metres; ``horizon`` in environment steps (0.02 s each). ``grpo`` holds
    the GRPO update's settings and ``correction`` WMRL's (used by the ``wmrl`` method; ``real``
    and ``wm_only`` override the anchor schedule and keep the reference correction settings).
    """

    env_id: str = "Reacher-v5"
    horizon: int = 50
    success_threshold: float = 0.02
    seeds: tuple[int, ...] = (0, 1, 2)
    methods: tuple[str, ...] = ("real", "wm_only", "wmrl")
    # initial states (reset seeds)
    n_train_states: int = 32
    n_eval_states: int = 100
    train_state_offset: int = 0
    eval_state_offset: int = 100_000
    demo_state_offset: int = 200_000
    offline_state_offset: int = 300_000
    # scripted controller, demonstrations, behaviour cloning
    kp: float = 0.5
    kd: float = 0.095
    n_demos: int = 25
    demo_noise: float = 0.3
    hidden: tuple[int, ...] = (64, 64)
    bc_epochs: int = 200
    bc_lr: float = 1e-3
    bc_batch_size: int = 256
    # learned predictor (world model)
    wm_scripted_episodes: int = 300
    wm_scripted_noise: tuple[float, ...] = (0.1, 0.3, 0.6, 1.0)
    wm_policy_episodes: int = 300
    wm_hidden: tuple[int, ...] = (128, 128)
    wm_epochs: int = 150
    wm_score: str = "success"
    # GRPO
    steps: int = 100
    groups_per_step: int = 8
    group_size: int = 8
    lr: float = 1e-3
    grpo: GRPOUpdateConfig = field(
        default_factory=lambda: GRPOUpdateConfig(kl_coef=0.04, num_iterations=4, max_grad_norm=1.0, drop_zero_advantage=False)
    )
    # WMRL (CPU-scale settings: the run has few anchor groups)
    correction: CorrectionConfig = field(
        default_factory=lambda: CorrectionConfig(anchor_fraction=0.125, min_pairs=32, refit_every=16, warmup_groups=8)
    )
    # evaluation
    eval_every: int = 10
    eval_deterministic: bool = True
    eval_sampled_rollouts: int = 2

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-serialisable)."""
        return asdict(self)


# ---------------------------------------------------------------------------- the predictor
def collect_offline_dataset(
    envs: Sequence[Any],
    controller: ScriptedReacher,
    policy: GaussianMLPPolicy,
    seeds: Sequence[int],
    *,
    n_scripted: int,
    scripted_noise: Sequence[float],
    n_policy: int,
    rng: np.random.Generator,
    generator: torch.Generator | None = None,
    horizon: int = 50,
    threshold: float = 0.02,
) -> dict[str, Any]:
    """Offline rollouts for the predictor: noisy scripted controller + the warm-started policy.

    The first ``n_scripted`` seeds are rolled out by the controller with a noise level drawn
    per episode from ``scripted_noise``; the next ``n_policy`` by the policy (sampled).

    Returns:
        ``{"trajectories": list[Trajectory], "success": (N,) float64, "progress": list of
        (T + 1,) float arrays, "source": list of "scripted"/"policy"}``; progress of frame t is
        ``clip(1 − d_t / d_0, 0, 1)`` with d the fingertip–target distance.

    Raises:
        ValueError: fewer seeds than episodes.
    """
    if len(seeds) < n_scripted + n_policy:
        raise ValueError(f"need {n_scripted + n_policy} seeds, got {len(seeds)}")
    batches: list[tuple[str, RolloutBatch]] = []
    noise_levels = np.asarray(scripted_noise, dtype=np.float64)
    for s in range(0, n_scripted, len(envs)):
        chunk = list(seeds[s : min(s + len(envs), n_scripted)])
        sd = rng.choice(noise_levels, size=len(chunk))
        batches.append(("scripted", rollout(envs, controller_actor(controller, sd, rng), chunk, horizon=horizon, threshold=threshold)))
    for s in range(n_scripted, n_scripted + n_policy, len(envs)):
        chunk = list(seeds[s : min(s + len(envs), n_scripted + n_policy)])
        batches.append(("policy", rollout(envs, policy_actor(policy, False, generator), chunk, horizon=horizon, threshold=threshold)))
    trajs, succ, prog, src = [], [], [], []
    for name, b in batches:
        d = final_distance(b.observations)
        for i in range(len(b.seeds)):
            trajs.append(b.trajectory(i))
            succ.append(b.success[i])
            prog.append(np.clip(1.0 - d[i] / max(d[i, 0], 1e-6), 0.0, 1.0))
            src.append(name)
    return {"trajectories": trajs, "success": np.asarray(succ), "progress": prog, "source": src}


def fit_progress_model(data: dict[str, Any], config: EmbodiedConfig, seed: int):
    """Fit the frozen :class:`~wmrl_envs.world_models.progress.ProgressWorldModel` on offline data."""
    from wmrl_envs.world_models.progress import ProgressWorldModel

    obs_dim = int(np.asarray(data["trajectories"][0].observations[0]).shape[0])
    wm = ProgressWorldModel(obs_dim, 8, config.wm_hidden, score=config.wm_score, seed=seed)  # type: ignore[arg-type]
    return wm.fit(data["trajectories"], data["success"], data["progress"], epochs=config.wm_epochs)


def _auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    if len(np.unique(labels)) < 2:
        return None
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, scores))


# ---------------------------------------------------------------------------- GRPO through the wrapper
def make_wrapper(method: str, world_model: Any, config: EmbodiedConfig, seed: int):
    """The :class:`~wmrl_envs.AnchoredWorldModelWrapper` (reward mode) of one method.

    ``real``: no world model, every group anchored; ``wm_only``: no anchors at all (both with
    the reference correction settings, :class:`~wmrl_envs.core.config.CorrectionConfig`'s
    defaults); ``wmrl``: ``config.correction`` (its anchor fraction, at least
    ``min_anchor_groups`` anchor groups per window of ``anchor_window`` steps, isotonic
    debiasing and ρ).

    Raises:
        ValueError: unknown method.
    """
    import gymnasium as gym

    from wmrl_envs import AnchoredWorldModelWrapper

    env = gym.make(config.env_id, max_episode_steps=config.horizon)
    corrections = {
        "real": (None, CorrectionConfig(anchor_fraction=1.0)),
        "wm_only": (world_model, CorrectionConfig(anchor_fraction=0.0, min_anchor_groups=0)),
        "wmrl": (world_model, config.correction),
    }
    if method in corrections:
        wm, corr = corrections[method]
        return AnchoredWorldModelWrapper(
            env, wm, group_size=config.group_size, mode="reward", groups_per_step=config.groups_per_step,
            correction=corr, seed=seed,
        )
    raise ValueError(f"unknown method {method!r}; choose from {sorted(METHOD_LABELS)}")


def train_grpo(
    policy: GaussianMLPPolicy,
    wrapper: Any,
    envs: Sequence[Any],
    config: EmbodiedConfig,
    *,
    train_seeds: Sequence[int],
    eval_seeds: Sequence[int],
    step_states: Sequence[Sequence[int]],
    generator: torch.Generator,
    eval_noise_seed: int = 0,
    on_step: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """GRPO on ``policy`` (in place); rewards and advantage weights come from ``wrapper``.

    Per step: the ``groups_per_step`` initial states of ``step_states[step]`` × G sampled
    rollouts (one batched lock-step rollout); each group goes through
    ``wrapper.score_trajectories(contexts, trajectories, real_successes)``, which routes it and
    returns its training rewards (real success on anchor groups, calibrated predictor scores
    elsewhere — the real successes of world-model groups are withheld by the wrapper) and its
    advantage weight (ρ on anchor groups); then :func:`agents.grpo.grpo_update` with
    ``config.grpo`` (``num_iterations`` full-batch Adam steps against the log-probs recorded at
    sampling, the per-step log-probs as tokens and the warm start as the KL reference).

    Args:
        policy: the policy to train (the warm start; a frozen copy is the reference).
        wrapper: the method's wrapper (:func:`make_wrapper`).
        envs: at least ``groups_per_step × G`` environments.
        config: the settings.
        train_seeds: the training initial states (for the record; ``step_states`` picks).
        eval_seeds: held-out initial states.
        step_states: per step, the ``groups_per_step`` training seeds to use.
        generator: torch generator of the training rollouts' sampling noise.
        eval_noise_seed: seed of the sampled evaluation's noise (+ the step number).
        on_step: called after each step with ``(step, log_row)``.

    Returns:
        ``{"curve": [{"step", "success", "success_deterministic", "success_sampled",
        "mean_final_distance", "real_labels"}], "log": [per-step
        rows], "real_labels": int, "anchor_groups": int, "groups": int, "corrector": stats,
        "ungraded": the wrapper's ungraded-rollout counts (``UngradedMonitor.stats()``),
        "final_eval": {...}, "train_seconds": float, "eval_seconds": float}``; ``real_labels``
        counts the real success labels the learner received (anchor-group rollouts).
    """
    policy.freeze_reference()
    opt = torch.optim.Adam(policy.parameters(), lr=config.lr)
    G, n_groups = config.group_size, config.groups_per_step
    real_labels = 0
    curve: list[dict[str, Any]] = []
    log: list[dict[str, Any]] = []
    train_secs = eval_secs = 0.0

    def do_eval(step: int) -> dict[str, Any]:
        nonlocal eval_secs
        t0 = time.perf_counter()
        kw = dict(horizon=config.horizon, threshold=config.success_threshold)
        det = evaluate(policy, envs, eval_seeds, deterministic=True, **kw)
        # sampled: common random numbers per evaluation point (the same noise for every method)
        smp = evaluate(policy, envs, list(eval_seeds) * config.eval_sampled_rollouts, deterministic=False,
                       generator=torch.Generator().manual_seed(eval_noise_seed + step), **kw)
        ev = det if config.eval_deterministic else smp
        eval_secs += time.perf_counter() - t0
        row = {"step": step, "success": ev["success"], "success_deterministic": det["success"],
               "success_sampled": smp["success"], "mean_final_distance": ev["mean_final_distance"],
               "real_labels": real_labels}
        curve.append(row)
        return ev

    do_eval(0)
    for step in range(config.steps):
        t0 = time.perf_counter()
        states = list(step_states[step])
        seeds = [s for s in states for _ in range(G)]
        wrapper.plan_step(n_groups)
        batch = rollout(envs, policy_actor(policy, False, generator), seeds, horizon=config.horizon,
                        threshold=config.success_threshold)
        group_rewards, group_weights, routes = [], [], []
        raw_wm, real_wm_groups = [], []
        for g in range(n_groups):
            idx = list(range(g * G, (g + 1) * G))
            trajs = [batch.trajectory(i) for i in idx]
            res = wrapper.score_trajectories([batch.observations[i, 0] for i in idx], trajs,
                                             [float(batch.success[i]) for i in idx])
            group_rewards.append(res.rewards)
            group_weights.append(res.advantage_weight)
            routes.append(res.route)
            if res.route == "anchor":
                real_labels += sum(1 for r in res.correction.real_scores if r is not None)
            else:  # diagnostic only (never given to the learner): the predictor vs the hidden real success
                raw_wm.extend(res.correction.raw_scores)
                real_wm_groups.extend(batch.success[i] for i in idx)
        up = grpo_update(policy, opt, batch, group_rewards, group_weights, config=config.grpo,
                         old_logprobs=torch.as_tensor(batch.logp))
        stats = {k: up[k] for k in ("loss", "kl", "clip_fraction")} if up["n_rows"] else {}
        train_secs += time.perf_counter() - t0
        row: dict[str, Any] = {
            "step": step + 1,
            "train_success": float(batch.success.mean()),
            "anchor_groups": routes.count("anchor"),
            "rows": int(up["n_rows"]),
            "groups_used": int(up["n_groups_used"]),
            "ungraded_rows": int(up["n_ungraded"]),
            "rho": float(wrapper.loop.rho),
            "policy_std": float(policy.log_std.detach().clamp(*policy.log_std_bounds).exp().mean()),
            "real_labels": real_labels,
            **stats,
        }
        wm_ok = [(r, y) for r, y in zip(raw_wm, real_wm_groups) if r is not None]
        if wm_ok:
            r_arr, y_arr = np.array([a for a, _ in wm_ok]), np.array([b for _, b in wm_ok])
            row["wm_mean_score"] = float(r_arr.mean())
            row["wm_hidden_real_success"] = float(y_arr.mean())
            row["wm_auc_hidden"] = _auc(r_arr, y_arr)
        if (step + 1) % config.eval_every == 0 or step + 1 == config.steps:
            ev = do_eval(step + 1)
            row["heldout_success"] = ev["success"]
        log.append(row)
        if on_step is not None:
            on_step(step + 1, row)
    final = curve[-1]
    return {
        "curve": curve,
        "log": log,
        "real_labels": real_labels,
        "anchor_groups": int(wrapper.loop.corrector.groups_corrected["anchor"]),
        "groups": int(wrapper.loop.n_groups_started),
        "corrector": _jsonable(wrapper.loop.corrector.stats()),
        "ungraded": wrapper.loop.ungraded.stats(),
        "final_success": final["success"],
        "train_seconds": train_secs,
        "eval_seconds": eval_secs,
    }


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in d.items():
        if isinstance(v, (float, np.floating)) and not math.isfinite(float(v)):
            out[k] = None
        elif isinstance(v, (np.integer, np.floating, np.bool_)):
            out[k] = v.item()
        else:
            out[k] = v
    return out


# ---------------------------------------------------------------------------- the experiment
def run_experiment(config: EmbodiedConfig | None = None, *, progress: bool = True) -> dict[str, Any]:
    """Run the whole experiment: per seed, demos → BC → predictor → GRPO under each method.

    Sets ``torch.set_num_threads(1)``. Within one experiment seed every method starts from the
    same warm start, uses the same predictor and the same sequence of training states and
    sampling seed; only the reward source differs.

    Args:
        config: the settings (default :class:`EmbodiedConfig`).
        progress: show a tqdm progress bar (stderr).

    Returns:
        JSON-serialisable dict: ``config``; ``seeds`` (per seed: scripted-controller and
        warm-start held-out success, demonstration success, the predictor's offline labels and
        its AUC on fresh warm-start rollouts from the held-out states); ``runs`` (per seed and
        method: :func:`train_grpo`'s output plus ``initial_success``); ``summary`` (per method:
        mean/std over seeds of the final held-out success, real labels); ``runtime_seconds``.

    Raises:
        ValueError: an unknown method in ``config.methods``.
    """
    from tqdm.auto import tqdm

    config = config if config is not None else EmbodiedConfig()
    for m in config.methods:
        if m not in METHOD_LABELS:
            raise ValueError(f"unknown method {m!r}; choose from {sorted(METHOD_LABELS)}")
    torch.set_num_threads(1)
    t_start = time.perf_counter()
    n_env = max(config.groups_per_step * config.group_size, 16)
    envs = make_envs(n_env, config.env_id, config.horizon)
    ctrl = ScriptedReacher(config.kp, config.kd)
    train_seeds = [config.train_state_offset + i for i in range(config.n_train_states)]
    eval_seeds = [config.eval_state_offset + i for i in range(config.n_eval_states)]
    kw = dict(horizon=config.horizon, threshold=config.success_threshold)
    total_steps = len(config.seeds) * len(config.methods) * config.steps
    bar = tqdm(total=total_steps, desc="embodied GRPO", unit="step", disable=not progress, dynamic_ncols=True)
    seed_info: list[dict[str, Any]] = []
    runs: list[dict[str, Any]] = []
    for seed in config.seeds:
        rng = np.random.default_rng(seed)
        torch.manual_seed(seed)
        gen = torch.Generator().manual_seed(seed)
        bar.set_postfix_str(f"seed {seed}: demos, BC, predictor")
        t0 = time.perf_counter()
        scripted_ev = rollout_chunked(envs, controller_actor(ctrl, 0.0, rng), eval_seeds, **kw)
        demo_seeds = [config.demo_state_offset + 1000 * seed + i for i in range(config.n_demos)]
        demos = collect_demonstrations(envs, ctrl, demo_seeds, noise_std=config.demo_noise, rng=rng, **kw)
        policy = GaussianMLPPolicy(envs[0].observation_space.shape[0], envs[0].action_space.shape[0], config.hidden)
        bc_losses = behaviour_cloning(policy, demos, epochs=config.bc_epochs, lr=config.bc_lr,
                                      batch_size=config.bc_batch_size, seed=seed)
        bc_eval = evaluate(policy, envs, eval_seeds, deterministic=config.eval_deterministic, generator=gen, **kw)
        n_off = config.wm_scripted_episodes + config.wm_policy_episodes
        off_seeds = [config.offline_state_offset + 10_000 * seed + i for i in range(n_off)]
        data = collect_offline_dataset(
            envs, ctrl, policy, off_seeds, n_scripted=config.wm_scripted_episodes,
            scripted_noise=config.wm_scripted_noise, n_policy=config.wm_policy_episodes, rng=rng, generator=gen, **kw,
        )
        wm = fit_progress_model(data, config, seed)
        # predictor quality on fresh sampled warm-start rollouts from the held-out states (2 each)
        chk = rollout_chunked(envs, policy_actor(policy, False, gen), eval_seeds * 2, **kw)
        chk_scores = np.array([p.score for p in wm.predict([None] * len(chk.seeds), [chk.trajectory(i) for i in range(len(chk.seeds))])])
        info = {
            "seed": seed,
            "scripted_success": float(scripted_ev.success.mean()),
            "demo_success": demos.success_rate,
            "n_demo_steps": int(len(demos.actions)),
            "bc_final_nll": bc_losses[-1],
            "bc_success": bc_eval["success"],
            "bc_std": float(policy.log_std.detach().exp().mean()),
            "wm_offline_labels": int(len(data["success"])),
            "wm_offline_success_rate": float(data["success"].mean()),
            "wm_final_loss": wm.history[-1],
            "wm_auc_warmstart": _auc(chk_scores, chk.success),
            "wm_mean_score_warmstart": float(chk_scores.mean()),
            "warmstart_sampled_success_check": float(chk.success.mean()),
            "setup_seconds": time.perf_counter() - t0,
        }
        seed_info.append(info)
        step_rng = np.random.default_rng(10_000 + seed)
        step_states = [
            step_rng.choice(train_seeds, size=config.groups_per_step, replace=len(train_seeds) < config.groups_per_step).tolist()
            for _ in range(config.steps)
        ]
        for method in config.methods:
            bar.set_postfix_str(f"seed {seed} {method}")
            pol = copy.deepcopy(policy)
            wrapper = make_wrapper(method, wm, config, seed)
            run_gen = torch.Generator().manual_seed(1_000 + seed)
            torch.manual_seed(1_000 + seed)

            def on_step(step: int, row: dict[str, Any], _m: str = method) -> None:
                bar.update(1)
                if "heldout_success" in row:
                    bar.set_postfix_str(f"seed {seed} {_m} step {step}: held-out {row['heldout_success']:.0%}")

            t1 = time.perf_counter()
            out = train_grpo(pol, wrapper, envs, config, train_seeds=train_seeds, eval_seeds=eval_seeds,
                             step_states=step_states, generator=run_gen, eval_noise_seed=5_000 + 100 * seed,
                             on_step=on_step)
            # how the predictor judges the trained policy's own rollouts (bias under the shift RL causes)
            fin = rollout_chunked(envs, policy_actor(pol, False, run_gen), eval_seeds * 2, **kw)
            fin_scores = np.array([p.score for p in wm.predict([None] * len(fin.seeds), [fin.trajectory(i) for i in range(len(fin.seeds))])])
            out.update(
                seed=seed,
                method=method,
                initial_success=out["curve"][0]["success"],
                final_sampled_success=float(fin.success.mean()),
                wm_mean_score_final=float(fin_scores.mean()),
                wm_auc_final=_auc(fin_scores, fin.success),
                seconds=time.perf_counter() - t1,
            )
            runs.append(out)
            wrapper.close()
    bar.close()
    for e in envs:
        e.close()
    summary: dict[str, Any] = {}
    for m in config.methods:
        rs = [r for r in runs if r["method"] == m]
        fin = np.array([r["final_success"] for r in rs])
        init = np.array([r["initial_success"] for r in rs])
        labels = np.array([r["real_labels"] for r in rs])
        summary[m] = {
            "label": METHOD_LABELS[m],
            "initial_success_mean": float(init.mean()),
            "final_success_mean": float(fin.mean()),
            "final_success_std": float(fin.std(ddof=1)) if len(fin) > 1 else 0.0,
            "final_success_per_seed": fin.tolist(),
            "real_labels_mean": float(labels.mean()),
            "offline_labels_mean": float(np.mean([s["wm_offline_labels"] for s in seed_info])) if m != "real" else 0.0,
            "anchor_fraction_realised": float(np.mean([r["anchor_groups"] / max(r["groups"], 1) for r in rs])),
            "final_sampled_success_mean": float(np.mean([r["final_sampled_success"] for r in rs])),
            "seconds_mean": float(np.mean([r["seconds"] for r in rs])),
        }
    return {
        "config": config.to_dict(),
        "seeds": seed_info,
        "runs": runs,
        "summary": summary,
        "runtime_seconds": time.perf_counter() - t_start,
    }


# ---------------------------------------------------------------------------- rendering
def _pm(values: Sequence[float], pct: bool = True) -> str:
    v = np.asarray(values, dtype=np.float64) * (100.0 if pct else 1.0)
    sd = v.std(ddof=1) if len(v) > 1 else 0.0
    return f"{v.mean():.1f} ± {sd:.1f}"


def results_table(results: dict[str, Any]) -> str:
    """The markdown tables of :func:`run_experiment`'s results (the paper's VLA-table layout).

    Table 1 rows: the scripted controller, the BC warm start, then each method; columns:
    held-out success % after RL with the mean action (deterministic) and with sampled actions
    (mean ± sample std over seeds), real success labels the learner received during RL (mean
    per run), offline labels used to fit the predictor, realised anchor fraction. Table 2: the
    predictor on each final policy's own sampled rollouts (mean score vs real success rate,
    AUC) — how biased it is where RL has taken the policy.
    """
    cfg = results["config"]
    seeds = results["seeds"]
    primary = "deterministic (mean action)" if cfg["eval_deterministic"] else "sampled"
    first_runs = [r for r in results["runs"] if r["method"] == cfg["methods"][0]]  # step 0 = the warm start
    lines = [
        f"Reacher-v5, success = fingertip within {cfg['success_threshold'] * 1000:.0f} mm of the target after "
        f"{cfg['horizon']} steps; held-out success on {cfg['n_eval_states']} initial states: one deterministic "
        f"(mean-action) rollout and {cfg['eval_sampled_rollouts']} sampled rollouts each (primary metric: {primary}); "
        f"mean ± std over {len(seeds)} seeds; {cfg['steps']} GRPO steps × "
        f"{cfg['groups_per_step']} groups × G = {cfg['group_size']}.",
        "",
        "| method | held-out success %, deterministic | held-out success %, sampled | real success labels used in RL "
        "| offline labels (predictor fit) | anchor fraction |",
        "|---|---|---|---|---|---|",
        f"| scripted controller (IK + PD, no noise) | {_pm([s['scripted_success'] for s in seeds])} | – | – | – | – |",
        f"| BC warm start ({cfg['n_demos']} noisy demos) | {_pm([r['curve'][0]['success_deterministic'] for r in first_runs])} | "
        f"{_pm([r['curve'][0]['success_sampled'] for r in first_runs])} | 0 | – | – |",
    ]
    for m, s in results["summary"].items():
        rs = [r for r in results["runs"] if r["method"] == m]
        det = [r["curve"][-1]["success_deterministic"] for r in rs]
        smp = [r["curve"][-1]["success_sampled"] for r in rs]
        lines.append(
            f"| {s['label']} | {_pm(det)} | {_pm(smp)} | {s['real_labels_mean']:.0f} | "
            f"{s['offline_labels_mean']:.0f} | {s['anchor_fraction_realised']:.2f} |"
        )
    lines += [
        "",
        "Predictor (frozen) on sampled rollouts from held-out states: mean predicted score vs real success rate, "
        "and AUC (mean over seeds).",
        "",
        "| policy | predictor mean score | real success rate | AUC |",
        "|---|---|---|---|",
    ]

    def auc_str(vals: list[float | None]) -> str:
        v = [x for x in vals if x is not None]
        return f"{np.mean(v):.2f}" if v else "–"

    lines.append(
        f"| BC warm start | {np.mean([s['wm_mean_score_warmstart'] for s in seeds]):.2f} | "
        f"{np.mean([s['warmstart_sampled_success_check'] for s in seeds]):.2f} | {auc_str([s['wm_auc_warmstart'] for s in seeds])} |"
    )
    for m, s in results["summary"].items():
        rs = [r for r in results["runs"] if r["method"] == m]
        lines.append(
            f"| after {s['label']} | {np.mean([r['wm_mean_score_final'] for r in rs]):.2f} | "
            f"{np.mean([r['final_sampled_success'] for r in rs]):.2f} | {auc_str([r['wm_auc_final'] for r in rs])} |"
        )
    return "\n".join(lines) + "\n"


def plot_curves(results: dict[str, Any], path: str) -> None:
    """PNG: held-out success vs GRPO step (left) and vs real labels used (right), per method.

    Top row: deterministic (mean-action) evaluation; bottom row: sampled. Lines are means
    over seeds, bands ± one standard deviation; the dotted line is the BC warm start.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharey="row")
    colors = {"real": "tab:blue", "wm_only": "tab:orange", "wmrl": "tab:green"}
    for row, key, name in ((0, "success_deterministic", "deterministic"), (1, "success_sampled", "sampled")):
        for m, s in results["summary"].items():
            rs = [r for r in results["runs"] if r["method"] == m]
            steps = np.array([p["step"] for p in rs[0]["curve"]])
            succ = np.array([[p[key] for p in r["curve"]] for r in rs]) * 100
            labels = np.array([[p["real_labels"] for p in r["curve"]] for r in rs]).mean(0)
            mu, sd = succ.mean(0), succ.std(0)
            c = colors.get(m)
            for ax, x in ((axes[row, 0], steps), (axes[row, 1], labels)):
                ax.plot(x, mu, marker="o", ms=3, color=c, label=s["label"])
                ax.fill_between(x, mu - sd, mu + sd, color=c, alpha=0.15)
        first = [r for r in results["runs"] if r["method"] == results["config"]["methods"][0]]
        bc = np.mean([r["curve"][0][key] for r in first]) * 100  # step 0 = the warm start
        for ax in axes[row]:
            ax.axhline(bc, color="gray", ls=":", lw=1, label="BC warm start")
            ax.grid(alpha=0.3)
        axes[row, 0].set_ylabel(f"held-out success % ({name})")
        axes[row, 0].set_xlabel("GRPO step")
        axes[row, 1].set_xlabel("real success labels used in RL (cumulative; symlog)")
        axes[row, 1].set_xscale("symlog", linthresh=100)
        axes[row, 1].set_xlim(left=-15)  # the predictor-only method sits at 0 labels
    axes[0, 0].legend(fontsize=8, loc="lower right")
    cfg = results["config"]
    fig.suptitle(
        f"Reacher-v5, success within {cfg['success_threshold'] * 1000:.0f} mm, {cfg['n_eval_states']} held-out states, "
        f"{len(results['seeds'])} seeds (mean ± std)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
