"""The per-installation task secret: what an AutoResearch agent must not be able to rebuild.

Every AutoResearch task is generated on the fly by a public generator
(:mod:`~wmrl_envs.envs.autoresearch.tasks`). If the generator's seed were public, a solution
could re-run the generator inside the sandbox (scikit-learn is there) and read off the hidden
test labels. So the seed of each task's data is *derived from a secret* that never enters a
sandbox:

    ``seed = int(HMAC-SHA256(secret, "wmrl-autoresearch/data-seed/v1/<task_id>/<data_seed>"))``

a 256-bit integer (``data_seed`` is the task's public number in the registry). Everything the
seed draws is secret with it: the rows, the train/test split, label noise, the column
permutation and, for the digits tasks, the split of scikit-learn's images and their
augmentation (the bundled image files themselves are hidden from the sandbox, see
:func:`sandbox_hidden_paths`).

Where the secret comes from, first match wins:

1. the environment variable :data:`SECRET_ENV_VAR` (``WMRL_TASK_SECRET``), any non-empty
   string. :data:`REFERENCE_SECRET` (``"wmrl-reference"``) is the documented reference value:
   the shipped ``leaderboards.json``, the test suite and the committed benchmark tables use it,
   so their figures are reproducible. Its data are public by construction — use it to
   reproduce, never to train an agent that could have read this file;
2. the secret file :func:`secret_path` (``$WMRL_HOME/task_secret``, else
   ``$XDG_DATA_HOME/wmrl/task_secret``, else ``~/.local/share/wmrl/task_secret``), created on
   first use with 32 random bytes from :mod:`secrets` (64 hex characters), mode ``0600``, in a
   folder of mode ``0700``. It lives outside every job folder and is hidden from the sandboxes.

Nothing here writes the secret itself anywhere else: caches derived from it (the leaderboards
of a non-reference secret) are keyed by :func:`secret_fingerprint`, a one-way hash.

Contents:
    * :data:`SECRET_ENV_VAR`, :data:`HOME_ENV_VAR`, :data:`REFERENCE_SECRET` — the knobs.
    * :func:`secret_dir`, :func:`secret_path` — where the secret file lives.
    * :func:`task_secret` — the active secret (bytes), creating the file if needed.
    * :func:`is_reference_secret`, :func:`secret_fingerprint` — which secret is active.
    * :func:`derive_seed` — the data seed of one task under a secret.
    * :func:`sandbox_hidden_paths` — host paths an isolating sandbox must hide.
"""

from __future__ import annotations

import glob
import hashlib
import hmac
import os
import secrets
import stat
import warnings
from pathlib import Path

__all__ = [
    "SECRET_ENV_VAR",
    "HOME_ENV_VAR",
    "REFERENCE_SECRET",
    "SECRET_FILE_NAME",
    "secret_dir",
    "secret_path",
    "task_secret",
    "is_reference_secret",
    "secret_fingerprint",
    "derive_seed",
    "sandbox_hidden_paths",
]

SECRET_ENV_VAR = "WMRL_TASK_SECRET"
"""Environment variable that overrides the secret file (any non-empty string)."""

HOME_ENV_VAR = "WMRL_HOME"
"""Environment variable naming the folder of the secret file (and of the caches derived from it)."""

REFERENCE_SECRET = "wmrl-reference"
"""The documented reference secret: ``WMRL_TASK_SECRET=wmrl-reference`` reproduces the shipped
leaderboards, the tests' pinned values and the committed benchmark tables. Its data are public."""

SECRET_FILE_NAME = "task_secret"
"""Name of the secret file inside :func:`secret_dir`."""

_SEED_CONTEXT = "wmrl-autoresearch/data-seed/v1"
_FINGERPRINT_CONTEXT = b"wmrl-autoresearch/secret-fingerprint/v1"


def secret_dir() -> Path:
    """The per-user folder of the secret file: ``$WMRL_HOME``, else ``$XDG_DATA_HOME/wmrl``, else
    ``~/.local/share/wmrl`` (the folder need not exist yet)."""
    home = os.environ.get(HOME_ENV_VAR)
    if home:
        return Path(home).expanduser().absolute()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg and os.path.isabs(os.path.expanduser(xdg)) else Path.home() / ".local" / "share"
    return (base / "wmrl").absolute()


def secret_path() -> Path:
    """Path of the secret file, ``secret_dir() / "task_secret"``."""
    return secret_dir() / SECRET_FILE_NAME


def _read_or_create(path: Path) -> bytes:
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        value = secrets.token_hex(32)
        # Write a private temporary file, then link it into place: the secret file appears
        # complete or not at all, and of two processes creating it at once one wins.
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(value + "\n")
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:  # another process created it meanwhile: use theirs
                return _read_or_create(path)
        finally:
            tmp.unlink(missing_ok=True)
        return value.encode("ascii")
    except UnicodeDecodeError:
        raise ValueError(
            f"the task secret file {path} is not ASCII text; delete it to create a new one "
            f"(the tasks' data and leaderboards then change) or set {SECRET_ENV_VAR}"
        ) from None
    if not text:
        raise ValueError(
            f"the task secret file {path} is empty; delete it to create a new one or set {SECRET_ENV_VAR}"
        )
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        warnings.warn(
            f"the task secret file {path} is readable by other users (mode {mode:o}); "
            f"run `chmod 600 {path}`",
            stacklevel=3,
        )
    return text.encode("ascii")


