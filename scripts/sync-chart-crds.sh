#!/usr/bin/env bash
# Refresh the generated and copied files inside the Helm chart (tests/chart checks they match):
#   crds/exactlyoncepipelines.eo.dev.yaml      -> charts/eo/crds/  (output of `eo crd`)
#   monitoring/grafana/eo-pipelines.json       -> charts/eo/files/ (dashboard ConfigMap)
# The alert files in charts/eo/files/ are written by scripts/generate_monitoring.py instead.
# Usage: scripts/sync-chart-crds.sh [CHART_DIR]   (default: charts/eo of this checkout)
# A missing monitoring source is reported and its stale copy removed; the chart then refuses to
# enable that feature with a message naming the file.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHART="${1:-$ROOT/charts/eo}"

say() { printf 'sync-chart-crds: %s\n' "$*"; }

[[ -f "$CHART/Chart.yaml" ]] || { say "no chart at $CHART" >&2; exit 1; }
[[ -f "$ROOT/crds/exactlyoncepipelines.eo.dev.yaml" ]] \
  || { say "crds/exactlyoncepipelines.eo.dev.yaml is missing: run \`eo crd > crds/exactlyoncepipelines.eo.dev.yaml\`" >&2; exit 1; }
mkdir -p "$CHART/crds" "$CHART/files"

# copy SRC DEST: copy only when the content differs, so a second run touches nothing.
copy() {
  if ! cmp -s "$1" "$2"; then
    cp "$1" "$2"
    say "updated ${2#"$CHART"/}"
  fi
}

# write DEST < CONTENT: same, for generated content.
write() {
  local tmp
  tmp="$(mktemp)"
  cat >"$tmp"
  if cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
  else
    mv "$tmp" "$1"
    chmod 644 "$1"
    say "updated ${1#"$CHART"/}"
  fi
}

copy "$ROOT/crds/exactlyoncepipelines.eo.dev.yaml" "$CHART/crds/exactlyoncepipelines.eo.dev.yaml"

for pair in grafana/eo-pipelines.json:eo-pipelines.json; do
  source="$ROOT/monitoring/${pair%%:*}" dest="$CHART/files/${pair##*:}"
  if [[ -f "$source" ]]; then
    copy "$source" "$dest"
  else
    say "monitoring/${pair%%:*} does not exist yet: the chart cannot enable it" >&2
    if [[ -e "$dest" ]]; then
      rm -f "$dest"
      say "removed stale ${dest#"$CHART"/}"
    fi
  fi
done
