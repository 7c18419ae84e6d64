#!/usr/bin/env bash
# Resolve, from Maven Central, the jars that PySpark does not ship:
#   $EO_CACHE/jars/spark-kafka-<pyspark version>/   Spark's Kafka connector + its own deps
#   $EO_CACHE/jars/kafka-broker-<kafka version>/    a Kafka broker (KRaft) for the tests
#   $EO_CACHE/jars/postgresql-jdbc-<version>/       the PostgreSQL JDBC driver (the JVM writer's,
#                                                   and the bench baseline's)
#   $EO_CACHE/jars/mariadb-jdbc-<version>/          MariaDB Connector/J (the JVM writer's MySQL
#                                                   tasks', and the bench baseline's; LGPL-2.1)
#   $EO_CACHE/jars/hadoop-aws-<hadoop version>/     Hadoop's S3A file system (s3a:// checkpoints)
# Each folder is written whole, then stamped with `.complete`; a stamped folder is not
# touched again, so a second run does nothing. The connector must match the installed
# PySpark exactly, so its version is read from the virtualenv, never pinned here.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EO_CACHE="${EO_CACHE:-$HOME/.cache/eo}"
JARS_DIR="$EO_CACHE/jars"
TOOLS="$ROOT/tools/jars"
PYTHON="$ROOT/.venv/bin/python"
MVN=(mvn -B -q -ntp)
# shellcheck source=scripts/lib/progress.sh
source "$ROOT/scripts/lib/progress.sh"
scratch=()
trap 'rm -rf "${scratch[@]}"' EXIT

die() { printf 'fetch-jars: %s\n' "$*" >&2; exit 1; }
say() { printf 'fetch-jars: %s\n' "$*"; }

# prop KEY: value of KEY in tools/jars/versions.properties (empty when absent).
prop() { sed -n "s/^$1=//p" "$TOOLS/versions.properties"; }

