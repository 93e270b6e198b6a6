"""The group-level correction: debiasing and denoising behind one call, used by
:class:`~wmrl_envs.core.CorrectionLoop` when it closes a group.

:class:`WMRLCorrector` takes one scored group — its route, the world model's raw scores and,
on anchor groups, the real scores — and returns what the agent should train on
(:class:`GroupCorrection`): the rewards (real scores on anchor groups, calibrated world-model
scores ``r̃ = f̂(r̂)`` on world-model groups) and the advantage weight (``ρ`` on anchor groups,
1 on world-model groups). On anchor groups it also feeds the anchor pairs to the
:class:`~wmrl_envs.core.debias.IsotonicDebiaser` and the group's disagreement to the
:class:`~wmrl_envs.core.denoise.InverseVarianceDenoiser`. See ``docs/method.md``.

The calibration error is tracked *prequentially*: each anchor group is scored with the map
as it was before its own pairs were added, so "after calibration" is an honest out-of-sample
figure.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from .debias import IsotonicDebiaser
from .denoise import InverseVarianceDenoiser
from .routing import ANCHOR, WORLD_MODEL, Route

__all__ = ["GroupCorrection", "WMRLCorrector"]

logger = logging.getLogger(__name__)


def _clean(values: Sequence[float | None] | None, n: int) -> list[float | None]:
    if values is None:
        return [None] * n
    out: list[float | None] = []
    for v in values:
        out.append(None if v is None or not math.isfinite(float(v)) else float(v))
    return out


@dataclass
class GroupCorrection:
    """What the corrections made of one group (all lists have length G).

    Attributes:
        route: ``"anchor"`` or ``"world_model"``.
        raw_scores: world-model raw scores r̂ (``None`` = world model could not grade).
        calibrated_scores: ``f̂(r̂)`` (identity when debiasing is off or not yet fitted).
        real_scores: real scores r on anchor groups (``None`` = ungraded / not executed).
        rewards: the scores to train on: real on anchor groups, calibrated on world-model
            groups; ``None`` rows are ungraded and must be dropped, not zeroed.
        advantage_weight: ρ for anchor groups — the ρ at routing when the group is closed by
            :meth:`~wmrl_envs.core.CorrectionLoop.close_group`, else the value before this
            group's own update — and 1.0 for world-model groups.
        disagreement: the group's ``s²`` (anchor groups with varying real scores that update
            the corrections), else ``None``. Before the debiaser's first fit it is measured on
            the raw scores and does not enter ρ (the denoiser's ``n_uncalibrated`` counts it).
        group_id: caller's group id (int) or ``None``.
        ungraded_causes: per rollout, why it has no training reward (``None``: it has one);
            filled by :meth:`~wmrl_envs.core.CorrectionLoop.close_group`, empty otherwise.
    """

    route: Route
    raw_scores: list[float | None]
    calibrated_scores: list[float | None]
    real_scores: list[float | None]
    rewards: list[float | None]
    advantage_weight: float
    disagreement: float | None = None
    group_id: int | None = None
    ungraded_causes: list[str | None] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (JSON-serialisable)."""
        return asdict(self)


class WMRLCorrector:
    """Online debiasing + inverse-variance denoising behind one group-level call.

    Args:
        debiaser: the isotonic debiaser (default: reference settings).
        denoiser: the anchor denoiser (default: reference settings).
        debias: apply ``f̂`` to world-model scores (ablation switch; pairs are still logged).
        denoise: use ``ρ`` as the anchor-group advantage weight (ablation switch; ``s²`` is
            still tracked and logged).

    Attributes:
        training: propagates to the debiaser and the denoiser; ``False`` freezes both
            (evaluation), as ``VecNormalize.training`` does in Stable-Baselines3. Set by the
            caller only: :meth:`correct_group` passes a group's own flag to the debiaser and the
            denoiser and never changes this one.
        flat_map_groups: training world-model groups corrected while the fitted map was flat
            (:attr:`IsotonicDebiaser.flat`: one calibrated score for all, zero advantage); the
            first one logs a warning that says why and what to do.

    Example:
        >>> corr = WMRLCorrector()
        >>> out = corr.correct_group("anchor", raw=[0.1, 0.5], real=[0.0, 1.0])
        >>> out.rewards, out.advantage_weight
        ([0.0, 1.0], 1.0)
    """

    def __init__(
        self,
        debiaser: IsotonicDebiaser | None = None,
        denoiser: InverseVarianceDenoiser | None = None,
        *,
        debias: bool = True,
        denoise: bool = True,
    ) -> None:
        self.debiaser = debiaser if debiaser is not None else IsotonicDebiaser()
        self.denoiser = denoiser if denoiser is not None else InverseVarianceDenoiser()
        self.debias = bool(debias)
        self.denoise = bool(denoise)
        self._training = True
        # prequential calibration error on anchor pairs
        self._abs_err_raw = 0.0
        self._abs_err_cal = 0.0
        self._n_err = 0
        self._sq_err_raw = 0.0
        self._sq_err_cal = 0.0
        self.groups_corrected = {ANCHOR: 0, WORLD_MODEL: 0}
        self.flat_map_groups = 0
        self._flat_warned = False
        self._stalled_warned = False

    # ------------------------------------------------------------------ flags
    @property
    def training(self) -> bool:
        """Whether anchor groups update the debiaser and the denoiser."""
        return self._training

    @training.setter
    def training(self, value: bool) -> None:
        self._training = bool(value)
        self.debiaser.training = self._training
        self.denoiser.training = self._training

    @property
    def rho(self) -> float:
        """The anchor weight currently applied (1.0 when denoising is off)."""
        return self.denoiser.rho if self.denoise else 1.0

    # ------------------------------------------------------------------ core
    def calibrate(self, raw: Sequence[float | None]) -> list[float | None]:
        """``f̂(r̂)`` for a batch (identity when ``debias`` is off), ``None`` kept as ``None``."""
        if not self.debias:
            return _clean(raw, len(raw))
        cal = self.debiaser.transform(list(raw))
        return [None if not np.isfinite(v) else float(v) for v in cal]

    def correct_group(
        self,
        route: Route,
        raw: Sequence[float | None],
        real: Sequence[float | None] | None = None,
        group_id: int | None = None,
        *,
        rho: float | None = None,
        training: bool | None = None,
    ) -> GroupCorrection:
        """Correct one group's scores and, on anchor groups, update the corrections.

        Args:
            route: ``"anchor"`` or ``"world_model"``.
            raw: world-model raw scores r̂ of the G rollouts (float or ``None``), shape (G,).
            real: real scores r, shape (G,); required for anchor groups, ignored otherwise.
            group_id: optional id carried into the result.
            rho: advantage weight of an anchor group (default: ρ now, before this group's own
                update); :class:`~wmrl_envs.core.CorrectionLoop` passes the ρ at routing.
            training: whether this anchor group updates the corrections (pairs, ρ, calibration
                error); default :attr:`training` now. :class:`~wmrl_envs.core.CorrectionLoop`
                passes its ticket's flag (a group routed while training still updates when it is
                closed during evaluation, and the reverse).

        Returns:
            A :class:`GroupCorrection`.

        Raises:
            ValueError: unknown route; anchor group without ``real``; length mismatch.
        """
        g = len(raw)
        raw_c = _clean(raw, g)
        if route == WORLD_MODEL:
            cal = self.calibrate(raw_c)
            self.groups_corrected[WORLD_MODEL] += 1
            if self.debias and self.debiaser.flat and (self._training if training is None else training):
                self._flat_map_group()
            return GroupCorrection(WORLD_MODEL, raw_c, cal, [None] * g, list(cal), 1.0, None, group_id)
        if route != ANCHOR:
            raise ValueError(f"route must be 'anchor' or 'world_model', got {route!r}")
        if real is None:
            raise ValueError("an anchor group needs its real scores (real=...), one per rollout")
        if len(real) != g:
            raise ValueError(f"raw and real differ in length: {g} vs {len(real)}")
        real_c = _clean(real, g)
        cal = self.calibrate(raw_c)  # the map *before* this group's pairs: prequential
        if rho is None:
            rho = self.rho  # the weight before this group's own update
        s2: float | None = None
        update = self._training if training is None else bool(training)
        if update:
            for a, c, r in zip(raw_c, cal, real_c):
                if a is not None and c is not None and r is not None:
                    self._abs_err_raw += abs(a - r)
                    self._abs_err_cal += abs(c - r)
                    self._n_err += 1
                    self._sq_err_raw += (a - r) ** 2
                    self._sq_err_cal += (c - r) ** 2
            # The intent is passed explicitly: a training group closed during evaluation updates
            # the debiaser and the denoiser without raising the public training flags, which
            # wrappers read from other threads without the loop's lock.
            # s² counts towards ρ only on the scale the run trains on: before the debiaser's
            # first fit, `cal` is still the raw scale (ρ's warm-up starts after that fit).
            on_scale = not self.debias or self.debiaser.fitted
            was_warm = self.denoiser.warmed_up
            s2 = self.denoiser.update(cal, real_c, training=True, calibrated_scale=on_scale)
            self.debiaser.add_pairs(raw_c, real_c, training=True)
            if not was_warm and self.denoiser.warmed_up and not self.debias and self.denoise:
                self._warn_raw_scale_rho()
            if self.denoise and not self._stalled_warned and self.denoiser.warmup_stalled:
                self._warn_warmup_stalled()
        self.groups_corrected[ANCHOR] += 1
        return GroupCorrection(ANCHOR, raw_c, cal, real_c, list(real_c), rho, s2, group_id)

    def _warn_raw_scale_rho(self) -> None:
        """ρ's warm-up just ended on raw world-model scores (``debias=False``): say what it means,
        once, as a ``UserWarning`` (pointing at the caller of :meth:`correct_group`)."""
        warnings.warn(
            "the anchor weight rho now leaves 1, measured on raw world-model scores (debias=False): their disagreement "
            "includes the world model's scale error ((a - 1)^2 for scores a*r + b), so unless the raw scores are on "
            "the real reward scale rho responds weakly to a change in the world model's quality. Set debias=True "
            "(rho's warm-up then starts after the isotonic map's first fit, on calibrated scores), or denoise=False "
            "(docs/method.md, 'Inverse-variance denoising').", UserWarning, stacklevel=3)

    def _warn_warmup_stalled(self) -> None:
        """Say once, as a log warning, that ρ's warm-up is stalled
        (:attr:`~wmrl_envs.core.denoise.InverseVarianceDenoiser.warmup_stalled`)."""
        self._stalled_warned = True
        d = self.denoiser
        logger.warning(
            "the anchor weight rho is still 1 and its warm-up is stalled: the last %d anchor groups' real scores "
            "were all equal, so none of them counted (%d of the %d anchor groups the warm-up needs have counted). "
            "Such a group says nothing about the world model's error within a group: the policy repeats one action "
            "per group, or binary outcomes are all 0 or all 1. Until the warm-up ends anchor groups get no extra "
            "weight (plain anchored GRPO). Raise group_size or lower warmup_groups (CorrectionConfig); "
            "docs/method.md, 'Inverse-variance denoising'. Counted in stats()['denoiser_groups_no_spread'].",
            d.no_spread_run, d.n_scored_groups, max(1, d.warmup_groups))

    def _flat_map_group(self) -> None:
        """Count a training world-model group scored by a flat map; warn the first time."""
        self.flat_map_groups += 1
        if self._flat_warned:
            return
        self._flat_warned = True
        _, real = self.debiaser.pairs()
        why = (f"every anchor real score so far is {real[0]:g}" if real.size and float(np.ptp(real)) == 0.0
               else "the anchor real scores do not increase with the world model's (an anti-correlated or "
                    "uninformative world model)")
        logger.warning(
            "the isotonic map is flat: %s, so every world-model score calibrates to one value and world-model "
            "groups get zero advantage (no learning signal from them; anchor groups still train on their real "
            "rewards) until the anchor pairs say otherwise. If the task is too hard (or too easy) for the policy, make it easier or the reward "
            "denser, or raise the anchor fraction; to train on raw world-model scores meanwhile, set "
            "debias=False; check the world model with `wmrl advise`. Counted in stats()['flat_map_groups'].", why)

    # ------------------------------------------------------------------ reporting
    def calibration_error(self) -> dict[str, float]:
        """Prequential calibration error on anchor pairs: raw vs calibrated scores.

        Each pair is scored with the map fitted *before* its group (prequential). Mean absolute
        error (MAE) and mean squared error (MSE; the Brier score when real outcomes are 0/1,
        e.g. LIBERO success). Isotonic regression fits the conditional *mean*, which minimises
        squared error: with binary outcomes the MSE is the right yardstick, and the MAE can get
        worse after calibration even when the map is right.

        Returns:
            ``{"raw_mae", "calibrated_mae", "raw_mse", "calibrated_mse", "n"}``; NaN errors
            when no anchor pair was seen.
        """
        nan = float("nan")
        if self._n_err == 0:
            return {"raw_mae": nan, "calibrated_mae": nan, "raw_mse": nan, "calibrated_mse": nan, "n": 0}
        return {
            "raw_mae": self._abs_err_raw / self._n_err,
            "calibrated_mae": self._abs_err_cal / self._n_err,
            "raw_mse": self._sq_err_raw / self._n_err,
            "calibrated_mse": self._sq_err_cal / self._n_err,
            "n": self._n_err,
        }

    def stats(self) -> dict[str, Any]:
        """Flat dict for logging: ρ, s̄², pairs, fits, calibration errors, group counts, and ρ's
        warm-up (``denoiser_groups_counted`` of ``denoiser_warmup_groups``; ``denoiser_groups_no_spread``:
        anchor groups whose real scores did not vary, which never count; ``denoiser_groups_uncalibrated``:
        anchor groups with spread seen before the debiaser's first fit; ``denoiser_warmup_stalled``)."""
        err = self.calibration_error()
        ema = self.denoiser.ema
        return {
            "rho": self.rho,
            "disagreement_ema": None if not math.isfinite(ema) else ema,
            "anchor_pairs": self.debiaser.n_pairs,
            "debiaser_fitted": self.debiaser.fitted,
            "debias_map": self.debiaser.chosen,
            "debias_oof_mse": dict(self.debiaser.oof_mse),
            "debiaser_fits": self.debiaser.n_fits,
            "calibration_mae_raw": err["raw_mae"],
            "calibration_mae_calibrated": err["calibrated_mae"],
            "calibration_mse_raw": err["raw_mse"],
            "calibration_mse_calibrated": err["calibrated_mse"],
            "anchor_groups": self.groups_corrected[ANCHOR],
            "world_model_groups": self.groups_corrected[WORLD_MODEL],
            "flat_map_groups": self.flat_map_groups,
            # rho's warm-up: anchor groups that counted, skipped (real scores all equal) and seen
            # before the debiaser's first fit, against the warm-up's length
            "denoiser_groups_counted": self.denoiser.n_scored_groups,
            "denoiser_groups_no_spread": self.denoiser.n_no_spread,
            "denoiser_groups_uncalibrated": self.denoiser.n_uncalibrated,
            "denoiser_warmup_groups": self.denoiser.warmup_groups,
            "denoiser_warmup_stalled": self.denoise and self.denoiser.warmup_stalled,  # rho off: nothing stalls
        }

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly (JSON-serialisable)."""
        return {
            "debiaser": self.debiaser.state_dict(),
            "denoiser": self.denoiser.state_dict(),
            "debias": self.debias,
            "denoise": self.denoise,
            "abs_err_raw": self._abs_err_raw,
            "abs_err_cal": self._abs_err_cal,
            "n_err": self._n_err,
            "sq_err_raw": self._sq_err_raw,
            "sq_err_cal": self._sq_err_cal,
            "groups_corrected": dict(self.groups_corrected),
            "flat_map_groups": self.flat_map_groups,
            "stalled_warned": self._stalled_warned,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (the ``training`` flag is kept)."""
        self.debiaser.load_state_dict(state["debiaser"])
        self.denoiser.load_state_dict(state["denoiser"])
        self.debias = bool(state["debias"])
        self.denoise = bool(state["denoise"])
        self._abs_err_raw = float(state["abs_err_raw"])
        self._abs_err_cal = float(state["abs_err_cal"])
        self._n_err = int(state["n_err"])
        self._sq_err_raw = float(state["sq_err_raw"])
        self._sq_err_cal = float(state["sq_err_cal"])
        self.groups_corrected = {ANCHOR: int(state["groups_corrected"][ANCHOR]), WORLD_MODEL: int(state["groups_corrected"][WORLD_MODEL])}
        self.flat_map_groups = int(state.get("flat_map_groups", 0))  # absent: saved before it was counted
        self._stalled_warned = bool(state.get("stalled_warned", False))  # the stall warning is said once per run
        self.training = self._training
