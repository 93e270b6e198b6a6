"""The configuration of ``wmrl bench advisor`` (:class:`AdvisorCheckConfig`, its out-of-sample part
:class:`OutOfSampleConfig`) and its presets."""

from __future__ import annotations

from dataclasses import dataclass, field


from .sweep_config import SweepConfig

__all__ = ["AdvisorCheckConfig", "ADVISOR_CHECK_PRESETS", "OutOfSampleConfig"]


@dataclass
class OutOfSampleConfig:
    """The cells of ``wmrl bench advisor --out-of-sample`` (each field is a flag ``--oos.FIELD``).

    World models are written ``name:field=value,...`` with the fields of
    :class:`wmrl_envs.envs.known_truth.WorldModelError` (its declared cost is replaced by the
    setting's ``wm_cost_s``); a name must not be one of the in-sample levels
    (:data:`~wmrl_envs.envs.known_truth.WORLD_MODEL_ERRORS`). Settings are written
    ``field=value,...`` with fields of :class:`agents.experiments.sweep_config.SweepConfig` among
    ``wm_cost_s``, ``group_size``, ``groups_per_step``, ``outcome_noise_std``; each replaces the
    base settings (``AdvisorCheckConfig.sweep``)."""

    errors: tuple[str, ...] = ("sq_bias:squash=8,bias_std=0.2", "squash_noise:squash=12,noise_std=0.25",
                               "noise_bias:noise_std=0.2,bias_std=0.15", "bias_noise_heavy:bias_std=0.3,noise_std=0.3",
                               "blind_noise:blind_spot_share=0.5,noise_std=0.15", "weak:information=0.25,noise_std=0.2",
                               "very_weak:information=0.1,noise_std=0.25")
    """World models run at the base settings: mixtures of the in-sample error kinds and partial
    information, none of them an in-sample level (a pilot's r at G = 8 from 0.84 down to about 0.1)."""
    settings: tuple[str, ...] = ("wm_cost_s=0.05", "wm_cost_s=0.0025", "group_size=4", "group_size=16")
    """Other settings (cost ratios 1 : 20 and 1 : 400, G = 4 and 16 at the base's 1 : 100)."""
    setting_errors: tuple[str, ...] = ("sq_bias", "bias_noise_heavy", "very_weak")
    """Names of ``errors`` run at each of ``settings`` (a high, a middle and a low r)."""
    fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    """Fixed anchor fractions of every cell."""
    first_seed: int = 100
    """Measured runs use seeds first_seed .. first_seed + sweep.seeds - 1 (the in-sample check used 0 .. 9)."""
    pilot_seeds: tuple[int, ...] = (1000, 1001)
    """Seeds of the pilots (their own env tables and world-model draws; never a measured seed)."""
    pilot_groups: int = 16
    """Pilot groups per pilot seed under the untrained policy, every one executed and predicted
    (what ``wmrl advise`` does): the advisor's r, its interval and its recommended fraction."""
    pilot_steps: int = 3
    """Real-GRPO steps per pilot seed on which the gradient noise scale b is measured (per group size)."""
    real_batches: tuple[int, ...] = ()
    """Real-GRPO cells at these groups per step (each below the setting's ``groups_per_step``), per
    setting of real GRPO (group size, groups per step, outcome noise): measured against real GRPO at
    the full batch and predicted by the same model (``q = B'/B``); they also join every (world model,
    setting)'s choices for the recommendation (empty: WMRL cells only, as before issue 39)."""


@dataclass
class AdvisorCheckConfig:
    """Configuration of ``wmrl bench advisor`` (each field is a CLI flag)."""

    levels: tuple[str, ...] = ("perfect", "heavy_noise", "bias", "blind_spots", "useless")
    """World-model quality levels (names of wmrl_envs.envs.known_truth.WORLD_MODEL_ERRORS)."""
    fractions: tuple[float, ...] = (0.05, 0.1, 0.2, 0.4)
    """The fixed anchor fractions auto is compared with."""
    breaking: bool = True
    """Also the world model that breaks mid-run (sweep settings break_from, break_to, break_at_step)."""
    sweep: SweepConfig = field(default_factory=lambda: SweepConfig(workers=2))
    """The environment, costs, policy, correction and budget settings (those of wmrl bench sweep,
    flags --sweep.seeds, --sweep.wm-cost-s, ...; its levels and fractions are replaced by the two above)."""
    pilot_steps: int = 3
    """Real-GRPO steps (per seed, pooled over seeds) the gradient noise scale is measured on: what a
    pilot before training would see. The predictions and the runs with auto use it."""
    out_dir: str = "runs/advisor-check"
    """Output folder."""
    out_of_sample: bool = False
    """Run the out-of-sample check instead (run_out_of_sample, settings --oos.*): world models, cost
    ratios, group sizes and seeds the in-sample cells never used, r and b from a pilot of each cell."""
    oos: OutOfSampleConfig = field(default_factory=lambda: OutOfSampleConfig())
    """Settings of the out-of-sample check (with --out-of-sample)."""


