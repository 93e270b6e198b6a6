"""What the per-episode wrapper and its vector twin share: the one way to build their
:class:`~wmrl_envs.core.CorrectionLoop` from their constructor arguments (a ``CorrectionConfig``
or a shared loop; :func:`reject_removed_kwargs` says how to write the former keyword arguments),
what they keep of it besides ``wrapper.loop`` (``training``, ``plan_step``, state) and a running
episode's tally (:class:`EpisodeTally`: its scores and failure causes). The group result of the
group APIs, :class:`~wmrl_envs.core.GroupRollout`, lives in :mod:`wmrl_envs.core.group`
(imported here under its old path).
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from wmrl_envs.core import CorrectionConfig, CostLedger, Route
from wmrl_envs.core.group import STEP_SCORE_KEY, GroupRollout, group_rollout, wm_causes_of
from wmrl_envs.core.loop import CorrectionLoop, default_groups_per_step
from wmrl_envs.core.ungraded import EXECUTION_UNGRADED, WORLD_MODEL_UNGRADED, score_number
from wmrl_envs.utils import user_stacklevel
from wmrl_envs.world_models.base import Trajectory, WorldModel, WorldModelPrediction

__all__ = ["STEP_SCORE_KEY", "GroupRollout", "EpisodeTally", "aggregate_episode_score", "build_loop", "LoopState", "reject_removed_kwargs", "wm_causes_of", "group_rollout"]


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
        that is not finite leaves the step ungraded (cause ``"execution_ungraded"``); one that is
        not a number raises ``TypeError`` (:func:`~wmrl_envs.core.ungraded.score_number`).
        """
        step_score: Any = None if info is None else info.get(STEP_SCORE_KEY)
        if cause is None and step_score is not None and score_number(step_score, f"info[{STEP_SCORE_KEY!r}]") is None:
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


def check_episode_args(mode: str, group_size: int, episode_steps: int, episode_score: str, *,
                       world_model: bool = True) -> None:
    """The episode arguments both wrappers take, checked alike.

    Args:
        world_model: whether a world model scores groups. Without one (every group executed for real,
            e.g. a held-out evaluation of best-of-k), a group of one rollout is allowed: nothing is
            corrected and no GRPO advantage is computed from it.

    Raises:
        ValueError: ``mode`` not ``"outcome"``/``"reward"``, ``group_size < 2`` with a world model
            (``< 1`` without), ``episode_steps < 1``, or ``episode_score`` not ``"max"``/``"last"``/``"sum"``.
    """
    if mode not in ("outcome", "reward"):
        raise ValueError(f"mode must be 'outcome' or 'reward', got {mode!r}")
    if (isinstance(group_size, bool) or not isinstance(group_size, numbers.Integral)
            or group_size < (2 if world_model else 1)):
        raise ValueError(f"group_size must be an integer >= 2, got {group_size!r}: GRPO's advantage is a rollout's "
                         "reward less its group's mean, so a group of one rollout has advantage 0 and learns nothing "
                         "(and gives no within-group pair to the corrections); use G >= 2 (e.g. 4 or 8)")
    if episode_steps < 1:
        raise ValueError(f"episode_steps must be >= 1, got {episode_steps}")
    if episode_score not in ("max", "last", "sum"):
        raise ValueError(f"episode_score must be 'max', 'last' or 'sum', got {episode_score!r}")


#: The correction settings the wrappers once took as keyword arguments, with how to write each now.
REMOVED_CORRECTION_KWARGS: dict[str, str] = {
    "anchor_fraction": "correction=CorrectionConfig(anchor_fraction={value!r})",
    "min_anchor_groups": "correction=CorrectionConfig(min_anchor_groups={value!r})",
    "debiaser_kwargs": "correction=CorrectionConfig(**{value!r}) (buffer_size, min_pairs, refit_every are its fields)",
    "denoiser_kwargs": "correction=CorrectionConfig(**{value!r}) (warmup_groups, half_life, rho_target, rho_max, "
                       "disagreement_floor are its fields; 'mode' is rho_mode)",
    "corrector": "loop=CorrectionLoop(CorrectionConfig(...), world_model=world_model, corrector={value!r})",
}


def reject_removed_kwargs(owner: str, kwargs: Mapping[str, Any]) -> None:
    """Raise for keyword arguments a wrapper does not take, saying how to write the removed
    correction settings (:data:`REMOVED_CORRECTION_KWARGS`) with a
    :class:`~wmrl_envs.core.CorrectionConfig` or a :class:`~wmrl_envs.core.CorrectionLoop`.

    Raises:
        TypeError: ``kwargs`` is not empty (the message names each argument and its new spelling).
    """
    if not kwargs:
        return
    import dataclasses
    import difflib

    fields = [f.name for f in dataclasses.fields(CorrectionConfig)]
    lines, correction_related = [], False
    for k, v in kwargs.items():
        how = REMOVED_CORRECTION_KWARGS.get(k)
        if how is None and k in fields:  # a correction setting passed to the wrapper
            how = f"correction=CorrectionConfig({k}={{value!r}})"
        if how is not None:
            correction_related = True
            lines.append(f"  {k}={v!r} -> {how.format(value=v)}")
            continue
        near = difflib.get_close_matches(k, fields + list(REMOVED_CORRECTION_KWARGS), n=1)
        lines.append(f"  {k}: not an argument of {owner}"
                     + (f" (did you mean {near[0]}?)" if near else f"; see help({owner})"))
    head = (f"{owner} takes the correction settings one way, correction=CorrectionConfig(...) or a shared "
            f"loop=CorrectionLoop(...) (from wmrl_envs.core); write:\n" if correction_related
            else f"{owner} got unexpected keyword arguments:\n")
    raise TypeError(head + "\n".join(lines))