[[ -x "$PYTHON" ]] || die "no virtualenv at $PYTHON: run ./dev setup first"
command -v mvn >/dev/null || die "Maven (mvn) is not installed"
{ read -r spark_version; read -r pyspark_jars; } < <("$PYTHON" -c '
import os, pyspark
print(pyspark.__version__)
print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')
[[ -n "$spark_version" && -d "$pyspark_jars" ]] || die "cannot read the PySpark version from $PYTHON"
kafka_version="$(prop kafka.broker.version)"
[[ -n "$kafka_version" ]] || die "kafka.broker.version missing from $TOOLS/versions.properties"
pgjdbc_version="$(prop postgresql.jdbc.version)"
[[ -n "$pgjdbc_version" ]] || die "postgresql.jdbc.version missing from $TOOLS/versions.properties"
mariadb_jdbc_version="$(prop mariadb.jdbc.version)"
[[ -n "$mariadb_jdbc_version" ]] || die "mariadb.jdbc.version missing from $TOOLS/versions.properties"
# S3A must match the Hadoop client PySpark ships (hadoop-client-api-<version>.jar).
hadoop_version="$(find "$pyspark_jars" -maxdepth 1 -name 'hadoop-client-api-*.jar' -printf '%f\n' \
  | sed -E 's/^hadoop-client-api-(.*)\.jar$/\1/' | head -n 1)"
[[ -n "$hadoop_version" ]] || die "no hadoop-client-api jar in $pyspark_jars"
aws_sdk_version="$(prop "hadoop.aws.sdk.version.$hadoop_version")"
[[ -n "$aws_sdk_version" ]] || die "hadoop.aws.sdk.version.$hadoop_version missing from" \
  "$TOOLS/versions.properties (the aws-java-sdk-v2.version of hadoop-project $hadoop_version)"

# copy_deps POM OUT LOG [-Dprop=value...]: resolve POM's runtime dependencies into OUT.
# Maven runs quietly into LOG; a line every 30 s says it is still resolving (lib/progress.sh).
copy_deps() {
  local pom="$1" out="$2" log="$3"
  shift 3
  local progress_log="$log"
  with_progress "fetch-jars: maven ($(basename "$(dirname "$pom")"))" "" \
    "${MVN[@]}" -f "$pom" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$out" "$@"
}

# artifact_name JAR: the jar's file name without its version ("zstd-jni-1.5.7-6.jar" -> "zstd-jni").
artifact_name() { basename "$1" | sed -E 's/-[0-9]+\.[0-9]+[^/]*\.jar$//'; }

# drop_shipped_by_pyspark DIR: remove jars whose artifact PySpark already ships, so the
# driver never sees two versions of one library (PySpark's copy wins: Spark was built with it).
drop_shipped_by_pyspark() {
  local dir="$1" jar
  local -A shipped=()
  for jar in "$pyspark_jars"/*.jar; do shipped["$(artifact_name "$jar")"]=1; done
  for jar in "$dir"/*.jar; do
    if [[ -n "${shipped["$(artifact_name "$jar")"]:-}" ]]; then
      rm -f "$jar"
    fi
  done
}

fetch_spark_kafka() {
  local dest="$JARS_DIR/spark-kafka-$spark_version"
  if [[ -f "$dest/.complete" ]]; then
    say "spark-kafka $spark_version already in $dest"
    return
  fi
  local tmp="$dest.partial.$$" log token_version="$spark_version" fallback
  log="$(mktemp)"
  scratch+=("$tmp" "$log")
  say "resolving org.apache.spark:spark-sql-kafka-0-10_2.13:$spark_version"
  if ! copy_deps "$TOOLS/spark-kafka/pom.xml" "$tmp" "$log" \
      -Dspark.version="$spark_version" -Dspark.token.provider.version="$token_version"; then
    fallback="$(prop "spark.token.provider.fallback.$(cut -d. -f1,2 <<<"$spark_version")")"
    if [[ -n "$fallback" ]] && grep -q "spark-token-provider-kafka-0-10_2.13:jar:$spark_version" "$log"; then
      say "spark-token-provider-kafka-0-10_2.13:$spark_version is not served by this Maven" \
        "repository; using $fallback (tools/jars/versions.properties)"
      token_version="$fallback"
      rm -rf "$tmp"
      copy_deps "$TOOLS/spark-kafka/pom.xml" "$tmp" "$log" \
        -Dspark.version="$spark_version" -Dspark.token.provider.version="$token_version" \
        || { cat "$log" >&2; die "could not resolve the Spark Kafka connector"; }
    else
      cat "$log" >&2
      die "could not resolve org.apache.spark:spark-sql-kafka-0-10_2.13:$spark_version"
    fi
  fi
  drop_shipped_by_pyspark "$tmp"
  printf 'spark.version=%s\nspark.token.provider.version=%s\n' \
    "$spark_version" "$token_version" >"$tmp/versions.properties"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  touch "$dest/.complete"
  say "spark-kafka $spark_version -> $dest ($(find "$dest" -name '*.jar' | wc -l) jars)"
}

fetch_kafka_broker() {
  local dest="$JARS_DIR/kafka-broker-$kafka_version"
  if [[ -f "$dest/.complete" ]]; then
    say "kafka-broker $kafka_version already in $dest"
    return
  fi
  local tmp="$dest.partial.$$" log
  log="$(mktemp)"
  scratch+=("$tmp" "$log")
  say "resolving org.apache.kafka:kafka_2.13:$kafka_version"
  copy_deps "$TOOLS/kafka-broker/pom.xml" "$tmp" "$log" -Dkafka.version="$kafka_version" \
    || { cat "$log" >&2; die "could not resolve org.apache.kafka:kafka_2.13:$kafka_version"; }
  rm -rf "$dest"
  mv "$tmp" "$dest"
  touch "$dest/.complete"
  say "kafka-broker $kafka_version -> $dest ($(find "$dest" -name '*.jar' | wc -l) jars)"
}

fetch_postgresql_jdbc() {
  local dest="$JARS_DIR/postgresql-jdbc-$pgjdbc_version"
  if [[ -f "$dest/.complete" ]]; then
    say "postgresql-jdbc $pgjdbc_version already in $dest"
    return
  fi
  local tmp="$dest.partial.$$" log
  log="$(mktemp)"
  scratch+=("$tmp" "$log")
  say "resolving org.postgresql:postgresql:$pgjdbc_version"
  copy_deps "$TOOLS/postgresql-jdbc/pom.xml" "$tmp" "$log" \
    -Dpostgresql.jdbc.version="$pgjdbc_version" \
    || { cat "$log" >&2; die "could not resolve org.postgresql:postgresql:$pgjdbc_version"; }
  drop_shipped_by_pyspark "$tmp"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  touch "$dest/.complete"
  say "postgresql-jdbc $pgjdbc_version -> $dest ($(find "$dest" -name '*.jar' | wc -l) jars)"
}

fetch_mariadb_jdbc() {
  local dest="$JARS_DIR/mariadb-jdbc-$mariadb_jdbc_version"
  if [[ -f "$dest/.complete" ]]; then
    say "mariadb-jdbc $mariadb_jdbc_version already in $dest"
    return
  fi
  local tmp="$dest.partial.$$" log
  log="$(mktemp)"
  scratch+=("$tmp" "$log")
  say "resolving org.mariadb.jdbc:mariadb-java-client:$mariadb_jdbc_version"
  copy_deps "$TOOLS/mariadb-jdbc/pom.xml" "$tmp" "$log" \
    -Dmariadb.jdbc.version="$mariadb_jdbc_version" \
    || { cat "$log" >&2; die "could not resolve org.mariadb.jdbc:mariadb-java-client:$mariadb_jdbc_version"; }
  drop_shipped_by_pyspark "$tmp"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  touch "$dest/.complete"
  say "mariadb-jdbc $mariadb_jdbc_version -> $dest ($(find "$dest" -name '*.jar' | wc -l) jars)"
}

fetch_hadoop_aws() {
  local dest="$JARS_DIR/hadoop-aws-$hadoop_version"
  if [[ -f "$dest/.complete" ]]; then
    say "hadoop-aws $hadoop_version already in $dest"
    return
  fi
  local tmp="$dest.partial.$$" log
  log="$(mktemp)"
  scratch+=("$tmp" "$log")
  say "resolving org.apache.hadoop:hadoop-aws:$hadoop_version (AWS SDK $aws_sdk_version)"
  copy_deps "$TOOLS/hadoop-aws/pom.xml" "$tmp" "$log" \
    -Dhadoop.version="$hadoop_version" -Daws.sdk.version="$aws_sdk_version" \
    || { cat "$log" >&2; die "could not resolve org.apache.hadoop:hadoop-aws:$hadoop_version"; }
  drop_shipped_by_pyspark "$tmp"
  rm -rf "$dest"
  mv "$tmp" "$dest"
  touch "$dest/.complete"
  say "hadoop-aws $hadoop_version -> $dest ($(find "$dest" -name '*.jar' | wc -l) jars)"
}

mkdir -p "$JARS_DIR"
fetch_spark_kafka
fetch_kafka_broker
fetch_postgresql_jdbc
fetch_mariadb_jdbc
fetch_hadoop_aws
