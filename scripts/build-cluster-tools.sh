#!/usr/bin/env bash
# Builds the real control-plane binaries the cluster tests run as plain processes:
# kube-apiserver and kube-controller-manager from k8s.io/kubernetes, and etcd, all from the
# Go modules pinned in tools/cluster (no Docker, no prebuilt downloads: only the Go module
# proxy is reachable). Output goes to ${EO_CACHE}/cluster-tools/<k8s-version>/bin; a stamp
# naming both versions makes a second run a no-op, and a version bump builds afresh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/tools/cluster"
export EO_CACHE="${EO_CACHE:-$HOME/.cache/eo}"
# The pinned modules need nothing newer than the installed toolchain; never fetch another.
export GOTOOLCHAIN=local
export GOFLAGS=-mod=mod
# Two cores: two compile jobs, and the linker of a 150 MB binary needs no more threads.
export GOMAXPROCS="${GOMAXPROCS:-2}"
JOBS="${EO_BUILD_JOBS:-2}"
# shellcheck source=scripts/lib/progress.sh
source "$ROOT/scripts/lib/progress.sh"

command -v go >/dev/null || { echo "error: 'go' is not on PATH; install Go >= 1.26" >&2; exit 1; }

module_version() { # <module dir> <module path>
  (cd "$1" && go list -m -f '{{.Version}}' "$2")
}
k8s_version="$(module_version "$TOOLS" k8s.io/kubernetes)"
etcd_version="$(module_version "$TOOLS/etcd" go.etcd.io/etcd/server/v3)"
bin="$EO_CACHE/cluster-tools/$k8s_version/bin"
stamp="$bin/.built"
# v2: the binaries carry their real version (the apiserver reports it in /version, which
# Helm's kubeVersion checks read); without the -X flags they say v0.0.0-master.
want="v2 kubernetes=$k8s_version etcd=$etcd_version"
minor="${k8s_version#v1.}"; minor="${minor%%.*}"
version_flags="-X k8s.io/component-base/version.gitVersion=$k8s_version \
-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/component-base/version.gitTreeState=clean \
-X k8s.io/client-go/pkg/version.gitVersion=$k8s_version \
-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$minor"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] \
  && [[ -x "$bin/kube-apiserver" && -x "$bin/kube-controller-manager" && -x "$bin/etcd" ]]; then
  echo "cluster tools cached ($want) in $bin"
  exit 0
fi

mkdir -p "$bin"
rm -f "$stamp"
build() { # <module dir> <package> <output name> [extra ldflags]
  # -v prints each package as it is compiled (and go: downloading lines): the progress count.
  (cd "$1" && with_progress "building $3 from $2" "packages compiled or modules fetched" \
    go build -v -p "$JOBS" -trimpath -ldflags="-s -w ${4:-}" -o "$bin/$3" "$2")
}
total=$SECONDS
echo "building the cluster tools once (cached afterwards): etcd, kube-apiserver and" \
  "kube-controller-manager; a cold build takes tens of minutes on 2 cores"
build "$TOOLS/etcd" go.etcd.io/etcd/server/v3 etcd
build "$TOOLS" k8s.io/kubernetes/cmd/kube-apiserver kube-apiserver "$version_flags"
build "$TOOLS" k8s.io/kubernetes/cmd/kube-controller-manager kube-controller-manager "$version_flags"
echo "$want" >"$stamp"
echo "cluster tools ($want) built in $((SECONDS - total)) s: $(du -sh "$bin" | cut -f1) in $bin"
