"""What the per-episode wrapper and its vector twin share: the one way to build their
:class:`~wmrl_envs.core.CorrectionLoop` from their constructor arguments, the views of it they
both expose (router, corrector, ledger, ρ, ``training``, ``plan_step``, state) and a running
episode's tally (:class:`EpisodeTally`: its scores and failure causes). The group result of the
group APIs, :class:`~wmrl_envs.core.GroupRollout`, lives in :mod:`wmrl_envs.core.group`
(imported here under its old path).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from wmrl_envs.core import (
    EXECUTION,
    AnchorRouter,
    CorrectionConfig,
    CostLedger,
    Route,
    WMRLCorrector,
)
from wmrl_envs.core.group import STEP_SCORE_KEY, GroupRollout, group_rollout, wm_causes_of
from wmrl_envs.core.loop import CorrectionLoop, default_groups_per_step
from wmrl_envs.core.ungraded import EXECUTION_UNGRADED, WORLD_MODEL_UNGRADED, UngradedMonitor
from wmrl_envs.world_models.base import Trajectory, WorldModel, WorldModelPrediction

__all__ = ["STEP_SCORE_KEY", "GroupRollout", "EpisodeTally", "aggregate_episode_score", "build_loop", "LoopViews", "wm_causes_of", "group_rollout"]


def aggregate_episode_score(scores: Sequence[float | None], how: str) -> float | None:
    """An episode's score from its per-step scores (world-model predictions, or the real steps'
    scores: both routes use it): ``"max"`` (AutoResearch: best turn), ``"last"`` or ``"sum"``.

    Order-independent for ``"max"`` and ``"sum"``: a step without a finite score (``None``,
    NaN, inf) makes the episode ungraded (``None``) whatever its position — a NaN never wins or
    loses a ``max`` depending on where it stands. ``None`` for an empty sequence.
    """
    vals: list[float] = []
    for v in scores:
        if v is None:
            return None
        f = float(v)
        if not math.isfinite(f):
            return None
        vals.append(f)
    if not vals:
        return None
    if how == "max":
        return max(vals)
    if how == "last":
        return vals[-1]
    return float(sum(vals))


def learning_inputs(inputs: Sequence[tuple[Any, Any] | None]) -> tuple[list[Any] | None, list[Any] | None]:
    """``(contexts, actions)`` of a group's rollouts for :meth:`CorrectionLoop.close_group
    <wmrl_envs.core.CorrectionLoop.close_group>` (a world model that learns from anchors is taught
    with them), from each episode's :meth:`EpisodeTally.learning_input`; ``(None, None)`` when an
    episode has none (a multi-step episode)."""
    if not inputs or any(x is None for x in inputs):
        return None, None
    return [x[0] for x in inputs], [x[1] for x in inputs]  # type: ignore[index]


@dataclass
class EpisodeTally:
    """What one running episode has gathered so far (per-episode wrapper: its one episode;
    vector twin: one per sub-env): world-model scores per step, the real return and the real
    per-step scores, and the first cause of a failed world-model score and of a failed real step."""

    steps: int = 0
    raw_steps: list[float] = field(default_factory=list)
    raw_graded: bool = True
    real_return: float = 0.0
    real_steps: list[float] = field(default_factory=list)
    real_graded: bool = True
    traj: Trajectory | None = None
    wm_cause: str | None = None
    real_cause: str | None = None
    first_step: tuple[Any, Any] | None = None  # outcome mode: (context, action) of the first step

    def learning_input(self) -> tuple[Any, Any] | None:
        """The (context, action) a world model that learns from anchors is taught with this
        episode's real score: its only step's, for a one-step episode; ``None`` for a longer one
        (its real score aggregates several steps' scores, no single pair stands for it)."""
        return self.first_step if self.steps == 1 else None

    def note_wm_failure(self, pred: WorldModelPrediction, messages: dict[str, str]) -> None:
        """A prediction without a score: remember the episode's first cause and its error text."""
        cause = pred.ungraded_cause or WORLD_MODEL_UNGRADED
        if self.wm_cause is None:
            self.wm_cause = cause
        if pred.extras.get("error"):
            messages[cause] = str(pred.extras["error"])

    def add_step_prediction(self, pred: WorldModelPrediction, messages: dict[str, str]) -> None:
        """Outcome mode: one step's world-model score (a missing one makes the episode ungraded)."""
        if pred.score is None:  # predict_checked made every non-finite score None
            self.raw_graded = False
            self.note_wm_failure(pred, messages)
        else:
            self.raw_steps.append(float(pred.score))

    def add_real_step(self, reward: Any, cause: str | None, message: Any, messages: dict[str, str],
                      info: Mapping[str, Any] | None = None) -> float:
        """Fold one real step in (``cause``: why it is ungraded, ``None`` when graded); returns the
        reward to hand out (0.0 when ungraded).

        ``info`` (outcome mode): the step's info; its :data:`STEP_SCORE_KEY` entry, when present,
        is the step's score for :meth:`real_episode_score` (else the reward is). A present entry
        that is not a finite number leaves the step ungraded (cause ``"execution_ungraded"``).
        """
        step_score: Any = None if info is None else info.get(STEP_SCORE_KEY)
        if cause is None and step_score is not None and not _finite_number(step_score):
            cause = EXECUTION_UNGRADED
            message = f"info[{STEP_SCORE_KEY!r}] is not a finite number: {step_score!r}"
        if cause is None:
            self.real_return += float(reward)
            self.real_steps.append(float(reward) if step_score is None else float(step_score))
            return float(reward)
        self.real_graded = False
        if self.real_cause is None:
            self.real_cause = cause
        if message:
            messages[cause] = str(message)
        return 0.0

    def raw_score(self, how: str) -> float | None:
        """The episode's world-model score from its per-step scores (``None``: ungraded or none)."""
        return aggregate_episode_score(self.raw_steps, how) if (self.raw_steps and self.raw_graded) else None

    @property
    def real_score(self) -> float | None:
        """The real return (sum of the rewards; reward mode's episode score), ``None`` when a real
        step was ungraded."""
        return self.real_return if self.real_graded else None

    def real_episode_score(self, how: str) -> float | None:
        """Outcome mode: the episode's real score by the rule the world model's per-step scores
        follow (:func:`aggregate_episode_score` of the real per-step scores, ``how`` =
        ``episode_score``), ``None`` when a real step was ungraded or none was taken."""
        return aggregate_episode_score(self.real_steps, how) if (self.real_steps and self.real_graded) else None


def _finite_number(v: Any) -> bool:
    """A finite real number (not a bool)."""
    if isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def check_episode_args(mode: str, group_size: int, episode_steps: int, episode_score: str) -> None:
    """The episode arguments both wrappers take, checked alike.

    Raises:
        ValueError: ``mode`` not ``"outcome"``/``"reward"``, ``group_size < 1``,
            ``episode_steps < 1``, or ``episode_score`` not ``"max"``/``"last"``/``"sum"``.
    """
    if mode not in ("outcome", "reward"):
        raise ValueError(f"mode must be 'outcome' or 'reward', got {mode!r}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1 (GRPO needs >= 2 to learn), got {group_size}")
    if episode_steps < 1:
        raise ValueError(f"episode_steps must be >= 1, got {episode_steps}")
    if episode_score not in ("max", "last", "sum"):
        raise ValueError(f"episode_score must be 'max', 'last' or 'sum', got {episode_score!r}")


def build_loop(
    *,
    world_model: WorldModel | None,
    anchor_fraction: float,
    min_anchor_groups: int,
    groups_per_step: int | None,
    corrector: WMRLCorrector | None,
    debiaser_kwargs: Mapping[str, Any] | None,
    denoiser_kwargs: Mapping[str, Any] | None,
    seed: int,
    ledger: CostLedger | None,
    eval_route: Route,
    world_model_timeout_s: float | None,
    max_ungraded_share: float | None,
    correction: CorrectionConfig | None,
    loop: CorrectionLoop | None,
) -> CorrectionLoop:
    """The wrappers' :class:`~wmrl_envs.core.CorrectionLoop`: ``loop`` itself when given;
    otherwise one built from ``correction`` (which wins over ``anchor_fraction``,
    ``min_anchor_groups`` and the ``*_kwargs``) or from the individual arguments.

    Raises:
        ValueError: invalid or conflicting arguments (the message says which).
    """
    if loop is not None:
        if correction is not None or corrector is not None or debiaser_kwargs or denoiser_kwargs or ledger is not None:
            raise ValueError("pass loop= alone: the loop holds the correction settings, the corrector and the ledger")
        if world_model is not None and world_model is not loop.world_model:
            raise ValueError("world_model differs from loop.world_model: pass world_model=None or the loop's own")
        return loop
    if correction is not None:
        if corrector is not None or debiaser_kwargs or denoiser_kwargs:
            raise ValueError("pass either correction= or corrector=/debiaser_kwargs/denoiser_kwargs, not both")
    else:
        if corrector is not None and (debiaser_kwargs or denoiser_kwargs):
            raise ValueError("pass either corrector= or debiaser_kwargs/denoiser_kwargs, not both")
        correction = correction_from_kwargs(anchor_fraction, min_anchor_groups, debiaser_kwargs, denoiser_kwargs)
    if world_model is None and correction.anchor_fraction != 1.0:
        raise ValueError(
            "world_model=None is only valid with anchor_fraction=1.0 (every group executed "
            f"for real); got anchor_fraction={correction.anchor_fraction}. Pass a world model."
        )
    if groups_per_step is None:
        groups_per_step = default_groups_per_step(
            correction.auto_start_fraction if correction.adaptive else correction.anchor_fraction)
    return CorrectionLoop(
        correction, world_model=world_model, seed=seed, groups_per_step=groups_per_step, eval_route=eval_route,
        world_model_timeout_s=world_model_timeout_s, max_ungraded_share=max_ungraded_share,
        corrector=corrector, ledger=ledger,
    )


def correction_from_kwargs(
    anchor_fraction: float,
    min_anchor_groups: int,
    debiaser_kwargs: Mapping[str, Any] | None,
    denoiser_kwargs: Mapping[str, Any] | None,
) -> CorrectionConfig:
    """The :class:`~wmrl_envs.core.CorrectionConfig` that the wrappers' individual keyword
    arguments spell out (``denoiser_kwargs["mode"]`` is the config's ``rho_mode``), so that a
    wrapper built either way is validated once, by the config.

    Raises:
        ValueError: a value out of range, or a key that is no setting of the debiaser / denoiser.
    """
    den = dict(denoiser_kwargs or {})
    if "mode" in den:
        den["rho_mode"] = den.pop("mode")
    deb = dict(debiaser_kwargs or {})
    for where, keys, allowed in (
        ("debiaser_kwargs", deb, ("buffer_size", "min_pairs", "refit_every")),
        ("denoiser_kwargs", den, ("warmup_groups", "half_life", "rho_target", "rho_max", "rho_mode",
                                  "disagreement_floor")),
    ):
        unknown = sorted(set(keys) - set(allowed))
        if unknown:
            raise ValueError(f"{where} has unknown key(s) {unknown}; allowed: {list(allowed)}")
    return CorrectionConfig(anchor_fraction=anchor_fraction, min_anchor_groups=min_anchor_groups, **deb, **den)


class LoopViews:
    """The wrappers' views of their :class:`~wmrl_envs.core.CorrectionLoop` (``self.loop``)."""

    loop: CorrectionLoop

    @property
    def world_model(self) -> WorldModel | None:
        """The loop's world model."""
        return self.loop.world_model

    @property
    def world_model_timeout_s(self) -> float | None:
        """Seconds one batched ``predict`` may take (``None``: no limit)."""
        return self.loop.world_model_timeout_s

    @world_model_timeout_s.setter
    def world_model_timeout_s(self, value: float | None) -> None:
        self.loop.world_model_timeout_s = None if value is None else float(value)

    @property
    def router(self) -> AnchorRouter:
        """The loop's :class:`~wmrl_envs.core.AnchorRouter`."""
        return self.loop.router

    @property
    def corrector(self) -> WMRLCorrector:
        """The loop's :class:`~wmrl_envs.core.WMRLCorrector` (debiaser + denoiser)."""
        return self.loop.corrector

    @property
    def ledger(self) -> CostLedger:
        """The loop's :class:`~wmrl_envs.core.CostLedger`."""
        return self.loop.ledger

    @property
    def ungraded(self) -> UngradedMonitor:
        """The loop's :class:`~wmrl_envs.core.UngradedMonitor` (counts by cause, stop rule)."""
        return self.loop.ungraded

    @property
    def eval_route(self) -> Route:
        """Route of every group while ``training`` is ``False``."""
        return self.loop.eval_route

    @property
    def groups_per_step(self) -> int:
        """Groups per training step of the schedule and the stop rule."""
        return self.loop.groups_per_step

    @property
    def training(self) -> bool:
        """``False`` = evaluation: corrections frozen, every group routed to ``eval_route``."""
        return self.loop.training

    @training.setter
    def training(self, value: bool) -> None:
        self.loop.training = value

    @property
    def rho(self) -> float:
        """Current anchor weight ρ (float)."""
        return self.loop.rho

    @property
    def n_groups_started(self) -> int:
        """Groups routed so far (the next group id; shared by every wrapper of the loop)."""
        return self.loop.n_groups_started

    @property
    def n_episodes(self) -> int:
        """Rollouts counted so far (shared by every wrapper of the loop)."""
        return self.loop.n_episodes

    @property
    def inner_step_calls(self) -> int:
        """Real executions recorded in the ledger (``ledger.count("execution")``; a shared
        ledger counts every wrapper's)."""
        return self.loop.ledger.count(EXECUTION)

    def plan_step(self, groups_in_step: int | None = None, free_slots: int | None = None) -> list[Route]:
        """Draw the routes of the next training step now (replacing any unused ones).

        Call it at the start of each step when the number of groups per step varies, or to
        cap the anchors by the real-execution slots that are free right now; the next
        ``groups_in_step`` groups then take these routes in order.

        Args:
            groups_in_step: groups in the coming step (default ``groups_per_step``).
            free_slots: free real-execution slots, in groups (caps the anchor count; the
                realised fraction then reflects the cap).

        Returns:
            The planned routes.
        """
        return self.loop.plan_step(groups_in_step, free_slots)

    def set_anchor_fraction(self, fraction: float) -> None:
        """Change the anchor fraction from the next drawn step on (:meth:`CorrectionLoop.set_anchor_fraction`)."""
        self.loop.set_anchor_fraction(fraction)

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        """The loop's state (router, route queue, corrections, ledger, counters, ``"version"``)
        plus the wrapper's own counters (JSON-serialisable). Save at a group boundary."""
        return {**self.loop.state_dict(), **self._extra_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the next group continues the saved run, with
        the saved correction settings (one ``UserWarning`` lists those that differ from the
        configured ones: :meth:`CorrectionLoop.load_state_dict`).

        Raises:
            ValueError: unknown state version.
        """
        self.loop.load_state_dict(state)
        self._load_extra_state(state)

    def save(self, path: str | Path) -> None:
        """Write :meth:`state_dict` to a JSON file atomically, beside the model checkpoint (like
        ``VecNormalize.save``); the env itself is not saved."""
        from wmrl_envs.utils import write_json_atomic

        write_json_atomic(path, self.state_dict())

    def load(self, path: str | Path) -> None:
        """Load a file written by :meth:`save` (``FileNotFoundError``: no file; ``ValueError``:
        unknown state version)."""
        import json

        self.load_state_dict(json.loads(Path(path).read_text()))
