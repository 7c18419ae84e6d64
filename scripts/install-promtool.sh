#!/usr/bin/env bash
# Builds promtool and prometheus from source through the Go module proxy (no root, no prebuilt
# download) into ${EO_CACHE:-~/.cache/eo}/prometheus/<version>/bin. Cached by version: a second
# run only prints the version. The alert-rule tests run promtool from there.
#
# Why a throwaway wrapper module instead of `go install ...@version`: Prometheus' go.mod has
# replace directives, which `go install pkg@version` refuses; the wrapper copies them.
# cmd/prometheus is built without the `builtinassets` tag: the server and its API work, the
# web UI's compiled assets (an npm build) are not embedded.
# Both are built with `-tags remove_all_sd` (Prometheus' own switch, plugins/plugin_*.go): the
# plugins package then registers none of its ~25 service-discovery plugins, so the build skips
# their cloud SDKs (AWS EC2/ECS/RDS/..., Azure compute and network, GCE compute, OpenStack,
# Docker, Scaleway, ...): 1,474 -> 1,259 packages, and the slowest ones to compile. Every config
# here uses static_configs (no *_sd_configs anywhere); promtool imports discovery/kubernetes
# itself, so its `check service-discovery` keeps Kubernetes. The cache path stays as it was: a
# binary built before, with every plugin, accepts everything the new one does, so a cached old
# build serves the tests just as well and need not be rebuilt.
set -euo pipefail
# Two cores: two compile jobs, as scripts/build-cluster-tools.sh.
export GOMAXPROCS="${GOMAXPROCS:-2}"
# shellcheck source=scripts/lib/progress.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/progress.sh"

PROMETHEUS_VERSION="${EO_PROMETHEUS_VERSION:-3.13.5}"
IFS=. read -r major minor patch <<<"$PROMETHEUS_VERSION"
if [[ "$major" != 3 ]]; then
  echo "install-promtool: only Prometheus 3.x is supported, got $PROMETHEUS_VERSION" >&2
  exit 2
fi
# Prometheus 3.m.p is published as the Go module version v0.(300+m).p.
module_version="v0.$((300 + minor)).$patch"
cache="${EO_CACHE:-$HOME/.cache/eo}/prometheus/$PROMETHEUS_VERSION"

if [[ -x "$cache/bin/promtool" && -x "$cache/bin/prometheus" ]]; then
  "$cache/bin/promtool" --version | head -n 1
  exit 0
fi

if ! command -v go >/dev/null; then
  echo "install-promtool: Go is needed to build promtool (https://go.dev/doc/install)" >&2
  exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

echo "install-promtool: building promtool and prometheus $PROMETHEUS_VERSION ($module_version)" \
  "once (cached afterwards); a cold build takes several minutes"
with_progress "install-promtool: downloading github.com/prometheus/prometheus@$module_version" "" \
  go mod download -json "github.com/prometheus/prometheus@$module_version"
upstream_mod="$(go mod download -json "github.com/prometheus/prometheus@$module_version" \
  | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
{
  echo "module eo.local/prometheus-build"
  echo
  echo "go 1.24"
  echo
  echo "require github.com/prometheus/prometheus $module_version"
  echo
  # Single-line and block replace directives, copied verbatim.
  awk '/^replace \(/ {block=1} block {print} block && /^\)/ {block=0; next}
       /^replace [^(]/ {print}' "$upstream_mod"
} >go.mod
cat >tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
EOF
with_progress "install-promtool: resolving modules (go mod tidy)" "modules fetched" go mod tidy
mkdir -p bin
with_progress "install-promtool: go build" "packages compiled or modules fetched" \
  go build -v -trimpath -tags remove_all_sd -o bin/ \
  -ldflags "-s -w -X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION" \
  github.com/prometheus/prometheus/cmd/promtool \
  github.com/prometheus/prometheus/cmd/prometheus

mkdir -p "$(dirname "$cache")"
rm -rf "$cache.partial"
mkdir -p "$cache.partial"
mv bin "$cache.partial/bin"
rm -rf "$cache"
mv "$cache.partial" "$cache"
"$cache/bin/promtool" --version | head -n 1
