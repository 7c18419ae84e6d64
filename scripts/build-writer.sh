#!/usr/bin/env bash
# Build eo's JVM writer (the Maven module jvm/writer: writer tasks over Spark's internal rows,
# PostgreSQL's by binary COPY, MySQL's/MariaDB's by INSERTs in XA branches) into eo-writer.jar,
# with the JDBC drivers it uses beside it (pgJDBC, MariaDB Connector/J: the session puts every
# jar of the folder on Spark's class path), in
#   $EO_CACHE/jars/eo-writer-<key>/    (key: sources, pom, pinned versions, PySpark; see
#                                      eo_jobs.runtime.packages.writer_folder)
# or in OUT when given (the job image, which points $EO_WRITER_JARS at it).
# Maven compiles it with the Eclipse compiler (ECJ, through maven-compiler-plugin), which runs on
# a Java runtime: no JDK needed. It compiles against the jars PySpark ships and the JDBC driver
# jars fetch-jars.sh fetched (passed as -Deo.classpath), so nothing of Spark comes from Maven
# Central. Connector/J is LGPL-2.1: its unmodified jar ships beside eo's (docs/mysql.md).
# Maven runs offline first (everything in ~/.m2 already), online only when that fails.
# A stamped folder is not touched again, so a second run does nothing.
# Usage: scripts/build-writer.sh [OUT]    (after scripts/fetch-jars.sh, which fetches the drivers)
#        scripts/build-writer.sh --test DIR
#                                         runs the module's JUnit tests, building in DIR (its
#                                         surefire-reports/ has the results); builds no jar
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
command -v mvn >/dev/null || die "Maven (mvn) is not installed (it builds jvm/writer)"
test_dir=""
out=""
if [[ "${1:-}" == "--test" ]]; then
  [[ -n "${2:-}" ]] || die "--test needs the folder to build in"
  mkdir -p "$2"
  test_dir="$(cd "$2" && pwd)"
else
  out="${1:-}"
  if [[ -z "$out" ]]; then
    out="$("$PYTHON" -c 'from eo_jobs.runtime.packages import writer_folder; print(writer_folder())')"
  fi
  if [[ -f "$out/.complete" ]]; then
    say "up to date: $out"
    exit 0
  fi
fi
ecj_version="$(prop ecj.version)"
pgjdbc_version="$(prop postgresql.jdbc.version)"
mariadb_version="$(prop mariadb.jdbc.version)"
[[ -n "$ecj_version" && -n "$pgjdbc_version" && -n "$mariadb_version" ]] || die "ecj.version," \
  "postgresql.jdbc.version or mariadb.jdbc.version missing from $TOOLS/versions.properties"
pgjdbc="$EO_CACHE/jars/postgresql-jdbc-$pgjdbc_version/postgresql-$pgjdbc_version.jar"
[[ -f "$pgjdbc" ]] || die "no $pgjdbc: run scripts/fetch-jars.sh first"
mariadb="$EO_CACHE/jars/mariadb-jdbc-$mariadb_version/mariadb-java-client-$mariadb_version.jar"
[[ -f "$mariadb" ]] || die "no $mariadb: run scripts/fetch-jars.sh first"
pyspark_jars="$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
classpath="$(find "$pyspark_jars" -maxdepth 1 -name '*.jar' | sort | tr '\n' ':')$pgjdbc:$mariadb"

# mvn GOAL BUILD_DIR: offline first, then online (a fresh ~/.m2 fetches the plugins, ECJ and
# JUnit once, a few MB).
maven() {
  local goal="$1" dir="$2" log="$2/maven.log"
  local args=(-B -ntp -f "$ROOT/jvm/writer/pom.xml" "-Deo.build.dir=$dir/target"
    "-Deo.classpath=$classpath" "-Deo.test.classpath=${classpath//:/,}"
    "-Decj.version=$ecj_version")
  [[ -n "$test_dir" ]] || args+=(-q -DskipTests)
  if mvn -o "${args[@]}" "$goal" >"$log" 2>&1; then
    return 0
  fi
  if grep -q "COMPILATION ERROR\|There are test failures\|There are test errors" "$log"; then
    cat "$log" >&2
    return 1
  fi
  say "not everything Maven needs is in ~/.m2 yet: fetching it"
  mvn "${args[@]}" "$goal" >"$log" 2>&1 || { cat "$log" >&2; return 1; }
}

if [[ -n "$test_dir" ]]; then
  say "testing jvm/writer in $test_dir"
  maven test "$test_dir" || die "the JUnit tests of jvm/writer failed"
  grep -h "Tests run:" "$test_dir/maven.log" | tail -1
  exit 0
fi

mkdir -p "$(dirname "$out")"
build="$(mktemp -d "$(dirname "$out")/.eo-writer.XXXXXX")"
scratch+=("$build")
say "building jvm/writer into $out"
maven package "$build" || die "maven failed"
mv "$build/target/eo-writer.jar" "$build/"
rm -rf "$build/target" "$build/maven.log"
cp "$pgjdbc" "$mariadb" "$build/"
chmod 0755 "$build"
touch "$build/.complete"
rm -rf "$out"
mv "$build" "$out"
say "built $out"
