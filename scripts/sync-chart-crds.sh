#!/usr/bin/env bash
# Refresh the generated and copied files inside the Helm chart (tests/chart checks they match):
#   crds/exactlyoncepipelines.eo.dev.yaml      -> charts/eo/crds/  (output of `eo crd`)
#   kopf's peering CRDs (below)                -> charts/eo/crds/  (kopf ships no YAML)
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

# kopf's peering CRDs, as documented by kopf (docs.kopf.dev, "Peering"; the group is kopf.dev,
# the legacy zalando.org group is not installed). kopf keeps each peer's state in .status.
for scope in Cluster Namespaced; do
  if [[ $scope == Cluster ]]; then
    kind=ClusterKopfPeering plural=clusterkopfpeerings singular=clusterkopfpeering
  else
    kind=KopfPeering plural=kopfpeerings singular=kopfpeering
  fi
  write "$CHART/crds/$plural.kopf.dev.yaml" <<EOF
# kopf's peering CRD; written by scripts/sync-chart-crds.sh, do not edit.
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: $plural.kopf.dev
spec:
  scope: $scope
  group: kopf.dev
  names:
    kind: $kind
    plural: $plural
    singular: $singular
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            status:
              type: object
              x-kubernetes-preserve-unknown-fields: true
EOF
done

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
