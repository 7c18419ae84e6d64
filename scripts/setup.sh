#!/usr/bin/env bash
# Idempotent setup: a virtualenv with the project and its dev tools, then every external
# tool the tests need (Maven jars, control-plane binaries, promtool), each cached by
# version under ${EO_CACHE:-~/.cache/eo}. `--minimal` stops after what `eo demo` needs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
minimal=0
[[ "${1:-}" == "--minimal" ]] && minimal=1
export EO_CACHE="${EO_CACHE:-$HOME/.cache/eo}"
mkdir -p "$EO_CACHE"

step() { printf '==> %s\n' "$*"; }

if [[ ! -x .venv/bin/python ]]; then
  step "creating virtualenv .venv"
  python3 -m venv .venv
fi
stamp=".venv/.eo-installed-$(sha256sum pyproject.toml | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  step "installing eo and its dependencies into .venv"
  .venv/bin/python -m pip install -q --upgrade pip
  if [[ $minimal == 1 ]]; then
    .venv/bin/python -m pip install -q -e ".[spark,embedded]"
  else
    .venv/bin/python -m pip install -q -e ".[dev]"
    rm -f .venv/.eo-installed-*
    touch "$stamp"
  fi
fi
[[ $minimal == 1 ]] && exit 0

for extra in scripts/fetch-jars.sh scripts/build-cluster-tools.sh scripts/install-promtool.sh; do
  if [[ -x "$extra" ]]; then
    step "running $extra"
    "$extra"
  fi
done
