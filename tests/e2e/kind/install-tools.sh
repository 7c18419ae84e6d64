#!/usr/bin/env bash
# Installs the kind, Helm and kubectl versions the kind end-to-end suite is pinned to, from
# their official release downloads, each checked against the SHA-256 published next to it.
# Cached by version under ${EO_CACHE:-~/.cache/eo}/e2e-tools/<tool>-<version>/, so a second
# run downloads nothing; ${EO_CACHE}/e2e-tools/bin links to the pinned versions and run.sh
# puts it first on PATH. kubectl stays within one minor version of kind's default node image
# (kind v0.33.0: kindest/node v1.37.0). Docker itself is not installed here.
set -euo pipefail

KIND_VERSION=v0.33.0
HELM_VERSION=v4.3.1
KUBECTL_VERSION=v1.37.2

CACHE="${EO_CACHE:-$HOME/.cache/eo}/e2e-tools"
BIN="$CACHE/bin"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) echo "install-tools.sh: unsupported OS $(uname -s)" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) echo "install-tools.sh: unsupported CPU $(uname -m)" >&2; exit 1 ;;
esac

sha256() {
  if command -v sha256sum >/dev/null; then
    sha256sum "$1" | cut -d' ' -f1
  else
    shasum -a 256 "$1" | cut -d' ' -f1
  fi
}

# fetch URL SUM_URL FILE: download URL to FILE and check it against the first word of SUM_URL.
fetch() {
  local url=$1 sum_url=$2 file=$3 want got
  curl --fail --silent --show-error --location --retry 3 --output "$file" "$url"
  want="$(curl --fail --silent --show-error --location --retry 3 "$sum_url" | cut -d' ' -f1)"
  got="$(sha256 "$file")"
  if [[ "$want" != "$got" ]]; then
    echo "install-tools.sh: checksum mismatch for $url (published $want, got $got)" >&2
    exit 1
  fi
}

# install TOOL VERSION: fill $CACHE/TOOL-VERSION/TOOL once, then link it from $BIN.
install() {
  local tool=$1 version=$2 dir="$CACHE/$1-$2"
  if [[ ! -x "$dir/$tool" ]]; then
    echo "==> installing $tool $version"
    local tmp="$TMP/$tool"
    mkdir -p "$tmp"
    case "$tool" in
      kind)
        local url="https://github.com/kubernetes-sigs/kind/releases/download/$version/kind-$os-$arch"
        fetch "$url" "$url.sha256sum" "$tmp/kind"
        ;;
      helm)
        local url="https://get.helm.sh/helm-$version-$os-$arch.tar.gz"
        fetch "$url" "$url.sha256sum" "$tmp/helm.tar.gz"
        tar -xzf "$tmp/helm.tar.gz" -C "$tmp" "$os-$arch/helm"
        mv "$tmp/$os-$arch/helm" "$tmp/helm"
        ;;
      kubectl)
        local url="https://dl.k8s.io/release/$version/bin/$os/$arch/kubectl"
        fetch "$url" "$url.sha256" "$tmp/kubectl"
        ;;
    esac
    chmod +x "$tmp/$tool"
    mkdir -p "$dir"
    mv "$tmp/$tool" "$dir/$tool"
  fi
  mkdir -p "$BIN"
  ln -sfn "$dir/$tool" "$BIN/$tool"
}

install kind "$KIND_VERSION"
install helm "$HELM_VERSION"
install kubectl "$KUBECTL_VERSION"
echo "==> $BIN: kind $KIND_VERSION, helm $HELM_VERSION, kubectl $KUBECTL_VERSION"
