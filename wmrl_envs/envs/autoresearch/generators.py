"""The AutoResearch tasks' data generators: each draws one task's train/test split from data that
ship with scikit-learn, deterministically in its seed (the installation's task secret derives the
seed: :mod:`~wmrl_envs.envs.autoresearch.secret`).

Split from :mod:`~wmrl_envs.envs.autoresearch.tasks` (the registry, which names one generator per
task) so that each module holds one thing. What each task makes hard (scales, skew, imbalance,
categoricals, missing values) is in ``tasks``' module docstring; the measured execution costs are
in ``docs/autoresearch.md``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

DataTuple = tuple[pd.DataFrame, pd.Series, pd.DataFrame, pd.Series]
"""(train features, train target, test features, test target) of one task."""

_N_ROWS = 6000
"""Rows (train + test, 3:1) of every tabular task: small enough that a fit takes well under a
second on one core for most programs, so an execution costs about its Python and scikit-learn
start-up (measured by ``benchmarks/bench_design.py``)."""

_DIGIT_COPIES = 1
"""Augmented copies of every bundled digits image in the image tasks (1797 images each)."""

# ----------------------------------------------------------------------------------------------
# Data generators (all deterministic in ``seed``)
# ----------------------------------------------------------------------------------------------


def _rngs(seed: int) -> tuple[np.random.Generator, np.random.RandomState]:
    """Two independent random streams of one seed: a numpy ``Generator`` and, for scikit-learn's
    ``random_state`` arguments, a ``RandomState`` whose MT19937 state comes from the seed's full
    entropy (an int ``random_state`` would cut the seed to 32 bits, a space one can search)."""
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"a data seed must be a non-negative int, got {seed!r}")
    np_seq, sk_seq = np.random.SeedSequence(int(seed)).spawn(2)
    return np.random.default_rng(np_seq), np.random.RandomState(np.random.MT19937(sk_seq))


def _split(X: pd.DataFrame, y: np.ndarray, rng: np.random.Generator, test_frac: float = 0.25) -> DataTuple:
    n = len(X)
    perm = rng.permutation(n)
    n_test = int(round(n * test_frac))
    te, tr = perm[:n_test], perm[n_test:]
    y = np.asarray(y)
    return (
        X.iloc[tr].reset_index(drop=True),
        pd.Series(y[tr]),
        X.iloc[te].reset_index(drop=True),
        pd.Series(y[te]),
    )


def _quantile_categories(values: np.ndarray, labels: list[str], rng: np.random.Generator, noise: float) -> np.ndarray:
    """Bin ``values`` (plus Gaussian noise of ``noise`` std-units) into ``labels`` by quantile."""
    v = values + noise * values.std() * rng.standard_normal(len(values))
    edges = np.quantile(v, np.linspace(0, 1, len(labels) + 1)[1:-1])
    return np.asarray(labels, dtype=object)[np.searchsorted(edges, v)]


def _mask_missing(df: pd.DataFrame, columns: list[str], frac: float, rng: np.random.Generator) -> pd.DataFrame:
    df = df.copy()
    for c in columns:
        m = rng.random(len(df)) < frac
        if df[c].dtype.kind in "iu":
            df[c] = df[c].astype(float)
        df.loc[m, c] = np.nan
    return df


def gen_credit_default(seed: int) -> DataTuple:
    from sklearn.datasets import make_classification

    rng, sk_rng = _rngs(seed)
    n = _N_ROWS
    X, y = make_classification(
        n_samples=n, n_features=36, n_informative=10, n_redundant=8, n_repeated=0,
        n_clusters_per_class=3, weights=[0.88], flip_y=0.04, class_sep=0.7,
        shuffle=False, random_state=sk_rng,
    )
    # Nonlinear, skewed "financial" columns from informative ones.
    income = np.round(np.exp(10.3 + 0.45 * X[:, 2]), 0)
    utilisation = 1 / (1 + np.exp(-1.5 * X[:, 3]))
    grade = _quantile_categories(X[:, 0], ["A", "B", "C", "D", "E", "F"], rng, 0.3)
    region = _quantile_categories(X[:, 1], ["north", "east", "south", "west", "central"], rng, 1.0)
    home = rng.choice(np.array(["rent", "own", "mortgage"], dtype=object), size=n, p=[0.45, 0.15, 0.40])
    age = np.clip(np.round(42 + 11 * rng.standard_normal(n) - 3 * X[:, 4]), 18, 90).astype(np.int64)
    rest = X[:, 5:]
    perm = rng.permutation(rest.shape[1])
    df = pd.DataFrame(rest[:, perm], columns=[f"f{i:02d}" for i in range(rest.shape[1])])
    df.insert(0, "age", age)
    df.insert(1, "income", income)
    df.insert(2, "utilisation", utilisation)
    df.insert(3, "grade", grade)
    df.insert(4, "region", region)
    df.insert(5, "home_ownership", home)
    df = _mask_missing(df, ["income", "f03", "f07", "f12", "f19", "f25"], 0.06, rng)
    return _split(df, y.astype(np.int64), rng)


def gen_land_cover(seed: int) -> DataTuple:
    from sklearn.datasets import make_classification

    rng, sk_rng = _rngs(seed)
    X, y = make_classification(
        n_samples=_N_ROWS, n_features=32, n_informative=14, n_redundant=6, n_classes=6,
        n_clusters_per_class=2, weights=[0.30, 0.25, 0.18, 0.12, 0.10, 0.05],
        class_sep=1.1, flip_y=0.02, random_state=sk_rng,
    )
    names = np.array(["forest", "grassland", "cropland", "urban", "water", "wetland"], dtype=object)
    bands = [f"band_{i:02d}" for i in range(X.shape[1])]
    # Spectral bands are reflectances: squash into (0, 1).
    df = pd.DataFrame(1 / (1 + np.exp(-0.7 * X)), columns=bands)
    df["elevation_m"] = np.round(400 + 150 * X[:, 0] + 60 * rng.standard_normal(len(df)), 1)
    df["slope_deg"] = np.round(np.abs(8 * X[:, 1] + 4 * rng.standard_normal(len(df))), 2)
    return _split(df, names[y], rng)


def gen_hastie_noisy(seed: int) -> DataTuple:
    from sklearn.datasets import make_hastie_10_2

    rng, sk_rng = _rngs(seed)
    n = _N_ROWS
    X, y = make_hastie_10_2(n_samples=n, random_state=sk_rng)
    noise = rng.standard_normal((n, 20))
    mix = X @ rng.standard_normal((10, 6)) / 3.0 + 0.5 * rng.standard_normal((n, 6))
    full = np.hstack([X, noise, mix])
    perm = rng.permutation(full.shape[1])
    df = pd.DataFrame(full[:, perm], columns=[f"x{i:02d}" for i in range(full.shape[1])])
    return _split(df, (y > 0).astype(np.int64), rng)


def gen_friedman_sensors(seed: int) -> DataTuple:
    from sklearn.datasets import make_friedman1

    rng, sk_rng = _rngs(seed)
    X, y = make_friedman1(n_samples=_N_ROWS, n_features=40, noise=1.0, random_state=sk_rng)
    perm = rng.permutation(X.shape[1])
    df = pd.DataFrame(X[:, perm], columns=[f"sensor_{i:02d}" for i in range(X.shape[1])])
    return _split(df, y, rng)


def gen_sparse_linear(seed: int) -> DataTuple:
    from sklearn.datasets import make_regression

    rng, sk_rng = _rngs(seed)
    n = _N_ROWS
    X, y = make_regression(
        n_samples=n, n_features=50, n_informative=12, effective_rank=20, tail_strength=0.4,
        noise=0.0, random_state=sk_rng,
    )
    y = (y - y.mean()) / y.std()
    y = y + 0.35 * np.sin(2.5 * X[:, 0] / X[:, 0].std()) + 0.25 * (X[:, 1] / X[:, 1].std()) ** 2
    y = 100 + 25 * y + 6 * rng.standard_t(df=2, size=n)  # heavy-tailed noise: MAE metric
    df = pd.DataFrame(X / X.std(axis=0), columns=[f"x{i:02d}" for i in range(X.shape[1])])
    return _split(df, y, rng)


def gen_house_prices(seed: int) -> DataTuple:
    rng = _rngs(seed)[0]
    n = _N_ROWS
    hoods = np.array([f"district_{c}" for c in "ABCDEFGHIJKL"], dtype=object)
    hood_idx = rng.integers(0, len(hoods), n)
    hood_effect = rng.normal(0, 0.25, len(hoods))[hood_idx]
    sqft = np.round(np.exp(rng.normal(7.3, 0.35, n)))
    bedrooms = np.clip(np.round(sqft / 600 + rng.normal(0, 0.8, n)), 1, 8).astype(np.int64)
    bathrooms = np.clip(np.round(bedrooms * 0.6 + rng.normal(0, 0.5, n)), 1, 6).astype(np.int64)
    year_built = rng.integers(1900, 2024, n)
    age = 2024 - year_built
    lot = np.round(np.exp(rng.normal(8.6, 0.5, n)))
    lat = rng.uniform(0, 10, n)
    lon = rng.uniform(0, 10, n)
    dist_center = np.hypot(lat - 5.2, lon - 4.7)
    cond_names = np.array(["poor", "fair", "good", "excellent"], dtype=object)
    cond_idx = rng.choice(4, n, p=[0.1, 0.3, 0.45, 0.15])
    garage = rng.integers(0, 3, n)
    school = np.clip(rng.normal(6, 2, n) - 0.2 * dist_center, 0, 10).round(1)
    crime = np.clip(np.exp(rng.normal(1.0, 0.6, n)) + 0.1 * dist_center, 0, None).round(2)
    log_price = (
        12.4
        + 0.8 * (np.log(sqft) - 7.3)
        + hood_effect
        - 0.07 * dist_center
        + 0.012 * np.maximum(dist_center - 5.0, 0) ** 2
        + np.where(age < 10, 0.15, 0.0) - 0.002 * age + 0.000025 * (age - 60) ** 2 * (age > 60)
        + 0.08 * (cond_idx - 1.5) * (1 + 0.004 * age)
        + 0.05 * garage
        + 0.04 * (school - 6)
        - 0.03 * crime
        + 0.06 * np.log(lot / 5400)
        + 0.03 * (bathrooms - bedrooms * 0.6)
        + rng.normal(0, 0.12, n)
    )
    price = np.round(np.exp(log_price), -2)
    df = pd.DataFrame({
        "sqft": sqft, "bedrooms": bedrooms, "bathrooms": bathrooms, "year_built": year_built,
        "lot_sqft": lot, "latitude": lat.round(4), "longitude": lon.round(4),
        "neighborhood": hoods[hood_idx], "condition": cond_names[cond_idx], "garage_spaces": garage,
        "school_rating": school, "crime_index": crime,
    })
    # Weakly or un-related listing attributes.
    for i in range(10):
        df[f"listing_attr_{i}"] = np.round(rng.normal(0, 1, n) + (0.3 * np.log(sqft) if i < 3 else 0), 3)
    df = _mask_missing(df, ["lot_sqft", "year_built", "school_rating"], 0.05, rng)
    return _split(df, price.astype(np.float64), rng)


def _load_digits_images() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return d.images.astype(np.float64), d.target.astype(np.int64)


def _shift(img: np.ndarray, dy: int, dx: int) -> np.ndarray:
    out = np.zeros_like(img)
    h, w = img.shape[-2:]
    ys, yd = (slice(0, h - dy), slice(dy, h)) if dy >= 0 else (slice(-dy, h), slice(0, h + dy))
    xs, xd = (slice(0, w - dx), slice(dx, w)) if dx >= 0 else (slice(-dx, w), slice(0, w + dx))
    out[..., yd, xd] = img[..., ys, xs]
    return out


def _shift_each(images: np.ndarray, dy: np.ndarray, dx: np.ndarray, r: int) -> np.ndarray:
    """Every image ``images[i]`` shifted by its own ``(dy[i], dx[i])``, both in ``[-r, r]``."""
    out = np.empty_like(images)
    for sy in range(-r, r + 1):
        for sx in range(-r, r + 1):
            m = (dy == sy) & (dx == sx)
            if m.any():
                out[m] = _shift(images[m], sy, sx)
    return out


def _digits_split(seed: int) -> tuple[np.random.Generator, np.ndarray, np.ndarray, np.ndarray]:
    """Split the original images (not their augmentations) so no digit leaks into the test set."""
    rng = _rngs(seed)[0]
    images, labels = _load_digits_images()
    perm = rng.permutation(len(images))
    n_test = len(images) // 4
    is_test = np.zeros(len(images), dtype=bool)
    is_test[perm[:n_test]] = True
    return rng, images, labels, is_test


def gen_digits_shifted(seed: int) -> DataTuple:
    rng, images, labels, is_test = _digits_split(seed)
    aug_x, aug_y, aug_t = [], [], []
    for _ in range(_DIGIT_COPIES):  # each copy shifts every image by its own (dy, dx) in {-1, 0, 1}^2
        dy = rng.integers(-1, 2, len(images))
        dx = rng.integers(-1, 2, len(images))
        shifted = _shift_each(images, dy, dx, 1)
        noisy = np.clip(np.round(shifted + rng.normal(0, 1.5, shifted.shape)), 0, 16)
        aug_x.append(noisy.reshape(len(images), -1))
        aug_y.append(labels)
        aug_t.append(is_test)
    return _shuffled_split(rng, aug_x, aug_y, aug_t, [f"px_{r}_{c}" for r in range(8) for c in range(8)])


def _shuffled_split(
    rng: np.random.Generator, xs: list[np.ndarray], ys: list[np.ndarray], is_test: list[np.ndarray], cols: list[str]
) -> DataTuple:
    """The augmented image rows stacked, split by ``is_test`` and shuffled (train, then test) with ``rng``."""
    X = np.vstack(xs).astype(np.int64)
    y = np.concatenate(ys)
    t = np.concatenate(is_test)
    tr = rng.permutation(np.flatnonzero(~t))
    te = rng.permutation(np.flatnonzero(t))
    return (
        pd.DataFrame(X[tr], columns=cols), pd.Series(y[tr]),
        pd.DataFrame(X[te], columns=cols), pd.Series(y[te]),
    )


def gen_digits_upscaled(seed: int) -> DataTuple:
    from scipy.ndimage import zoom

    rng, images, labels, is_test = _digits_split(seed)
    big = zoom(images, (1, 1.5, 1.5), order=1)  # (n, 12, 12), bilinear upscaling
    aug_x, aug_y, aug_t = [], [], []
    for _ in range(_DIGIT_COPIES):
        dy = rng.integers(-2, 3, len(big))
        dx = rng.integers(-2, 3, len(big))
        out = _shift_each(big, dy, dx, 2)
        contrast = rng.uniform(0.6, 1.2, (len(big), 1, 1))
        out = np.clip(np.round(out * contrast * 255 / 16 + rng.normal(0, 40, out.shape)), 0, 255)
        aug_x.append(out.reshape(len(big), -1))
        aug_y.append(labels)
        aug_t.append(is_test)
    return _shuffled_split(rng, aug_x, aug_y, aug_t, [f"px_{r:02d}_{c:02d}" for r in range(12) for c in range(12)])


def gen_churn(seed: int) -> DataTuple:
    from sklearn.datasets import make_classification

    rng, sk_rng = _rngs(seed)
    n = _N_ROWS
    X, y = make_classification(
        n_samples=n, n_features=30, n_informative=9, n_redundant=6, n_clusters_per_class=4,
        weights=[0.92], flip_y=0.03, class_sep=0.6, shuffle=False, random_state=sk_rng,
    )
    plan = _quantile_categories(X[:, 0], ["basic", "standard", "plus", "premium"], rng, 0.5)
    contract = _quantile_categories(X[:, 1], ["monthly", "annual", "two_year"], rng, 0.6)
    payment = rng.choice(np.array(["card", "bank", "voucher", "invoice"], dtype=object), n)
    tenure = np.clip(np.round(24 + 14 * X[:, 2] + 6 * rng.standard_normal(n)), 0, 120).astype(np.int64)
    monthly = np.round(np.exp(3.6 + 0.3 * X[:, 3] + 0.1 * rng.standard_normal(n)), 2)
    support_calls = rng.poisson(np.exp(0.2 + 0.5 * np.tanh(X[:, 4])))
    rest = X[:, 5:]
    perm = rng.permutation(rest.shape[1])
    df = pd.DataFrame(rest[:, perm], columns=[f"usage_{i:02d}" for i in range(rest.shape[1])])
    df.insert(0, "tenure_months", tenure)
    df.insert(1, "monthly_charge", monthly)
    df.insert(2, "support_calls", support_calls.astype(np.int64))
    df.insert(3, "plan", plan)
    df.insert(4, "contract", contract)
    df.insert(5, "payment_method", payment)
    df = _mask_missing(df, ["monthly_charge", "usage_02", "usage_09", "usage_17"], 0.05, rng)
    return _split(df, y.astype(np.int64), rng)


def gen_energy_load(seed: int) -> DataTuple:
    rng = _rngs(seed)[0]
    n = _N_ROWS
    hour = rng.integers(0, 24, n)
    weekday = rng.integers(0, 7, n)
    month = rng.integers(1, 13, n)
    season_temp = 12 - 10 * np.cos(2 * math.pi * (month - 1) / 12)
    temp = season_temp + 5 * np.sin(2 * math.pi * (hour - 9) / 24) + rng.normal(0, 4, n)
    humidity = np.clip(60 - 1.2 * (temp - 12) + rng.normal(0, 12, n), 5, 100)
    wind = np.abs(rng.normal(4, 2.5, n))
    solar = np.clip(800 * np.sin(math.pi * (hour - 6) / 12), 0, None) * rng.uniform(0.3, 1.0, n)
    occupancy = np.clip(rng.normal(0.6, 0.2, n) + 0.3 * ((hour >= 8) & (hour <= 18) & (weekday < 5)), 0, 1)
    load = (
        120
        + 35 * np.sin(2 * math.pi * (hour - 7) / 24) * (weekday < 5)
        + 15 * np.sin(2 * math.pi * (hour - 10) / 24) * (weekday >= 5)
        + 0.35 * (temp - 18) ** 2
        + 0.4 * np.maximum(humidity - 70, 0) * (temp > 22)
        + 90 * occupancy
        - 0.02 * solar
        + 2.0 * wind * (temp < 8)
        + rng.normal(0, 8, n)
    )
    df = pd.DataFrame({
        "hour": hour, "weekday": weekday, "month": month, "temperature_c": temp.round(2),
        "humidity_pct": humidity.round(1), "wind_ms": wind.round(2), "solar_wm2": solar.round(1),
        "occupancy": occupancy.round(3),
    })
    for i in range(22):
        base = [temp, humidity, wind, solar][i % 4] if i < 8 else 0.0
        df[f"meter_{i:02d}"] = np.round(0.5 * base + rng.normal(0, 3, n), 3)
    return _split(df, load.astype(np.float64), rng)


def gen_sensor_fault(seed: int) -> DataTuple:
    from sklearn.datasets import make_classification

    rng, sk_rng = _rngs(seed)
    n = _N_ROWS
    X, y = make_classification(
        n_samples=n, n_features=36, n_informative=8, n_redundant=10, n_classes=4,
        n_clusters_per_class=3, weights=[0.4, 0.25, 0.2, 0.15], class_sep=1.4, flip_y=0.02,
        random_state=sk_rng,
    )
    # Sensors respond nonlinearly: cube, exponential and absolute-value channels.
    X[:, 0:6] = X[:, 0:6] ** 3
    X[:, 6:12] = np.exp(0.8 * X[:, 6:12])
    X[:, 12:18] = np.abs(X[:, 12:18])
    names = np.array(["healthy", "bearing_wear", "misalignment", "imbalance"], dtype=object)
    df = pd.DataFrame(X.round(5), columns=[f"vib_{i:02d}" for i in range(X.shape[1])])
    df["rpm"] = np.round(1500 + 300 * rng.standard_normal(n))
    df["temperature_c"] = np.round(55 + 4 * X[:, 20] + 3 * rng.standard_normal(n), 2)
    return _split(df, names[y], rng)


def gen_fraud(seed: int) -> DataTuple:
    """Card transactions: 4% fraud, a skewed amount, account age in days, a high-cardinality
    merchant category whose levels carry their own fraud rate, and 20 anonymised features."""
    from sklearn.datasets import make_classification

    rng, sk_rng = _rngs(seed)
    n = _N_ROWS
    X, y = make_classification(
        n_samples=n, n_features=24, n_informative=8, n_redundant=4, n_clusters_per_class=2,
        weights=[0.96], flip_y=0.01, class_sep=0.9, shuffle=False, random_state=sk_rng,
    )
    merchants = np.array([f"mcc_{i:02d}" for i in range(40)], dtype=object)
    risk = rng.normal(0, 1, len(merchants))  # per-merchant risk, echoed by the label
    m_idx = np.where(rng.random(n) < 0.5, np.argsort(risk)[np.clip((X[:, 0] * 8 + 20).astype(int), 0, 39)],
                     rng.integers(0, len(merchants), n))
    amount = np.round(np.exp(3.5 + 0.9 * X[:, 1] + 0.4 * rng.standard_normal(n)), 2)  # skewed: 1..10^4
    account_age = np.clip(np.round(900 + 600 * X[:, 2] + 300 * rng.standard_normal(n)), 1, None)
    hour = np.clip(np.round(14 + 4 * X[:, 3] + 3 * rng.standard_normal(n)), 0, 23).astype(np.int64)
    rest = X[:, 4:]
    df = pd.DataFrame(rest[:, rng.permutation(rest.shape[1])], columns=[f"v{i:02d}" for i in range(rest.shape[1])])
    df.insert(0, "amount", amount)
    df.insert(1, "account_age_days", account_age)
    df.insert(2, "hour", hour)
    df.insert(3, "merchant_category", merchants[m_idx])
    return _split(df, y.astype(np.int64), rng)


def gen_insurance_claims(seed: int) -> DataTuple:
    """Claim costs: a right-skewed (log-normal) target driven by age, vehicle value, region and
    past claims through multiplicative effects; features on very different scales."""
    rng = _rngs(seed)[0]
    n = _N_ROWS
    regions = np.array(["urban", "suburban", "rural", "coastal", "mountain"], dtype=object)
    r_idx = rng.integers(0, len(regions), n)
    age = rng.integers(18, 86, n)
    vehicle_value = np.round(np.exp(rng.normal(9.8, 0.5, n)), -1)
    annual_km = np.round(np.exp(rng.normal(9.4, 0.45, n)))
    past_claims = rng.poisson(0.4 + 0.01 * np.maximum(30 - age, 0), n)
    bonus_malus = np.clip(np.round(rng.normal(1.0, 0.25, n) + 0.15 * past_claims, 2), 0.5, 2.5)
    log_cost = (
        6.2 + 0.35 * (np.log(vehicle_value) - 9.8) + 0.25 * (np.log(annual_km) - 9.4)
        + 0.018 * np.abs(age - 45) + 0.3 * past_claims + 0.5 * (bonus_malus - 1)
        + rng.normal(0, 0.25, len(regions))[r_idx] + rng.normal(0, 0.6, n)
    )
    df = pd.DataFrame({
        "age": age, "vehicle_value": vehicle_value, "annual_km": annual_km, "past_claims": past_claims,
        "bonus_malus": bonus_malus, "region": regions[r_idx],
    })
    for i in range(14):
        df[f"policy_attr_{i:02d}"] = np.round(rng.normal(0, 1, n) * 10 ** (i % 4), 3)
    return _split(df, np.round(np.exp(log_cost), 2), rng)


def gen_friedman_plant(seed: int) -> DataTuple:
    """Friedman #2 (an impedance from four physical quantities of very different scales) with
    16 distractor columns of random scales: a distance-based model needs scaling."""
    from sklearn.datasets import make_friedman2

    rng, sk_rng = _rngs(seed)
    n = _N_ROWS
    X, y = make_friedman2(n_samples=n, noise=60.0, random_state=sk_rng)
    noise = rng.standard_normal((n, 16)) * (10.0 ** rng.integers(-1, 4, 16))
    df = pd.DataFrame({"resistance_ohm": X[:, 0], "angular_freq": X[:, 1], "inductance_h": X[:, 2],
                       "capacitance_uf": X[:, 3]}).round(4)
    for i in range(noise.shape[1]):
        df[f"aux_{i:02d}"] = noise[:, i].round(3)
    return _split(df, y, rng)


def gen_digits_rotated(seed: int) -> DataTuple:
    from scipy.ndimage import rotate

    rng, images, labels, is_test = _digits_split(seed)
    aug_x, aug_y, aug_t = [], [], []
    for _ in range(_DIGIT_COPIES):
        angles = rng.uniform(-20, 20, len(images))
        out = np.stack([rotate(im, a, reshape=False, order=1, mode="constant") for im, a in zip(images, angles)])
        out = np.clip(np.round(out + rng.normal(0, 2.0, out.shape)), 0, 16)
        aug_x.append(out.reshape(len(images), -1))
        aug_y.append(labels)
        aug_t.append(is_test)
    return _shuffled_split(rng, aug_x, aug_y, aug_t, [f"px_{r}_{c}" for r in range(8) for c in range(8)])
