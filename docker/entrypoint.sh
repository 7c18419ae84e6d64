#!/bin/bash
# The job image's entrypoint (the image is both the eo driver and Spark's executor image).
#
#   entrypoint executor     a Spark executor: Spark on Kubernetes creates executor pods from
#                           spark.kubernetes.container.image with the single argument
#                           `executor` and describes the executor in SPARK_* variables; this
#                           starts Spark's KubernetesExecutorBackend from them, with PySpark's
#                           jars as the classpath, the way Spark's own image does.
#   entrypoint ARGS...      anything else is an eo command line: `eo ARGS...` (`run`, `--help`).
#
# The executor needs, set by the driver on each executor pod: SPARK_DRIVER_URL,
# SPARK_EXECUTOR_ID, SPARK_EXECUTOR_CORES, SPARK_APPLICATION_ID, SPARK_EXECUTOR_POD_IP,
# SPARK_RESOURCE_PROFILE_ID, SPARK_EXECUTOR_POD_NAME; optional: SPARK_EXECUTOR_MEMORY (heap),
# SPARK_JAVA_OPT_<n> (JVM options, in order of n), SPARK_CLASSPATH, SPARK_EXTRA_CLASSPATH,
# SPARK_DIST_CLASSPATH, SPARK_CONF_DIR, HADOOP_CONF_DIR. SPARK_HOME defaults to the PySpark
# package inside the image's virtualenv.
#
# A user with no passwd entry (OpenShift's restricted SCC runs the pod as an arbitrary UID of
# the namespace's range, GID 0): the JVM's login (Hadoop's UnixLoginModule) fails with "invalid
# null input: name" and Ivy's folder becomes "?/.ivy2". The root filesystem is read-only, so
# /etc/passwd cannot gain the entry; instead nss_wrapper (Debian's libnss-wrapper) answers
# from a copy with the entry under $HOME (/tmp, the pod's writable emptyDir), for this process
# and every process it starts (the JVM, PySpark's workers).
set -euo pipefail

die() { printf 'entrypoint: %s\n' "$*" >&2; exit 2; }

passwd_entry() {
  local uid gid lib
  uid="$(id -u)"
  getent passwd "$uid" >/dev/null && return 0
  gid="$(id -g)"
  lib="$(ls /usr/lib/*/libnss_wrapper.so /usr/lib/libnss_wrapper.so 2>/dev/null | head -n 1 || true)"
  [[ -n "$lib" ]] || die "uid $uid has no passwd entry and libnss_wrapper.so is missing (Spark" \
    "needs a user name): install libnss-wrapper in the image or run as a user it knows"
  local dir="${HOME:-/tmp}"
  [[ "$dir" == / || ! -w "$dir" ]] && dir=/tmp
  export HOME="$dir"
  cp /etc/passwd "$dir/.eo-passwd"
  printf 'eo:x:%s:%s:eo:%s:/usr/sbin/nologin\n' "$uid" "$gid" "$dir" >>"$dir/.eo-passwd"
  export NSS_WRAPPER_PASSWD="$dir/.eo-passwd" NSS_WRAPPER_GROUP=/etc/group
  export LD_PRELOAD="$lib${LD_PRELOAD:+ $LD_PRELOAD}"
}

executor() {
  local name missing=()
  for name in SPARK_DRIVER_URL SPARK_EXECUTOR_ID SPARK_EXECUTOR_CORES SPARK_APPLICATION_ID \
    SPARK_EXECUTOR_POD_IP SPARK_RESOURCE_PROFILE_ID SPARK_EXECUTOR_POD_NAME; do
    [[ -n "${!name:-}" ]] || missing+=("$name")
  done
  [[ ${#missing[@]} -eq 0 ]] \
    || die "executor: ${missing[*]} not set (Spark sets them on the executor pods it creates)"

  local home="${SPARK_HOME:-}" candidate
  if [[ -z "$home" ]]; then
    for candidate in /opt/eo/venv/lib/python3*/site-packages/pyspark; do
      [[ -d "$candidate/jars" ]] && home="$candidate"
    done
  fi
  [[ -d "$home/jars" ]] || die "executor: no Spark jars under SPARK_HOME=${home:-<unset>}"
  export SPARK_HOME="$home"

  # Configuration folders first, then Spark's jars, then what the pod adds.
  local classpath="${SPARK_CLASSPATH:+$SPARK_CLASSPATH:}$SPARK_HOME/jars/*"
  [[ -z "${SPARK_EXTRA_CLASSPATH:-}" ]] || classpath="$classpath:$SPARK_EXTRA_CLASSPATH"
  [[ -z "${HADOOP_CONF_DIR:-}" ]] || classpath="$HADOOP_CONF_DIR:$classpath"
  classpath="${SPARK_CONF_DIR:-$SPARK_HOME/conf}:$classpath"
  [[ -z "${SPARK_DIST_CLASSPATH:-}" ]] || classpath="$classpath:$SPARK_DIST_CLASSPATH"

  # SPARK_JAVA_OPT_0, SPARK_JAVA_OPT_1, ...: each is one JVM option, kept in numeric order.
  local java_opts=() index
  while IFS= read -r index; do
    name="SPARK_JAVA_OPT_$index"
    java_opts+=("${!name}")
  done < <(compgen -e | sed -n 's/^SPARK_JAVA_OPT_\([0-9][0-9]*\)$/\1/p' | sort -n)
  local heap=()
  if [[ -n "${SPARK_EXECUTOR_MEMORY:-}" ]]; then
    heap=("-Xms$SPARK_EXECUTOR_MEMORY" "-Xmx$SPARK_EXECUTOR_MEMORY")
  fi
  [[ -z "${PYSPARK_PYTHON:-}" ]] || export PYSPARK_PYTHON

  exec "${JAVA_HOME:+$JAVA_HOME/bin/}java" "${java_opts[@]}" "${heap[@]}" -cp "$classpath" \
    org.apache.spark.scheduler.cluster.k8s.KubernetesExecutorBackend \
    --driver-url "$SPARK_DRIVER_URL" \
    --executor-id "$SPARK_EXECUTOR_ID" \
    --cores "$SPARK_EXECUTOR_CORES" \
    --app-id "$SPARK_APPLICATION_ID" \
    --hostname "$SPARK_EXECUTOR_POD_IP" \
    --resourceProfileId "$SPARK_RESOURCE_PROFILE_ID" \
    --podName "$SPARK_EXECUTOR_POD_NAME"
}

passwd_entry
if [[ "${1:-}" == executor ]]; then
  shift
  [[ $# -eq 0 ]] || die "executor takes no arguments (got: $*)"
  executor
fi
exec eo "$@"
