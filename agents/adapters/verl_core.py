"""The verl adapter's shared state (:class:`WMRLHub`) and advantage math, without importing verl.

verl (0.9.1) scores every rollout in a separate call, in one of several reward-worker processes,
as the rollout finishes; it computes advantages later, in the trainer process, from the
rewards, the response mask and the group ``uid`` of each row only. The WMRL method
(``docs/method.md``) needs state across those calls and processes: the route of each group,
the anchor pairs, ρ, the ledger and which rollouts are ungraded. :class:`WMRLHub` holds all of
it once — one :class:`~wmrl_envs.core.CorrectionLoop` — and is run as one named Ray actor
(:func:`connect_hub`) that every reward worker and the trainer reach by name; in a single
process (tests, a debugger) :func:`use_local_hub` registers a plain instance instead.

What a group goes through (``docs/verl.md`` has the whole picture):

1. :meth:`WMRLHub.route` — the first rollout of a ``uid`` to arrive opens its group: the seeded
   router's schedule gives the route (one training step of ``groups_per_step`` groups is drawn
   when the step's first group arrives), and every later rollout of the ``uid``, on any worker,
   gets the same route and the ρ of the ticket;
2. the reward worker scores the rollout (world model; real execution on anchor groups);
3. :meth:`WMRLHub.submit` — charges the costs, returns the training reward (real score on
   anchors, ``f̂(r̂)`` on world-model groups, ``None`` = ungraded) and closes the group when
   its ``group_size``-th rollout arrives (anchor pairs, ρ, ungraded accounting);
4. :meth:`WMRLHub.advantage_plan` — called by the advantage estimator with the step's rows:
   closes the groups still open (a rollout that never arrived), finds the ungraded rows, gives
   each row its weight (ρ on anchor rows), saves the state for a resume and appends the step's
   metrics;
5. :func:`wmrl_grpo_advantages` — GRPO advantages over the graded rows of each group, times
   the row's weight; ungraded rows get 0.

Contents: :class:`WMRLHub`, :class:`RowPlan`, :func:`wmrl_grpo_advantages`,
:func:`connect_hub`, :func:`use_local_hub`, :func:`get_hub`, :func:`call_hub`,
:data:`ESTIMATOR_NAME`, :data:`DEFAULT_HUB_NAME`, :data:`UNGRADED_SCORE`.
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
import warnings
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from wmrl_envs.core import ANCHOR, WORLD_MODEL, CorrectionConfig, CorrectionLoop, TooManyUngradedError
from wmrl_envs.core.ledger import EXECUTION, WORLD_MODEL_SOURCE
from wmrl_envs.utils import write_json_atomic

__all__ = [
    "ESTIMATOR_NAME",
    "DEFAULT_HUB_NAME",
    "UNGRADED_SCORE",
    "STATE_DIR",
    "RowPlan",
    "WMRLHub",
    "wmrl_grpo_advantages",
    "hub_name",
    "use_local_hub",
    "get_hub",
    "connect_hub",
    "call_hub",
]

ESTIMATOR_NAME = "wmrl_grpo"
"""``algorithm.adv_estimator`` value of the WMRL estimator (registered by the ``verl.plugins``
entry point of this package, :mod:`agents.adapters.verl_plugin`)."""
DEFAULT_HUB_NAME = "wmrl_hub"
"""Name of the hub's Ray actor (the environment variable ``WMRL_HUB_NAME`` changes it, see :func:`hub_name`)."""
UNGRADED_SCORE = 0.0
"""The score an ungraded rollout is handed to verl with (verl's own convention for a reward that
timed out or raised). verl only takes numbers; the estimator leaves such rows out of their
group's statistics and gives them a zero advantage."""
STATE_DIR = "wmrl_state"
"""Folder (inside ``trainer.default_local_dir``) of the per-step state files and ``metrics.jsonl``."""

_STEP_FILE = re.compile(r"^step_(\d+)\.json$")


class _WorkerSideWorldModel:
    """Placeholder world model of the hub's loop: predictions are made in the reward workers,
    never by the hub (the loop only needs to know that world-model routes are possible)."""

    def predict(self, contexts: Sequence[Any], actions: Sequence[Any]) -> list[Any]:
        raise RuntimeError("the WMRL hub does not predict: reward workers call their world model")


