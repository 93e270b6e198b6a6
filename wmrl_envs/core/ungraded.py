"""Ungraded rollouts: the contract between "the agent's code failed" and "the machinery failed".

What the agent's own code causes is graded (it keeps its score on the reward scale); what the
machinery causes — a sandbox, a Ray worker, a world model that raised, hung or returned a
non-finite score — leaves the rollout **ungraded**: reward ``None``, out of the anchor pairs
and ρ, counted by cause, warned about and subject to the stop rule. This module holds the
pieces every wrapper and the Ray pool share for that: the cause names and
:func:`is_infrastructure` (named failures warn and count toward the stop rule; the unnamed
:data:`UNSCORABLE`, :data:`WORLD_MODEL_UNGRADED` and :data:`EXECUTION_UNGRADED` are only
counted), :func:`score_number` (the one rule for what a real score may be),
:func:`execution_cause` (the cause of an ungraded real step), and
:class:`UngradedMonitor` with its :class:`TooManyUngradedError` (per-step counts, ledger
entries ``"ungraded:<cause>"``, warnings, the stop rule). The contract, the causes and the
stop rule are described in ``docs/method.md`` ("Ungraded rollouts"). The cause names are
defined in :mod:`wmrl_envs.causes` (below the world models and envs that name them) and
re-exported here.
"""

from __future__ import annotations

import logging
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from wmrl_envs.causes import (
    CAUSE_KEY,
    EXECUTION_ERROR,
    EXECUTION_INVALID,
    EXECUTION_TIMEOUT,
    EXECUTION_UNGRADED,
    SANDBOX_UNAVAILABLE,
    UNSCORABLE,
    WORKER_LOST,
    WORLD_MODEL_ERROR,
    WORLD_MODEL_INVALID,
    WORLD_MODEL_TIMEOUT,
    WORLD_MODEL_UNGRADED,
)
from wmrl_envs.causes import __all__ as CAUSE_NAMES

from .ledger import CostLedger

__all__ = [
    *CAUSE_NAMES,  # re-exported from wmrl_envs.causes
    "is_infrastructure",
    "score_number",
    "execution_cause",
    "TooManyUngradedError",
    "UngradedMonitor",
]

logger = logging.getLogger(__name__)


_NOT_INFRASTRUCTURE = frozenset({UNSCORABLE, WORLD_MODEL_UNGRADED, EXECUTION_UNGRADED})


def is_infrastructure(cause: str | None) -> bool:
    """``True`` for every cause except ``None`` (graded) and the unnamed ones:
    :data:`UNSCORABLE`, :data:`WORLD_MODEL_UNGRADED` and :data:`EXECUTION_UNGRADED`.

    Infrastructure causes are warned about and count toward the stop rule.
    """
    return cause is not None and cause not in _NOT_INFRASTRUCTURE


def score_number(value: Any, what: str = "the reward") -> float | None:
    """The one rule for a real score (a reward, or ``info["step_score"]``): a real number or ungraded.

    A real number is what Gymnasium's env checker accepts as a reward: ``int``, ``float``, a
    numpy integer or floating scalar (any :class:`numbers.Real`), never a ``bool`` (Python's or
    numpy's: a success flag is a score only once the env says which number it is).

    Args:
        value: the score as the env gave it.
        what: how the error names it (e.g. ``'info["step_score"]'``).

    Returns:
        ``float(value)``; ``None`` (ungraded) for ``None``, NaN or ±inf.

    Raises:
        TypeError: ``value`` is not a number (a ``bool``/``numpy.bool_``, a string such as
            ``"0.7"``, an array, any other object): the env has a bug, not the rollout.
    """
    if value is None:
        return None
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        v = float(value)
        return v if math.isfinite(v) else None
    raise TypeError(
        f"{what} must be a real number (int, float, numpy integer or floating; None or NaN when the step could "
        f"not be scored), got {value!r} of type {type(value).__name__}: return the number from the env, e.g. "
        "float(score) (1.0 / 0.0 for a success flag)")


