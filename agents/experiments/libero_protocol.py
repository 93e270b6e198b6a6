"""The paper's VLA protocol on LIBERO-Long as one command: ``wmrl libero``.

Yang et al. (arXiv 2608.12564), VLA experiment (``docs/method.md``, "Reward mode"): from the SFT
policy, GRPO with G rollouts per initial state on the training states 0-15 of the ``libero_10``
tasks, rewarded three ways —

* ``sparse``: LIBERO's success (every group is simulated to the end and checked: real-execution GRPO);
* ``robometer``: the raw Robometer reward alone (world-model groups only, no correction);
* ``wmrl``: Robometer on every group, the success on ``anchor_fraction`` of them (anchor groups),
  with online debiasing and the anchor weight ρ —

then held-out success on states 16-49 of every task (one greedy episode per state), reported per
task and on average in the paper's table layout, mean and spread over seeds.

Each group's G episodes run in G parallel LIBERO processes (:mod:`wmrl_envs.envs.libero.vector`);
the world model scores the G trajectories in one batched call and the method's
:class:`~wmrl_envs.core.CorrectionLoop` routes and corrects the group. Progress bars (tqdm) show
the steps and the evaluation; the run is resumable: every finished (method, seed) cell is kept in
``results.json`` and a cell in progress saves its step (LoRA weights, optimiser, correction state,
generators) to ``<out>/<method>-seed<k>/checkpoint.pt`` after every training step.

Presets: ``paper`` (the real protocol: all ten tasks, G = 8, 520 steps; pass ``--vla`` and
``--robometer`` with local checkpoints; a GPU run) and ``quick`` (the CI smoke run on the real
simulator with tiny randomly initialised models: one task, two training and two held-out states,
G = 2, 6 policy steps). Without ``--vla``/``--robometer`` the models are tiny and random: the run
then measures the machinery, not learning.
"""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Sequence

import numpy as np

__all__ = ["LiberoProtocolConfig", "LIBERO_PRESETS", "METHODS", "main_libero", "results_table"]

METHODS = ("sparse", "robometer", "wmrl")
"""The three reward schemes of the protocol, in the paper's table order."""


