#!/usr/bin/env bash
# Builds the two images of the Dockerfile without a Docker engine, with Debian's buildah
# (`--isolation chroot`: no daemon, no user namespaces, no runc/crun needed):
#   localhost/eo-operator:$EO_IMAGE_TAG   (target operator: kopf, no JVM, no Spark)
#   localhost/eo-job:$EO_IMAGE_TAG        (target job: PySpark, JRE 17, Kafka connector jars)
# Base images cannot be pulled from a registry here, so the Dockerfile's BASE_IMAGE is
# replaced by a local one built once from Debian packages: a debootstrap of the same Debian
# release as the pinned public base (python:X.Y.Z-slim-<release>), with the same Python minor
# version, committed as localhost/eo-base:<release>-py<X.Y>. It is cached by recipe: a second
# run finds it (label dev.eo.base-recipe) and builds nothing; a recipe bump rebuilds it. A copy
# is kept in $EO_CACHE/images (an OCI archive named by the recipe's hash), loaded when
# buildah's own storage (/var/lib/containers) does not have it.
# Target builds use buildah's layer cache and the Dockerfile's pip/Maven cache mounts, so an
# unchanged tree rebuilds in seconds and a code change reinstalls only the project layers.
#
#   scripts/build-images.sh [--base-only] [operator] [job]     (default: both targets)
#
# Environment: EO_IMAGE_TAG (default: local), EO_DEBIAN_MIRROR (default: deb.debian.org),
# EO_BUILDAH_STORAGE_DRIVER (overlay, or vfs where overlay does not mount),
# EO_BUILD_CA_DIR (default /usr/local/share/ca-certificates: the *.crt there, e.g. a proxy's
# CA, are trusted by the builder stages), EO_CACHE (debootstrap's package cache, the base's
# archive, the lock).
# Needs root (apt-get for buildah/debootstrap; chroot builds).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export EO_CACHE="${EO_CACHE:-$HOME/.cache/eo}"
TAG="${EO_IMAGE_TAG:-local}"
MIRROR="${EO_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Bump when the base's package list or clean-up changes: the cached base is then rebuilt.
BASE_RECIPE=2
CA_DIR="${EO_BUILD_CA_DIR:-/usr/local/share/ca-certificates}"
BASE_PACKAGES=python3,python3-venv,python-is-python3,ca-certificates,netbase,tzdata

say() { printf '==> [build-images %(%H:%M:%S)T] %s\n' -1 "$*"; }
die() { printf 'build-images: %s\n' "$*" >&2; exit 1; }

base_only=0
targets=()
for arg in "$@"; do
  case "$arg" in
    --base-only) base_only=1 ;;
    operator | job) targets+=("$arg") ;;
    *) die "unknown argument: $arg (usage: $0 [--base-only] [operator] [job])" ;;
  esac
