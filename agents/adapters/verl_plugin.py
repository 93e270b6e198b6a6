"""verl plugin entry point: registers the ``wmrl_grpo`` advantage estimator in every process.

verl (0.9.1, ``verl/__init__.py``) loads the ``verl.plugins`` entry points of installed
packages when it is imported (unless ``VERL_USE_EXTERNAL_PLUGINS=none``); this package declares
this module as one (``pyproject.toml``). verl computes advantages in its trainer process, which
never imports a custom reward function, so this is how ``algorithm.adv_estimator=wmrl_grpo``
is found there. Importing this module imports :mod:`agents.adapters.verl` (which registers the
estimator on import); see ``docs/verl.md``.
"""

from __future__ import annotations

from agents.adapters.verl import register_estimator

register_estimator()
