"""ρ's calibration over many seeds: where does ρ settle for a world model of constant quality,
and does it move when the world model breaks, whatever its raw scale?

A simulation of the anchor groups of a run (issue 25, findings 1 and 13). Each anchor group has
G rollouts with real scores r and world-model raw scores r̂; an isotonic map fitted on the
anchor pairs seen so far (the debiaser's rule: identity until ``min_pairs`` pairs, refitted
every ``refit_every`` new pairs, a FIFO of 5000) calibrates the group before its own pairs are
added, and the denoiser sees (calibrated, real). World models:

* ``pass_fail``: rollouts pass or fail (r ∈ {0, 1}); task difficulty μ ~ N(0, 1), rollout
  latent q = μ + N(0, 1), r = 1[q + 0.5·Logistic > 0]; the judge scores sigmoid(q + 0.35·N(0, 1)).
* ``gaussian``: r = μ + 0.5·N(0, 1); the world model scores r + 0.5·N(0, 1).

The raw score is ``scale · score + offset`` (``--scale``/``--offset`` for the constant-quality
runs; the break scenario uses 10x + 3, the usual case of an LLM judge on its own scale).

Two rules side by side on the same draws:

* ``old``: the rule before issue 25 (reimplemented here): s̄² an EMA of the groups' s² started
  at the first group's, every group with a defined s² counts (before the debiaser's first fit
  its scores are raw), c fixed when ``warmup_groups`` groups have counted.
* ``new``: the library's :class:`~wmrl_envs.core.InverseVarianceDenoiser`, fed as
  :class:`~wmrl_envs.core.WMRLCorrector` feeds it: only groups calibrated by a fitted map count
  (the warm-up starts after the first fit), s̄² pools residual² over Var(r), the warm-up mean
  fixes c, an EMA follows.

Figures per seed (median and 5-95% range over seeds printed):

* ``calibration``: 1 + c·D (clipped), D the disagreement (each rule's own definition: pooled
  for the new, the mean of s² for the old) of the world model calibrated by the map that c was
  fixed with, measured on 4000 fresh groups: c's own error, how far it puts ρ from
  ``rho_target`` = 2 for a world model that does not change.
* ``settled``: the same with the map the run has ``--horizon`` groups after calibration: the ρ
  the run settles at, including the map's improvement with more pairs (which lowers D: the
  calibrated world model does get better).
* ``end``: ρ after those groups (adds the EMA's own noise at half-life 64).
* break: ρ just before a world model turns into noise (same raw spread, no information) and
  64 anchor groups after (README settings: min_pairs 64, warm-up 8, G 8, raw 10x + 3).

Settings: ``defaults`` (G 8, min_pairs 200, refit_every 64, warm-up 32, half-life 64) and
``wmrl train``'s CPU preset (G 4, its min_pairs/refit_every; old warm-up 3, new: the preset's,
plus the spread each candidate warm-up allows).

``--learning`` (issue 37, item 5) runs only a world model that learns from its anchors, on the
library's loop (:func:`learning_seed`): a ridge :class:`~wmrl_envs.world_models.learned.LearnedWorldModel`
on the rollouts' features (refit every 1 and every 8 groups) with ρ's recalibration at refits
(``learning``) and without it (``learning_before``, the rule before issue 37), beside a frozen
model of the learning one's final quality (``frozen``); ρ read 96, 112 and 127 groups after its
calibration and averaged from 32 groups after it.

Run (the figures in ``docs/method.md``, "Inverse-variance denoising" and "A world model that
learns from its anchors")::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rho_calibration.py --seeds 200 --jobs 2 --out results/rho_calibration.json
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/rho_calibration.py --learning --seeds 12 --jobs 2 \\
        --out results/rho_calibration_learning.json
    .venv/bin/python benchmarks/rho_calibration.py --quick      # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.isotonic import isotonic_regression

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wmrl_envs.core import IsotonicDebiaser, InverseVarianceDenoiser  # noqa: E402
from wmrl_envs.core.denoise import group_disagreement  # noqa: E402

KINDS = ("pass_fail", "gaussian")


# ---------------------------------------------------------------- the debiaser's map, fast
class FastIsotonic:
    """The debiaser's rule (FIFO, identity until ``min_pairs``, refit every ``refit_every`` new
    pairs, increasing isotonic fit clipped outside the range) with np.interp on the thresholds;
    :func:`check_fast_isotonic` checks it against :class:`IsotonicDebiaser` at start."""

    def __init__(self, min_pairs: int, refit_every: int, buffer_size: int = 5000) -> None:
        self.min_pairs, self.refit_every, self.buffer_size = min_pairs, refit_every, buffer_size
        self.x: list[float] = []
        self.y: list[float] = []
        self.since = 0
        self.map: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def fitted(self) -> bool:
        return self.map is not None

    def transform(self, raw: np.ndarray) -> np.ndarray:
        return apply_map(self.map, raw)

    def add(self, raw: np.ndarray, real: np.ndarray) -> None:
        self.x.extend(raw.tolist())
        self.y.extend(real.tolist())
        if len(self.x) > self.buffer_size:
            del self.x[: len(self.x) - self.buffer_size], self.y[: len(self.y) - self.buffer_size]
        self.since += len(raw)
        if len(self.x) >= self.min_pairs and (self.map is None or self.since >= self.refit_every):
            self.map, self.since = fit_isotonic(np.asarray(self.x), np.asarray(self.y)), 0


def apply_map(fitted: tuple[np.ndarray, np.ndarray] | None, raw: np.ndarray) -> np.ndarray:
    """The isotonic map's prediction (clipped outside its range); the identity before a fit."""
    return raw.copy() if fitted is None else np.interp(raw, *fitted)


