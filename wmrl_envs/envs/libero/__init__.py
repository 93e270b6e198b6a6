"""LIBERO-Long (suite ``libero_10``) as a Gymnasium environment (the paper's VLA protocol; ``docs/method.md``, "Reward mode").

The VLA-transfer experiment of the paper: a vision-language-action policy manipulates objects
in the LIBERO simulator (robosuite / MuJoCo); the simulator's sparse success is the anchor and
a video world model supplies dense reward. This package holds:

    * :mod:`~wmrl_envs.envs.libero.env` — :class:`LiberoEnv` (Gymnasium id
      ``wmrl/LIBERO-Long-v0``).
    * :func:`register_envs` — register that id with Gymnasium (idempotent).
    * :mod:`~wmrl_envs.envs.libero.robometer` — the Robometer reward model, this env's
      reward-mode world model (:class:`RobometerWorldModel`; imported on first access).

Importing this package is light: LIBERO itself (the ``libero`` extra,
``pip install -e ".[libero]"``) is imported only when a :class:`LiberoEnv` is constructed.
"""

from __future__ import annotations

from wmrl_envs.utils import lazy_exports

from .env import ENV_ID, LiberoEnv

__all__ = ["ENV_ID", "LiberoEnv", "register_envs"]


def register_envs() -> None:
    """Register :data:`ENV_ID` (``wmrl/LIBERO-Long-v0``) with Gymnasium unless already registered.

    No ``max_episode_steps``/``TimeLimit`` is added: the environment truncates itself at
    ``max_steps`` policy steps (an action chunk counts as its ``k`` steps).
    """
    import gymnasium

    if ENV_ID in gymnasium.registry:
        return
    gymnasium.register(id=ENV_ID, entry_point="wmrl_envs.envs.libero.env:LiberoEnv")


_ROBOMETER_NAMES = (
    "RobometerWorldModel", "RobometerModel", "RobometerProcessor", "RobometerHeadConfig",
    "RobometerWeightsNotFoundError", "robometer_reward", "uniform_frame_indices", "build_tiny_robometer",
)
__all__ += list(_ROBOMETER_NAMES)


# the Robometer names (:mod:`.robometer`, torch-heavy) are imported on first access
__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_ROBOMETER_NAMES, ".robometer"), __all__)