@dataclass(frozen=True)
class LiberoProtocolConfig:
    """Settings of ``wmrl libero`` (every field is a flag: ``--steps 10``)."""

    methods: tuple[Literal["sparse", "robometer", "wmrl"], ...] = METHODS
    """Reward schemes to run (table rows)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Seeds (each method trains once per seed from the same SFT policy)."""
    tasks: tuple[int, ...] = tuple(range(10))
    """libero_10 tasks trained and evaluated (table columns)."""
    train_states: tuple[int, ...] = tuple(range(16))
    """Initial states GRPO trains on (the paper: 0-15)."""
    eval_states: tuple[int, ...] = tuple(range(16, 50))
    """Held-out initial states evaluated (the paper: 16-49), one greedy episode each."""
    group_size: int = 8
    """G, rollouts per initial state (one group), each in its own LIBERO process."""
    steps: int = 50
    """GRPO steps (one optimiser update each)."""
    groups_per_step: int = 4
    """Groups per step, drawn from (task, training state) pairs."""
    max_steps: int = 520
    """Policy steps per episode (LIBERO-Long: 520)."""
    image_size: int = 224
    """Camera image side given to the policy, pixels."""
    render_size: int | None = 256
    """Render the cameras at this side and resize to ``image_size`` with Lanczos, as openvla-mini's
    LIBERO evaluation does (256 -> 224, ``LiberoEnv(render_size=...)``); None: render at ``image_size``."""
    multisample: bool = True
    """MuJoCo's 4x multisampling, LIBERO's default look (the authors' demonstrations and evaluation);
    False renders ~1.3-1.8x faster on CPU with aliased edges (``LiberoEnv(multisample=...)``)."""
    anchor_fraction: float = 0.1
    """wmrl: share of groups also checked by LIBERO's success (anchor groups)."""
    min_pairs: int = 200
    """wmrl: anchor pairs before the first isotonic fit (reference 200)."""
    warmup_groups: int = 32
    """wmrl: anchor groups before ρ leaves 1 (reference 32)."""
    lr: float = 1e-4
    """AdamW learning rate of the LoRA weights."""
    vla: str | None = None
    """The SFT policy: a local MiniVLA/OpenVLA checkpoint, Hugging Face format or a MiniVLA run folder in
    the authors' Prismatic format (``agents.vla.prismatic``; None: a tiny random VLA)."""
    robometer: str | None = None
    """A local Robometer checkpoint (None: a tiny random Robometer)."""
    device: str = "auto"
    """Where the ``--vla`` / ``--robometer`` checkpoints run: ``auto`` (CUDA when available, else the
    CPU), ``cpu``, ``cuda`` or ``cuda:N``; in bfloat16 on CUDA, float32 on the CPU. The tiny random
    models always run on the CPU."""
    vq: str | None = None
    """MiniVLA VQ models: the VQ folder (``config.json`` + ``checkpoints/model.pt``) of the
    ``--vla`` checkpoint; default for a Prismatic run ``<vla>/vq/<its VQ folder name>`` or
    ``<vla>/vq``, for another checkpoint ``<vla>/vq`` when that folder exists (else 256-bin tokens)."""
    unnorm_key: str = "libero_10"
    """Dataset whose action statistics (q01/q99 in the ``--vla`` checkpoint) un-normalise the
    policy's actions (``libero_10``, else ``libero_10_no_noops``, as the authors' evaluation)."""
    out: str = "runs/libero-protocol"
    """Output folder (results.json, table.md, success.png, per-cell checkpoints)."""
    resume: bool = True
    """Continue a run in ``out`` (finished cells are kept, a cell in progress resumes at its last step)."""

    def __post_init__(self) -> None:
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"methods must be among {METHODS}, got {self.methods!r}")
        for name in ("group_size", "steps", "groups_per_step", "max_steps", "image_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if not self.tasks or any(not 0 <= t < 10 for t in self.tasks):
            raise ValueError(f"tasks must be libero_10 task ids in 0..9, got {self.tasks!r}")
        for name in ("train_states", "eval_states"):
            states = getattr(self, name)
            if not states or any(not 0 <= s < 50 for s in states):
                raise ValueError(f"{name} must be initial-state ids in 0..49, got {states!r}")
        if self.render_size is not None and (isinstance(self.render_size, bool) or not isinstance(self.render_size, int)
                                             or self.render_size < 8):
            raise ValueError(f"render_size must be None or an integer >= 8, got {self.render_size!r}")
        if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", str(self.device)):
            raise ValueError(f"device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        if set(self.train_states) & set(self.eval_states):
            raise ValueError("train_states and eval_states overlap: held-out states must not be trained on")
        if not 0.0 < self.anchor_fraction <= 1.0:
            raise ValueError(f"anchor_fraction must be in (0, 1], got {self.anchor_fraction!r}")


LIBERO_PRESETS: dict[str, LiberoProtocolConfig] = {
    "default": LiberoProtocolConfig(),
    "quick": LiberoProtocolConfig(
        seeds=(0,), tasks=(0,), train_states=(0, 1), eval_states=(16, 17), group_size=2, steps=2,
        groups_per_step=2, max_steps=6, image_size=32, render_size=None, multisample=False, anchor_fraction=0.5, min_pairs=2, warmup_groups=1,
        lr=1e-3, out="runs/libero-protocol-quick"),
}
"""``default`` = the paper's protocol; ``quick`` = the CI smoke run (``wmrl libero --quick``)."""


def _correction(cfg: LiberoProtocolConfig, method: str) -> Any:
    from wmrl_envs.core import CorrectionConfig

    if method == "sparse":
        return CorrectionConfig(anchor_fraction=1.0, debias=False, denoise=False)
    if method == "robometer":
        return CorrectionConfig(anchor_fraction=0.0, min_anchor_groups=0, debias=False, denoise=False)
    return CorrectionConfig(anchor_fraction=cfg.anchor_fraction, min_pairs=cfg.min_pairs,
                            refit_every=max(1, min(64, cfg.min_pairs)), warmup_groups=cfg.warmup_groups)


class _Envs:
    """One vector env (G processes) of the task in use; switching task closes the previous."""

    def __init__(self, cfg: LiberoProtocolConfig) -> None:
        self.cfg, self.task, self.vec = cfg, None, None

    def get(self, task: int) -> Any:
        from wmrl_envs.envs.libero.vector import make_libero_vector_env

        if self.task != task:
            self.close()
            self.vec = make_libero_vector_env(self.cfg.group_size, task, image_size=self.cfg.image_size,
                                              render_size=self.cfg.render_size, max_steps=self.cfg.max_steps,
                                              multisample=self.cfg.multisample)
            self.task = task
        return self.vec

    def close(self) -> None:
        if self.vec is not None:
            self.vec.close()
        self.vec, self.task = None, None


def _members(batched: dict[str, Any], g: int) -> list[dict[str, Any]]:
    return [{k: v[i] for k, v in batched.items()} for i in range(g)]


def _rollout(envs: _Envs, policy: Any, task: int, states: Sequence[int], *, greedy: bool,
             action_stats: dict[str, Any] | None) -> tuple[list, list]:
    """G episodes of ``task`` (member i from ``states[i]``), stepped together; the policy's
    normalised actions reach LIBERO through :func:`agents.vla.action_tokenizer.libero_env_actions`.
    Returns per member ``(observations, samples)`` and the results of :func:`rollout_group`."""
    from agents.vla.action_tokenizer import libero_env_actions
    from wmrl_envs.envs.libero.vector import rollout_group

    vec = envs.get(task)
    g = vec.num_envs
    obs_of: list[list[Any]] = [[] for _ in range(g)]
    samples_of: list[list[Any]] = [[] for _ in range(g)]

    def act(batched: dict[str, Any], active: np.ndarray) -> np.ndarray:
        members = _members(batched, g)
        smp = policy.sample(members, group_size=1, greedy=greedy)
        for i in np.flatnonzero(active):
            obs_of[i].append(members[i])
            samples_of[i].append(smp.select([int(i)]))
        return libero_env_actions(smp.actions, action_stats)

    results = rollout_group(vec, act, states, record_final=True)
    for i, r in enumerate(results):
        obs_of[i].append(r["final_observation"])
    return [(obs_of[i], samples_of[i]) for i in range(g)], results


def _evaluate(envs: _Envs, policy: Any, cfg: LiberoProtocolConfig, bar: Any,
              action_stats: dict[str, Any] | None) -> dict[str, list[float]]:
    """Held-out success per task: one greedy episode per evaluation state, G states at a time."""
    out: dict[str, list[float]] = {}
    g = cfg.group_size
    for task in cfg.tasks:
        succ: list[float] = []
        states = list(cfg.eval_states)
        for k in range(0, len(states), g):
            chunk = states[k:k + g]
            padded = chunk + [chunk[-1]] * (g - len(chunk))
            _, results = _rollout(envs, policy, task, padded, greedy=True, action_stats=action_stats)
            succ += [float(r["success"]) for r in results[:len(chunk)]]
            bar.update(len(chunk))
        out[str(task)] = succ
    return out


def _device(cfg: LiberoProtocolConfig) -> tuple[str, Any]:
    """The device and dtype of the real checkpoints (``cfg.device``; bfloat16 on CUDA)."""
    import torch

    device = ("cuda" if torch.cuda.is_available() else "cpu") if cfg.device == "auto" else cfg.device
    return device, (torch.bfloat16 if device.startswith("cuda") else torch.float32)


def _prompt_template(processor: Any, model: Any = None) -> str:
    """MiniVLA's Qwen chat prompt for a Prismatic run with a Qwen2.5 LM or a Qwen2 tokenizer,
    OpenVLA's prompt otherwise."""
    from agents.vla.policy import MINIVLA_QWEN_PROMPT, OPENVLA_PROMPT

    llm = str(getattr(getattr(model, "config", None), "llm_backbone_id", "") or "")
    if llm.startswith("qwen25"):
        return MINIVLA_QWEN_PROMPT
    tok = getattr(processor, "tokenizer", processor)
    return MINIVLA_QWEN_PROMPT if "qwen2" in type(tok).__name__.lower() else OPENVLA_PROMPT


def _action_tokenizer(cfg: LiberoProtocolConfig, model: Any, processor: Any) -> Any:
    """A :class:`~agents.vla.action_tokenizer.VQActionTokenizer` for a MiniVLA VQ checkpoint, else None
    (VLAPolicy's 256 bins, ending where :func:`~agents.vla.policy.default_action_vocab_size` says).

    The VQ folder is ``--vq``, else for a Prismatic run (``model.config.action_tokenizer`` names its
    action tokenizer) ``<vla>/vq/<that tokenizer's VQ folder>`` or ``<vla>/vq``
    (:func:`agents.vla.load.prismatic_vq_folder`), else ``<vla>/vq`` when it holds a config.json.

    Raises:
        ValueError: the checkpoint's config names a VQ action tokenizer but no VQ folder is found
            (decoding its tokens as bins would give wrong actions silently), or ``--vq`` is given
            for a Prismatic run trained with bins.
    """
    from agents.vla.action_tokenizer import VQActionTokenizer
    from agents.vla.load import prismatic_vq_folder
    from agents.vla.policy import default_action_vocab_size

    tokenizer = getattr(processor, "tokenizer", processor)
    run_tokenizer = getattr(getattr(model, "config", None), "action_tokenizer", None)  # Prismatic runs
    if isinstance(run_tokenizer, str):
        is_vq = "vq" in run_tokenizer
        if cfg.vq and not is_vq:
            raise ValueError(f"--vq was given but {cfg.vla!r} was trained with {run_tokenizer!r} (binned action tokens)")
        if not is_vq:
            return None
        folder = Path(cfg.vq) if cfg.vq else prismatic_vq_folder(cfg.vla, run_tokenizer)
        if folder is None:
            raise ValueError(f"{cfg.vla!r} was trained with MiniVLA's VQ action tokens ({run_tokenizer}) but no VQ folder "
                             "was found in it (vq/<name>/ or vq/ with config.json): pass --vq PATH")
        return VQActionTokenizer(default_action_vocab_size(model, tokenizer), folder)
    folder = Path(cfg.vq) if cfg.vq else (Path(cfg.vla) / "vq" if cfg.vla else None)
    if folder is not None and (cfg.vq or (folder / "config.json").is_file()):
        return VQActionTokenizer(default_action_vocab_size(model, tokenizer), folder)
    config_json = Path(cfg.vla) / "config.json" if cfg.vla else None
    if config_json is not None and config_json.is_file() and "vq_" in config_json.read_text():
        raise ValueError(f"{cfg.vla!r} was trained with MiniVLA's VQ action tokens (its config.json names a VQ "
                         "action tokenizer) but no VQ folder was found: pass --vq PATH (the "
                         "vq/pretrain_vq+... folder of the checkpoint)")
    return None


def _action_stats(cfg: LiberoProtocolConfig, model: Any) -> dict[str, Any] | None:
    """The ``--vla`` checkpoint's action statistics for ``cfg.unnorm_key`` (None for the tiny
    random VLA, whose normalised actions go to LIBERO as they are).

    Raises:
        ValueError: a real checkpoint without statistics for the dataset (says which it has).
    """
    from agents.vla.action_tokenizer import load_action_stats

    if not cfg.vla:
        return None
    errors = []
    for source in (model, cfg.vla):
        try:
            return load_action_stats(source, cfg.unnorm_key)
        except (KeyError, FileNotFoundError) as e:
            errors.append(str(e).strip("'\""))
    raise ValueError(f"cannot un-normalise the actions of {cfg.vla!r}: " + "; ".join(errors)
                     + ". Pass --unnorm-key, or add the fine-tuning run's dataset_statistics.json to the folder.")


def _cell(cfg: LiberoProtocolConfig, method: str, seed: int, folder: Path, envs: _Envs) -> dict[str, Any]:
    """Train one method from the SFT policy with one seed, then evaluate; resumes from ``folder``.
    ``envs`` (the simulator processes) is shared by the cells."""
    import torch
    from tqdm.auto import tqdm

    from agents.grpo import GRPOUpdateConfig, group_batch, group_step
    from agents.vla.load import build_tiny_vla, load_vla
    from agents.vla.policy import VLAPolicy, VLASamples
    from wmrl_envs.core import AnchorExecution, CorrectionLoop
    from wmrl_envs.envs.libero.robometer import RobometerWorldModel, build_tiny_robometer
    from wmrl_envs.world_models.base import Trajectory

    torch.manual_seed(seed)
    device, dtype = _device(cfg)
    model, processor = (load_vla(cfg.vla, device=device, dtype=dtype) if cfg.vla
                        else build_tiny_vla(seed=0))  # the same SFT policy for every cell
    policy = VLAPolicy(model, processor, image_keys=("agentview_image",), seed=seed,
                       prompt_template=_prompt_template(processor, model),
                       action_tokenizer=_action_tokenizer(cfg, model, processor))
    action_stats = _action_stats(cfg, model)
    optimizer = torch.optim.AdamW(policy.trainable_parameters(), lr=cfg.lr, weight_decay=0.0)
    world_model = None
    if method != "sparse":
        world_model = (RobometerWorldModel.from_pretrained(cfg.robometer, device=device, dtype=dtype) if cfg.robometer
                       else RobometerWorldModel(*build_tiny_robometer(seed=0)))
    loop = CorrectionLoop(_correction(cfg, method), world_model=world_model, seed=seed,
                          groups_per_step=cfg.groups_per_step)
    rng = np.random.default_rng(seed)
    pairs = [(t, s) for t in cfg.tasks for s in cfg.train_states]
    history: list[dict[str, Any]] = []
    start = 0
    ckpt = folder / "checkpoint.pt"
    if cfg.resume and ckpt.is_file():
        state = torch.load(ckpt, weights_only=False)
        policy.load_adapter_state_dict(state["adapter"])
        optimizer.load_state_dict(state["optimizer"])
        loop.load_state_dict(state["loop"])
        rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        history, start = state["history"], state["step"]
    update = GRPOUpdateConfig(kl_coef=0.0, micro_batch_size=32, drop_zero_advantage=False)
    with tqdm(total=cfg.steps, initial=start, desc=f"{method} seed {seed}: GRPO steps", leave=False) as bar:
        for step in range(start, cfg.steps):
            t0 = time.perf_counter()
            loop.plan_step(cfg.groups_per_step)
            chosen = sorted(pairs[i] for i in rng.choice(len(pairs), size=cfg.groups_per_step,
                                                         replace=len(pairs) < cfg.groups_per_step))
            rewards, weights, parts, rows_of, routes, successes = [], [], [], [], [], []
            for task, state_id in chosen:
                members, results = _rollout(envs, policy, task, [state_id] * cfg.group_size, greedy=False,
                                            action_stats=action_stats)
                real = [float(r["success"]) for r in results]
                ctx = [m[0][0] for m in members]
                trajs = [Trajectory(obs, [None] * (len(obs) - 1), True) for obs, _ in members]
                # the loop's group sequence (predict, route, close; CorrectionLoop.score_group): the
                # rollouts ran above, an anchor group's real scores are their successes
                group = loop.score_group(ctx, trajs, lambda _ticket: AnchorExecution(real=real),
                                         observations=[None] * cfg.group_size, keep_actions=False)
                corr = group.correction
                rewards.append(corr.rewards)
                weights.append(corr.advantage_weight)
                routes.append(group.route)
                successes += real
                for _obs, smp in members:
                    rows_of.append(len(smp))
                    parts.extend(smp)
            # every chunk row of an episode takes the episode's advantage (the one group step)
            stats = group_step(policy, optimizer, VLASamples.concat(parts), group_batch(rewards, weights, update),
                               config=update, turn_episode=np.repeat(np.arange(len(rows_of)), rows_of))
            history.append({"step": step + 1, "routes": routes, "train_success": float(np.mean(successes)),
                            "rho": loop.rho, "anchor_pairs": loop.corrector.debiaser.n_pairs,
                            "loss": stats["loss"] if stats["n_rows"] else None, "seconds": round(time.perf_counter() - t0, 2)})
            folder.mkdir(parents=True, exist_ok=True)
            torch.save({"adapter": policy.adapter_state_dict(), "optimizer": optimizer.state_dict(),
                        "loop": loop.state_dict(), "rng": rng.bit_generator.state,
                        "torch_rng": torch.get_rng_state(), "history": history, "step": step + 1}, ckpt)
            bar.update(1)
    n_eval = len(cfg.tasks) * len(cfg.eval_states)
    with tqdm(total=n_eval, desc=f"{method} seed {seed}: held-out episodes", leave=False) as bar:
        success = _evaluate(envs, policy, cfg, bar, action_stats)
    led = loop.ledger
    return {"method": method, "seed": seed, "success": success, "history": history,
            "anchor_groups": loop.router.n_anchor_groups, "groups": loop.router.n_groups_routed,
            "world_model_calls": led.count("world_model"), "world_model_seconds": led.seconds("world_model")}


def results_table(results: Sequence[dict[str, Any]], methods: Sequence[str], tasks: Sequence[int]) -> str:
    """The paper's layout: one row per method, held-out success (%) per task and on average, mean ±
    standard deviation over seeds (± is left out with one seed)."""
    head = "| method | " + " | ".join(f"task {t}" for t in tasks) + " | average |"
    lines = [head, "|" + "---|" * (len(tasks) + 2)]
    for m in methods:
        cells = [r for r in results if r["method"] == m]
        if not cells:
            continue
        cols = []
        for t in [*map(str, tasks), "avg"]:
            vals = [100 * (float(np.mean(c["success"][t])) if t != "avg"
                           else float(np.mean([np.mean(v) for v in c["success"].values()]))) for c in cells]
            sd = f" ± {statistics.stdev(vals):.1f}" if len(vals) > 1 else ""
            cols.append(f"{statistics.mean(vals):.1f}{sd}")
        lines.append(f"| {m} (n={len(cells)}) | " + " | ".join(cols) + " |")
    return "\n".join(lines) + "\n"


def _plot(results: Sequence[dict[str, Any]], methods: Sequence[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    for i, m in enumerate(methods):
        vals = [100 * float(np.mean([np.mean(v) for v in r["success"].values()])) for r in results if r["method"] == m]
        if vals:
            ax.bar(i, statistics.mean(vals), color=f"C{i}", alpha=0.7)
            ax.scatter([i] * len(vals), vals, color="k", s=12, zorder=3)
    ax.set_xticks(range(len(methods)), methods)
    ax.set_ylabel("held-out success (%)")
    ax.set_title("LIBERO-Long, states 16-49 (dots: seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main_libero(cfg: LiberoProtocolConfig) -> dict[str, Any]:
    """Run every (method, seed) cell not yet in ``<out>/results.json``, then write the table
    (``table.md``, printed) and the plot (``success.png``). Returns the results dict."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    res_path = out / "results.json"
    done: list[dict[str, Any]] = []
    settings = dataclasses.asdict(cfg)
    if cfg.resume and res_path.is_file():
        prev = json.loads(res_path.read_text())
        keep = {k: v for k, v in settings.items() if k not in ("seeds", "methods", "resume", "out", "device")}
        old = {k: v for k, v in prev["config"].items() if k in keep}
        if json.loads(json.dumps(keep)) != old:
            raise ValueError(f"{res_path} was written with other settings ({old}); pass another --out or --no-resume")
        done = prev["cells"]
    cells = [(m, s) for m in cfg.methods for s in cfg.seeds]
    t0 = time.perf_counter()
    envs = _Envs(cfg)
    try:
        for m, s in cells:
            if any(c["method"] == m and c["seed"] == s for c in done):
                continue
            print(f"[libero] {m}, seed {s}", flush=True)
            done.append(_cell(cfg, m, s, out / f"{m}-seed{s}", envs))
            res_path.write_text(json.dumps({"config": settings, "cells": done}, indent=1))
    finally:
        envs.close()
    table = results_table(done, cfg.methods, cfg.tasks)
    (out / "table.md").write_text(table)
    _plot(done, cfg.methods, out / "success.png")
    print(table)
    print(f"[libero] {len(done)} cells in {out} ({time.perf_counter() - t0:.0f} s this run)")
    return {"config": settings, "cells": done, "table": table}
