"""``wmrl advise``: before committing compute, measure whether a world model pays and at which
anchor fraction.

Holds :class:`AdviseConfig` (the command's flags), :func:`run_pilot` (N groups of an env, each
executed for real *and* scored by the world model, through the same
:class:`~wmrl_envs.AnchoredWorldModelWrapper` and :class:`~wmrl_envs.core.CorrectionLoop` as
training), :func:`advice_from_run` (the same advice from a ``wmrl train`` run folder's anchor
groups), :func:`load_advice_groups` (the anchor groups an earlier ``advice.json`` stored, for
``--from-advice``), :func:`plot_advice` and the built-in AutoResearch factories. The advice itself is
:class:`wmrl_envs.core.AnchorAdvisor`'s (``docs/method.md``, "Choosing the anchor fraction"): the
within-group correlation of world-model and real scores with a bootstrap CI, the per-rollout
costs, the recommended anchor fraction f* and the predicted speedup over real-execution GRPO
(a model of steps and cost per step that ignores the world model's bias; without a measured
gradient noise scale, ``--noise-batch-ratio``, it is given as a range).

The env, the world model and the policy are importable factories (``module:function``, called
with no arguments):

* env: a Gymnasium env in which one ``step(action)`` executes an action for real and returns its
  score as the reward (an outcome-mode env; it may report ``info["execution_cpu_s"]``);
* world model: an object with ``predict(contexts, actions) -> list[WorldModelPrediction]``
  (:class:`wmrl_envs.world_models.base.WorldModel`);
* policy: an object with ``sample(observation, info, group_size) -> list[action]`` (the G actions
  of one group for the task the env's reset returned).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import math
import numbers
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Iterator, Literal, Protocol, TextIO

import numpy as np

__all__ = [
    "AdviseConfig",
    "PilotPolicy",
    "load_factory",
    "run_pilot",
    "advice_from_run",
    "load_advice_groups",
    "advise_loop",
    "plot_advice",
    "main_advise",
    "autoresearch_env",
    "autoresearch_world_model",
    "autoresearch_policy",
]


class PilotPolicy(Protocol):
    """What the pilot needs from a policy."""

    def sample(self, observation: Any, info: dict[str, Any], group_size: int) -> list[Any]:
        """The ``group_size`` actions of one group for the task of ``observation`` / ``info``."""


@dataclass
class AdviseConfig:
    """Configuration of ``wmrl advise`` (each field is a CLI flag)."""

    run_dir: str | None = None
    """A ``wmrl train`` run folder: advise from its checkpoint's anchor groups and cost ledger
    instead of running a pilot (the pilot's flags, --groups, --group-size, --env, --world-model and
    --policy, are refused with it; the groups per step default to the run's own)."""
    from_advice: str | None = None
    """An advice.json written by an earlier wmrl advise pilot: advise again from the anchor groups and
    costs it stored, without a pilot (e.g. with another --groups-per-step, --noise-batch-ratio or fitting
    flags). Every setting it used and you do not give is reused (--seed, --n-boot, --f-min, --f-max,
    --min-groups, --step-law, the b it used, --groups-per-step, --world-model-fit-executions, --real-steps,
    --run-group-size), and a line says which; --cost-basis and the pilot's flags are refused with it
    (the costs and groups are stored)."""
    groups: int = 16
    """Pilot groups; each is executed for real and scored by the world model (anchor fraction 1). At least
    --min-groups (default 8): below it the advice has too few groups to give one."""
    group_size: int = 4
    """G, rollouts per group (as in training: the correlation that matters is within groups)."""
    env: str = "agents.advise:autoresearch_env"
    """Factory of the env (``module:function``); default: AutoResearch's training tasks in the
    bubblewrap sandbox."""
    world_model: str = "agents.advise:autoresearch_world_model"
    """Factory of the world model; default: the benchmark's embedding world model."""
    policy: str = "agents.advise:autoresearch_policy"
    """Factory of the policy; default: the benchmark's grammar agent, untrained."""
    seed: int = 0
    """Seed of the tasks drawn and of the bootstrap."""
    f_min: float = 0.05
    """Lowest anchor fraction to recommend: the anchors that fit the calibration map and watch the
    world model, which the variance model does not price (it would often answer 0)."""
    f_max: float = 1.0
    """Highest anchor fraction to recommend."""
    noise_batch_ratio: float | None = None
    """b = B_noise / B: real-execution GRPO's gradient noise scale (in groups) over the groups per step
    of the run you plan (benchmarks/noise_scale.py measures B_noise on AutoResearch; in your own loop,
    wmrl_envs.core.GradientNoiseScale fed by agents.grpo.group_gradient_moments); unset: the advice gives
    the model's range from a noise-limited batch to a batch far above the noise scale, and recommends
    from the noise-limited end."""
    groups_per_step: int | None = None
    """Groups per step of the run you plan: the real batches the advice prices run from the anchor batch
    up to it (unset: the run's own with --run-dir, the stored one with --from-advice, else as shares of
    your batch), and when the advice recommends WMRL it says the --anchor-window that realises the
    recommended fraction (the router puts at least one anchor group in every window of steps, so
    with the default window of 1 step a fraction below 1 / groups_per_step is not realised)."""
    world_model_fit_executions: int = 0
    """Real executions the world model was fitted on before training (e.g. a log of earlier runs), paid
    once: with --real-steps and --groups-per-step the advice counts their cost (at the pilot's cost per
    execution) against real GRPO's compute to the target, and the verdict, the recommended choice and
    the --anchor-window hint follow the totals. 0: a world model that costs nothing before training
    (a frozen LLM judge, one learned from its anchors)."""
    real_steps: int | None = None
    """Steps real-execution GRPO at your batch would take to your target (e.g. the steps you would train
    it for), each of --groups-per-step groups of --run-group-size rollouts (default: the pilot's, or the
    run folder's, group size): what a one-time fitting cost is weighed against (needed with
    --world-model-fit-executions, and refused without it)."""
    run_group_size: int | None = None
    """G of the run you plan, for weighing a fitting cost against real GRPO's compute (--real-steps x
    --groups-per-step x G rollouts); unset: the pilot's --group-size (the run folder's G with --run-dir)."""
    step_law: str = "adam"
    """The optimiser of the run you plan: "adam" (Adam/AdamW/RMSprop at a fixed learning rate, as wmrl
    train and every benchmark here: steps grow as sqrt(1 + B_noise/B)) or "sgd" (SGD with its learning
    rate retuned for every batch: 1 + B_noise/B); docs/method.md, "Choosing the anchor fraction"."""
    min_groups: int = 8
    """Usable groups below which the verdict is "not enough anchor groups"."""
    n_boot: int = 1000
    """Bootstrap resamples of the groups for the confidence intervals."""
    out_dir: str = "runs/advise"
    """Where advice.json and advice.png are written."""
    cost_basis: Literal["cpu", "wall"] = "cpu"
    """What a cost is (CorrectionConfig.cost_basis): "cpu", CPU-seconds of this machine, or "wall",
    wall-clock seconds (say "wall" when an execution waits for a remote job, a GPU queue or a paid API)."""


def load_factory(spec: str) -> Callable[[], Any]:
    """The callable named by ``"module:function"``. The working folder is importable, as it is for
    ``python -m`` (appended to ``sys.path``, after the installed packages, so it shadows none), so
    ``wmrl advise --env my_pkg.factories:make_env`` works from the folder that holds ``my_pkg``.

    Raises:
        ValueError: ``spec`` is not of that form, the module cannot be imported (the message says
            to run from the folder that holds the package or to set ``PYTHONPATH``) or has no such
            callable (the message says which).
    """
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        hint = ""
        if spec in ("judge", "learned-policy", "learned-encoder"):
            hint = (f" ('{spec}' is a `wmrl train --world-model` choice: for advice on a training run's anchor "
                    "groups, whatever its world model, use `wmrl advise --run-dir RUN_DIR`)")
        raise ValueError(f"a factory is given as 'module:function', got {spec!r}{hint}")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        top = module.split(".")[0]
        raise ValueError(
            f"factory {spec!r}: cannot import {module!r} ({exc}); run wmrl advise from the folder that holds "
            f"{top!r} (now {cwd}), or put that folder on the import path: PYTHONPATH=/path/to/folder wmrl advise ..."
        ) from exc
    fn = getattr(mod, name, None)
    if not callable(fn):
        raise ValueError(f"factory {spec!r}: {module!r} has no callable {name!r}")
    return fn


def run_pilot(env: Any, world_model: Any, policy: PilotPolicy, *, groups: int = 16, group_size: int = 4,
              seed: int = 0, progress: Callable[[int], None] | None = None, cost_basis: str = "cpu") -> Any:
    """Run ``groups`` groups with both real execution and the world model.

    Every group is an anchor group (anchor fraction 1) of an
    :class:`~wmrl_envs.AnchoredWorldModelWrapper` without debiasing (the advice calibrates out of
    sample instead): its loop's advisor collects the (raw world-model, real) scores group by
    group, its ledger the CPU-seconds of execution, world model and generation (the policy's
    ``sample``, timed). The pilot trains nothing, so the policy update's cost, which training
    adds to every rollout under any method, is not in its γ (nor is the world model's own
    fitting cost, paid once before).

    Args:
        env, world_model, policy: see the module docstring.
        groups: number of groups (>= 2).
        group_size: rollouts per group (>= 2).
        seed: group i resets the env with ``seed + i`` (its task); each of its rollouts then
            draws outcome noise from its own stream (``docs/method.md``, "Randomness"), so a
            group's shared seed does not cancel the noise that real GRPO would see.
        progress: called with the number of groups done after each group.
        cost_basis: what the ledger counts as a cost (``CorrectionConfig.cost_basis``: ``"cpu"``
            or ``"wall"``).

    Returns:
        The wrapper: ``wrapper.loop.advisor`` holds the pilot's groups, ``wrapper.loop.ledger`` the
        costs. The advice ``wmrl advise`` gives (world-model scores calibrated out of sample, as
        training with debiasing uses them) is
        ``wrapper.loop.advisor.advise(CostRates.from_ledger(wrapper.loop.ledger), calibrate="crossfit")``;
        ``wrapper.loop.advise()`` would correlate the *raw* scores, since the pilot's loop does
        not debias.

    Raises:
        ValueError: ``groups`` or ``group_size`` below 2, or the policy returned a number of
            actions other than ``group_size``.
    """
    from wmrl_envs import AnchoredWorldModelWrapper
    from wmrl_envs.core import GENERATION, CorrectionConfig

    if groups < 2 or group_size < 2:
        raise ValueError(f"a pilot needs groups >= 2 and group_size >= 2, got groups={groups}, group_size={group_size}")
    wrapper = AnchoredWorldModelWrapper(env, world_model, group_size=group_size, groups_per_step=1, seed=seed,
                                        correction=CorrectionConfig(anchor_fraction=1.0, debias=False, denoise=False,
                                                                    cost_basis=cost_basis))
    for i in range(groups):
        obs, info = wrapper.begin_group(seed=seed + i)
        with wrapper.loop.ledger.timed(GENERATION, count=group_size):
            actions = list(policy.sample(obs, info, group_size))
        if len(actions) != group_size:
            raise ValueError(f"the policy returned {len(actions)} actions for a group of {group_size}")
        wrapper.plan_step(1)
        wrapper.score_group(actions)
        if progress:
            progress(i + 1)
    return wrapper


@contextlib.contextmanager
def pilot_progress(total: int, stream: TextIO | None = None, min_interval_s: float = 10.0
                   ) -> Iterator[Callable[[int], None]]:
    """The pilot's progress on ``stream`` (default: ``sys.stderr``), as :func:`run_pilot`'s
    ``progress`` callable (called with the number of groups done).

    On a terminal it is a progress bar (rich, cleared at the end). Elsewhere (a log file, CI),
    where a bar draws nothing, it is plain lines ``[advise] pilot group n/total done (t s
    elapsed)``: the first and the last group always, the others at most one per
    ``min_interval_s`` seconds (a pilot of slow groups gets a line per group; one of instant
    groups does not fill the log).

    Args:
        total: the pilot's number of groups.
        stream: where to write; its ``isatty()`` chooses the bar or the lines.
        min_interval_s: the least time between two lines (seconds; 0: a line per group).
    """
    stream = sys.stderr if stream is None else stream
    if getattr(stream, "isatty", lambda: False)():
        from rich.console import Console
        from rich.progress import Progress

        with Progress(console=Console(file=stream), transient=True) as bar:
            task = bar.add_task("pilot groups (real execution + world model)", total=total)
            yield lambda n: bar.update(task, completed=n)
        return
    start = time.monotonic()
    last = [-math.inf]

    def line(n: int) -> None:
        now = time.monotonic()
        if n in (1, total) or now - last[0] >= min_interval_s:
            last[0] = now
            print(f"[advise] pilot group {n}/{total} done ({now - start:.0f} s elapsed)", file=stream, flush=True)

    yield line


def _restore_run(run_dir: str | Path, cost_basis: str, advisor_settings: dict[str, Any]) -> Any:
    """The :class:`~wmrl_envs.core.CorrectionLoop` of a ``wmrl train`` run folder's checkpoint, its
    advisor set to ``advisor_settings`` (see :func:`advice_from_run` for the errors)."""
    from wmrl_envs.core import CorrectionLoop

    if not Path(run_dir).is_dir():
        raise FileNotFoundError(f"--run-dir {run_dir}: no such folder (give a wmrl train run folder, e.g. runs/default-<time>)")
    path = Path(run_dir) / "checkpoint" / "state.json"
    if not path.is_file():
        raise FileNotFoundError(f"{run_dir} has no checkpoint (expected {path}); give a wmrl train run folder")
    try:
        state = json.loads(path.read_text())["wrapper"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a wmrl train checkpoint ({type(exc).__name__}: {exc})") from None
    ledger = state.get("ledger") if isinstance(state, dict) else None
    wm_calls = (ledger.get("world_model") or {}).get("count", 0) if isinstance(ledger, dict) else 0
    if isinstance(state, dict) and state.get("world_model") is None and not wm_calls:
        raise ValueError(f"--run-dir {run_dir} is a real-execution run (no world model, so no anchor groups to advise "
                         f"from): give the WMRL run's folder (its parent, {Path(run_dir).resolve().parent})")
    if "advisor" not in state:
        raise ValueError(f"{path} was saved by a wmrl version without the advisor: it holds anchor pairs but not "
                         "their groups; run `wmrl advise` as a pilot instead, or train again")
    from wmrl_envs.core import CorrectionConfig

    loop = CorrectionLoop(CorrectionConfig(cost_basis=cost_basis))
    with warnings.catch_warnings():  # the run's settings are meant to replace the defaults here
        warnings.simplefilter("ignore", UserWarning)
        loop.load_state_dict(state)
    loop.advisor.load_state_dict({**loop.advisor.state_dict(), **advisor_settings})
    return loop


def run_setting(run_dir: str | Path, name: str) -> int | None:
    """A positive integer setting (``"groups_per_step"``, ``"group_size"``) of a ``wmrl train`` run
    folder: its ``config.json``'s, else the one its checkpoint stored (``checkpoint/state.json``'s
    wrapper state; ``None``: neither holds such an integer)."""
    def ok(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 1

    try:
        v = json.loads((Path(run_dir) / "config.json").read_text()).get(name)
        if ok(v):
            return v
    except (OSError, ValueError, AttributeError):
        pass
    try:
        v = json.loads((Path(run_dir) / "checkpoint" / "state.json").read_text())["wrapper"].get(name)
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        return None
    return v if ok(v) else None


def advice_from_run(run_dir: str | Path, noise_batch_ratio: float | None = None, *, cost_basis: str = "cpu",
                    groups_per_step: int | None = None, step_law: str = "adam", fitting_share: float = 0.0,
                    **advisor_settings: Any) -> tuple[Any, Any]:
    """The advice for a ``wmrl train`` run folder's training anchor groups and cost ledger.

    Args:
        run_dir: the run folder (its ``checkpoint/state.json`` is read, and ``config.json`` for
            the groups per step).
        noise_batch_ratio: ``B_noise / B`` for the prediction (``None``: not measured).
        cost_basis: how the run's ledger is read (``"cpu"`` or ``"wall"``; the ledger holds both).
        groups_per_step: groups per step the choices are priced at (``None``: the run's own, from
            its ``config.json`` or else its checkpoint, :func:`run_setting`; as shares of it when
            neither holds it).
        step_law: the optimiser's step law (``"adam"`` or ``"sgd"``).
        fitting_share: a world model's one-time fitting over real GRPO's compute to the target
            (:meth:`~wmrl_envs.core.AnchorAdvisor.advise`; 0: none).
        advisor_settings: ``f_min``, ``f_max``, ``min_groups``, ``n_boot``, ``seed`` of the advisor.

    Returns:
        ``(advice, loop)``: the :class:`~wmrl_envs.core.AnchorAdvice` and the restored
        :class:`~wmrl_envs.core.CorrectionLoop` (its advisor, debiaser and ledger).

    Raises:
        FileNotFoundError: no checkpoint in the folder.
        ValueError: the checkpoint predates the advisor (no anchor groups saved), or holds no
            execution or world-model call.
    """
    loop = _restore_run(run_dir, cost_basis, advisor_settings)
    if groups_per_step is None:
        groups_per_step = run_setting(run_dir, "groups_per_step")
    return advise_loop(loop, noise_batch_ratio=noise_batch_ratio, groups_per_step=groups_per_step, step_law=step_law,
                       fitting_share=fitting_share), loop


def advise_loop(loop: Any, *, noise_batch_ratio: float | None = None, groups_per_step: int | None = None,
                step_law: str = "adam", costs: Any = None, fitting_share: float = 0.0) -> Any:
    """The advice for a :class:`~wmrl_envs.core.CorrectionLoop`'s own training anchor groups (what
    :meth:`CorrectionLoop.advise <wmrl_envs.core.CorrectionLoop.advise>` answers: the run's calibration,
    its ledger's costs, its adaptive fraction's noise scale when it has one), with every choice priced
    at the run's ``groups_per_step`` (``docs/method.md``, "Every choice").

    Args:
        loop: the correction loop.
        noise_batch_ratio: ``B_noise / B`` (``None``: the adaptive fraction's, else not measured).
        groups_per_step: the run's groups per step (``None``: real batches as shares of it).
        step_law: the optimiser's step law (``"adam"`` or ``"sgd"``).
        costs: per-rollout costs (``None``: the loop's ledger, :meth:`CostRates.from_ledger`).
        fitting_share: a world model's one-time fitting over real GRPO's compute to the target (0: none).

    Returns:
        The :class:`~wmrl_envs.core.AnchorAdvice`.

    Raises:
        ValueError: ``costs`` omitted and the ledger has no execution or no world-model call yet; a bad
            ``step_law`` or ``groups_per_step``.
    """
    return loop.advise(costs, noise_batch_ratio, groups_per_step=groups_per_step, step_law=step_law,
                       fitting_share=fitting_share)


def load_advice_groups(path: str | Path, advisor_settings: dict[str, Any]) -> tuple[Any, Any, str | None, dict[str, Any]]:
    """The anchor groups and costs an earlier ``wmrl advise`` stored in its ``advice.json``
    (``"anchor_groups"``), for ``--from-advice``.

    Returns:
        ``(advisor, costs, calibrate, saved)``: an :class:`~wmrl_envs.core.AnchorAdvisor` with
        ``advisor_settings`` holding the groups, the :class:`~wmrl_envs.core.CostRates`, the
        calibration the advice used (``"crossfit"`` or ``None``) and the whole saved advice.

    Raises:
        FileNotFoundError: no such file. ValueError: not JSON, no anchor groups stored (an
            advice.json of an earlier version), or malformed groups or costs.
    """
    from wmrl_envs.core import AnchorAdvisor, CostRates

    path = Path(path)
    saved = _read_advice(path)
    stored = saved.get("anchor_groups")
    if not isinstance(stored, dict) or "advisor" not in stored:
        raise ValueError(f"--from-advice {path} holds no anchor groups (an advice.json written before wmrl advise stored "
                         "them, or not an advice.json): run the pilot again (wmrl advise ... --out-dir DIR), then "
                         "advise again from DIR/advice.json")
    groups = stored["advisor"].get("groups") if isinstance(stored["advisor"], dict) else None
    for i, g in enumerate(groups if isinstance(groups, list) else []):
        for side, name in ((0, "world-model"), (1, "real")):
            scores = g[side] if isinstance(g, list) and len(g) > side and isinstance(g[side], list) else []
            for j, v in enumerate(scores):
                if not (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))):
                    raise ValueError(f"--from-advice {path}: its anchor_groups.advisor.groups[{i}][{side}][{j}] (a "
                                     f"{name} score) is {v!r}, not a number or null (was the file edited?): advise "
                                     "from the advice.json as written, or run the pilot again")
    try:
        advisor = AnchorAdvisor(**advisor_settings)
        advisor.load_state_dict({**stored["advisor"], **advisor_settings})
        c = saved["costs"]
        costs = CostRates(execution_s=c["execution_s"], world_model_s=c["world_model_s"], other_s=c["other_s"],
                          unit=c["unit"])
        calibrate = stored.get("calibrate")
        if calibrate not in ("crossfit", None):
            raise ValueError(f"unknown calibration {calibrate!r}")
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"--from-advice {path}: its anchor groups or costs are malformed ({type(exc).__name__}: "
                         f"{exc}); run the pilot again") from None
    return advisor, costs, calibrate, saved


