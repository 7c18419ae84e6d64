#!/usr/bin/env bash
# Installs moto's S3-compatible server (a maintained package from PyPI) into its own virtualenv
# at ${EO_CACHE:-~/.cache/eo}/moto/<version>, for the object-store checkpoint tests: no object
# store is reachable from CI. Cached by version: a second run only prints the version.
#
# Why not in the project's .venv: moto needs botocore, which pins python-dateutil below 3,
# while the kubernetes client needs 3 or later. A separate virtualenv keeps both intact; the
# tests start `<this venv>/bin/moto_server` as a child process and speak HTTP to it.
set -euo pipefail

MOTO_VERSION="${EO_MOTO_VERSION:-5.2.5}"
cache="${EO_CACHE:-$HOME/.cache/eo}/moto/$MOTO_VERSION"

# A virtualenv copied from elsewhere has scripts pointing at the old path: check it runs.
if [[ -f "$cache/.complete" ]] && "$cache/bin/python" -c 'import moto.server' 2>/dev/null \
  && head -n 1 "$cache/bin/moto_server" | grep -qF "$cache/bin/python"; then
  echo "moto $MOTO_VERSION in $cache"
  exit 0
fi

rm -rf "$cache"
mkdir -p "$(dirname "$cache")"
echo "install-s3-server: installing moto[server]==$MOTO_VERSION into $cache"
python3 -m venv "$cache"
"$cache/bin/python" -m pip install -q --disable-pip-version-check "moto[server]==$MOTO_VERSION"
touch "$cache/.complete"
echo "moto $MOTO_VERSION in $cache"