ADVISOR_CHECK_PRESETS: dict[str, AdvisorCheckConfig] = {
    "default": AdvisorCheckConfig(),
    "quick": AdvisorCheckConfig(levels=("perfect", "blind_spots", "useless"), fractions=(0.1, 0.4),
                                sweep=SweepConfig(seeds=3, steps=12, step_cap=300, break_at_step=4, n_boot=300,
                                                  correlation_groups=64, workers=1),
                                out_dir="runs/advisor-check-quick"),
    # the out-of-sample check as run for docs/advisor_check.md: 8 seeds per cell, one worker
    "out_of_sample": AdvisorCheckConfig(out_of_sample=True, sweep=SweepConfig(seeds=8, workers=1, n_boot=2000),
                                        out_dir="runs/advisor-check-oos"),
    # issue 39's validation: world models, cost ratios, group sizes and seeds that neither the in-sample
    # check nor the earlier out-of-sample check used, with real GRPO at smaller batches beside WMRL
    "out_of_sample_39": AdvisorCheckConfig(
        out_of_sample=True, sweep=SweepConfig(seeds=6, workers=1, n_boot=2000), out_dir="runs/advisor-check-oos39",
        oos=OutOfSampleConfig(
            errors=("sq_weak:information=0.4,squash=6,noise_std=0.15", "bias_mid:bias_std=0.2,noise_std=0.1",
                    "blind_light:blind_spot_share=0.3,noise_std=0.1", "info_half:information=0.5,noise_std=0.3",
                    "faint:information=0.15,noise_std=0.15", "squash_bias:squash=4,bias_std=0.12,noise_std=0.2"),
            settings=("wm_cost_s=0.03", "wm_cost_s=0.005", "group_size=6", "group_size=12"),
            setting_errors=("bias_mid", "info_half", "faint"), fractions=(0.05, 0.1, 0.2, 0.4), first_seed=200,
            pilot_seeds=(2000, 2001), real_batches=(1, 2, 4, 8))),
    # issue 39's second set: dear world models (γ = 1 : 5 and 1 : 2), where real GRPO at a smaller batch
    # can beat WMRL: a test that the recommendation leaves WMRL when it should
    "out_of_sample_39_dear": AdvisorCheckConfig(
        out_of_sample=True, sweep=SweepConfig(seeds=6, workers=1, n_boot=2000, wm_cost_s=0.2),
        out_dir="runs/advisor-check-oos39-dear",
        oos=OutOfSampleConfig(
            errors=("sq_weak:information=0.4,squash=6,noise_std=0.15", "bias_mid:bias_std=0.2,noise_std=0.1",
                    "blind_light:blind_spot_share=0.3,noise_std=0.1", "info_half:information=0.5,noise_std=0.3",
                    "faint:information=0.15,noise_std=0.15", "squash_bias:squash=4,bias_std=0.12,noise_std=0.2"),
            settings=("wm_cost_s=0.5",), setting_errors=("sq_weak", "info_half", "faint", "squash_bias"),
            fractions=(0.05, 0.1, 0.2, 0.4), first_seed=300, pilot_seeds=(3000, 3001), real_batches=(1, 2, 4, 8))),
    # its CI size (seconds): one new world model at the base and at one other cost ratio, 2 seeds
    "out_of_sample_quick": AdvisorCheckConfig(
        out_of_sample=True, out_dir="runs/advisor-check-oos-quick",
        sweep=SweepConfig(seeds=3, steps=10, groups_per_step=8, group_size=4, step_cap=60, n_boot=200, workers=1,
                          breaking=False),
        oos=OutOfSampleConfig(errors=("noise_bias:noise_std=0.2,bias_std=0.15",), settings=("wm_cost_s=0.05",),
                              setting_errors=("noise_bias",), fractions=(0.1, 0.4), pilot_seeds=(1000,),
                              pilot_groups=12, pilot_steps=2)),
}
"""``wmrl bench advisor`` starts from ``"default"``; ``--quick`` from ``"quick"`` (the CI preset);
``--out-of-sample`` with the ``"default"`` preset's sweep runs the out-of-sample check at 10 seeds;
``"out_of_sample"`` is the size run for ``docs/advisor_check.md`` (``--out-of-sample --sweep.seeds 8
--sweep.workers 1``); ``"out_of_sample_39"`` issue 39's validation on new cells with real-batch cells."""