def plot_advice(advice: Any, loop: Any, path: str | Path) -> None:
    """``advice.png``: world-model vs real score within groups (both centred on their group's mean),
    the calibration map (isotonic fit of real on raw world-model score, drawn over the pairs), the
    cost split per rollout, and the predicted speedup against the anchor fraction with f* marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sklearn.isotonic import IsotonicRegression

    from wmrl_envs.core import predicted_speedup

    wm, real = loop.advisor.groups()
    fig, ax = plt.subplots(2, 2, figsize=(10, 8))
    xs, ys, raw_x, raw_y = [], [], [], []
    for w, r in zip(wm, real):
        both = [(a, b) for a, b in zip(w, r) if a is not None and b is not None]
        raw_x += [a for a, _ in both]
        raw_y += [b for _, b in both]
        if len(both) >= 2:
            m = np.mean(both, axis=0)
            xs += [a - m[0] for a, _ in both]
            ys += [b - m[1] for _, b in both]
    a = ax[0, 0]
    a.scatter(xs, ys, s=12, alpha=0.6)
    a.axhline(0, color="grey", lw=0.5)
    a.axvline(0, color="grey", lw=0.5)
    a.set_xlabel("world-model score − group mean")
    a.set_ylabel("real score − group mean")
    a.set_title(f"within groups: r = {advice.r:.2f} ({advice.n_groups} groups)")
    a = ax[0, 1]
    a.scatter(raw_x, raw_y, s=12, alpha=0.5, label="anchor pairs")
    if len(set(raw_x)) >= 2:
        iso = IsotonicRegression(out_of_bounds="clip").fit(raw_x, raw_y)
        grid = np.linspace(min(raw_x), max(raw_x), 200)
        a.plot(grid, iso.predict(grid), color="C3", label="isotonic map (fitted here)")
    a.set_xlabel("raw world-model score")
    a.set_ylabel("real score")
    a.set_title("calibration")
    a.legend(fontsize=8)
    a = ax[1, 0]
    c = advice.costs
    names, vals = ["execution", "world model", "generation + update"], [c.execution_s, c.world_model_s, c.other_s]
    a.bar(names, vals, color=["C3", "C0", "C2"])
    positive = [v for v in vals if v > 0]
    if positive and max(positive) > 50 * min(positive):  # e.g. 1 : 200 between world model and execution
        a.set_yscale("log")
    a.set_ylabel(f"{c.unit} per rollout")
    a.set_title(f"cost split (gamma = {c.gamma:.3g})")
    a = ax[1, 1]
    if math.isfinite(advice.r):
        fs = np.linspace(0.005, 1.0, 400)
        b = advice.noise_batch_ratio
        law = getattr(advice, "step_law", "adam")  # the curve under the step law the advice priced with
        if b is not None:
            a.plot(fs, [predicted_speedup(float(f), advice.r, c, b, law) for f in fs], color="C0", label=f"b = {b:.3g}")
        else:  # the model's range: noise-limited batch (lower) to a batch far above the noise scale (upper)
            lo = [predicted_speedup(float(f), advice.r, c, None, law) for f in fs]
            hi = [predicted_speedup(float(f), advice.r, c, 0.0, law) for f in fs]
            a.fill_between(fs, lo, hi, color="C0", alpha=0.2, label="noise scale unmeasured: range")
            a.plot(fs, lo, color="C0", label="noise-limited end")
        a.set_yscale("log")
        a.axhline(1.0, color="grey", ls="--", lw=0.8, label="real-execution GRPO")
        a.axvline(advice.recommended_fraction, color="C3", ls=":",
                  label=(f"recommended f = {advice.recommended_fraction:.3f}" if advice.use_wmrl
                         else f"WMRL's f = {advice.recommended_fraction:.3f} (not recommended)"))
        a.legend(fontsize=8)
    a.set_xlabel("anchor fraction f")
    a.set_ylabel("predicted speedup (model; ignores bias)")
    a.set_title("predicted speedup vs anchor fraction"
                + ("\n(training only: fitting not counted)" if getattr(advice, "fitting_share", 0) > 0 else ""))
    import textwrap

    fig.suptitle("\n".join(textwrap.wrap(advice.verdict, 150)), fontsize=8)  # the whole verdict, wrapped
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


_FLAGS = ("f_min", "f_max", "min_groups", "n_boot", "max_groups", "groups_per_step", "step_law", "group_size")


def _as_flags(exc: ValueError) -> ValueError:
    """``exc`` with the settings' field names (``f_min``) written as the flags (``--f-min``)."""
    import re

    text = re.sub(r"(?<![\w-])(" + "|".join(_FLAGS) + r")\b", lambda m: "--" + m.group(1).replace("_", "-"), str(exc))
    return ValueError(text)