def build_loop(
    *,
    world_model: WorldModel | None,
    groups_per_step: int | None,
    seed: int,
    ledger: CostLedger | None,
    eval_route: Route,
    world_model_timeout_s: float | None,
    max_ungraded_share: float | None,
    correction: CorrectionConfig | None,
    loop: CorrectionLoop | None,
) -> CorrectionLoop:
    """The wrappers' :class:`~wmrl_envs.core.CorrectionLoop`: ``loop`` itself when given;
    otherwise one built from ``correction`` (default ``CorrectionConfig()``) and the loop's
    own arguments.

    Raises:
        TypeError: ``correction`` is not a :class:`~wmrl_envs.core.CorrectionConfig`, or ``loop``
            not a :class:`~wmrl_envs.core.CorrectionLoop`.
        ValueError: invalid or conflicting arguments (the message says which).
    """
    if loop is not None:
        if not isinstance(loop, CorrectionLoop):
            raise TypeError(f"loop must be a CorrectionLoop (wmrl_envs.core), got {type(loop).__name__}")
        if correction is not None or ledger is not None:
            raise ValueError("pass loop= alone: the loop holds the correction settings and the ledger "
                             "(build it with CorrectionLoop(CorrectionConfig(...), ledger=...))")
        if world_model is not None and world_model is not loop.world_model:
            raise ValueError("world_model differs from loop.world_model: pass world_model=None or the loop's own")
        return loop
    if correction is None:
        correction = CorrectionConfig()
    elif not isinstance(correction, CorrectionConfig):
        raise TypeError(f"correction must be a CorrectionConfig (wmrl_envs.core), got {type(correction).__name__}")
    if world_model is None and correction.anchor_fraction != 1.0:
        raise ValueError(
            "world_model=None is only valid with anchor_fraction=1.0 (every group executed "
            f"for real); got anchor_fraction={correction.anchor_fraction}. Pass a world model, "
            "or correction=CorrectionConfig(anchor_fraction=1.0)."
        )
    if groups_per_step is None:
        groups_per_step = default_groups_per_step(
            correction.auto_start_fraction if correction.adaptive else correction.anchor_fraction)
    return CorrectionLoop(
        correction, world_model=world_model, seed=seed, groups_per_step=groups_per_step, eval_route=eval_route,
        world_model_timeout_s=world_model_timeout_s, max_ungraded_share=max_ungraded_share, ledger=ledger,
    )


class LoopState:
    """What the wrappers keep of their :class:`~wmrl_envs.core.CorrectionLoop` (``self.loop``,
    where everything else is read: ``loop.router``, ``loop.corrector``, ``loop.ledger``,
    ``loop.rho``, ``loop.stats()``): the ``training`` switch, :meth:`plan_step` (the two calls a
    training loop makes on the wrapper every step) and the state of the loop plus the wrapper's
    own counters (:meth:`state_dict`, :meth:`save`)."""

    loop: CorrectionLoop

    @property
    def training(self) -> bool:
        """``False`` = evaluation: corrections frozen, every group routed to ``eval_route``."""
        return self.loop.training

    @training.setter
    def training(self, value: bool) -> None:
        self.loop.training = value

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

    def _extra_state(self) -> dict[str, Any]:
        return {}

    def _load_extra_state(self, state: Mapping[str, Any]) -> None:
        pass

    def state_dict(self) -> dict[str, Any]:
        """The loop's state (router, route queue, corrections, ledger, counters, ``"version"``)
        plus the wrapper's own counters and its ``"group_size"`` (JSON-serialisable). Save at a
        group boundary."""
        return {**self.loop.state_dict(), **self._extra_state(), "group_size": self.group_size}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output; the next group continues the saved run, with
        the saved correction settings (one ``UserWarning`` lists those that differ from the
        configured ones: :meth:`CorrectionLoop.load_state_dict`). The wrapper keeps its own
        ``group_size``; a state saved with another one loads with a ``UserWarning`` (a state
        saved before the size was kept loads silently).

        Raises:
            ValueError: unknown state version.
        """
        self.loop.load_state_dict(state)
        self._load_extra_state(state)
        saved = state.get("group_size")
        if saved is not None and saved != self.group_size:
            warnings.warn(
                f"resuming with group_size={self.group_size} from a state saved with group_size={saved}: the run goes on "
                f"with groups of {self.group_size}, but what it carries over was measured on groups of {saved} — "
                "the advisor's r and f*, rho's disagreement average and the execution budget's price per group mix "
                "the two sizes (a disagreement's scale depends on G). Resume with the saved group_size to continue "
                "the run as it was, or start a new run", UserWarning, stacklevel=user_stacklevel())

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

    def __getattr__(self, name: str) -> Any:
        # only reached for a missing attribute: say where the views the wrappers once had are read now
        if name in LOOP_ATTRIBUTES:
            new = 'loop.ledger.count("execution")' if name == "inner_step_calls" else f"loop.{name}"
            raise AttributeError(f"{type(self).__name__}.{name} is read on its CorrectionLoop now: "
                                 f"wrapper.{new} (or wrapper.loop.stats() for the logged figures)")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


#: The loop's attributes the wrappers forwarded before issue 26 (read them as ``wrapper.loop.<name>``).
LOOP_ATTRIBUTES = frozenset({
    "world_model", "world_model_timeout_s", "router", "corrector", "ledger", "ungraded", "eval_route",
    "groups_per_step", "rho", "n_groups_started", "n_episodes", "inner_step_calls", "set_anchor_fraction",
})
