#!/usr/bin/env bash
# The whole test suite: static checks, then every pytest suite (real PostgreSQL, Spark, Kafka,
# Kubernetes control plane, promtool), two workers in parallel. Extra args go to pytest.
# Pytest's exit code 5 ("no tests collected") is a failure here, never a silent pass.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export EO_CACHE="${EO_CACHE:-$HOME/.cache/eo}"
PY=.venv/bin/python

echo "==> ruff"
.venv/bin/ruff check jobs operator tests bench
.venv/bin/ruff format --check jobs operator tests bench
echo "==> mypy --strict"
.venv/bin/mypy
echo "==> import-linter"
PYTHONPATH=jobs:operator .venv/bin/lint-imports

# Busy and idle CPU time over the pytest run (/proc/stat's first line, in clock ticks), so a
# slow run tells whether more workers could help (idle cores) or only less work can (busy).
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8, $5+$6}' /proc/stat 2>/dev/null || echo "0 0"; }

echo "==> pytest"
read -r busy0 idle0 < <(cpu_ticks)
set +e
# --durations: every log names the 30 slowest setups, calls and teardowns, so a slow run says
# where the time went without a rerun. Extra args come last and can override it.
"$PY" -m pytest -n "${EO_TEST_WORKERS:-2}" --dist loadgroup --durations=30 "$@"
code=$?
set -e
read -r busy1 idle1 < <(cpu_ticks)
total=$(( (busy1 - busy0) + (idle1 - idle0) ))
if (( total > 0 )); then
  echo "==> pytest used $(( 100 * (busy1 - busy0) / total ))% of $(getconf _NPROCESSORS_ONLN) cores" \
    "(${EO_TEST_WORKERS:-2} workers; iowait counted idle)"
fi
if [[ $code -eq 5 ]]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit $code
