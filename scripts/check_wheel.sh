#!/usr/bin/env bash
# The wheel as a user installs it: build it, install it with constraints.txt into a fresh venv in
# a temporary folder, and from another folder outside the checkout run the planted quick run and
# the gemma3 dry run. Fails when either fails, or when locos_bench (or its built-in tasks) is
# read from the checkout instead of the wheel. Used by .ci/run; needs scripts/setup.sh's .venv.
#
# uv installs from its cache (torch from the same local wheel folders setup.sh hands it), and
# links rather than copies, so the fresh venv costs seconds; nothing is compiled ahead (the first
# run writes the bytecode caches the second reads).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/uv ] || { echo "check_wheel: needs .venv/bin/uv (scripts/setup.sh installs it unless LOCOS_INSTALLER=pip)" >&2; exit 1; }
tmp="$(mktemp -d)" && trap 'rm -rf "$tmp"' EXIT
links=()
for dir in ${PIP_FIND_LINKS:-$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)}; do
  links+=(--find-links "$dir")
done
# setuptools builds in ./build and reuses it: a module deleted since would slip into the wheel.
rm -rf build && .venv/bin/uv build -q --wheel -o "$tmp/dist" . && rm -rf build
.venv/bin/uv venv -q --python .venv/bin/python "$tmp/venv"
.venv/bin/uv pip install -q --python "$tmp/venv/bin/python" "${links[@]}" -c constraints.txt "$tmp"/dist/*.whl

mkdir "$tmp/work" && cd "$tmp/work"
unset PYTHONPATH LOCOS_BENCH_TASKS_DIR PYTHONDONTWRITEBYTECODE
read -r package tasks < <("$tmp/venv/bin/python" -c \
  'import locos_bench.tasks as t; print(t.__file__, t.BUILTIN_TASKS_DIR)')
for path in "$package" "$tasks"; do
  [[ "$path" == "$tmp/venv/"* ]] || { echo "check_wheel: $path is not the wheel's (in $tmp/venv)" >&2; exit 1; }
done
echo "check_wheel: locos_bench from $package"
"$tmp/venv/bin/locos-bench" run --model planted --preset quick
"$tmp/venv/bin/locos-bench" run --detector all --model gemma3 --dry-run