def execution_cause(reward: Any, info: Mapping[str, Any] | None) -> str | None:
    """Why a real step is ungraded, or ``None`` when it is graded.

    * ``info["graded"]`` is ``False``, or the reward is ``None``: the env says the step has no
      grade; the cause is ``info["ungraded_cause"]`` when the env names one, else
      :data:`EXECUTION_UNGRADED` (counted only);
    * the reward is not a finite number (NaN, inf) while the env did not say the step is
      ungraded: ``info["ungraded_cause"]`` when named, else :data:`EXECUTION_INVALID` (an env
      bug: warned about and counted toward the stop rule, as a world model's NaN is).
    A reward that is not a number at all (a bool, a string) raises (:func:`score_number`).

    Args:
        reward: the step's reward (a real number or ``None``).
        info: the step's info dict (or ``None``).

    Returns:
        A cause (str) or ``None``.

    Raises:
        TypeError: the reward is not a number (:func:`score_number`) on a step not marked ungraded.
    """
    info = info or {}
    named = info.get(CAUSE_KEY)
    if info.get("graded", True) is False or reward is None:
        return str(named) if named else EXECUTION_UNGRADED
    if score_number(reward) is not None:  # a bool or a string raises TypeError here
        return None
    return str(named) if named else EXECUTION_INVALID


class TooManyUngradedError(RuntimeError):
    """The stop rule: too large a share of one training step's rollouts is ungraded.

    Attributes:
        n_ungraded: ungraded rollouts of the step so far (int; infrastructure causes only;
            with ``scope == "real executions"``, those of its anchor groups).
        n_rollouts: rollouts the step plans (int; planned groups x rollouts per group so far),
            or, with ``scope == "real executions"``, the real executions it plans (its planned
            anchor groups x rollouts per anchor group so far).
        scope: ``"rollouts"`` or ``"real executions"`` (what the share is of).
        share: ``n_ungraded / n_rollouts`` (float).
        max_share: the configured limit (float).
        causes: ``{cause: count}`` of the step's ungraded rollouts (in ``scope``).
        messages: ``{cause: last error text}``.
    """

    def __init__(
        self,
        n_ungraded: int,
        n_rollouts: int,
        max_share: float,
        causes: Mapping[str, int],
        messages: Mapping[str, str] | None = None,
        scope: str = "rollouts",
    ) -> None:
        self.scope = scope
        self.n_ungraded = int(n_ungraded)
        self.n_rollouts = int(n_rollouts)
        self.share = self.n_ungraded / max(1, self.n_rollouts)
        self.max_share = float(max_share)
        self.causes = dict(causes)
        self.messages = dict(messages or {})
        by_cause = ", ".join(f"{c}: {n}" for c, n in sorted(self.causes.items()))
        last = "; ".join(f"{c}: {m}" for c, m in sorted(self.messages.items()))
        super().__init__(
            f"{self.n_ungraded} of the {self.n_rollouts} {scope} of this training step are ungraded "
            f"({self.share:.0%} >= the limit of {self.max_share:.0%}) because the machinery failed "
            f"({by_cause}). Last errors: {last or 'n/a'}. Fix the failing part (sandbox backend, "
            "Docker daemon, Ray cluster, world model) and resume; the limit is max_ungraded_share "
            "(--max-ungraded-share; None disables the stop)."
        )


@dataclass
class _Step:
    """One training step's counts (see :class:`UngradedMonitor`)."""

    planned: int  # groups the step holds
    anchors: int | None  # anchor groups it plans (None: not said, extrapolated from its groups)
    opened: int = 0  # groups opened in it (UngradedMonitor.open_group)
    opened_anchors: int = 0
    groups: int = 0  # groups recorded (closed)
    rollouts: int = 0
    ungraded: int = 0  # infrastructure causes only
    causes: dict[str, int] = field(default_factory=dict)
    exec_groups: int = 0  # anchor groups recorded
    executions: int = 0  # their rollouts
    exec_ungraded: int = 0
    exec_causes: dict[str, int] = field(default_factory=dict)

    def planned_rollouts(self) -> float:
        """The step's rollouts: planned groups x rollouts per recorded group."""
        return self.planned * self.rollouts / self.groups

    def planned_executions(self) -> float:
        """The step's real executions: planned anchor groups x rollouts per recorded anchor
        group. Anchor groups planned: as said by :meth:`UngradedMonitor.plan`, else the share of
        anchor groups among the recorded groups times the planned groups; never fewer than
        those opened or recorded."""
        n = self.anchors if self.anchors is not None else self.exec_groups * self.planned / self.groups
        n = max(n, self.opened_anchors, self.exec_groups)
        return n * self.executions / self.exec_groups


