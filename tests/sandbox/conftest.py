"""Fixtures of the sandbox tests: each isolating backend, every backend (the resource-limit
tests; ``subprocess`` must warn when built), a fresh job folder and a root-only hidden file."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from wmrl_envs.sandbox import Sandbox

from sandbox_helpers import _make_isolating, _make_unsafe


@pytest.fixture(scope="module", params=["bubblewrap", "docker"])
def isolating(request) -> Sandbox:
    sb = _make_isolating(request.param)
    yield sb
    sb.close()



@pytest.fixture(scope="module", params=["bubblewrap", "docker", "subprocess"])
def any_sandbox(request) -> Sandbox:
    """Every backend, for the resource-limit tests (subprocess must warn when built)."""
    sb = _make_unsafe() if request.param == "subprocess" else _make_isolating(request.param)
    yield sb
    sb.close()


@pytest.fixture
def job(tmp_path: Path) -> Path:
    d = tmp_path / "job"
    d.mkdir()
    return d


@pytest.fixture
def root_secret():
    """A hidden-labels file in /root (mode 700 on the host), when we may create one."""
    if os.geteuid() != 0 or not os.access("/root", os.W_OK):
        yield None
        return
    d = Path("/root") / f".wmrl_test_hidden_{uuid.uuid4().hex}"
    d.mkdir()
    f = d / "labels.csv"
    f.write_text("id,label\n1,SECRET-ROOT-LABEL\n")
    yield f
    f.unlink(missing_ok=True)
    d.rmdir()