def _check_out_dir(out_dir: str) -> None:
    """Refuse, before any pilot, an ``--out-dir`` that is a file or lies under one, or a folder
    that cannot be written."""
    out = Path(out_dir)
    for p in (out, *out.parents):
        if p.exists():
            if not p.is_dir():
                raise ValueError(f"--out-dir {out_dir}: {p} is a file, not a folder; give --out-dir a folder (new or "
                                 "existing) for advice.json and advice.png, e.g. --out-dir runs/advise")
            if not os.access(p, os.W_OK | os.X_OK):
                raise ValueError(f"--out-dir {out_dir}: cannot write in {p}; give --out-dir a folder you can write")
            return


def main_advise(cfg: AdviseConfig, log: Callable[[str], None] = print, *, given: Collection[str] | None = None) -> Any:
    """``wmrl advise``: a pilot (or a run folder's groups, or an earlier advice.json's), then the
    advice printed, in ``advice.json`` and in ``advice.png``.

    With ``--from-advice`` the settings the earlier advice used (:data:`REUSED`: the seed, the
    bootstrap, the bounds, the step law, b, the groups per step and the fitting flags) are reused
    unless given; one line says which were reused and which overridden, so a re-advice with no flag
    gives the same advice.

    Args:
        cfg: the flags.
        log: where the lines go.
        given: the fields the user gave (the CLI passes the flags on its command line); ``None``:
            those that differ from :class:`AdviseConfig`'s defaults.

    Returns:
        The :class:`~wmrl_envs.core.AnchorAdvice`.

    Raises:
        ValueError: bad settings or factories (named by their flags), an incomplete run folder or
            advice.json, an ``--out-dir`` that cannot be a folder (all before any pilot).
    """
    from types import SimpleNamespace

    from wmrl_envs.core import AnchorAdvisor, CostRates
    from wmrl_envs.core.advisor_choices import fitting_share
    from wmrl_envs.core.advisor_model import check_step_law

    if given is None:
        default = AdviseConfig()
        given = {f.name for f in dataclasses.fields(cfg) if getattr(cfg, f.name) != getattr(default, f.name)}
    given = set(given)
    if cfg.run_dir is not None and cfg.from_advice is not None:
        raise ValueError("give --run-dir or --from-advice, not both")
    reuse_line = None
    if cfg.from_advice is not None:
        if "cost_basis" in given:
            raise ValueError(f"--cost-basis has no effect with --from-advice: the costs are stored in {cfg.from_advice} "
                             "(their unit with them); leave --cost-basis out, or run the pilot again with it")
        cfg, reuse_line = _reuse_settings(cfg, _read_advice(cfg.from_advice), given)
    settings = dict(f_min=cfg.f_min, f_max=cfg.f_max, min_groups=cfg.min_groups, n_boot=cfg.n_boot, seed=cfg.seed)
    if isinstance(cfg.n_boot, int) and cfg.n_boot > MAX_N_BOOT:  # as a stored one (each resample refits the groups)
        raise ValueError(f"--n-boot must be at most {MAX_N_BOOT} (bootstrap resamples; the intervals settle well "
                         f"below), got {cfg.n_boot}")
    try:
        AnchorAdvisor(**settings)  # refuse bad settings before a pilot spends anything
        check_step_law(cfg.step_law)
    except ValueError as exc:
        raise _as_flags(exc) from None
    b = cfg.noise_batch_ratio
    if b is not None and not (isinstance(b, numbers.Real) and not isinstance(b, bool) and b >= 0):
        raise ValueError(f"--noise-batch-ratio must be B_noise / B >= 0 (a measured gradient noise scale over the "
                         f"batch of the run you plan; inf or unset: not measured), got {b!r}")
    if b is not None and math.isinf(b):
        cfg = dataclasses.replace(cfg, noise_batch_ratio=None)
    for flag, v in (("--groups-per-step", cfg.groups_per_step), ("--run-group-size", cfg.run_group_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{flag} must be an integer >= 1 (of the run you plan), got {v!r}")
    fit = cfg.world_model_fit_executions
    if isinstance(fit, bool) or not isinstance(fit, int) or fit < 0:
        raise ValueError(f"--world-model-fit-executions must be an integer >= 0 (real executions the world model "
                         f"was fitted on), got {fit!r}")
    pilot = cfg.run_dir is None and cfg.from_advice is None
    unused = [f"--{k.replace('_', '-')}" for k in PILOT_ONLY if k in given]
    if not pilot and unused:
        raise ValueError(f"{', '.join(unused)} set{'s' if len(unused) == 1 else ''} the pilot, and "
                         f"{'--run-dir' if cfg.run_dir is not None else '--from-advice'} runs none (its anchor groups "
                         "are already scored): leave " + ("it" if len(unused) == 1 else "them") + " out"
                         + ("; the G of the run you plan is --run-group-size" if "--group-size" in unused else ""))
    if "real_steps" in given and cfg.real_steps is not None and not fit:
        raise ValueError("--real-steps is only the yardstick of a fitting cost: it goes together with "
                         "--world-model-fit-executions (the real executions the world model was fitted on); give both, "
                         "or neither")
    missing = ([] if cfg.real_steps is not None else ["--real-steps (its steps to the target at your batch)"]) + (
        ["--groups-per-step"] if pilot and cfg.groups_per_step is None else [])
    if fit and missing:
        raise ValueError("--world-model-fit-executions is weighed against real GRPO's compute to your target: give "
                         + " and ".join(missing) + " too")
    if cfg.real_steps is not None and (isinstance(cfg.real_steps, bool) or not isinstance(cfg.real_steps, int)
                                       or cfg.real_steps < 1):
        raise ValueError(f"--real-steps must be an integer >= 1 (real GRPO's steps to your target), got {cfg.real_steps!r}")
    if pilot and (cfg.groups < 2 or cfg.group_size < 2):
        raise ValueError(f"a pilot needs --groups >= 2 and --group-size >= 2, got {cfg.groups} and {cfg.group_size}")
    if pilot and cfg.groups < cfg.min_groups:
        raise ValueError(f"--groups {cfg.groups} is below --min-groups {cfg.min_groups}: the advice needs at least "
                         f"{cfg.min_groups} usable pilot groups, so this pilot would give none; run --groups "
                         f"{cfg.min_groups} or more (or lower --min-groups, at least 2)")
    _check_out_dir(cfg.out_dir)
    out = Path(cfg.out_dir)
    gps, run_g = cfg.groups_per_step, cfg.run_group_size
    loop = None
    if cfg.run_dir is not None:
        loop = _restore_run(cfg.run_dir, cfg.cost_basis, settings)
        gps = gps if gps is not None else run_setting(cfg.run_dir, "groups_per_step")
        real_groups = loop.advisor.groups()[1]
        pilot_g = run_setting(cfg.run_dir, "group_size") or (len(real_groups[-1]) if real_groups else None)
        advisor, calibrate = loop.advisor, loop.advice_calibration()
        source = f"run folder {cfg.run_dir}"
    elif cfg.from_advice is not None:
        advisor, costs, calibrate, saved = load_advice_groups(cfg.from_advice, settings)
        pilot_g = saved["anchor_groups"].get("group_size")
        if pilot_g is not None and (isinstance(pilot_g, bool) or not isinstance(pilot_g, int) or pilot_g < 1):
            raise ValueError(f"--from-advice {cfg.from_advice}: its anchor_groups.group_size is {pilot_g!r}, not an "
                             "integer >= 1 or null (was the file edited?): give --run-group-size, or advise from the "
                             "advice.json as written")
        source = f"{_original_source(saved.get('source'))}; re-advised from {cfg.from_advice}"
    else:
        make_env, make_wm, make_policy = (load_factory(s) for s in (cfg.env, cfg.world_model, cfg.policy))
        env, wm, policy = make_env(), make_wm(), make_policy()
        for what, obj, method in (("--env", env, "step"), ("--world-model", wm, "predict"), ("--policy", policy, "sample")):
            if not callable(getattr(obj, method, None)):
                raise ValueError(f"{what} factory returned a {type(obj).__name__} without a {method}() method "
                                 "(see `wmrl advise --help` and agents/advise.py for what each factory must return)")
        try:
            with pilot_progress(cfg.groups) as progress:
                wrapper = run_pilot(env, wm, policy, groups=cfg.groups, group_size=cfg.group_size, seed=cfg.seed,
                                    progress=progress, cost_basis=cfg.cost_basis)
        finally:
            getattr(env, "close", lambda: None)()
        loop = wrapper.loop
        loop.advisor.load_state_dict({**loop.advisor.state_dict(), **settings})
        advisor, calibrate, pilot_g = loop.advisor, "crossfit", cfg.group_size  # calibrated out of sample, as training
        source = f"pilot of {cfg.groups} groups x G = {cfg.group_size} ({cfg.env}, {cfg.world_model}, {cfg.policy})"
    if loop is not None:
        costs = CostRates.from_ledger(loop.ledger)
    run_g = run_g if run_g is not None else pilot_g
    if fit and (gps is None or run_g is None):
        raise ValueError("--world-model-fit-executions needs the groups per step and the group size of the run you "
                         "plan: give " + " and ".join(f for f, v in (("--groups-per-step", gps), ("--run-group-size", run_g))
                                                      if v is None))
    phi = fitting_share(fit, cfg.real_steps, gps, run_g, costs) if fit else 0.0
    if cfg.run_dir is not None:
        advice = advise_loop(loop, noise_batch_ratio=cfg.noise_batch_ratio, groups_per_step=gps, step_law=cfg.step_law,
                             costs=costs, fitting_share=phi)
    else:
        advice = advisor.advise(costs, calibrate=calibrate, noise_batch_ratio=cfg.noise_batch_ratio,
                                groups_per_step=gps, step_law=cfg.step_law, fitting_share=phi)
    out.mkdir(parents=True, exist_ok=True)

    from wmrl_envs.utils import finite_or_none  # strict JSON: NaN and infinities become null

    fitting = fitting_advice(advice, fit, cfg.real_steps, gps, run_g) if fit else None
    # what was used: the groups per step and G found, and the b the advice used (a run's adaptive noise scale)
    used = {**asdict(cfg), "groups_per_step": gps, "run_group_size": run_g, "noise_batch_ratio": advice.noise_batch_ratio}
    if not pilot:  # what a pilot would have used, unused here
        for k in PILOT_ONLY + (("cost_basis",) if cfg.from_advice else ()):
            used.pop(k)
    stored = {"calibrate": calibrate, "group_size": pilot_g, "advisor": advisor.state_dict()}
    (out / "advice.json").write_text(json.dumps(finite_or_none({"source": source, "config": used, **advice.to_dict(),
                                                                "with_fitting": fitting, "anchor_groups": stored}),
                                                indent=1))
    plot_advice(advice, SimpleNamespace(advisor=advisor), out / "advice.png")
    log(f"[advise] {source}")
    if reuse_line:
        log(f"[advise] {reuse_line}")
    if fitting is not None:
        log(f"[advise] {fitting['text']}")
    log(advice.format())
    if gps is not None and math.isfinite(advice.recommended_fraction) and advice.use_wmrl:
        log(f"[advise] {anchor_window_hint(advice.recommended_fraction, gps)}")
    log(f"[advise] wrote {out / 'advice.json'} and {out / 'advice.png'} (advise again without a pilot: "
        f"wmrl advise --from-advice {out / 'advice.json'} ...)")
    return advice


PILOT_ONLY = ("groups", "group_size", "env", "world_model", "policy")
"""The flags only a pilot uses: refused with ``--run-dir`` or ``--from-advice``."""

REUSED = ("seed", "n_boot", "f_min", "f_max", "min_groups", "step_law", "noise_batch_ratio", "groups_per_step",
          "world_model_fit_executions", "real_steps", "run_group_size")
"""The settings ``--from-advice`` reuses from the advice.json's ``"config"`` unless given."""


def _read_advice(path: str | Path) -> dict[str, Any]:
    """An advice.json as a dict (see :func:`load_advice_groups` for the errors)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--from-advice {path}: no such file (give the advice.json an earlier wmrl advise wrote)")
    try:
        saved = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"--from-advice {path} is not JSON ({exc}); give the advice.json a wmrl advise wrote") from None
    if not isinstance(saved, dict):
        raise ValueError(f"--from-advice {path} holds no anchor groups (not an advice.json): give the advice.json a "
                         "wmrl advise wrote")
    return saved


def _original_source(source: Any) -> str:
    """The first advice's source (the pilot's), without the re-advices that followed it: a re-advice
    of a re-advice names the pilot and its own file once, not every file between."""
    if not isinstance(source, str) or not source:
        return "an earlier wmrl advise"
    source = source.split("; re-advised from ")[0]
    while source.startswith("anchor groups stored in ") and source.endswith(")") and " (" in source:
        source = source[source.index(" (") + 2:-1]  # an earlier version's nesting
    return source


MAX_N_BOOT = 100_000
"""The most bootstrap resamples a stored advice.json may ask for (more would run for hours)."""


def _valid_stored(name: str, v: Any) -> str | None:
    """Why a stored setting is not valid (``None``: it is)."""
    def integer(lo: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= lo

    def number() -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    checks = {"seed": (integer(0), "an integer >= 0"),
              "n_boot": (integer(0) and v <= MAX_N_BOOT, f"an integer from 0 to {MAX_N_BOOT}"),
              "min_groups": (integer(2), "an integer >= 2"),
              "f_min": (number() and 0 <= v <= 1, "a number in [0, 1]"), "f_max": (number() and 0 <= v <= 1, "a number in [0, 1]"),
              "step_law": (v in ("adam", "sgd"), "'adam' or 'sgd'"),
              "noise_batch_ratio": (v is None or (number() and v >= 0), "a number >= 0 or null"),
              "groups_per_step": (v is None or integer(1), "an integer >= 1 or null"),
              "run_group_size": (v is None or integer(1), "an integer >= 1 or null"),
              "world_model_fit_executions": (integer(0), "an integer >= 0"),
              "real_steps": (v is None or integer(1), "an integer >= 1 or null")}
    good, what = checks[name]
    return None if good else what


def _reuse_settings(cfg: AdviseConfig, saved: dict[str, Any], given: set[str]) -> tuple[AdviseConfig, str]:
    """``cfg`` with the settings of :data:`REUSED` the advice.json ``saved`` used, those in ``given``
    kept, and the line that says which were reused and which overridden.

    Raises:
        ValueError: a stored setting is not valid (the message names the file and the field).
    """
    old = saved.get("config")
    old = old if isinstance(old, dict) else {}
    where = {name: f"config.{name}" for name in old}
    if "noise_batch_ratio" in saved:  # the b the advice used (an earlier file stored the flag in its config)
        old = {**old, "noise_batch_ratio": saved["noise_batch_ratio"]}
        where["noise_batch_ratio"] = "noise_batch_ratio"  # the top-level field, not the config's
    reused, overridden, changes = [], [], {}

    def flag(name: str, v: Any) -> str:
        return f"--{name.replace('_', '-')} {'unset' if v is None else v}"

    for name in REUSED:
        if name in given:
            overridden.append(flag(name, getattr(cfg, name)))
        elif name in old:
            v = old[name]
            why = _valid_stored(name, v)
            if why is not None:
                raise ValueError(f"--from-advice {cfg.from_advice}: its {where[name]} is {v!r}, not {why} (was the file "
                                 f"edited?): give --{name.replace('_', '-')}, or advise from the advice.json as written")
            changes[name] = v
            if name == "real_steps" and not changes.get("world_model_fit_executions", cfg.world_model_fit_executions):
                continue  # the yardstick of a fitting cost: without one it does nothing, so it is not shown as reused
            reused.append(flag(name, v))
    line = (f"settings of {cfg.from_advice}: reused " + (", ".join(reused) or "none")
            + "; overridden: " + (", ".join(overridden) or "none"))
    return dataclasses.replace(cfg, **changes), line


def fitting_advice(advice: Any, fit_executions: int, real_steps: int, groups_per_step: int,
                   group_size: int) -> dict[str, Any] | None:
    """The fitting-counted figures of ``advice`` (given ``fitting_share`` by :func:`main_advise`) for
    ``advice.json``'s ``"with_fitting"``.

    Returns:
        ``{"fit_executions", "real_steps", "groups_per_step", "group_size", "share" (φ), "choices",
        "best_choice" (the recommended choice), "text"}``; ``None`` when the advice priced no choice
        (too few groups).
    """
    if not advice.choices:
        return None
    def n(k: int, what: str) -> str:
        return f"{k} {what}{'' if k == 1 else 's'}"

    text = (f"counting the world model's fitting ({n(fit_executions, 'execution')} = {advice.fitting_share:.0%} of real "
            f"GRPO's compute to the target in {n(real_steps, 'step')} of {n(groups_per_step, 'group')} of "
            f"{n(group_size, 'rollout')}): the verdict follows the totals")
    return {"fit_executions": fit_executions, "real_steps": real_steps, "groups_per_step": groups_per_step,
            "group_size": group_size, "share": advice.fitting_share, "choices": list(advice.choices_with_fitting),
            "best_choice": advice.recommended_choice, "text": text}


def anchor_window_hint(fraction: float, groups_per_step: int) -> str:
    """How to realise an anchor fraction at ``groups_per_step`` groups per step: the flags to train
    with. The router puts at least one anchor group in every window of ``--anchor-window`` steps
    (``docs/method.md``, "Anchor scheduling"), so a fraction below ``1 / groups_per_step`` needs a
    window of ``ceil(1 / (fraction · groups_per_step))`` steps to be the realised one.

    Args:
        fraction: the anchor fraction to realise, in (0, 1].
        groups_per_step: groups per training step (>= 1).

    Returns:
        One sentence with the flags.

    Example:
        >>> anchor_window_hint(0.05, 10)
        'f = 0.05 at 10 groups per step is 1 anchor group every 2 steps: train with --anchor-fraction 0.05 --anchor-window 2 (with a window of 1 step the floor of one anchor group per step realises 0.1)'
    """
    from wmrl_envs.core.advisor_choices import groups_text

    per_step = fraction * groups_per_step
    if per_step >= 1 - 1e-9:
        n = f"{per_step:.3g} anchor group{'' if abs(per_step - 1) < 1e-9 else 's'}"
        return (f"f = {fraction:.3g} at {groups_text(groups_per_step)} per step is {n} per step: "
                f"train with --anchor-fraction {fraction:.3g}")
    window = math.ceil(1 / per_step - 1e-9)
    return (f"f = {fraction:.3g} at {groups_text(groups_per_step)} per step is 1 anchor group every {window} steps: train "
            f"with --anchor-fraction {fraction:.3g} --anchor-window {window} (with a window of 1 step the floor of "
            f"one anchor group per step realises {1 / groups_per_step:.3g})")


# ---------------------------------------------------------------------- built-in AutoResearch setup
def autoresearch_env() -> Any:
    """AutoResearch's training tasks in the best isolating sandbox here (bubblewrap), leaderboards
    prepared (the default env of ``wmrl advise``).

    Raises:
        ValueError: no isolating sandbox works on this machine.
    """
    from wmrl_envs.envs.autoresearch.env import AutoResearchEnv
    from wmrl_envs.envs.autoresearch.secret import sandbox_hidden_paths
    from wmrl_envs.sandbox import make_sandbox

    sandbox = make_sandbox("auto", hidden_paths=sandbox_hidden_paths())
    if not sandbox.isolates:
        raise ValueError("no isolating sandbox works here; install bubblewrap (scripts/setup.sh does)")
    AutoResearchEnv(tasks="all", sandbox=sandbox).prepare_leaderboards()
    return AutoResearchEnv(tasks="train", sandbox=sandbox)


def autoresearch_world_model() -> Any:
    """The benchmark's embedding world model (MiniLM encoder + ridge head, fitted leave-one-task-out
    on the shipped log of the training tasks' executions)."""
    from agents.experiments.bench_agents import build_world_model
    from agents.experiments.bench_config import BenchConfig

    return build_world_model(BenchConfig())


class _GrammarPilotPolicy:
    """The benchmark's grammar agent (untrained) behind :class:`PilotPolicy`."""

    def __init__(self, seed: int = 0) -> None:
        import torch

        from agents.grammar.policy import GrammarPolicy

        torch.set_num_threads(1)
        self.policy = GrammarPolicy(seed=seed)

    def sample(self, observation: Any, info: dict[str, Any], group_size: int) -> list[str]:
        from wmrl_envs.envs.autoresearch.tasks import get_task

        return [p.code for p in self.policy.sample([get_task(info["task_id"])], group_size)[0]]


def autoresearch_policy() -> PilotPolicy:
    """The benchmark's grammar agent, untrained (the default policy of ``wmrl advise``)."""
    return _GrammarPilotPolicy()