class UngradedMonitor:
    """Counts ungraded rollouts per training step, warns, records them and applies the stop rule.

    A *step* is ``groups_per_step`` groups, or the ``groups_in_step`` groups given to
    :meth:`plan` (which :class:`~wmrl_envs.core.CorrectionLoop` calls whenever it draws a
    step's routes, with the number of anchor groups among them). A group belongs to the step it
    was *opened* in (:meth:`open_group`, whose id the loop keeps in the group's ticket and
    passes back to :meth:`record_group`), so an anchor group whose executions finish after the
    next step began (a Ray anchor) counts in the step that planned it; a step is kept until
    all of its opened groups are recorded. A group recorded without a step id is opened in the
    current step at that moment (a step then is the next ``groups_per_step`` recorded groups).

    After every group its step's shares are checked; both extrapolate what the step has seen so
    far to what it plans, the same way:

    * **rollouts**: the step's ungraded rollouts with an infrastructure cause against its
      planned groups x rollouts per recorded group;
    * **real executions**: those of its anchor groups (``anchor=True``) against its planned
      anchor groups x rollouts per recorded anchor group. Anchors are few (10–25% of a step),
      so a sandbox that is dead would otherwise stay below the share of all rollouts while
      training silently turned into world-model-only training.

    When either count reaches ``max_share`` of its planned total, :class:`TooManyUngradedError`
    is raised at once: the step can no longer end below the share, and a broken backend wastes
    at most that share of a step plus one group. (4 failed of the first 8 executions of a step that plans 3
    anchor groups of 8 are 4 of 24: the run goes on.)

    Every ungraded *score* (a failed execution, a failed world-model prediction — also on an
    anchor row whose real score exists, where it only leaves the anchor pair out) is added to
    ``ledger`` as source ``"ungraded:<cause>"`` (count 1, 0 seconds).

    Args:
        max_share: share in (0, 1] at which the run stops (default 0.5); ``None`` never stops.
        groups_per_step: groups per step until :meth:`plan` says otherwise (int >= 1).
        ledger: where the counts by cause go (default: a new ledger).

    Attributes:
        n_rollouts: rollouts recorded in training (int).
        n_ungraded: ungraded rollouts recorded in training, every cause (int).
        causes: ``{cause: ungraded rollouts}`` over the whole run (training and evaluation).
        last_messages: ``{cause: last error text}``.

    Raises:
        ValueError: ``max_share`` outside (0, 1] or ``groups_per_step < 1``.

    Example:
        >>> mon = UngradedMonitor(max_share=0.5, groups_per_step=2)
        >>> mon.record_group([None, "sandbox_unavailable"])  # 1 of 4 planned rollouts: go on
        >>> try:
        ...     mon.record_group(["sandbox_unavailable", None])
        ... except TooManyUngradedError as e:
        ...     print(e.n_ungraded, e.n_rollouts, e.causes)
        2 4 {'sandbox_unavailable': 2}
    """

    MAX_KEPT_STEPS = 64
    """Steps kept at most while some of their groups are still open (the oldest are dropped:
    a group that never closes must not hold memory for ever)."""

    def __init__(
        self, max_share: float | None = 0.5, groups_per_step: int = 1, ledger: CostLedger | None = None
    ) -> None:
        if max_share is not None and not (isinstance(max_share, (int, float)) and 0.0 < max_share <= 1.0):
            raise ValueError(
                f"max_ungraded_share must be in (0, 1] (share of a step's rollouts at which the run stops) "
                f"or None (never stop), got {max_share!r}"
            )
        if int(groups_per_step) < 1:
            raise ValueError(f"groups_per_step must be >= 1, got {groups_per_step}")
        self.max_share = None if max_share is None else float(max_share)
        self.ledger = ledger if ledger is not None else CostLedger()
        self._default_planned = int(groups_per_step)
        self.n_rollouts = 0
        self.n_ungraded = 0
        self.causes: dict[str, int] = {}
        self.last_messages: dict[str, str] = {}
        self._steps: dict[int, _Step] = {}
        self._step_id = -1
        self._new_step(self._default_planned, None)

    @property
    def groups_per_step(self) -> int:
        """Groups of a step that :meth:`plan` did not size (int >= 1; saved in the state)."""
        return self._default_planned

    def _new_step(self, planned: int, anchors: int | None) -> int:
        # drop the steps whose groups are all recorded, then the oldest beyond the cap
        for k in [k for k, st in self._steps.items() if st.opened <= st.groups]:
            del self._steps[k]
        while len(self._steps) >= self.MAX_KEPT_STEPS:
            del self._steps[min(self._steps)]
        self._step_id += 1
        self._steps[self._step_id] = _Step(max(1, int(planned)), None if anchors is None else max(0, int(anchors)))
        return self._step_id

    def plan(self, groups_in_step: int | None = None, anchor_groups: int | None = None) -> int:
        """Start a new step of ``groups_in_step`` groups (default ``groups_per_step``).

        Args:
            groups_in_step: groups of the step (int >= 1; ``None``: ``groups_per_step``).
            anchor_groups: how many of them are anchor groups (int >= 0; ``None``: not known,
                extrapolated from the step's recorded groups).

        Returns:
            The step's id (int).
        """
        return self._new_step(groups_in_step if groups_in_step is not None else self._default_planned,
                              anchor_groups)

    def open_group(self, anchor: bool = False) -> int:
        """Open a training group in the current step (a new step of ``groups_per_step`` groups
        starts when the current one is full) and return the step's id, for :meth:`record_group`.

        Args:
            anchor: the group is an anchor group (executed for real).
        """
        st = self._steps[self._step_id]
        if st.opened >= st.planned:
            self._new_step(self._default_planned, None)
            st = self._steps[self._step_id]
        st.opened += 1
        st.opened_anchors += int(bool(anchor))
        return self._step_id

    def abandon_groups(self, n: int, anchors: int = 0, step: int | None = None) -> None:
        """Forget ``n`` groups opened in the current step (or in ``step``, :meth:`open_group`'s id)
        that will never be recorded (their routes were given back,
        :meth:`CorrectionLoop.requeue_routes`, or the group was dropped,
        :meth:`CorrectionLoop.abandon_group`), ``anchors`` of them anchor groups. A step no
        longer kept: nothing to forget."""
        st = self._steps.get(self._step_id if step is None else step)
        if st is None:
            return
        st.opened = max(st.groups, st.opened - int(n))
        st.opened_anchors = max(0, st.opened_anchors - int(anchors))

    @property
    def step_counts(self) -> dict[str, Any]:
        """The current step: ``{"groups", "rollouts", "ungraded", "causes", "executions",
        "executions_ungraded"}`` (recorded so far)."""
        st = self._steps[self._step_id]
        return {
            "groups": st.groups,
            "rollouts": st.rollouts,
            "ungraded": st.ungraded,
            "causes": dict(st.causes),
            "executions": st.executions,
            "executions_ungraded": st.exec_ungraded,
        }

    def record_group(
        self,
        causes: Sequence[str | None],
        *,
        training: bool = True,
        anchor: bool = False,
        score_failures: Sequence[str | None] = (),
        messages: Mapping[str, str] | None = None,
        where: str = "group",
        step: int | None = None,
    ) -> None:
        """Record one scored group.

        Args:
            causes: per rollout, ``None`` (it has a training reward) or the cause of its
                missing reward, length G.
            training: ``False`` (evaluation): counted, recorded and warned about, but not part
                of a step (no stop rule).
            anchor: the group was executed for real (its ``causes`` are those of its
                executions): it also counts toward the share of real executions.
            score_failures: causes of further failed scores that did not leave a rollout
                ungraded (world-model failures on anchor rows, whose real score exists).
            messages: ``{cause: error text}`` for the warning and the stop rule's error.
            where: how the warning names the group (e.g. ``"group 7"``).
            step: the step the group was opened in (:meth:`open_group`'s id); ``None``: opened
                now, in the current step. A step no longer kept counts in the current one.

        Raises:
            TooManyUngradedError: the stop rule fired for the group's step (training only).
        """
        for cause, text in (messages or {}).items():
            if text:
                self.last_messages[cause] = str(text)[:500]
        failed = [c for c in causes if c is not None]
        for c in [*failed, *(c for c in score_failures if c is not None)]:
            self.ledger.add(CostLedger.UNGRADED_PREFIX + c, 0.0, 1, cpu_seconds=0.0)  # a count, not a cost
        for c in failed:
            self.causes[c] = self.causes.get(c, 0) + 1
        infra = [c for c in [*failed, *score_failures] if is_infrastructure(c)]
        if infra:
            counts: dict[str, int] = {}
            for c in infra:
                counts[c] = counts.get(c, 0) + 1
            detail = "; ".join(f"{c}: {self.last_messages[c]}" for c in sorted(counts) if c in self.last_messages)
            logger.warning(
                "%s: %d of %d rollouts ungraded, %d failed score(s) by cause %s%s (infrastructure failures: "
                "left out of training and of the anchor statistics)",
                where, len(failed), len(causes), len(infra), counts, f" — {detail}" if detail else "",
            )
        if not training:
            return
        if step is None:
            step = self.open_group(anchor)
        st = self._steps.get(step, self._steps[self._step_id])
        st.groups += 1
        st.rollouts += len(causes)
        self.n_rollouts += len(causes)
        self.n_ungraded += len(failed)
        if anchor:
            st.exec_groups += 1
            st.executions += len(causes)
        for c in failed:
            if is_infrastructure(c):
                st.ungraded += 1
                st.causes[c] = st.causes.get(c, 0) + 1
                if anchor:
                    st.exec_ungraded += 1
                    st.exec_causes[c] = st.exec_causes.get(c, 0) + 1
        if self.max_share is None or st.ungraded == 0:
            return
        if st.exec_ungraded:
            planned = st.planned_executions()
            if st.exec_ungraded >= self.max_share * planned - 1e-9:
                raise TooManyUngradedError(
                    st.exec_ungraded, int(round(planned)), self.max_share, st.exec_causes,
                    {c: m for c, m in self.last_messages.items() if c in st.exec_causes},
                    scope="real executions",
                )
        planned = st.planned_rollouts()
        if st.ungraded >= self.max_share * planned - 1e-9:
            raise TooManyUngradedError(
                st.ungraded, int(round(planned)), self.max_share, st.causes,
                {c: m for c, m in self.last_messages.items() if c in st.causes},
            )

    def stats(self) -> dict[str, Any]:
        """``{"ungraded_rollouts", "rollouts", "ungraded_share", "ungraded_by_cause"}`` (training
        rollouts; the causes also count evaluation)."""
        return {
            "ungraded_rollouts": self.n_ungraded,
            "rollouts": self.n_rollouts,
            "ungraded_share": self.n_ungraded / self.n_rollouts if self.n_rollouts else 0.0,
            "ungraded_by_cause": dict(sorted(self.causes.items())),
        }

    def state_dict(self) -> dict[str, Any]:
        """Totals and ``groups_per_step`` (JSON-serialisable); the steps in progress are not
        saved (save at step boundaries)."""
        return {
            "n_rollouts": self.n_rollouts,
            "n_ungraded": self.n_ungraded,
            "causes": dict(self.causes),
            "last_messages": dict(self.last_messages),
            "groups_per_step": self._default_planned,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output: the totals and ``groups_per_step`` (a state
        saved before it was kept leaves the monitor's own); every step in progress ends (a
        step planned before the load too) and a new one of ``groups_per_step`` groups starts.

        Raises:
            ValueError: ``groups_per_step`` in the state is not an integer >= 1 (nothing is
                changed then).
        """
        per_step = state.get("groups_per_step", self._default_planned)
        if isinstance(per_step, bool) or not isinstance(per_step, numbers.Integral) or per_step < 1:
            raise ValueError(f"ungraded monitor state: groups_per_step must be an integer >= 1, got {per_step!r}")
        n_rollouts = int(state.get("n_rollouts", 0))
        n_ungraded = int(state.get("n_ungraded", 0))
        causes = {str(k): int(v) for k, v in dict(state.get("causes", {})).items()}
        last = {str(k): str(v) for k, v in dict(state.get("last_messages", {})).items()}
        self.n_rollouts, self.n_ungraded, self.causes, self.last_messages = n_rollouts, n_ungraded, causes, last
        self._default_planned = int(per_step)
        self._steps.clear()
        self._new_step(self._default_planned, None)
