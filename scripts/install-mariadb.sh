#!/usr/bin/env bash
# Unpacks a MariaDB server from Debian's packages into ${EO_CACHE:-~/.cache/eo}/mariadb/<version>
# for the MySQL sink's tests: no system-wide install, no root. `apt-get download` fetches the
# .deb files into a scratch folder (any user may do that when the machine has package lists;
# without lists it keeps private ones under the cache), `dpkg -x` unpacks them. Cached: a
# second run only prints the version. tests/support/mariadb.py starts `usr/sbin/mariadbd`
# from there with LD_LIBRARY_PATH set to the unpacked libraries (the folders in `libdirs`).
#
# Packages: mariadb-server-core (mariadbd, mariadb-install-db, the system tables' SQL),
# mariadb-client-core (the `mariadb` client, my_print_defaults which the install script
# calls), and those of their lib* dependencies this machine lacks (on Debian 12: libaio1,
# liburing2). mariadb-server itself (galera, perl tools, plugins) is not needed to run one
# server. Debian serves one version per suite (bookworm: 10.11.x); the cache is keyed by it.
set -euo pipefail
# shellcheck source=scripts/lib/progress.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/progress.sh"

base="${EO_CACHE:-$HOME/.cache/eo}/mariadb"
PACKAGES=(mariadb-server-core mariadb-client-core)
say() { printf 'install-mariadb: %s\n' "$*"; }
die() { printf 'install-mariadb: %s\n' "$*" >&2; exit 1; }

# libpath DIR: the unpacked library folders of an installation, for LD_LIBRARY_PATH.
libpath() {
  local dir=$1 rel out=""
  while read -r rel; do out+="${out:+:}$dir/$rel"; done <"$dir/libdirs"
  printf '%s' "$out"
}

# runs DIR: the installation's server starts far enough to print its version here.
runs() {
  LD_LIBRARY_PATH="$(libpath "$1")" "$1/root/usr/sbin/mariadbd" --version 2>/dev/null
}

shopt -s nullglob
for stamp in "$base"/*/.complete; do
  dir="$(dirname "$stamp")"
  if runs "$dir" >/dev/null; then
    say "$(cat "$dir/VERSION") in $dir"
    exit 0
  fi
done

command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null \
  || die "needs Debian's apt-get and dpkg-deb (a Debian or Ubuntu machine); elsewhere set" \
    "EO_MARIADB_HOME to a folder holding usr/sbin/mariadbd and usr/bin/mariadb-install-db"

mkdir -p "$base"
work="$(mktemp -d)"
staging=""
trap 'rm -rf "$work" ${staging:+"$staging"}' EXIT
cd "$work"

apt_opts=()
if ! apt-cache show "${PACKAGES[0]}" >/dev/null 2>&1; then
  # No package lists (a fresh container): `apt-get update` of the system's lists needs root,
  # so keep private lists (about 25 MB) in the cache instead, which works for any user.
  private="$base/apt"
  mkdir -p "$private/lists/partial" "$private/cache/archives/partial"
  apt_opts=(-o "Dir::State::Lists=$private/lists" -o "Dir::Cache=$private/cache"
    -o Debug::NoLocking=1)
  with_progress "install-mariadb: apt-get update (package lists kept in $private)" "" \
    apt-get "${apt_opts[@]}" update
fi

say "downloading ${PACKAGES[*]} from Debian's packages (about 8 MB, once; cached afterwards)"
with_progress "install-mariadb: apt-get download" "" \
  apt-get "${apt_opts[@]}" download "${PACKAGES[@]}"

# The lib* dependencies (first alternative, version dropped) that dpkg does not list as
# installed here; libc6, libssl3 and the like are always installed and stay the system's.
needed=()
for deb in ./*.deb; do
  while read -r dep; do
    [[ "$dep" == lib* ]] || continue
    status="$(dpkg-query -W -f='${db:Status-Status}\n' "$dep" 2>/dev/null | head -n 1 || true)"
    [[ "$status" == installed ]] || needed+=("$dep")
  done < <(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*//; s/:any//; s/ //g')
done
if ((${#needed[@]})); then
  mapfile -t needed < <(printf '%s\n' "${needed[@]}" | sort -u)
  with_progress "install-mariadb: apt-get download ${needed[*]}" "" \
    apt-get "${apt_opts[@]}" download "${needed[@]}"
fi

version="$(dpkg-deb -f ./mariadb-server-core_*.deb Version)"
version="${version#*:}" # the epoch ("1:") is no part of a folder name
download_kb="$(du -ck ./*.deb | tail -n 1 | cut -f1)"
staging="$base/.$version.partial.$$"
rm -rf "$staging"
mkdir -p "$staging/root"
for deb in ./*.deb; do
  dpkg-deb -x "$deb" "$staging/root"
done
(cd "$staging" && find root -name 'lib*.so*' -path '*/lib/*' -printf '%h\n' | sort -u) \
  >"$staging/libdirs"
missing="$(LD_LIBRARY_PATH="$(libpath "$staging")" ldd "$staging/root/usr/sbin/mariadbd" \
  "$staging/root/usr/bin/mariadb" "$staging/root/usr/bin/my_print_defaults" \
  | grep 'not found' || true)"
if [[ -n "$missing" ]]; then
  die "the unpacked server lacks libraries this machine does not have:"$'\n'"$missing"
fi
runs "$staging" >/dev/null || die "the unpacked mariadbd does not run (see above)"
printf '%s\n' "$version" >"$staging/VERSION"
touch "$staging/.complete"
rm -rf "${base:?}/$version"
mv "$staging" "$base/$version"
staging=""
say "$version in $base/$version (downloaded $((download_kb / 1024)) MB," \
  "unpacked $(du -sm "$base/$version" | cut -f1) MB)"
