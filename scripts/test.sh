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

echo "==> pytest"
set +e
"$PY" -m pytest -n "${EO_TEST_WORKERS:-2}" --dist loadgroup "$@"
code=$?
set -e
if [[ $code -eq 5 ]]; then
  echo "pytest collected no tests: failing on purpose" >&2
  exit 1
fi
exit $code
