#!/usr/bin/env bash
# Build eo's JVM writer (jvm/writer/src: binary COPY writer tasks over Spark's internal rows)
# into eo-writer.jar, with the PostgreSQL JDBC driver it uses beside it, in
#   $EO_CACHE/jars/eo-writer-<key>/    (key: sources, pinned versions, PySpark; see
#                                      eo_jobs.runtime.packages.writer_folder)
# or in OUT when given (the job image, which points $EO_WRITER_JARS at it).
# It compiles with the Eclipse compiler (ECJ, from Maven Central), which runs on a Java runtime:
# no JDK needed. A stamped folder is not touched again, so a second run does nothing.
# Usage: scripts/build-writer.sh [OUT]    (after scripts/fetch-jars.sh, which fetches pgJDBC)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EO_CACHE="${EO_CACHE:-$HOME/.cache/eo}"
TOOLS="$ROOT/tools/jars"
PYTHON="$ROOT/.venv/bin/python"
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

die() { printf 'build-writer: %s\n' "$*" >&2; exit 1; }
say() { printf 'build-writer: %s\n' "$*"; }
prop() { sed -n "s/^$1=//p" "$TOOLS/versions.properties"; }

[[ -x "$PYTHON" ]] || die "no virtualenv at $PYTHON: run ./dev setup first"
command -v java >/dev/null || die "no java on PATH (a Java 17+ runtime is needed)"
out="${1:-}"
if [[ -z "$out" ]]; then
  out="$("$PYTHON" -c 'from eo_jobs.runtime.packages import writer_folder; print(writer_folder())')"
fi
if [[ -f "$out/.complete" ]]; then
  say "up to date: $out"
  exit 0
fi
ecj_version="$(prop ecj.version)"
pgjdbc_version="$(prop postgresql.jdbc.version)"
[[ -n "$ecj_version" && -n "$pgjdbc_version" ]] || die "ecj.version or postgresql.jdbc.version" \
  "missing from $TOOLS/versions.properties"
pgjdbc="$EO_CACHE/jars/postgresql-jdbc-$pgjdbc_version/postgresql-$pgjdbc_version.jar"
[[ -f "$pgjdbc" ]] || die "no $pgjdbc: run scripts/fetch-jars.sh first"

ecj_dir="$EO_CACHE/jars/ecj-$ecj_version"
if [[ ! -f "$ecj_dir/.complete" ]]; then
  command -v mvn >/dev/null || die "Maven (mvn) is not installed (it fetches the compiler, ECJ)"
  say "fetching the Eclipse compiler org.eclipse.jdt:ecj:$ecj_version"
  tmp="$(mktemp -d "$EO_CACHE/jars/.ecj.XXXXXX")"
  scratch+=("$tmp")
  mvn -B -q -ntp dependency:copy "-Dartifact=org.eclipse.jdt:ecj:$ecj_version" \
    -DoutputDirectory="$tmp" >"$tmp/maven.log" 2>&1 || { cat "$tmp/maven.log" >&2; die "maven failed"; }
  rm -f "$tmp/maven.log"
  touch "$tmp/.complete"
  rm -rf "$ecj_dir"
  mv "$tmp" "$ecj_dir"
fi

pyspark_jars="$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
classpath="$(find "$pyspark_jars" -maxdepth 1 -name '*.jar' | sort | tr '\n' ':')$pgjdbc"
mkdir -p "$(dirname "$out")"
build="$(mktemp -d "$(dirname "$out")/.eo-writer.XXXXXX")"
scratch+=("$build")
say "compiling jvm/writer into $out"
mapfile -t sources < <(find "$ROOT/jvm/writer/src" -name '*.java' | sort)
java -jar "$ecj_dir/ecj-$ecj_version.jar" -17 -encoding UTF-8 -warn:none -cp "$classpath" \
  -d "$build/classes" "${sources[@]}"
# A jar is a zip: Python's zipfile makes it, since a Java runtime has no jar tool.
(cd "$build/classes" && "$PYTHON" -m zipfile -c "$build/eo-writer.jar" dev)
rm -rf "$build/classes"
cp "$pgjdbc" "$build/"
chmod 0755 "$build"
touch "$build/.complete"
rm -rf "$out"
mv "$build" "$out"
say "built $out"
