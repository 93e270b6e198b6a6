"""What :meth:`AnchoredWorldModelVectorWrapper.step <wmrl_envs.wrappers.vector.AnchoredWorldModelVectorWrapper.step>`
does after the vector env stepped, one part per method: count each real step's cost for its
lane's group, advance the episodes (reward mode: the batched world-model call over the episodes
that ended), fold each sub-env's step in (outcome mode: the predicted transition on world-model
routes; reward mode: the withheld real reward), close the groups whose last episode ended, and
start the next episodes (autoreset).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium.vector import AutoresetMode

from wmrl_envs.core import ANCHOR, WORLD_MODEL
from wmrl_envs.core.group import STEP_SCORE_KEY, rollout_cause, score_failure
from wmrl_envs.core.ledger import EXECUTION_COST_KEY, execution_cpu_seconds, reported_execution_cost
from wmrl_envs.core.loop import GroupTicket
from wmrl_envs.core.ungraded import CAUSE_KEY, EXECUTION_ERROR, TooManyUngradedError, execution_cause
from wmrl_envs.world_models.base import Trajectory, WorldModelPrediction

from .common import learning_inputs
from .routed_sub_env import EXEC_CPU_KEY, EXEC_SECONDS_KEY
from .vector_info import InfoBuilder, copy_obs, info_get, own_info, withhold

__all__ = ["VectorStep", "VectorSteps"]


@dataclass
class VectorStep:
    """One vector step: what the vector env returned and what the wrapper builds from it.

    Attributes:
        stepped: the sub-envs that stepped (not reset by a next-step autoreset).
        act_list: the actions, one per sub-env.
        obs_list: the observations, one per sub-env.
        rewards: float64 (num_envs,), rewritten on world-model routes.
        done: bool (num_envs,), ``terminated | truncated``.
        infos: the vector env's infos (withheld keys cleared in place).
        final_info, final_obs: same-step autoreset's ``final_info`` / ``final_obs`` (else ``None``).
        same_step: the vector env autoresets in the same step.
        w: the ``info["wmrl"]`` builder.
        replacements: ``{sub-env: predicted observation}`` replacing a world-model route's.
        completed: sub-envs whose episode completed its group in this step.
        ended: ``{lane: [(sub-env, raw episode score)]}`` of the episodes that ended in this step.
    """

    stepped: list[int]
    act_list: list[Any]
    obs_list: list[Any]
    rewards: np.ndarray
    done: np.ndarray
    infos: dict[str, Any]
    final_info: Any
    final_obs: Any
    same_step: bool
    w: InfoBuilder
    replacements: dict[int, Any] = field(default_factory=dict)
    completed: list[int] = field(default_factory=list)
    ended: dict[int, list[tuple[int, float | None]]] = field(default_factory=dict)

    def step_info(self, i: int) -> dict[str, Any]:
        """The info dict that describes sub-env ``i``'s step (``final_info`` when it ended with a
        same-step autoreset)."""
        return self.final_info if (self.same_step and self.done[i] and isinstance(self.final_info, dict)) else self.infos


class VectorSteps:
    """Mixed into :class:`~wmrl_envs.wrappers.vector.AnchoredWorldModelVectorWrapper` (uses its
    loop, lanes, open groups and episode tallies)."""

    def _record_executions(self, st: VectorStep, wall: float, step_cpu: float) -> None:
        """Count the real steps' cost into the ledger, each for the group of its lane (its ticket: an
        execution budget reads what a group costs): with RoutedSubEnvs each real step's (seconds,
        CPU-seconds or NaN); on plain sub-envs every stepped sub-env, at an even share of the vector
        step's wall-clock and the env's own ``execution_cpu_s`` where it reports one, else an even
        share of the CPU measured over the vector step. A price a sub-env reports in its step info
        (``info["execution_cost"]``, :func:`~wmrl_envs.core.ledger.reported_execution_cost`) goes with
        its execution (``cost_basis="per_call"`` charges it instead of the declared price)."""
        executed: dict[int, list[float]] = {}  # sub-env -> [seconds, CPU-seconds, price] (NaN: none)
        if self._routed:
            for d in (st.infos, st.final_info):
                if isinstance(d, dict) and EXEC_SECONDS_KEY in d:
                    m = np.asarray(d.pop("_" + EXEC_SECONDS_KEY), dtype=bool)
                    secs = np.asarray(d.pop(EXEC_SECONDS_KEY), dtype=np.float64)
                    for i in np.flatnonzero(m):
                        executed[int(i)] = [float(secs[i]), 0.0, math.nan]
                if isinstance(d, dict) and EXEC_CPU_KEY in d:
                    m = np.asarray(d.pop("_" + EXEC_CPU_KEY), dtype=bool)
                    cpus = np.asarray(d.pop(EXEC_CPU_KEY), dtype=np.float64)
                    for i in np.flatnonzero(m):
                        executed.setdefault(int(i), [0.0, 0.0, math.nan])[1] = float(cpus[i])  # NaN: not measured
        elif st.stepped:
            wall_share, cpu_share = wall / len(st.stepped), step_cpu / len(st.stepped)
            for i in st.stepped:
                cpu = execution_cpu_seconds(own_info(st.final_info if st.same_step and st.done[i] else st.infos, i),
                                            cpu_share)
                executed[i] = [wall_share, math.nan if cpu is None else cpu, math.nan]
        for i, row in executed.items():  # the price each executed sub-env reported, if any
            d = st.final_info if st.same_step and st.done[i] and isinstance(st.final_info, dict) else st.infos
            price = reported_execution_cost({EXECUTION_COST_KEY: info_get(d, EXECUTION_COST_KEY, i)})
            if price is not None:
                row[2] = price
        self._record_by_group(executed)

    def _record_by_group(self, executed: dict[int, list[float]]) -> None:
        """Record ``{sub-env: [seconds, CPU-seconds, reported price] (NaN: not measured / not
        reported)}`` in the ledger, each for the group of its sub-env's lane (a sub-env waiting for
        the budget: for no group)."""
        by_group: dict[int, tuple[GroupTicket | None, list[list[float]]]] = {}
        for i, row in executed.items():
            rec = None if self._idle[i] else self._groups.get((i // self.group_size, int(self._ep_index[i])))
            key = id(rec.ticket) if rec is not None else -1
            by_group.setdefault(key, (rec.ticket if rec is not None else None, []))[1].append(list(row) + [math.nan] * (3 - len(row)))
        for key, (ticket, rows) in by_group.items():
            in_group = key != -1
            if not in_group:
                self.n_idle_executions += len(rows)
            kinds: dict[tuple[bool, bool], list[list[float]]] = {}  # (CPU measured, price reported) -> rows
            for r in rows:
                kinds.setdefault((not np.isnan(r[1]), not np.isnan(r[2])), []).append(r)
            for (measured, priced), part in kinds.items():
                self.loop.record_execution(float(sum(r[0] for r in part)), len(part),
                                           cpu_seconds=float(sum(r[1] for r in part)) if measured else None,
                                           cost=float(sum(r[2] for r in part)) if priced else None,
                                           ticket=ticket, in_group=in_group)

    def _fail_step(self, exc: BaseException, stepped: list[int], wall: float, step_cpu: float) -> None:
        """The vector env's ``step`` raised (the per-episode wrapper's rule, ``_close_failed_group``):
        the step is charged (one execution for each sub-env whose step is real, at an even share of
        the step's wall-clock and CPU), every open group is closed now as ungraded — its members
        that had not finished with cause ``"execution_error"``, those that finished keep their
        scores; a running evaluation episode is counted as ungraded — so no group is left open, and
        the wrapper needs a :meth:`reset` (all lanes start new groups). The caller re-raises
        ``exc``; a stop rule that fires on these groups raises :class:`TooManyUngradedError` from it."""
        real = [i for i in stepped if not self._routed or (
            not self._idle[i] and (self.mode == "reward" or self._group_of(i).route == ANCHOR))]
        if real:
            share = [wall / len(real), step_cpu / len(real)]
            self._record_by_group({i: list(share) for i in real})
        self._messages[EXECUTION_ERROR] = f"{type(exc).__name__}: {exc}"
        g = self.group_size
        stop: TooManyUngradedError | None = None
        for key in sorted(self._groups):
            rec = self._groups[key]
            if rec.abandoned:
                continue
            if rec.evaluating:
                running = sum(1 for i in range(rec.lane * g, (rec.lane + 1) * g)
                              if self._running[i] and not self._idle[i] and int(self._ep_index[i]) == rec.round)
                if running:
                    self.loop.record_ungraded([EXECUTION_ERROR] * running, messages=self._messages,
                                              where=f"evaluation episodes of lane {rec.lane}")
                continue
            anchor = rec.route == ANCHOR
            wm_causes = list(rec.wm_causes) if rec.wm_causes else [None] * g
            exec_causes = list(rec.exec_causes) if rec.exec_causes else [None] * g
            inputs = list(rec.inputs) if rec.inputs else [None] * g
            for m in range(g):
                if not rec.finished[m]:  # the running episode, or one not started
                    (exec_causes if anchor else wm_causes)[m] = EXECUTION_ERROR
                    inputs[m] = None
            contexts, actions = learning_inputs(inputs)
            try:
                self.loop.close_group(
                    rec.ticket, rec.raw, rec.real if anchor else None, wm_causes=wm_causes, exec_causes=exec_causes,
                    world_model_called=False,  # rollouts never run have no missing score to count; no advisor group
                    messages=self._messages, contexts=contexts, actions=actions,
                    where=f"group {rec.ticket.group_id} (lane {rec.lane}; the vector env's step raised "
                          f"{type(exc).__name__})")
            except TooManyUngradedError as e:  # the group is counted first; close the others too
                stop = stop or e
            self.n_groups_completed += 1
        self._groups.clear()
        self._idle[:] = False
        self._running[:] = False
        self._pending_reset[:] = False
        self._started = False  # the sub-envs' state is unknown: reset() starts new groups in every lane
        if stop is not None:
            raise stop from exc

    def _advance_episodes(self, st: VectorStep) -> dict[int, WorldModelPrediction]:
        """Count the step in each stepped episode; reward mode: extend its trajectory and score the
        episodes that ended in this step with ONE batched ``predict`` (returned by sub-env)."""
        batch_idx: list[int] = []
        batch_ctx: list[Any] = []
        batch_act: list[Any] = []
        for i in st.stepped:
            if self._idle[i]:
                continue
            rec = self._group_of(i)
            ep = self._episodes[i]
            if ep.steps == 0 and self.mode == "outcome" and self.loop.learns:  # what a learning world model is taught with
                ep.first_step = (copy_obs(self._ctx[i]), copy_obs(st.act_list[i]))
            ep.steps += 1
            use_wm = self.loop.calls_world_model(rec.ticket.route, rec.ticket.training)
            if self.mode != "outcome":
                assert ep.traj is not None
                done = bool(st.done[i])
                last = st.final_obs[i] if (st.same_step and done and st.final_obs is not None) else st.obs_list[i]
                ep.traj.actions.append(copy_obs(st.act_list[i]))
                ep.traj.observations.append(copy_obs(last))
                if done and use_wm:
                    batch_idx.append(i)
                    batch_ctx.append(ep.traj.observations[0])
                    batch_act.append(Trajectory(list(ep.traj.observations), list(ep.traj.actions), True))
        if not batch_idx:
            return {}
        return dict(zip(batch_idx, self.loop.predict(batch_ctx, batch_act)))

    def _fold_step(self, st: VectorStep, i: int, p: WorldModelPrediction | None) -> None:
        """Fold sub-env ``i``'s real step and its prediction ``p`` into its episode; an episode that
        ended goes to ``st.ended``."""
        if self._idle[i]:  # waiting for the budget: an episode of no group, nothing to fold
            st.rewards[i] = 0.0
            withhold(st.step_info(i), self.withheld_info_keys, i)
            self._fill_info(st.w, i)
            return
        rec = self._group_of(i)
        ep = self._episodes[i]
        src = st.step_info(i)
        real_r = float(st.rewards[i])
        # the per-episode wrapper's rule: a non-finite reward the env did not call ungraded is execution_invalid
        cause = execution_cause(real_r, {"graded": info_get(src, "graded", i), CAUSE_KEY: info_get(src, CAUSE_KEY, i)})
        step_score = info_get(src, STEP_SCORE_KEY, i) if self.mode == "outcome" else None
        ep.add_real_step(real_r, cause, info_get(src, "error", i) or info_get(src, "message", i), self._messages,
                         None if step_score is None else {STEP_SCORE_KEY: step_score})
        if self.mode == "outcome":
            raw_ep = self._fold_outcome_step(st, i, rec.route, p)
        else:
            raw_ep = self._fold_reward_step(st, i, rec.route, p, src)
        if st.done[i]:
            st.ended.setdefault(i // self.group_size, []).append((i, raw_ep))

    def _fold_outcome_step(self, st: VectorStep, i: int, route: str, p: WorldModelPrediction | None) -> float | None:
        """Outcome mode: the step's world-model score; on a world-model route the reward is 0 and
        the predicted observation replaces the placeholder. Returns the episode's raw score so far."""
        ep = self._episodes[i]
        if p is not None:
            ep.add_step_prediction(p, self._messages)
        raw_ep = ep.raw_score(self.episode_score)
        if route == WORLD_MODEL:
            st.rewards[i] = 0.0
            new_obs = None
            if p is not None and p.observation is not None:
                new_obs = copy.deepcopy(p.observation)
            elif self._ctx_predicted[i]:
                new_obs = copy.deepcopy(self._ctx[i])
            if new_obs is not None:
                if st.same_step and st.done[i]:
                    if st.final_obs is not None:
                        st.final_obs[i] = new_obs
                else:
                    st.replacements[i] = new_obs
            self._ctx[i] = new_obs if new_obs is not None else self._ctx[i]
            self._ctx_predicted[i] = new_obs is not None
            st.w.set("feedback", i, p.feedback if p is not None else "", object)
            st.w.set("status", i, p.status if p is not None else None, object)
        else:
            self._ctx[i] = copy_obs(st.obs_list[i]) if not (st.same_step and st.done[i]) else self._ctx[i]
        if raw_ep is not None:
            st.w.set("raw_score", i, raw_ep, np.float64)
        return raw_ep

    def _fold_reward_step(self, st: VectorStep, i: int, route: str, p: WorldModelPrediction | None,
                          src: dict[str, Any]) -> float | None:
        """Reward mode: on a world-model route the real reward and the withheld info keys are
        withheld; returns the ended episode's raw world-model score (``None``: none)."""
        ep = self._episodes[i]
        raw_ep: float | None = None
        if p is not None and p.score is not None:
            raw_ep = float(p.score)
        elif p is not None:
            ep.note_wm_failure(p, self._messages)
        if route == WORLD_MODEL:
            st.rewards[i] = 0.0  # the real reward is withheld
            withhold(src, self.withheld_info_keys, i)
        if st.done[i] and raw_ep is not None:
            st.w.set("raw_score", i, raw_ep, np.float64)
        return raw_ep

    def _close_ended(self, st: VectorStep) -> None:
        """The episodes that ended, group by group: ONE calibrate call per group, then its
        correction when its last episode ended (a later group's scores see the map updated by an
        earlier group's pairs, as in ``score_group``)."""
        g = self.group_size
        w = st.w
        for k in sorted(st.ended):
            members = st.ended[k]
            cals = self.loop.calibrate([raw for _, raw in members])
            for (i, raw_ep), cal in zip(members, cals):
                rec = self._group_of(i)
                ep = self._episodes[i]
                route = rec.route
                if not (rec.abandoned and not rec.evaluating):  # an abandoned group's episodes left the count
                    self.loop.count_episodes(1)
                if not rec.evaluating and (self.mode == "reward" or route == ANCHOR):
                    self._lengths.append(ep.steps)  # an episode that executed: its length, for the budget
                real_ep = None
                if route == ANCHOR:  # outcome mode: the real steps' scores by the world model's rule
                    real_ep = ep.real_episode_score(self.episode_score) if self.mode == "outcome" else ep.real_score
                if route == WORLD_MODEL:
                    st.rewards[i] = 0.0 if cal is None else float(cal)
                    graded = cal is not None
                else:
                    graded = real_ep is not None
                if cal is not None:
                    w.set("calibrated_score", i, cal, np.float64)
                if real_ep is not None:
                    w.set("real_score", i, real_ep, np.float64)
                w.set("graded", i, graded, bool)
                wm_called = self.loop.calls_world_model(rec.ticket.route, rec.ticket.training)
                cause = rollout_cause(route, real_ep if route == ANCHOR else cal, ep.wm_cause, ep.real_cause)
                w.set(CAUSE_KEY, i, cause, object)
                if rec.evaluating:
                    self.loop.record_ungraded(
                        [cause], score_failures=[score_failure(route, raw_ep, ep.wm_cause, wm_called)],
                        messages=self._messages, where=f"evaluation episode (sub-env {i})",
                    )
                m = i - rec.lane * g
                rec.raw[m] = raw_ep
                rec.real[m] = real_ep
                if not rec.wm_causes:
                    rec.wm_causes, rec.exec_causes, rec.inputs = [None] * g, [None] * g, [None] * g
                rec.wm_causes[m], rec.exec_causes[m] = ep.wm_cause, ep.real_cause
                rec.inputs[m] = ep.learning_input()
                rec.finished[m] = True
                rec.members_left -= 1
                if rec.members_left == 0 and not rec.abandoned:
                    if not rec.evaluating:
                        contexts, actions = learning_inputs(rec.inputs)
                        corr = self.loop.close_group(
                            rec.ticket, rec.raw, rec.real if route == ANCHOR else None,
                            wm_causes=rec.wm_causes, exec_causes=rec.exec_causes, world_model_called=wm_called,
                            messages=self._messages, contexts=contexts, actions=actions,
                        )
                        if corr.disagreement is not None:
                            w.set("group_disagreement", i, corr.disagreement, np.float64)
                    self.n_groups_completed += 1
                    st.completed.append(i)
                # info of the step that ended the episode describes the ended episode
                self._fill_base(w, i, rec)
                self._retire(rec)

    def _start_next_episodes(self, st: VectorStep, resetting: np.ndarray) -> None:
        """After this step's corrections (so new routes see the updated ρ): sub-envs reset by a
        next-step autoreset start their episode; those whose episode ended open their lane's next
        group and, by the autoreset mode, start it now (same step), at the next step, or wait for
        a ``reset`` (disabled)."""
        w = st.w
        for i in range(self.num_envs):
            if resetting[i]:
                self._pending_reset[i] = False
                self._running[i] = True
                self._new_episode(i, copy_obs(st.obs_list[i]))
                self._update_plan(i)
                self._fill_info(w, i)
                w.set("episode_start", i, True, bool)
                continue
            if not st.done[i]:
                continue
            if not self._idle[i]:  # an idle episode's end tries the same round again
                self._ep_index[i] += 1
            self._join(i)  # its next group: open, opened now, or (the budget waits) none
            if self.autoreset_mode == AutoresetMode.SAME_STEP:
                self._running[i] = True
                self._new_episode(i, copy_obs(st.obs_list[i]))
            elif self.autoreset_mode == AutoresetMode.NEXT_STEP:
                self._running[i] = False
                self._pending_reset[i] = True
            else:
                self._running[i] = False
            self._update_plan(i)
