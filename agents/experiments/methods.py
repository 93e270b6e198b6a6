"""The methods of the comparison (``wmrl bench`` and ``wmrl bench sweep``): how each routes and corrects.

Six methods, the paper's comparison (``docs/method.md``): real-execution GRPO, GRPO on the raw
world model only, WMRL (anchors + debiasing + denoising) and its three ablations. Each is a
:class:`MethodSpec`; :func:`method_correction` turns one into the
:class:`~wmrl_envs.core.CorrectionConfig` its wrapper is built with, so every benchmark runs the
methods through the same correction objects as the main job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from wmrl_envs.core import CorrectionConfig

__all__ = ["MethodSpec", "METHODS", "COST_SOURCES", "method_correction"]


@dataclass(frozen=True)
class MethodSpec:
    """How one method routes and corrects.

    Attributes:
        name: short id.
        label: name in tables.
        anchor_fraction: ``None`` = the benchmark's configured fraction; 1.0 = every group real.
        world_model: whether a world model scores groups.
        debias: apply the isotonic map.
        denoise: apply ρ.
    """

    name: str
    label: str
    anchor_fraction: float | None
    world_model: bool
    debias: bool
    denoise: bool


METHODS: dict[str, MethodSpec] = {
    m.name: m
    for m in [
        MethodSpec("real", "GRPO, real execution", 1.0, False, False, False),
        MethodSpec("wm_only", "GRPO, world model only", 0.0, True, False, False),
        MethodSpec("wmrl", "WMRL (debias + denoise)", None, True, True, True),
        MethodSpec("debias_only", "anchors + debiasing only", None, True, True, False),
        MethodSpec("denoise_only", "anchors + denoising only", None, True, False, True),
        MethodSpec("anchors_raw", "anchors, no correction", None, True, False, False),
    ]
}
"""The six methods of the comparison, in table order."""

COST_SOURCES: tuple[str, ...] = ("execution", "world_model", "generation", "update")
"""The cost sources of training compute (:class:`wmrl_envs.core.CostLedger` sources); held-out
evaluation is not training compute and is not charged."""


def method_correction(spec: MethodSpec, correction: CorrectionConfig) -> CorrectionConfig:
    """The correction settings of one method: the benchmark's ``correction`` with the method's
    anchor fraction (``None`` keeps the configured one), debias and denoise; a method without
    anchors (fraction 0) has no anchor floor.

    Example:
        >>> c = method_correction(METHODS["wm_only"], CorrectionConfig(anchor_fraction=0.2))
        >>> c.anchor_fraction, c.min_anchor_groups, c.debias, c.denoise
        (0.0, 0, False, False)
    """
    f = spec.anchor_fraction if spec.anchor_fraction is not None else correction.anchor_fraction
    return replace(correction, anchor_fraction=f, min_anchor_groups=0 if f == 0 else correction.min_anchor_groups,
                   debias=spec.debias, denoise=spec.denoise)
