"""Session-wide test settings.

The AutoResearch tasks draw their data from the installation's task secret
(:mod:`wmrl_envs.envs.autoresearch.secret`). The suite runs under the documented reference
secret, so that the shipped ``leaderboards.json`` applies and pinned values are reproducible,
and with ``WMRL_HOME`` in a private temporary folder, so that no test reads or creates the
user's own secret file or leaderboard cache. Both are set when this file is imported, before
any test module (or subprocess it starts) can generate task data; tests that need another
secret override them with ``monkeypatch``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from wmrl_envs.envs.autoresearch.secret import HOME_ENV_VAR, REFERENCE_SECRET, SECRET_ENV_VAR

os.environ[SECRET_ENV_VAR] = REFERENCE_SECRET
_HOME = tempfile.mkdtemp(prefix="wmrl-test-home-")
os.environ[HOME_ENV_VAR] = _HOME
atexit.register(shutil.rmtree, _HOME, True)
