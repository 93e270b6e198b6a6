"""The environments shipped with wmrl (registered by ``import wmrl_envs``).

* :mod:`.autoresearch` — AutoResearch (``wmrl/AutoResearch-v0``): sandboxed ML code.
* :mod:`.libero` — LIBERO-Long (``wmrl/LIBERO-Long-v0``): robot manipulation, optional extra.
* :mod:`.guess` — ``GuessEnv`` (``wmrl/Guess-v0``): a one-step env with a known score, for tests.
* :mod:`.known_truth` — ``KnownTruthEnv`` (``wmrl/KnownTruth-v0``), ``KnownTruthWorldModel``,
  ``BreakingWorldModel``, ``WorldModelError``, ``measured_correlation``: a known true score per
  action and a world model of configurable error (the env of ``wmrl bench sweep``).

The names below are imported on first access (module ``__getattr__``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wmrl_envs.utils import lazy_exports

__all__ = [
    "GuessEnv",
    "KnownTruthEnv",
    "KnownTruthWorldModel",
    "BreakingWorldModel",
    "WorldModelError",
    "WORLD_MODEL_ERRORS",
    "measured_correlation",
    "within_group_correlation",
]

_LAZY = {
    "GuessEnv": "wmrl_envs.envs.guess",
    **{n: "wmrl_envs.envs.known_truth" for n in __all__[1:]},
}

if TYPE_CHECKING:  # pragma: no cover
    from wmrl_envs.envs.guess import GuessEnv
    from wmrl_envs.envs.known_truth import (
        WORLD_MODEL_ERRORS,
        BreakingWorldModel,
        KnownTruthEnv,
        KnownTruthWorldModel,
        WorldModelError,
        measured_correlation,
        within_group_correlation,
    )

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, __all__)
