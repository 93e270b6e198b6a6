"""Does the debiasing map make calibration worse? The isotonic map against the out-of-fold choice
(``CorrectionConfig(debias_map="auto")``), prequentially, over seeds (issue 36, item 3).

A stream of anchor groups (G rollouts each) is calibrated the way the loop calibrates them: each
group is scored with the map fitted *before* its pairs are added (prequential), then its pairs go
into the library's :class:`~wmrl_envs.core.IsotonicDebiaser`. Real scores take the main job's
reward levels (a 0 / 0.1 / 0.2 floor and valid scores 0.5 + 0.5·position); world models:

* ``on_scale``: a world model fitted on the real scale (the learned one of ``wmrl train``): raw =
  E[real | the rollout], real = raw + N(0, ``--noise``); the identity is the best map there, and a
  fitted map can only add its own fitting noise;
* ``judge``: raw = 10·real + 3 + N(0, 10·``--noise``) — a judge on its own scale, which needs a map;
* ``bent``: raw = real² + N(0, ``--noise``) — on the scale but bent, where an isotonic map pays.

Figures per (world model, map): the prequential mean squared error of the calibrated scores over
the raw one's (for ``judge`` over the isotonic map's, since a judge's raw error on its own scale
means nothing),
median and 5–95% over seeds, and the share of seeds where calibration made the error worse than
the raw score. Settings are ``wmrl train``'s (G 8, min_pairs 16, refit_every 8) with 8 anchor
groups (the default run) and 32.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/debias_map.py --seeds 300 --out results/debias_map.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def stream(kind: str, seed: int, groups: int, g: int, noise: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    real = []
    for _ in range(groups):
        skill = rng.uniform(0, 1)
        lvl = rng.choice([0.0, 0.1, 0.2, 1.0], size=g, p=[0.15, 0.2, 0.15, 0.5])
        pos = np.clip(skill + rng.normal(0, 0.2, g), 0, 1)
        real.append(np.where(lvl == 1.0, 0.5 + 0.5 * pos, lvl))
    r = np.concatenate(real)
    if kind == "on_scale":  # the prediction is the conditional mean; the outcome scatters around it
        raw, r = r, r + rng.normal(0, noise, r.size)
    elif kind == "judge":
        raw = 10 * r + 3 + rng.normal(0, 10 * noise, r.size)
    elif kind == "bent":
        raw = r ** 2 + rng.normal(0, noise, r.size)
    else:
        raise ValueError(kind)
    return raw, r


def prequential(map_kind: str, raw: np.ndarray, real: np.ndarray, g: int, min_pairs: int, refit_every: int) -> dict:
    from wmrl_envs.core import IsotonicDebiaser

    deb = IsotonicDebiaser(min_pairs=min_pairs, refit_every=refit_every, map_kind=map_kind)
    sq_raw = sq_cal = 0.0
    chosen = []
    for i in range(0, raw.size, g):
        x, y = raw[i:i + g], real[i:i + g]
        cal = deb.transform(x)
        sq_raw += float(np.sum((x - y) ** 2))
        sq_cal += float(np.sum((cal - y) ** 2))
        deb.add_pairs(x, y)
        chosen.append(deb.chosen)
    return {"mse_raw": sq_raw / raw.size, "mse_cal": sq_cal / raw.size, "last_map": chosen[-1]}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--noise", type=float, default=0.25)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--groups", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--out", default="results/debias_map.json")
    args = ap.parse_args(argv)
    g = args.group_size
    out: dict = {"seeds": args.seeds, "noise": args.noise, "group_size": g, "min_pairs": 16, "refit_every": 8,
                 "command": "python benchmarks/debias_map.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                 "results": {}}
    for groups in args.groups:
        for kind in ("on_scale", "judge", "bent"):
            for mk in ("isotonic", "auto"):
                ratios, worse, maps = [], 0, {}
                for seed in range(args.seeds):
                    raw, real = stream(kind, seed, groups, g, args.noise)
                    res = prequential(mk, raw, real, g, 16, 8)
                    ref = res["mse_raw"]
                    if kind == "judge":  # a judge's raw error on its own scale means nothing: against the isotonic map's
                        ref = prequential("isotonic", raw, real, g, 16, 8)["mse_cal"]
                    ratios.append(res["mse_cal"] / ref)
                    worse += res["mse_cal"] > ref
                    maps[res["last_map"]] = maps.get(res["last_map"], 0) + 1
                q = np.percentile(ratios, [5, 50, 95])
                key = f"{kind}/{groups} groups/{mk}"
                out["results"][key] = {"mse_ratio_median": float(q[1]), "mse_ratio_5_95": [float(q[0]), float(q[2])],
                                       "share_worse": worse / args.seeds, "last_map": maps}
                print(f"{key:32s} calibrated/reference MSE {q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}]  worse in "
                      f"{worse / args.seeds:.0%} of seeds  maps at the end {maps}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
