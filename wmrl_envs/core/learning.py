"""A world model that learns from the anchor groups: the part of
:class:`~wmrl_envs.core.CorrectionLoop` that teaches it each closed training anchor group and,
after a refit, rescores the stored pairs out of fold (``docs/method.md``)."""

from __future__ import annotations

import logging
import warnings
from typing import Any, Sequence

import numpy as np

from .advisor_model import crossfit_calibrated
from .ledger import WORLD_MODEL_SOURCE, Stopwatch

__all__ = ["LearningFromAnchors"]


class LearningFromAnchors:
    """Mixed into :class:`~wmrl_envs.core.CorrectionLoop` (uses its world model, corrector,
    advisor and ledger)."""

    @property
    def learns(self) -> bool:
        """Whether the world model learns from the anchor groups (it has an ``observe`` method,
        e.g. :class:`~wmrl_envs.world_models.learned.LearnedWorldModel`)."""
        return callable(getattr(self.world_model, "observe", None))

    def _learn_from_group(self, group_id: int | None, contexts: Sequence[Any] | None, actions: Sequence[Any] | None,
                          real: Sequence[float | None]) -> None:
        """Teach a learning world model one closed training anchor group (under the loop's lock,
        after the group was corrected), and after a refit rescore the pairs out of fold.

        The debiaser's buffered pairs and the advisor's groups were scored by older models; after a
        refit they are replaced by ``crossfit_scores()`` (each stored anchor rollout scored by a
        head fitted without its group's fold): the debiaser's buffer becomes those pairs
        (:meth:`IsotonicDebiaser.replace_pairs`) and every advisor group the model holds gets its
        out-of-fold scores (:meth:`AnchorAdvisor.replace_world_model_scores`), so the calibration
        map, the advice and ``anchor_fraction="auto"`` describe the model in use, out of sample.
        ρ's disagreement and scale are measured again on the same scores once per warm-up length
        (:meth:`_recalibrate_rho`), so ρ is calibrated against the model in use.

        The wall-clock and CPU-seconds of learning (featurizing, refit, rescoring) are charged to
        the ledger's ``world_model`` source with a count of 0 (no prediction was made: they raise
        the cost per prediction). A failure (e.g. a featurizer error) is logged and warned about
        once; the run goes on with the model as it was.
        """
        g = len(real)
        wm = self.world_model
        if actions is None or len(actions) != g or (contexts is not None and len(contexts) != g):
            if not self._learn_warned:
                self._learn_warned = True
                warnings.warn(
                    f"the world model {type(wm).__name__} learns from anchor groups, but group {group_id} was closed "
                    "without its actions (and contexts), one per rollout: pass close_group(..., actions=, contexts=); "
                    "it cannot learn from such groups", UserWarning, stacklevel=3)
            return
        ctx = list(contexts) if contexts is not None else [None] * g
        sw = Stopwatch(exclude_other_threads=True)
        refit = False
        try:
            refit = bool(wm.observe(ctx, list(actions), list(real), group_id=group_id))  # type: ignore[union-attr]
            if refit and callable(getattr(wm, "crossfit_scores", None)):
                self._rescore(wm.crossfit_scores())  # type: ignore[union-attr]
        except Exception as exc:  # noqa: BLE001 - a failed update leaves the model as it was
            msg = f"the world model {type(wm).__name__} could not learn from group {group_id}: {type(exc).__name__}: {exc}"
            logging.getLogger(__name__).warning(msg)
            if not self._learn_warned:
                self._learn_warned = True
                warnings.warn(msg, UserWarning, stacklevel=3)
        finally:
            wall, cpu = sw.read()
            self.ledger.add(WORLD_MODEL_SOURCE, wall, 0, cpu_seconds=cpu)
            if refit and hasattr(wm, "fit_cpu_s"):
                wm.last_fit_cpu_s = cpu  # type: ignore[union-attr]
                wm.fit_cpu_s += cpu  # type: ignore[union-attr]

    def _rescore(self, crossfit: Any) -> None:
        """Replace the debiaser's pairs and the advisor's world-model scores with out-of-fold ones."""
        # a training group closed during evaluation still updates: say so, never flip the flag
        # (readers on other threads see it as it is)
        self.corrector.debiaser.replace_pairs(np.asarray(crossfit.scores, dtype=np.float64).tolist(),
                                              np.asarray(crossfit.real, dtype=np.float64).tolist(), training=True)
        by_group = crossfit.by_group()
        held = self.advisor.groups()[1]
        self.advisor.replace_world_model_scores({
            i: by_group[gid] for i, gid in enumerate(self._advisor_ids)
            if gid is not None and gid in by_group and len(by_group[gid]) == len(held[i])})
        self._recalibrate_rho(by_group, crossfit)

    def _recalibrate_rho(self, by_group: dict[int, list[float | None]], crossfit: Any) -> None:
        """When due, measure ρ's disagreement again on the refitted model's out-of-fold scores of the
        stored groups (oldest first), calibrated out of sample when the run debiases
        (:meth:`InverseVarianceDenoiser.recalibrate`: what ρ is calibrated against)."""
        corr = self.corrector
        if not (corr.denoise and corr.denoiser.recalibration_due) or (corr.debias and not corr.debiaser.fitted):
            return  # not due, or the scores are not yet on the scale the run trains on
        real: dict[int, list[float | None]] = {g: [None] * len(v) for g, v in by_group.items()}
        for y, g, m in zip(crossfit.real.tolist(), crossfit.group_ids.tolist(), crossfit.members.tolist()):
            real[int(g)][int(m)] = float(y)
        ids = sorted(by_group)  # group ids run in the order the groups closed
        raw, real_groups = [by_group[g] for g in ids], [real[g] for g in ids]
        cal = crossfit_calibrated(raw, real_groups) if corr.debias else raw
        corr.denoiser.recalibrate(cal, real_groups, training=True)

    def _advice_calibration(self) -> str | None:
        """How the advice calibrates world-model scores: out of sample (``"crossfit"``) when the
        run debiases, raw otherwise (a map fitted on the same pairs would inflate r)."""
        return "crossfit" if self.corrector.debias else None

    def advice_calibration(self) -> str | None:
        """How :meth:`advise` calibrates world-model scores (``"crossfit"`` or ``None``: raw), for
        a caller that advises again from the same anchor groups (``wmrl advise --from-advice``)."""
        return self._advice_calibration()