def task_secret() -> bytes:
    """The active task secret (bytes; never pass it to a sandbox or write it to a log).

    :data:`SECRET_ENV_VAR` when set, else the contents of :func:`secret_path`, which is created
    (32 random bytes as 64 hex characters, mode ``0600``) when missing.

    Raises:
        ValueError: :data:`SECRET_ENV_VAR` is set but empty, or the secret file is empty or not
            ASCII text (the message says how to fix it).
        OSError: the secret folder cannot be created or the file cannot be read.
    """
    value = os.environ.get(SECRET_ENV_VAR)
    if value is not None:
        if not value:
            raise ValueError(
                f"{SECRET_ENV_VAR} is set but empty: unset it to use this installation's secret "
                f"file ({secret_path()}), or set it to a non-empty string (the reference value "
                f"{REFERENCE_SECRET!r} reproduces the shipped leaderboards)"
            )
        return value.encode("utf-8")
    return _read_or_create(secret_path())


def is_reference_secret(secret: bytes | None = None) -> bool:
    """Whether ``secret`` (default: the active one) is :data:`REFERENCE_SECRET`."""
    key = task_secret() if secret is None else secret
    return hmac.compare_digest(key, REFERENCE_SECRET.encode("utf-8"))


def secret_fingerprint(secret: bytes | None = None) -> str:
    """A one-way name of a secret (16 hex characters), for cache keys and file names.

    Args:
        secret: the secret bytes (default: the active one).

    Returns:
        The first 16 hex digits of ``SHA-256(context || secret)``; it does not reveal a
        high-entropy secret (a guessable override string can be tried against it, like against
        the data themselves).
    """
    key = task_secret() if secret is None else secret
    return hashlib.sha256(_FINGERPRINT_CONTEXT + b"\0" + key).hexdigest()[:16]


def derive_seed(task_id: str, data_seed: int, secret: bytes | None = None) -> int:
    """The data seed of one task under a secret.

    Args:
        task_id: the task id.
        data_seed: the task's public number (:attr:`TaskSpec.data_seed`).
        secret: the secret bytes (default: the active one).

    Returns:
        A non-negative int below ``2**256`` (``HMAC-SHA256`` of the task under the secret),
        for ``numpy.random.SeedSequence``; from a space too large to search.
    """
    key = task_secret() if secret is None else secret
    msg = f"{_SEED_CONTEXT}/{task_id}/{int(data_seed)}".encode("utf-8")
    return int.from_bytes(hmac.new(key, msg, hashlib.sha256).digest(), "big")


def sandbox_hidden_paths() -> list[str]:
    """Host paths an isolating sandbox must hide from the programs it runs.

    * the folder of the secret file (:func:`secret_dir`); the file is created first (unless
      :data:`SECRET_ENV_VAR` overrides it, when the folder alone is created, if it can be), so that
      the folder exists to be hidden;
    * the sandboxes' own defaults (:func:`wmrl_envs.sandbox.base.default_hidden_paths`: this
      project's installed files, which a ``hidden_paths`` list would otherwise replace) and
      the imported ``wmrl_envs`` package (the task generators and leaderboards);
    * every copy of scikit-learn's bundled data sets (``sklearn/datasets/data``: the digits
      images the digits tasks are built from) that the sandbox's Python could reach: the one
      this interpreter imports, those in its site-packages folders, and those in the
      site-/dist-packages of the base installation, ``/usr`` and ``/usr/local`` (the
      sandboxes bind these read-only).

    Returns:
        Absolute paths (str) that exist, without duplicates, in a stable order.

    Raises:
        ValueError, OSError: from :func:`task_secret` (a misconfigured secret).
    """
    import site
    import sys

    from wmrl_envs.sandbox.base import default_hidden_paths

    task_secret()
    # The folder is hidden even when SECRET_ENV_VAR supplies the secret and no file was created:
    # a path that does not exist when the sandbox is built cannot be hidden, and a later run
    # without the variable (or a test) writes this installation's secret file there.
    try:
        secret_dir().mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:  # a read-only home: no secret file can be written there later either
        pass
    found: list[str] = [str(secret_dir()), *default_hidden_paths()]  # the latter holds the wmrl_envs folder
    roots = list(site.getsitepackages()) + [site.getusersitepackages()] + list(sys.path)
    # The sandboxes bind the base installation and /usr too (not only the venv): a scikit-learn
    # installed there (pyenv/conda base, /usr/local, Debian's python3-sklearn) must be hidden
    # as well, though this interpreter never imports it.
    for prefix in dict.fromkeys([sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, "/usr", "/usr/local"]):
        for pattern in ("lib*/python3*/site-packages", "lib*/python3*/dist-packages", "lib*/python3/dist-packages"):
            roots.extend(sorted(glob.glob(os.path.join(prefix, pattern))))
    try:
        import sklearn

        roots.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(sklearn.__file__))))
    except ImportError:  # pragma: no cover - scikit-learn is a dependency
        pass
    for root in roots:
        if not root:
            continue
        for sub in (("sklearn", "datasets", "data"), ("wmrl_envs",)):
            p = os.path.join(os.path.abspath(root), *sub)
            if os.path.isdir(p):
                found.append(p)
    out: list[str] = []
    for p in found:
        for q in (p, os.path.realpath(p)):
            if q not in out and os.path.exists(q):
                out.append(q)
    return out