def fit_isotonic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(x, kind="mergesort")
    xs, ys = x[order], y[order]
    ux, first, count = np.unique(xs, return_index=True, return_counts=True)
    if len(ux) < len(xs):
        yu, w = np.add.reduceat(ys, first) / count, count.astype(np.float64)
    else:
        yu, w = ys, None
    fitted = isotonic_regression(yu, sample_weight=w, increasing=True)
    return ux, fitted


def check_fast_isotonic() -> float:
    """Largest difference between :class:`FastIsotonic` and the library's debiaser on a stream."""
    rng = np.random.default_rng(0)
    fast, lib = FastIsotonic(16, 8), IsotonicDebiaser(min_pairs=16, refit_every=8)
    worst = 0.0
    for _ in range(60):
        real = (rng.normal(size=4) > 0).astype(float)
        raw = np.round(real + rng.normal(size=4), 1)  # ties, as a coarse judge gives
        worst = max(worst, float(np.max(np.abs(fast.transform(raw) - lib.transform(list(raw))))))
        fast.add(raw, real)
        lib.add_pairs(list(raw), list(real))
    return worst


# ---------------------------------------------------------------- world models
def draw_groups(rng: np.random.Generator, kind: str, n: int, g: int, informative: bool = True,
                noise: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(world-model score before scale/offset, real score) of n groups, shape (n, g) each.
    ``noise``: the world model's error (default 0.35 for pass_fail, 0.5 for gaussian);
    ``informative=False``: the score is an independent draw with the same spread."""
    mu = rng.normal(size=(n, 1))
    if kind == "pass_fail":
        tau = 0.35 if noise is None else noise
        lat = mu + rng.normal(size=(n, g))
        real = (lat + 0.5 * rng.logistic(size=(n, g)) > 0).astype(float)
        seen = lat if informative else mu + rng.normal(size=(n, g))
        return 1.0 / (1.0 + np.exp(-(seen + tau * rng.normal(size=(n, g))))), real
    tau = 0.5 if noise is None else noise
    real = mu + 0.5 * rng.normal(size=(n, g))
    score = real + tau * rng.normal(size=(n, g)) if informative else mu + math.hypot(0.5, tau) * rng.normal(size=(n, g))
    return score, real


def draw_group(rng: np.random.Generator, kind: str, g: int, informative: bool = True,
               noise: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    score, real = draw_groups(rng, kind, 1, g, informative, noise)
    return score[0], real[0]


def long_run_disagreement(fitted: tuple[np.ndarray, np.ndarray] | None, kind: str, g: int, scale: float,
                          offset: float, seed: int, n: int = 4000) -> tuple[float, float]:
    """The disagreement the run settles at with the map ``fitted``, on n fresh groups: (pooled
    residual² / Var(r) — the new rule's s̄² —, mean of the groups' s² — the old rule's)."""
    score, real = draw_groups(np.random.default_rng(10**9 + seed), kind, n, g)
    cal = apply_map(fitted, scale * score + offset)
    resid = (((cal - cal.mean(1, keepdims=True)) - (real - real.mean(1, keepdims=True))) ** 2).mean(1)
    var_r = real.var(1)
    ok = var_r > 1e-8
    return float(resid[ok].mean() / var_r[ok].mean()), float((resid[ok] / var_r[ok]).mean())


# ---------------------------------------------------------------- the rule before issue 25
class OldRule:
    """s̄² an EMA of s² started at the first group's; c fixed after ``warmup`` groups."""

    def __init__(self, warmup: int, half_life: float = 64.0, rho_target: float = 2.0, rho_max: float = 4.0,
                 floor: float = InverseVarianceDenoiser.DEFAULT_DISAGREEMENT_FLOOR) -> None:
        self.warmup, self.alpha = warmup, 1.0 - 0.5 ** (1.0 / half_life)
        self.rho_target, self.rho_max, self.floor = rho_target, rho_max, floor
        self.ema, self.c, self.n = math.nan, math.nan, 0

    def update(self, s2: float) -> None:
        self.ema = s2 if not math.isfinite(self.ema) else (1 - self.alpha) * self.ema + self.alpha * s2
        self.n += 1
        if not math.isfinite(self.c) and self.n >= self.warmup:
            self.c = (self.rho_target - 1.0) / max(self.ema, self.floor)

    def rho_at(self, ema: float) -> float:
        if not math.isfinite(self.c):
            return 1.0
        return float(min(max(1.0 + self.c * max(ema, self.floor), 1.0), self.rho_max))


def new_rho_at(den: InverseVarianceDenoiser, ema: float) -> float:
    if not math.isfinite(den.c) or not den.warmed_up:
        return 1.0
    return float(min(max(1.0 + den.c * max(ema, den.disagreement_floor), 1.0), den.rho_max))


# ---------------------------------------------------------------- one seed
@dataclass(frozen=True)
class Setting:
    name: str
    group_size: int
    min_pairs: int
    refit_every: int
    old_warmup: int
    new_warmups: tuple[int, ...]  # the first is the setting's own; the others: candidates


def constant_quality_seed(args: tuple[Setting, str, int, int, float, float]) -> dict[str, Any]:
    """One seed of a constant-quality world model under both rules (and each candidate warm-up):
    ``calibration`` = 1 + c·(the disagreement with the map of the calibration group), ``settled``
    = 1 + c·(the disagreement with the map at the end), both on 4000 fresh groups; ``end`` = ρ
    after ``horizon`` groups past the last calibration."""
    st, kind, seed, horizon, scale, offset = args
    rng = np.random.default_rng(seed)
    deb = FastIsotonic(st.min_pairs, st.refit_every)
    old = OldRule(st.old_warmup)
    news = [InverseVarianceDenoiser(warmup_groups=w) for w in st.new_warmups]
    at_calibration: dict[int, Any] = {}  # rule index (-1: old) -> the map its c was fixed with
    after = 0  # groups counted since every new rule is calibrated
    while after < horizon:
        fitted, used, cal, real, s2 = anchor_group(deb, draw_group(rng, kind, st.group_size), scale, offset)
        if s2 is None:
            continue
        old.update(s2)
        if math.isfinite(old.c):
            at_calibration.setdefault(-1, used)
        for i, den in enumerate(news):
            den.update(list(cal), list(real), calibrated_scale=fitted)
            if den.warmed_up:
                at_calibration.setdefault(i, used)
        after += all(den.warmed_up for den in news)
    pooled, mean_s2 = long_run_disagreement(deb.map, kind, st.group_size, scale, offset, seed)
    out: dict[str, Any] = {}
    for i, (w, den) in enumerate(zip(st.new_warmups, news)):
        pooled_cal = long_run_disagreement(at_calibration[i], kind, st.group_size, scale, offset, seed)[0]
        out[f"new_w{w}"] = {"calibration": new_rho_at(den, pooled_cal), "settled": new_rho_at(den, pooled), "end": den.rho}
    mean_s2_cal = long_run_disagreement(at_calibration[-1], kind, st.group_size, scale, offset, seed)[1]
    out["old"] = {"calibration": old.rho_at(mean_s2_cal), "settled": old.rho_at(mean_s2), "end": old.rho_at(old.ema)}
    return out


def anchor_group(deb: Any, drawn: tuple[np.ndarray, np.ndarray], scale: float, offset: float
                 ) -> tuple[bool, Any, np.ndarray, np.ndarray, float | None]:
    """One anchor group through the debiaser: raw = scale · score + offset, calibrated with the map
    before its own pairs (prequential), then added. Returns ``(fitted, map used, calibrated, real, s²)``
    (``s²`` None: the group is skipped)."""
    score, real = drawn
    raw = scale * score + offset
    fitted, used = deb.fitted, deb.map
    cal = deb.transform(raw)
    deb.add(raw, real)
    return fitted, used, cal, real, group_disagreement(list(cal), list(real))


def break_seed(args: tuple[str, int, float, float]) -> dict[str, Any]:
    """README settings; the world model (gaussian: error 0.3) turns into noise at group 100; ρ
    before and 64 groups after."""
    kind, seed, scale, offset = args
    rng = np.random.default_rng(seed)
    deb = FastIsotonic(64, 64)
    old, new = OldRule(8), InverseVarianceDenoiser(warmup_groups=8)
    out: dict[str, Any] = {}
    for i in range(164):
        if i == 100:
            out["old_before"], out["new_before"] = old.rho_at(old.ema), new.rho
        fitted, _, cal, real, s2 = anchor_group(
            deb, draw_group(rng, kind, 8, informative=i < 100, noise=0.3 if kind == "gaussian" else None), scale, offset)
        if s2 is None:
            continue
        old.update(s2)
        new.update(list(cal), list(real), calibrated_scale=fitted)
    out["old_after"], out["new_after"] = old.rho_at(old.ema), new.rho
    return out


# ---------------------------------------------------------------- a world model that learns (issue 37, item 5)
LEARNING_POINTS = (96, 112, 127)
"""Anchor groups after ρ's calibration at which ρ is read in ``--learning`` (96: the review's;
with a recalibration every 32 groups, 96 is one, 112 half-way to the next, 127 just before it)."""


def learning_seed(args: tuple[int, str, int, int, float, int]) -> dict[str, Any]:
    """One seed on the library's loop (anchor_fraction 1, the debiaser's defaults: min_pairs 200,
    refit every 64 pairs; ρ's warm-up 32, G 8): real = task offset + x·w + noise, x ~ N(0, I_d) the rollout's features
    (w ~ N(0, I/d), noise sd ``noise``); the world model a :class:`LearnedWorldModel` (ridge on x).
    ``arm``: ``"learning"`` learns from the anchors (refit every ``refit_every`` groups), ``"frozen"``
    was fitted beforehand on as many groups as the learning one ends with and never learns,
    ``"learning_before"`` learns with ρ's recalibration switched off (the rule before issue 37).
    Returns ρ at :data:`LEARNING_POINTS` groups after calibration, ρ's mean from 32 groups after
    calibration to the end, and s̄² at calibration and at the end."""
    import warnings

    from sklearn.linear_model import Ridge

    from wmrl_envs.core import CorrectionConfig, CorrectionLoop
    from wmrl_envs.world_models.learned import CallableFeaturizer, LearnedWorldModel

    seed, arm, d, refit_every, noise, after = args
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d) / math.sqrt(d)
    g = 8

    def group() -> tuple[list[np.ndarray], list[float]]:
        x = rng.normal(size=(g, d))
        return list(x), (rng.normal() + x @ w + noise * rng.normal(size=g)).tolist()

    model = LearnedWorldModel(CallableFeaturizer(lambda c, a: np.asarray(a)), head=Ridge(alpha=1.0),
                              refit_every=refit_every if arm != "frozen" else 1)
    total = 25 + 32 + after  # the debiaser's first fit (200 pairs), the warm-up, the groups after it
    if arm == "frozen":  # fitted on as many groups as the learning model ends with, then frozen
        for k in range(total):
            xs, ys = group()
            model.observe([None] * g, xs, ys, group_id=-1 - k)

        class Frozen:  # predicts with the fitted head; no observe: the loop does not teach it
            def predict(self, contexts, actions):
                return model.predict(contexts, actions)

        wm: Any = Frozen()
    else:
        wm = model
    loop = CorrectionLoop(CorrectionConfig(anchor_fraction=1.0, min_pairs=200, refit_every=64, warmup_groups=32),
                          world_model=wm, seed=seed)
    den = loop.corrector.denoiser
    if arm == "learning_before":
        den.recalibrate = lambda *a, **k: False  # type: ignore[method-assign]
    rhos: list[float] = []
    at_cal = None
    s2_cal = math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        while at_cal is None or len(rhos) - at_cal < after:
            xs, ys = group()
            ctx = [None] * g
            preds = loop.predict(ctx, xs)
            t = loop.open_group()
            loop.close_group(t, [p.score for p in preds], ys, actions=xs, contexts=ctx)
            rhos.append(den.rho)
            if at_cal is None and den.warmed_up:
                at_cal, s2_cal = len(rhos), den.ema
    out = {f"rho_{k}": rhos[at_cal + k - 1] for k in LEARNING_POINTS if at_cal + k - 1 < len(rhos)}
    out.update(rho_mean=float(np.mean(rhos[at_cal + 31:])), s2_at_calibration=s2_cal, s2_end=den.ema,
               recalibrations=den.n_recalibrations)
    return out


def learning_comparison(seeds: int, d: int, arms: list[tuple[str, int]], noise: float, jobs: int) -> dict[str, Any]:
    """``learning_seed`` for each ``(arm, refit_every)`` over ``seeds`` seeds; median and 5-95% per figure."""
    after = 192
    res: dict[str, Any] = {"d": d, "noise": noise, "groups_after_calibration": after}
    for arm, k in arms:
        rows = run_map(learning_seed, [(s, arm, d, k, noise, after) for s in range(seeds)], jobs)
        res[arm if arm == "frozen" else f"{arm}/refit_every={k}"] = {key: summary([r[key] for r in rows]) for key in rows[0]}
    return res


# ---------------------------------------------------------------- driver
def summary(values: list[float]) -> dict[str, float]:
    lo, med, hi = np.percentile(np.asarray(values, dtype=np.float64), [5, 50, 95])
    return {"median": round(float(med), 3), "p5": round(float(lo), 3), "p95": round(float(hi), 3)}


def fmt(s: dict[str, float]) -> str:
    return f"{s['median']:.2f} [{s['p5']:.2f}, {s['p95']:.2f}]"


def run_map(fn, jobs: list, n_jobs: int) -> list:
    if n_jobs <= 1:
        return [fn(j) for j in jobs]
    with ProcessPoolExecutor(n_jobs) as pool:
        return list(pool.map(fn, jobs, chunksize=max(1, len(jobs) // (4 * n_jobs))))



def _finish(result: dict, t0: float, out) -> dict:
    """Stamp the run's seconds, print them, write ``result`` to ``out`` (when given) and return it."""
    result["seconds"] = round(time.time() - t0, 1)
    print(f"({result['seconds']} s)")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=1) + "\n")
    return result

def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=200, help="seeds per setting and world model (default 200)")
    ap.add_argument("--horizon", type=int, default=192, help="anchor groups simulated after calibration (default 192)")
    ap.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    ap.add_argument("--scale", type=float, default=1.0, help="raw = scale * score + offset (constant-quality runs)")
    ap.add_argument("--offset", type=float, default=0.0)
    ap.add_argument("--candidates", type=int, nargs="*", default=[3, 16, 32],
                    help="warm-ups whose spread is measured on the trainer preset (new rule)")
    ap.add_argument("--settings", nargs="+", default=["defaults", "preset"], choices=["defaults", "preset"],
                    help="constant-quality settings to run")
    ap.add_argument("--no-break", action="store_true", help="skip the break scenario")
    ap.add_argument("--learning", action="store_true",
                    help="only the world model that learns from its anchors (issue 37): frozen vs learning, "
                         "with and without rho's recalibration at refits")
    ap.add_argument("--learning-dim", type=int, default=100, help="--learning: feature dimension d (default 100)")
    ap.add_argument("--learning-refit-every", type=int, nargs="+", default=[1, 8],
                    help="--learning: the learned model's refit_every values to run (default 1 and 8)")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--quick", action="store_true", help="smoke run: 20 seeds, horizon 64")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    a = ap.parse_args(argv)
    if a.quick:
        a.seeds, a.horizon = 20, 64
    from agents.train.config import PRESETS

    preset = PRESETS["default"]
    pc = preset.correction
    t0 = time.time()
    if a.learning:
        arms = [("frozen", 1)] + [(arm, k) for k in a.learning_refit_every for arm in ("learning_before", "learning")]
        res = learning_comparison(a.seeds, a.learning_dim, arms, 0.3, a.jobs)
        result = {"seeds": a.seeds, "learning": res}
        print(f"rho with a world model that learns from its anchors: median [5%, 95%] over {a.seeds} seeds "
              f"(d = {a.learning_dim}; rho_k: k groups after its calibration; rho_mean: from 32 groups after it)")
        for arm, v in res.items():
            if isinstance(v, dict):
                print(f"  {arm:>30s}: " + "  ".join(f"{key} {fmt(x)}" for key, x in v.items()))
        return _finish(result, t0, a.out)
    worst = check_fast_isotonic()
    assert worst < 1e-9, f"the benchmark's isotonic map differs from the debiaser's by {worst}"
    den_default = InverseVarianceDenoiser()
    settings = [
        Setting("defaults", 8, 200, 64, 32, (den_default.warmup_groups,)),
        Setting("wmrl train preset", preset.group_size, pc.min_pairs, pc.refit_every, 3,
                tuple(dict.fromkeys([pc.warmup_groups, *a.candidates]))),
    ]
    result: dict[str, Any] = {"seeds": a.seeds, "horizon": a.horizon, "scale": a.scale, "offset": a.offset,
                              "constant_quality": {}, "break": {}}
    print(f"rho after calibration, world model of constant quality: median [5%, 95%] over {a.seeds} seeds "
          f"(raw = {a.scale:g} * score + {a.offset:g}). calibration = 1 + c * D(map c was fixed with), settled = 1 + c * "
          f"D(map {a.horizon} groups later), end = rho then")
    for st in settings:
        if ("preset" if st.name != "defaults" else "defaults") not in a.settings:
            continue
        for kind in a.kinds:
            rows = run_map(constant_quality_seed, [(st, kind, s, a.horizon, a.scale, a.offset) for s in range(a.seeds)], a.jobs)
            res: dict[str, Any] = {"group_size": st.group_size, "min_pairs": st.min_pairs, "refit_every": st.refit_every}
            for key in rows[0]:
                res[key] = {m: summary([r[key][m] for r in rows]) for m in ("calibration", "settled", "end")}
            own = f"new_w{st.new_warmups[0]}"
            def line(label: str, key: str) -> str:
                return (f"{label:>24s}: calibration {fmt(res[key]['calibration'])}  settled {fmt(res[key]['settled'])}  "
                        f"end {fmt(res[key]['end'])}")

            print(f"  {st.name} / {kind} (G={st.group_size}, min_pairs {st.min_pairs}, refit_every {st.refit_every})")
            print(line(f"old, warm-up {st.old_warmup}", "old"))
            print(line(f"new, warm-up {st.new_warmups[0]}", own))
            for w in st.new_warmups[1:]:
                print(line(f"new, warm-up {w}", f"new_w{w}"))
            result["constant_quality"][f"{st.name}/{kind}"] = res
    if not a.no_break:
        print("world model that turns into noise at anchor group 100 (min_pairs 64, warm-up 8, G 8): rho at group 100 "
              "-> 64 groups later, median [5%, 95%]")
    for scale, offset in () if a.no_break else ((10.0, 3.0), (1.0, 0.0)):
        for kind in a.kinds:
            rows = run_map(break_seed, [(kind, s, scale, offset) for s in range(a.seeds)], a.jobs)
            res = {k: summary([r[k] for r in rows]) for k in rows[0]}
            for rule in ("old", "new"):
                res[f"{rule}_rise"] = summary([r[f"{rule}_after"] - r[f"{rule}_before"] for r in rows])
            print(f"  raw {scale:g}x + {offset:g}  {kind:9s}  old {fmt(res['old_before'])} -> {fmt(res['old_after'])} "
                  f"(rise {fmt(res['old_rise'])})   new {fmt(res['new_before'])} -> {fmt(res['new_after'])} "
                  f"(rise {fmt(res['new_rise'])})")
            result["break"][f"{scale:g}x+{offset:g}/{kind}"] = res
    return _finish(result, t0, a.out)


if __name__ == "__main__":
    main()