@dataclass
class _Rollout:
    route: str
    reward: float | None
    raw: float | None
    real: float | None
    wm_cause: str | None
    exec_cause: str | None
    sent: float
    length: int | None

    @property
    def ungraded(self) -> bool:
        return self.reward is None


@dataclass
class _Group:
    ticket: Any
    step: int | None
    rollouts: dict[str, _Rollout] = field(default_factory=dict)
    closed: bool = False
    world_model_called: bool = True


@dataclass
class RowPlan:
    """What the estimator does with each row of a batch (per-row lists of length B).

    Attributes:
        weights: ρ of the group's ticket on anchor rows, 1.0 on world-model rows and on rows of
            a ``uid`` the hub does not know (float).
        graded: ``False`` for a row left out of its group's statistics (ungraded; zero advantage).
        routes: ``"anchor"``, ``"world_model"`` or ``""`` (unknown ``uid``).
        n_ambiguous: graded rows dropped because they could not be told apart from an ungraded
            row of their group (same score and length).
        n_unknown: rows whose ``uid`` the hub never routed (plain GRPO, weight 1).
    """

    weights: list[float]
    graded: list[bool]
    routes: list[str]
    n_ambiguous: int = 0
    n_unknown: int = 0


def wmrl_grpo_advantages(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Sequence[Any],
    weights: Sequence[float],
    graded: Sequence[bool],
    *,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantages over the graded rows of each group, times each row's weight.

    For the rows of one ``index`` value (a group) with outcome scores ``s`` (the sum of the row's
    token-level rewards): ``A = (s - mean(s_graded)) / (std(s_graded) + epsilon)`` (``std`` is
    the unbiased one, as in verl's ``compute_grpo_outcome_advantage``; without
    ``norm_adv_by_std_in_grpo`` only the mean is taken off). A group with all rows graded gets
    exactly verl's GRPO advantages (a group of one row: mean 0, std 1, as in verl). A group left
    with a single graded row out of several gets 0 for it (no baseline). Ungraded rows get 0.
    Each row's advantage is then multiplied by ``weights`` (ρ on anchor rows).

    Args:
        token_level_rewards: (B, T) float tensor.
        response_mask: (B, T) tensor of 0/1 (the advantage is broadcast over the response tokens).
        index: B group ids (verl's ``uid`` array).
        weights: B floats.
        graded: B bools.
        epsilon: added to the standard deviation (verl's default 1e-6).
        norm_adv_by_std_in_grpo: divide by the group's standard deviation (GRPO) or not (Dr.GRPO).

    Returns:
        ``(advantages, returns)``: two equal (B, T) float tensors (verl's convention for outcome
        estimators), zero outside the response mask.

    Raises:
        ValueError: ``index``, ``weights`` or ``graded`` does not have B entries.
    """
    b = token_level_rewards.shape[0]
    for name, seq in (("index", index), ("weights", weights), ("graded", graded)):
        if len(seq) != b:
            raise ValueError(f"{name} has {len(seq)} entries for {b} rows")
    scores = token_level_rewards.sum(dim=-1)
    out = torch.zeros_like(scores)
    groups: dict[Any, list[int]] = OrderedDict()
    for i in range(b):
        groups.setdefault(index[i], []).append(i)
    with torch.no_grad():
        for rows in groups.values():
            ok = [i for i in rows if graded[i]]
            if not ok or (len(ok) == 1 and len(rows) > 1):
                continue
            s = scores[ok]
            if len(ok) == 1:
                mean, std = torch.tensor(0.0, dtype=s.dtype), torch.tensor(1.0, dtype=s.dtype)
            else:
                mean, std = torch.mean(s), torch.std(s)
            for i in ok:
                a = scores[i] - mean
                out[i] = a / (std + epsilon) if norm_adv_by_std_in_grpo else a
        w = torch.tensor([float(x) for x in weights], dtype=out.dtype, device=out.device)
        adv = (out * w).unsqueeze(-1) * response_mask
    return adv, adv


class WMRLHub:
    """Routing, corrections, ledger and ungraded rollouts of one verl run, held once.

    Methods are plain (synchronous) and cheap; as a Ray actor the hub runs them one at a time.

    Args:
        group_size: rollouts per group (verl's ``actor_rollout_ref.rollout.n``, int >= 1).
        groups_per_step: prompts per training step (``data.train_batch_size``, int >= 1).
        correction: :class:`~wmrl_envs.core.CorrectionConfig` or a dict of its fields (default:
            the reference settings).
        seed: the router's seed (int).
        state_dir: folder for ``step_<n>.json`` (the state after training step n) and
            ``metrics.jsonl``; ``None``: nothing is written.
        resume_step: load ``state_dir/step_<resume_step>.json`` at start (the step verl resumes
            from; ``metrics.jsonl`` loses the lines of later steps); ``None``: start fresh (an
            earlier run's ``state_dir`` is moved to ``<state_dir>.previous``).
        max_ungraded_share: the stop rule (see :class:`~wmrl_envs.core.UngradedMonitor`);
            :class:`~wmrl_envs.core.TooManyUngradedError` is raised by :meth:`advantage_plan`,
            in the trainer, so that it stops the run.
        keep_states: per-step state files kept besides those of steps verl holds a checkpoint of
            (``global_step_<n>`` folders next to ``state_dir``).

    Attributes:
        loop: the :class:`~wmrl_envs.core.CorrectionLoop`.
        n_train_steps: training steps whose advantages were computed (resumes with the state).

    Raises:
        ValueError: bad ``group_size`` or ``groups_per_step``; ``resume_step`` given without a
            state file for it (the message names the file).
    """

    STATE_VERSION = 1

    def __init__(
        self,
        group_size: int,
        groups_per_step: int,
        correction: CorrectionConfig | Mapping[str, Any] | None = None,
        *,
        seed: int = 0,
        state_dir: str | os.PathLike | None = None,
        resume_step: int | None = None,
        max_ungraded_share: float | None = 0.5,
        keep_states: int = 2,
    ) -> None:
        for name, v in (("group_size", group_size), ("groups_per_step", groups_per_step)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if correction is None:
            correction = CorrectionConfig()
        elif isinstance(correction, Mapping):
            correction = CorrectionConfig(**dict(correction))
        self.group_size = int(group_size)
        self.loop = CorrectionLoop(correction, world_model=_WorkerSideWorldModel(), seed=int(seed),
                                   groups_per_step=int(groups_per_step), max_ungraded_share=max_ungraded_share)
        self.state_dir = None if state_dir is None else Path(state_dir)
        self.keep_states = int(keep_states)
        self.n_train_steps = 0
        self._groups: dict[str, _Group] = {}
        self._arrivals: dict[str, int] = {}
        self._step: int | None = None
        self._stop: TooManyUngradedError | None = None
        self._lock = threading.RLock()
        self._step_counts = {"ambiguous_rows": 0, "unknown_rows": 0, "late_rollouts": 0}
        if self.state_dir is not None and self.state_dir.is_dir():
            self._tidy_state_dir(resume_step)
        if resume_step is not None:
            path = self._state_file(int(resume_step))
            if path is None or not path.is_file():
                raise ValueError(
                    f"verl resumes from step {resume_step} but there is no WMRL state for it "
                    f"({path}); the corrections would restart from nothing. Restore that file or start "
                    "verl fresh (trainer.resume_mode=disable)")
            self.load(path)

    def _tidy_state_dir(self, resume_step: int | None) -> None:
        """A fresh run moves an earlier run's files aside (``<state_dir>.previous``); a resumed
        run drops the metrics lines of the steps after ``resume_step`` (they are trained again)."""
        assert self.state_dir is not None
        metrics = self.state_dir / "metrics.jsonl"
        if resume_step is None:
            if any(self.state_dir.iterdir()):
                old = self.state_dir.with_name(self.state_dir.name + ".previous")
                if old.exists():
                    import shutil

                    shutil.rmtree(old)
                self.state_dir.rename(old)
                warnings.warn(f"a fresh run: the WMRL state of an earlier run was moved to {old}", UserWarning,
                              stacklevel=3)
        elif metrics.is_file():
            keep = [ln for ln in metrics.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= resume_step]
            metrics.write_text("".join(ln + "\n" for ln in keep))

    # ------------------------------------------------------------------ routing
    # verl's rollouts, and their world-model predictions, arrive one at a time from the reward
    # workers, after routing: the hub calls the loop's steps itself (open_group at a group's first
    # route, record_execution and count_episodes per rollout, close_group once G rollouts are in)
    # where the other group APIs call CorrectionLoop.score_group / begin_group + finish_group
    def route(self, uid: str, step: int | None = None, training: bool = True) -> dict[str, Any]:
        """The route of the group ``uid`` (opened on its first call).

        Args:
            uid: verl's group id (every rollout of a prompt shares it).
            step: verl's ``global_steps`` when known: a new value draws that step's routes.
            training: ``False`` for a validation group (route ``eval_route``, nothing updated).

        Returns:
            ``{"route", "rho", "group_id", "training"}`` (``group_id`` ``None`` on validation).
        """
        with self._lock:
            uid = str(uid)
            g = self._groups.get(uid)
            if g is None:
                if not training:
                    t = self.loop.eval_ticket()
                    return {"route": t.route, "rho": t.rho, "group_id": None, "training": False}
                if step is not None and step != self._step:
                    self._step = int(step)
                    self.loop.plan_step()
                g = _Group(self.loop.open_group(), None if step is None else int(step))
                self._groups[uid] = g
            t = g.ticket
            return {"route": t.route, "rho": t.rho, "group_id": t.group_id, "training": t.training}

    def submit(
        self,
        uid: str,
        rollout_id: str | int | None,
        *,
        route: str,
        raw: float | None = None,
        real: float | None = None,
        wm_cause: str | None = None,
        exec_cause: str | None = None,
        length: int | None = None,
        wm_seconds: float = 0.0,
        wm_cpu_seconds: float | None = None,
        world_model_called: bool = True,
        exec_seconds: float | None = None,
        exec_cpu_seconds: float | None = None,
        training: bool = True,
    ) -> dict[str, Any]:
        """Record one scored rollout and return its training reward.

        Args:
            uid: the group id; ``rollout_id``: the rollout within it (verl's ``session_id``;
                ``None``: numbered in order of arrival). A second submission of a rollout
                replaces the first while the group is open (e.g. verl timed the call out after
                it had been recorded).
            route: the route :meth:`route` gave.
            raw: the world model's raw score r̂ (``None``: no score, cause ``wm_cause``).
            real: the real score r of an anchor rollout (``None``: ungraded, cause ``exec_cause``).
            length: the response length in tokens (tells the row apart in :meth:`advantage_plan`).
            wm_seconds, wm_cpu_seconds: cost of the world-model call (charged when called).
            exec_seconds, exec_cpu_seconds: cost of the real execution (``None``: not executed).
            training: ``False`` for a validation rollout.

        Returns:
            ``{"reward": float | None, "score": float}``: the reward (real score on anchors,
            ``f̂(r̂)`` on world-model groups, ``None`` = ungraded) and the number to hand to verl
            (the reward, or :data:`UNGRADED_SCORE`).
        """
        with self._lock:
            uid = str(uid)
            if world_model_called:
                self.loop.ledger.add(WORLD_MODEL_SOURCE, float(wm_seconds), 1, cpu_seconds=wm_cpu_seconds)
            if exec_seconds is not None:  # credited to its group (an execution budget prices groups by it)
                open_group = self._groups.get(uid) if training else None
                self.loop.record_execution(float(exec_seconds), 1, cpu_seconds=exec_cpu_seconds,
                                           ticket=open_group.ticket if open_group is not None else None)
            if route == ANCHOR:
                reward = None if (real is None or exec_cause) else float(real)
                if reward is None and not exec_cause:
                    exec_cause = "execution_ungraded"
            else:
                reward = None if (raw is None or wm_cause) else self.loop.calibrate([float(raw)])[0]
                if reward is None and not wm_cause:
                    wm_cause = "world_model_ungraded"
            sent = UNGRADED_SCORE if reward is None else float(reward)
            rec = _Rollout(route, reward, raw, real, wm_cause, exec_cause, sent, None if length is None else int(length))
            g = self._groups.get(uid)
            if not training or g is None:
                self.loop.count_episodes(1)
                if training and g is None:
                    self._step_counts["late_rollouts"] += 1
                if reward is None:
                    self.loop.record_ungraded([exec_cause or wm_cause], where=f"rollout of group {uid}")
                return {"reward": reward, "score": sent}
            if rollout_id is None:
                rollout_id = self._arrivals.get(uid, 0)
                self._arrivals[uid] = rollout_id + 1
            key = str(rollout_id)
            if key not in g.rollouts:
                self.loop.count_episodes(1)
            if g.closed:
                if key in g.rollouts and reward is None:
                    # ungraded after the group was closed with a score for it (verl timed the call
                    # out late): the row is left out of the advantages, the pairs stay
                    g.rollouts[key] = rec
                self._step_counts["late_rollouts"] += 1
                return {"reward": reward, "score": sent}
            g.rollouts[key] = rec
            g.world_model_called = g.world_model_called and world_model_called
            if len(g.rollouts) >= self.group_size:
                self._close(uid, g)
            return {"reward": reward, "score": sent}

    def _close(self, uid: str, g: _Group) -> None:
        recs = list(g.rollouts.values())
        g.closed = True
        if not recs:
            return
        try:
            self.loop.close_group(
                g.ticket, [r.raw for r in recs], [r.real for r in recs] if g.ticket.route == ANCHOR else None,
                wm_causes=[r.wm_cause for r in recs],
                exec_causes=[r.exec_cause for r in recs] if g.ticket.route == ANCHOR else None,
                world_model_called=g.world_model_called, where=f"group {uid}")
        except TooManyUngradedError as e:  # raised where it stops the run: in advantage_plan
            self._stop = self._stop or e

    # ------------------------------------------------------------------ advantages
    def advantage_plan(self, uids: Sequence[str], scores: Sequence[float], lengths: Sequence[int | None]) -> RowPlan:
        """Per-row weights and graded flags for one training batch; ends the step.

        Closes the groups of ``uids`` still open (their missing rollouts simply do not count),
        matches each group's ungraded rollouts to rows by the score verl holds for them
        (:data:`UNGRADED_SCORE`) and their response length — graded rows of the same group that
        cannot be told apart from an ungraded one are dropped too (counted in
        ``n_ambiguous``): no ungraded rollout is ever trained on as a real score —, forgets the
        groups, saves ``state_dir/step_<n>.json`` and appends a line to ``metrics.jsonl``.

        Args:
            uids: B group ids; ``scores``: B outcome scores (sum of token-level rewards);
            ``lengths``: B response lengths (sum of the response mask).

        Raises:
            TooManyUngradedError: the stop rule fired on a group of this or an earlier call.
            ValueError: the three sequences differ in length; a group has more rows than
                ``group_size`` (several outputs per rollout: multi-turn agent loops).
        """
        b = len(uids)
        if len(scores) != b or len(lengths) != b:
            raise ValueError(f"{b} uids but {len(scores)} scores and {len(lengths)} lengths")
        with self._lock:
            if self._stop is not None:
                raise self._stop
            weights, graded, routes = [1.0] * b, [True] * b, [""] * b
            rows: dict[str, list[int]] = OrderedDict()
            for i, u in enumerate(uids):
                rows.setdefault(str(u), []).append(i)
            n_amb = n_unknown = 0
            for uid, idx in rows.items():
                if uid.startswith("pad"):  # verl's padding rows (padding_utils: uid "pad<hex>"): plain rows
                    continue
                if len(idx) > self.group_size:
                    raise ValueError(
                        f"group {uid} has {len(idx)} rows for {self.group_size} rollouts: several outputs per rollout "
                        "(a multi-turn agent loop that returns one output per turn) are not supported by wmrl_grpo; "
                        "use a single-output agent loop (docs/verl.md, 'Limits')")
                g = self._groups.pop(uid, None)
                self._arrivals.pop(uid, None)
                if g is None:
                    n_unknown += len(idx)
                    continue
                if not g.closed:
                    self._close(uid, g)
                t = g.ticket
                w = float(t.rho) if t.route == ANCHOR else 1.0
                for i in idx:
                    weights[i], routes[i] = w, t.route
                bad = [r for r in g.rollouts.values() if r.ungraded]
                if not bad:
                    continue
                cands: set[int] = set()
                for r in bad:
                    same = [i for i in idx if float(scores[i]) == r.sent]
                    exact = [i for i in same if r.length is None or lengths[i] is None or int(lengths[i]) == r.length]
                    cands.update(exact or same)
                for i in cands:
                    graded[i] = False
                n_amb += max(0, len(cands) - len(bad))
            self._step_counts["ambiguous_rows"] += n_amb
            self._step_counts["unknown_rows"] += n_unknown
            if n_unknown:
                warnings.warn(f"{n_unknown} rows of the batch belong to groups the WMRL hub never routed: they get "
                              "plain GRPO advantages (were they scored by WMRLRewardManager?)", RuntimeWarning,
                              stacklevel=2)
            self.n_train_steps += 1
            self._prune()
            self._write_step(routes, graded)
            if self._stop is not None:
                raise self._stop
            return RowPlan(weights, graded, routes, n_amb, n_unknown)

    def _prune(self) -> None:
        """Forget closed groups the trainer never asked about (filtered out of a batch) once they
        are more than four steps' worth of groups old."""
        limit = 4 * self.loop.groups_per_step
        closed = [u for u, g in self._groups.items() if g.closed]
        for u in closed[: max(0, len(closed) - limit)]:
            self._groups.pop(u, None)

    # ------------------------------------------------------------------ reporting and state
    def stats(self) -> dict[str, Any]:
        """Flat dict: routing counts, ρ, calibration, costs, ungraded rollouts and this adapter's
        counters (``ambiguous_rows``, ``unknown_rows``, ``late_rollouts``)."""
        with self._lock:
            led, r = self.loop.ledger, self.loop.router
            return {
                "train_steps": self.n_train_steps,
                "groups": r.n_groups_routed, "anchor_groups": r.n_anchor_groups,
                "realised_anchor_fraction": r.realised_fraction, "anchor_fraction": r.anchor_fraction,
                "real_executions": led.count(EXECUTION), "execution_cpu_s": led.cpu_seconds(EXECUTION),
                "execution_s": led.seconds(EXECUTION),
                "world_model_predictions": led.count(WORLD_MODEL_SOURCE),
                "world_model_cpu_s": led.cpu_seconds(WORLD_MODEL_SOURCE),
                "ungraded": dict(led.ungraded_counts()),
                "open_groups": sum(1 for g in self._groups.values() if not g.closed),
                **self._step_counts, **self.loop.corrector.stats(),
            }

    def process_cpu_seconds(self) -> float:
        """CPU-seconds used so far by the process the hub runs in (its Ray actor's, for the
        overhead benchmark ``benchmarks/verl_reward_overhead.py``)."""
        return time.process_time()

    def state_dict(self) -> dict[str, Any]:
        """The loop's state (router, corrections, ledger, advisor, ...) and ``n_train_steps``
        (JSON-serialisable). Groups in flight are not part of it: save between steps."""
        with self._lock:
            return {"version": self.STATE_VERSION, "n_train_steps": self.n_train_steps,
                    "group_size": self.group_size, "step_counts": dict(self._step_counts),
                    "loop": self.loop.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (groups in flight are dropped).

        Raises:
            ValueError: not a state of this version, or a malformed loop state (nothing loaded).
        """
        if not isinstance(state, Mapping) or state.get("version") != self.STATE_VERSION or "loop" not in state:
            raise ValueError(f"not a WMRLHub state of version {self.STATE_VERSION}: keys "
                             f"{sorted(state) if isinstance(state, Mapping) else type(state).__name__}")
        with self._lock:
            self.loop.load_state_dict(state["loop"])
            self.n_train_steps = int(state["n_train_steps"])
            self._step_counts.update({k: int(v) for k, v in dict(state.get("step_counts", {})).items()})
            self._groups.clear()
            self._arrivals.clear()
            self._step = None

    def save(self, path: str | os.PathLike) -> Path:
        """Write :meth:`state_dict` to ``path`` atomically; returns the path."""
        return write_json_atomic(path, self.state_dict())

    def load(self, path: str | os.PathLike) -> None:
        """Load a file written by :meth:`save` (see :meth:`load_state_dict`)."""
        self.load_state_dict(json.loads(Path(path).read_text()))

    def _state_file(self, step: int) -> Path | None:
        return None if self.state_dir is None else self.state_dir / f"step_{step}.json"

    def _write_step(self, routes: Sequence[str], graded: Sequence[bool]) -> None:
        if self.state_dir is None:
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.save(self._state_file(self.n_train_steps))
        line = {"step": self.n_train_steps, "time": time.time(), "rows": len(routes),
                "anchor_rows": sum(1 for r in routes if r == ANCHOR),
                "world_model_rows": sum(1 for r in routes if r == WORLD_MODEL),
                "ungraded_rows": sum(1 for x in graded if not x), **self.stats()}
        with open(self.state_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(line, default=_json_default) + "\n")
        # keep the newest states and those of steps verl holds a checkpoint of
        ckpt_root = self.state_dir.parent
        files = sorted((int(m.group(1)), p) for p in self.state_dir.iterdir() if (m := _STEP_FILE.match(p.name)))
        for n, p in files[: max(0, len(files) - self.keep_states)]:
            if not (ckpt_root / f"global_step_{n}").is_dir():
                p.unlink(missing_ok=True)


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    return str(x)


# ---------------------------------------------------------------------- reaching the hub
_LOCAL_HUBS: dict[str, WMRLHub] = {}


def hub_name() -> str:
    """The hub's name: the environment variable ``WMRL_HUB_NAME``, default :data:`DEFAULT_HUB_NAME`
    (read the same way by the reward manager, the reward function and the estimator; the Ray actor
    is also scoped by the Ray job, so runs on one cluster never share a hub)."""
    return os.environ.get("WMRL_HUB_NAME", DEFAULT_HUB_NAME)


def use_local_hub(hub: WMRLHub | None, name: str = DEFAULT_HUB_NAME) -> None:
    """Serve ``hub`` under ``name`` to this process's reward function and estimator instead of
    a Ray actor (single-process use: tests, debugging); ``None`` removes it."""
    if hub is None:
        _LOCAL_HUBS.pop(name, None)
    else:
        _LOCAL_HUBS[name] = hub


def get_hub(name: str | None = None) -> Any:
    """The hub named ``name``: the local one (:func:`use_local_hub`) or the Ray actor's handle.

    Raises:
        RuntimeError: neither exists (the reward manager creates the actor when it starts:
            is ``reward.reward_manager`` set to ``WMRLRewardManager``?).
    """
    name = name or hub_name()
    if name in _LOCAL_HUBS:
        return _LOCAL_HUBS[name]
    import ray

    try:
        return ray.get_actor(_actor_name(name))
    except ValueError as e:
        raise RuntimeError(
            f"no WMRL hub named {name!r}: it is created by WMRLRewardManager when the reward workers start "
            "(reward.reward_manager.source=importlib, module.path=pkg://agents.adapters.verl, "
            "name=WMRLRewardManager); the estimator cannot run before them") from e


def _actor_name(name: str) -> str:
    """The Ray actor's name: ``name`` and the Ray job id (every process of a verl run shares the
    job; a later run on the same cluster gets a new hub)."""
    import ray

    return f"{name}:{ray.get_runtime_context().get_job_id()}"


def connect_hub(name: str | None = None, **hub_kwargs: Any) -> Any:
    """The hub ``name``, created as a Ray actor with ``hub_kwargs`` if it does not exist yet
    (every reward worker calls this with the same arguments; the first creates it).

    The actor is named ``<name>:<job id>``, takes no CPU, runs one call at a time and is
    *detached*: it does not die with the reward worker that happened to create it (a reward
    worker restarted by Ray would otherwise take the run's anchor pairs with it). It ends with
    the Ray cluster; on a cluster that outlives the run (``ray start``), remove it with
    ``ray.kill(ray.get_actor("<name>:<job id>"))`` (``docs/verl.md``)."""
    name = name or hub_name()
    if name in _LOCAL_HUBS:
        return _LOCAL_HUBS[name]
    import ray

    actor = ray.remote(WMRLHub).options(name=_actor_name(name), get_if_exists=True, lifetime="detached",
                                        num_cpus=0, max_concurrency=1)
    return actor.remote(**hub_kwargs)


def call_hub(hub: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """Call ``method`` on a local hub or a Ray actor handle, blocking for the result."""
    if isinstance(hub, WMRLHub):
        return getattr(hub, method)(*args, **kwargs)
    import ray

    return ray.get(getattr(hub, method).remote(*args, **kwargs))


async def call_hub_async(hub: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """:func:`call_hub` for coroutines (awaits the actor without blocking the event loop)."""
    if isinstance(hub, WMRLHub):
        return getattr(hub, method)(*args, **kwargs)
    return await getattr(hub, method).remote(*args, **kwargs)