done
# Buildah 1.28 builds every stage before the target, so `job` first: `operator` then reuses it.
[[ ${#targets[@]} -gt 0 ]] || targets=(job operator)

# The public base pinned in the Dockerfile tells which Debian release and Python minor to use.
public_base="$(sed -n 's/^ARG BASE_IMAGE=//p' "$ROOT/Dockerfile" | head -n 1)"
[[ "$public_base" =~ ^python:([0-9]+)\.([0-9]+)\.[0-9]+-slim-([a-z]+)$ ]] \
  || die "cannot read the Debian release and Python version from 'ARG BASE_IMAGE=$public_base'"
py_minor="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
release="${BASH_REMATCH[3]}"
BASE="localhost/eo-base:$release-py$py_minor"

ensure_tools() {
  local missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [[ ${#missing[@]} -eq 0 ]] && return
  [[ $(id -u) -eq 0 ]] || die "${missing[*]} missing and not root: apt-get install ${missing[*]}"
  say "installing ${missing[*]} from Debian's packages"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install --yes -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

ensure_tools
[[ $(id -u) -eq 0 ]] || die "chroot builds need root"
if [[ -n "${EO_BUILDAH_STORAGE_DRIVER:-}" ]]; then
  export STORAGE_DRIVER="$EO_BUILDAH_STORAGE_DRIVER"
fi
mkdir -p "$EO_CACHE/images"
# One build at a time on this machine (parallel test workers, several checkouts).
exec 9>"$EO_CACHE/images/.lock"
flock 9

image_label() { # <image> <label>: the label's value, empty when the image or label is absent
  buildah inspect --type image --format "{{index .OCIv1.Config.Labels \"$2\"}}" "$1" 2>/dev/null || true
}

build_base() {
  local want="recipe=$BASE_RECIPE release=$release python=$py_minor packages=$BASE_PACKAGES"
  # The base also lives in EO_CACHE as an OCI archive named by its recipe, like the other
  # cached tools: a machine whose buildah storage is new (CI) loads it instead of rebuilding.
  local archive="$EO_CACHE/images/eo-base-$release-py$py_minor" recipe_hash
  recipe_hash="$(sha256sum <<<"$want" | cut -c1-12)"
  archive="$archive-$recipe_hash.oci.tar"
  if [[ "$(image_label "$BASE" dev.eo.base-recipe)" == "$want" ]]; then
    say "base $BASE cached ($want)"
    [[ -f "$archive" ]] || save_base "$archive"
    return
  fi
  if [[ -f "$archive" ]]; then
    local id
    id="$(buildah pull --quiet "oci-archive:$archive")"
    buildah tag "$id" "$BASE"
    if [[ "$(image_label "$BASE" dev.eo.base-recipe)" == "$want" ]]; then
      say "base $BASE loaded from $archive ($want)"
      return
    fi
    say "$archive does not hold that recipe: building the base again"
    rm -f "$archive"
  fi
  local started=$SECONDS ctr mnt
  say "building base $BASE: debootstrap $release ($MIRROR) with $BASE_PACKAGES"
  ctr="$(buildah from scratch)"
  # shellcheck disable=SC2064  # the container name is fixed now
  trap "buildah rm '$ctr' >/dev/null 2>&1 || true" EXIT
  mnt="$(buildah mount "$ctr")"
  mkdir -p "$EO_CACHE/debootstrap/$release"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" \
    --cache-dir="$EO_CACHE/debootstrap/$release" "$release" "$mnt" "$MIRROR" \
    | grep --line-buffered -vE '^I: (Retrieving|Validating|Extracting|Unpacking|Configuring) ' \
    || true
  [[ -x "$mnt/usr/bin/python3" ]] || die "debootstrap did not install python3 (see above)"
  # The same suites as Debian's own images: security and point-release updates.
  cat >"$mnt/etc/apt/sources.list" <<EOF
deb $MIRROR $release main
deb $MIRROR $release-updates main
deb ${EO_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security} $release-security main
EOF
  # Like the official images: no recommends, no docs or man pages from later apt installs.
  printf 'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n' \
    >"$mnt/etc/apt/apt.conf.d/90eo-no-recommends"
  printf 'Acquire::Languages "none";\n' >"$mnt/etc/apt/apt.conf.d/90eo-no-translations"
  printf 'path-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\npath-exclude /usr/share/man/*/*\npath-exclude /usr/share/info/*\npath-exclude /usr/share/locale/*\n' \
    >"$mnt/etc/dpkg/dpkg.cfg.d/90eo-slim"
  say "base: apt-get upgrade from $release-updates and $release-security"
  buildah run --isolation chroot "$ctr" -- sh -ec '
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get upgrade --yes -qq >/dev/null
    apt-get clean
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/*.log /var/log/apt/* \
      /usr/share/doc/*/[!c]* /usr/share/info/* /usr/share/locale/*
    # Man pages go, their folders stay: update-alternatives (openjdk) links into man1.
    find /usr/share/man -type f -delete
    mkdir -p /usr/share/man/man1
    find /usr/lib/python3* -name __pycache__ -prune -exec rm -rf {} +'
  local version
  version="$(buildah run --isolation chroot "$ctr" -- python3 -c \
    'import sys; print("%d.%d" % sys.version_info[:2])')"
  [[ "$version" == "$py_minor" ]] \
    || die "Debian $release ships Python $version, the Dockerfile's base has $py_minor"
  buildah umount "$ctr" >/dev/null
  buildah config \
    --env LANG=C.UTF-8 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd python3 \
    --label "dev.eo.base-recipe=$want" \
    --label "dev.eo.base-of=$public_base" \
    "$ctr"
  buildah commit --quiet --rm "$ctr" "$BASE" >/dev/null
  trap - EXIT
  say "base $BASE built in $((SECONDS - started)) s (Python $version)"
  save_base "$archive"
}

save_base() { # <archive>: write $BASE there (whole, then renamed: never a half archive)
  rm -f "$1".partial.*
  buildah push --quiet "$BASE" "oci-archive:$1.partial.$$" >/dev/null
  mv "$1.partial.$$" "$1"
  say "base saved to $1 ($(du -h "$1" | cut -f1))"
}

build_target() { # <target>
  local target="$1" image="localhost/eo-$1:$TAG" started=$SECONDS
  say "building $image (Dockerfile target $target, BASE_IMAGE=$BASE)"
  local extra=()
  # A TLS-intercepting proxy's CA (as on these machines): trusted by the builder stages only.
  if compgen -G "$CA_DIR/*.crt" >/dev/null; then
    extra+=(--volume "$CA_DIR:/run/build-ca:ro")
  fi
  buildah bud --isolation chroot --layers --force-rm "${extra[@]}" \
    --build-arg "BASE_IMAGE=$BASE" \
    --target "$target" --tag "$image" \
    --file "$ROOT/Dockerfile" "$ROOT"
  say "$image built in $((SECONDS - started)) s"
}

build_base
if [[ $base_only == 0 ]]; then
  for target in "${targets[@]}"; do
    build_target "$target"
  done
fi
say "images:"
buildah images --format '{{.Name}}:{{.Tag}}  {{.Size}}' \
  | grep -E "^localhost/eo-(base:$release-py$py_minor|operator:$TAG|job:$TAG) " || true
