#!/usr/bin/env bash
# The kind end-to-end run: the real images, the real chart and a real PostgreSQL in a kind
# cluster; an ExactlyOncePipeline whose driver pod is deleted twice in the middle of the
# stream (once gracefully, once forced: a crash with a zombie window); then an audit of the
# sink against the generator's truth. Exits non-zero on any mismatch or timeout.
#
#   tests/e2e/kind/run.sh [--keep] [--no-build] [--executors N]
#     --keep         keep the cluster afterwards (prints how to reach it)
#     --no-build     reuse the images eo-operator:e2e and eo-job:e2e already built
#     --executors N  run the writer tasks on N Spark executor pods (default 0: in the driver);
#                    one executor pod is also deleted in the middle of the stream, and the
#                    run checks that executors ran tasks and belong to the last driver
#
# Needs Docker, kind, helm, kubectl and python3 (tests/e2e/kind/install-tools.sh installs the
# pinned kind, helm and kubectl). Environment: EO_E2E_CLUSTER (default eo-e2e),
# EO_E2E_WORKDIR (logs, truth and audit inputs; default: a new temporary folder),
# EO_E2E_TIMEOUT (seconds per wait, default 600).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
MANIFESTS="$HERE/manifests"
CLUSTER="${EO_E2E_CLUSTER:-eo-e2e}"
TIMEOUT="${EO_E2E_TIMEOUT:-600}"
NS=eo-e2e
OPERATOR_NS=eo-system
PIPELINE=orders-ledger
DRIVER_SELECTOR=app.kubernetes.io/component=driver
OPERATOR_IMAGE=eo-operator:e2e
JOB_IMAGE=eo-job:e2e
POSTGRES_POD=postgres-0
# Pinned tools from install-tools.sh come first; the project's virtualenv kubectl is a fallback.
export PATH="${EO_CACHE:-$HOME/.cache/eo}/e2e-tools/bin:$PATH:$ROOT/.venv/bin"

EXECUTOR_SELECTOR=spark-role=executor

keep=0
build=1
executors=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --keep) keep=1 ;;
    --no-build) build=0 ;;
    --executors)
      [[ "${2:-}" =~ ^[0-9]+$ ]] || { echo "run.sh: --executors needs a number" >&2; exit 2; }
      executors=$2
      shift
      ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
fail() { log "FAILED: $*" >&2; exit 1; }

for tool in docker kind helm kubectl python3; do
  command -v "$tool" >/dev/null || fail "$tool not found on PATH: run tests/e2e/kind/install-tools.sh (kind, helm, kubectl) and install Docker and Python 3"
done
docker info >/dev/null 2>&1 || fail "docker info failed: start a Docker engine"

WORK="${EO_E2E_WORKDIR:-$(mktemp -d "${TMPDIR:-/tmp}/eo-e2e-kind.XXXXXX")}"
mkdir -p "$WORK"
# A kubeconfig of our own: the user's ~/.kube/config and current context stay untouched.
export KUBECONFIG="$WORK/kubeconfig"
created=0

# shellcheck disable=SC2317 # called from finish, which runs as the EXIT trap
diagnostics() {
  log "diagnostics (also in $WORK/diagnostics.txt)"
  {
    kubectl get nodes,pods,pvc,jobs -A -o wide
    kubectl -n "$NS" get eop "$PIPELINE" -o yaml
    kubectl -n "$NS" get events --sort-by=.lastTimestamp
    echo "--- operator log"
    kubectl -n "$OPERATOR_NS" logs deployment/eo-operator --tail=300
    echo "--- driver logs"
    kubectl -n "$NS" logs -l "$DRIVER_SELECTOR" --all-containers --tail=300 --prefix
    echo "--- executor logs"
    kubectl -n "$NS" logs -l "$EXECUTOR_SELECTOR" --tail=100 --prefix
    echo "--- generator log"
    kubectl -n "$NS" logs job/gen-orders --tail=50
  } >"$WORK/diagnostics.txt" 2>&1 || true
  cat "$WORK/diagnostics.txt"
}

# shellcheck disable=SC2317 # runs as the EXIT trap
finish() {
  local code=$?
  trap - EXIT
  if [[ $code -ne 0 && $created == 1 ]]; then
    diagnostics
  fi
  if [[ $created == 1 && $keep == 0 ]]; then
    log "deleting kind cluster $CLUSTER"
    kind delete cluster --name "$CLUSTER" || true
  elif [[ $created == 1 ]]; then
    log "kept cluster $CLUSTER: export KUBECONFIG=$KUBECONFIG"
  fi
  log "work folder: $WORK"
  exit "$code"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_until WHAT COMMAND...: poll COMMAND every 2 s until it succeeds, for at most $TIMEOUT s.
wait_until() {
  local what=$1
  shift
  local begin=$SECONDS
  log "waiting for $what"
  until "$@"; do
    ((SECONDS - begin < TIMEOUT)) || fail "timed out after ${TIMEOUT}s waiting for $what"
    sleep 2
  done
  log "... $what after $((SECONDS - begin)) s"
}

# wait_idle: no batch decided for 15 s (five trigger intervals): nothing left in flight.
wait_idle() {
  local begin=$SECONDS previous="" now
  log "waiting until no batch is decided for 15 s"
  while now="$(status lastBatchId)"; [[ -z "$now" || "$now" != "$previous" ]]; do
    ((SECONDS - begin < TIMEOUT)) || fail "timed out after ${TIMEOUT}s: batches keep coming"
    phase_is_not_failed
    previous=$now
    sleep 15
  done
}

# load_image IMAGE: copy a host image into the kind node. `kind load docker-image` fails on
# Docker's containerd image store when an image index names platforms that are not present
# locally (kubernetes-sigs/kind#3795); a single-platform archive avoids that.
load_image() {
  log "loading $1 into the kind node"
  kind load docker-image --name "$CLUSTER" "$1" && return 0
  log "kind load docker-image failed; retrying with a single-platform archive"
  local platform
  platform="$(docker version --format '{{.Server.Os}}/{{.Server.Arch}}')"
  docker image save --platform "$platform" --output "$WORK/image.tar" "$1"
  kind load image-archive --name "$CLUSTER" "$WORK/image.tar"
  rm -f "$WORK/image.tar"
}

# status FIELD: one field of the pipeline's status ("" when absent).
status() {
  kubectl -n "$NS" get eop "$PIPELINE" -o "jsonpath={.status.$1}" 2>/dev/null || true
}

# psql_query SQL: one value, from psql inside the PostgreSQL pod (local socket, no password).
psql_query() {
  kubectl -n "$NS" exec -i "$POSTGRES_POD" -- \
    psql -X -At -v ON_ERROR_STOP=1 --username=eo --dbname=shop -c "$1"
}

phase_is_not_failed() {
  local phase
  phase="$(status phase)"
  [[ "$phase" != Failed ]] || fail "pipeline phase is Failed: $(status message)"
}

# shellcheck disable=SC2317 # called through wait_until "$@"
running_with_batch_at_least() {
  phase_is_not_failed
  local batch
  batch="$(status lastBatchId)"
  [[ "$(status phase)" == Running && -n "$batch" ]] && ((batch >= $1))
}

# shellcheck disable=SC2317 # called through wait_until "$@"
running_with_epoch_above() {
  phase_is_not_failed
  local epoch
  epoch="$(status epoch)"
  [[ "$(status phase)" == Running && -n "$epoch" ]] && ((epoch > $1))
}

# shellcheck disable=SC2317 # called through wait_until "$@"
job_finished() {
  local succeeded failed
  succeeded="$(kubectl -n "$NS" get job gen-orders -o 'jsonpath={.status.succeeded}')"
  failed="$(kubectl -n "$NS" get job gen-orders -o 'jsonpath={.status.failed}')"
  [[ -z "$failed" || "$failed" == 0 ]] || fail "the generator Job failed: $(kubectl -n "$NS" logs job/gen-orders --tail=20 2>&1)"
  [[ "$succeeded" == 1 ]]
}

# shellcheck disable=SC2317 # called through wait_until "$@"
table_exists() {
  [[ "$(psql_query "SELECT to_regclass('public.ledger') IS NOT NULL" 2>/dev/null)" == t ]]
}

distinct_orders() {
  psql_query 'SELECT count(DISTINCT order_id) FROM public.ledger'
}

# shellcheck disable=SC2317 # called through wait_until "$@"
all_input_in_sink() {
  phase_is_not_failed
  [[ "$(distinct_orders)" == "$EXPECTED" ]]
}

# The stream must still be running when a driver is deleted, or the deletion proves nothing.
assert_mid_stream() {
  local seen
  seen="$(distinct_orders)"
  ((seen < EXPECTED)) || fail "the stream already finished ($seen of $EXPECTED orders) before disruption $1: it proves nothing; make the input longer (manifests/gen-orders-job.yaml)"
  log "disruption $1 in mid-stream: $seen of $EXPECTED orders in the sink, last batch $(status lastBatchId), epoch $(status epoch)"
}

# running_driver: the name of the driver pod in phase Running ("" if none).
running_driver() {
  kubectl -n "$NS" get pods -l "$DRIVER_SELECTOR" --field-selector=status.phase=Running \
    -o 'jsonpath={.items[*].metadata.name}'
}

# shellcheck disable=SC2317 # called through wait_until "$@"
executors_of_running_driver() {
  phase_is_not_failed
  local driver owners
  driver="$(running_driver)"
  [[ -n "$driver" && "$driver" != *" "* ]] || return 1
  owners="$(kubectl -n "$NS" get pods -l "$EXECUTOR_SELECTOR" \
    --field-selector=status.phase=Running \
    -o 'jsonpath={range .items[*]}{.metadata.ownerReferences[0].name}{"\n"}{end}')"
  [[ "$(grep -cx "$driver" <<<"$owners")" == "$executors" ]]
}

# shellcheck disable=SC2317 # called through wait_until "$@"
executors_and_batch_at_least() {
  executors_of_running_driver && running_with_batch_at_least "$1"
}

# delete_driver N KUBECTL-DELETE-FLAGS...: delete the driver pod(s); at least one must exist.
delete_driver() {
  local n=$1
  shift
  local deleted
  deleted="$(kubectl -n "$NS" delete pod -l "$DRIVER_SELECTOR" -o name "$@")"
  [[ -n "$deleted" ]] || fail "no pod labelled $DRIVER_SELECTOR in $NS to delete"
  log "disruption $n: deleted $(echo "$deleted" | tr '\n' ' ')"
}

started=$SECONDS
log "work folder: $WORK"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  fail "a kind cluster named $CLUSTER already exists (a run with --keep?); delete it with: kind delete cluster --name $CLUSTER"
fi

if [[ $build == 1 ]]; then
  log "building $OPERATOR_IMAGE and $JOB_IMAGE"
  DOCKER_BUILDKIT=1 docker build --target operator -t "$OPERATOR_IMAGE" "$ROOT"
  DOCKER_BUILDKIT=1 docker build --target job -t "$JOB_IMAGE" "$ROOT"
fi

log "creating kind cluster $CLUSTER"
created=1
kind create cluster --name "$CLUSTER" --kubeconfig "$KUBECONFIG" --wait 120s
load_image "$OPERATOR_IMAGE"
load_image "$JOB_IMAGE"

kubectl apply -f "$MANIFESTS/namespace.yaml"
log "installing the chart"
helm upgrade --install eo "$ROOT/charts/eo" --namespace "$OPERATOR_NS" --create-namespace \
  --values "$HERE/values.yaml"
kubectl -n "$OPERATOR_NS" rollout status deployment/eo-operator --timeout="${TIMEOUT}s"

log "PostgreSQL, the data volume and the input"
kubectl apply -f "$MANIFESTS/postgres.yaml" -f "$MANIFESTS/data-pvc.yaml"
kubectl -n "$NS" create configmap gen-orders-script --from-file="$HERE/gen_orders.py" \
  --dry-run=client -o yaml | kubectl apply -f -
kubectl apply -f "$MANIFESTS/gen-orders-job.yaml"
wait_until "the generator Job" job_finished
kubectl -n "$NS" logs job/gen-orders | sed -n 's/^EO_E2E_TRUTH //p' >"$WORK/truth.json"
[[ -s "$WORK/truth.json" ]] || fail "the generator printed no EO_E2E_TRUTH line"
EXPECTED="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["valid"])' <"$WORK/truth.json")"
log "input written: $EXPECTED orders expected in the sink"
kubectl -n "$NS" rollout status statefulset/postgres --timeout="${TIMEOUT}s"
wait_until "table public.ledger" table_exists

log "applying the pipeline ($executors executor pods)"
sed "s/^    instances: 0\$/    instances: $executors/" "$MANIFESTS/pipeline.yaml" >"$WORK/pipeline.yaml"
grep -qx "    instances: $executors" "$WORK/pipeline.yaml" \
  || fail "could not set spec.executors.instances in $WORK/pipeline.yaml"
kubectl apply -f "$WORK/pipeline.yaml"
wait_until "phase Running and lastBatchId >= 2" running_with_batch_at_least 2
first_epoch="$(status epoch)"
[[ "$first_epoch" =~ ^[0-9]+$ ]] || fail "status.epoch is not a number: '$first_epoch'"

if ((executors > 0)); then
  wait_until "$executors executor pods of the driver" executors_of_running_driver
  assert_mid_stream "0 (an executor pod)"
  victim="$(kubectl -n "$NS" get pods -l "$EXECUTOR_SELECTOR" -o 'jsonpath={.items[0].metadata.name}')"
  kubectl -n "$NS" delete pod "$victim" --grace-period=0 --force
  log "disruption 0: deleted executor $victim; Spark retries its tasks and replaces it"
  batch="$(status lastBatchId)"
  wait_until "a replacement executor and two more batches" \
    executors_and_batch_at_least "$((batch + 2))"
  [[ "$(status epoch)" == "$first_epoch" ]] \
    || fail "an executor's loss restarted the driver (epoch $(status epoch), was $first_epoch)"
fi

assert_mid_stream 1
delete_driver 1
wait_until "an epoch above $first_epoch and phase Running" running_with_epoch_above "$first_epoch"
second_epoch="$(status epoch)"

batch="$(status lastBatchId)"
wait_until "two more decided batches (lastBatchId >= $((batch + 2)))" \
  running_with_batch_at_least "$((batch + 2))"
assert_mid_stream 2
delete_driver 2 --grace-period=0 --force
wait_until "an epoch above $second_epoch and phase Running" running_with_epoch_above "$second_epoch"

wait_until "all $EXPECTED orders in the sink" all_input_in_sink
wait_idle

if ((executors > 0)); then
  wait_until "$executors executor pods of the last driver" executors_of_running_driver
  finished="$(kubectl -n "$NS" logs -l "$EXECUTOR_SELECTOR" --tail=-1 | grep -c 'Finished task' || true)"
  ((finished > 0)) || fail "no executor of the last driver logged a finished task"
  log "the last driver's executors finished $finished tasks"
fi

log "auditing the sink"
python3 "$HERE/audit.py" sql | kubectl -n "$NS" exec -i "$POSTGRES_POD" -- \
  psql -X -At -v ON_ERROR_STOP=1 --username=eo --dbname=shop >"$WORK/sink.json"
kubectl -n "$NS" get eop "$PIPELINE" -o json >"$WORK/pipeline.json"
set +e
python3 "$HERE/audit.py" compare --truth "$WORK/truth.json" --sink "$WORK/sink.json" \
  --pipeline "$WORK/pipeline.json" --first-epoch "$first_epoch" --disruptions 2 \
  | tee "$WORK/audit.txt"
audit=${PIPESTATUS[0]}
set -e
log "finished in $((SECONDS - started)) s"
exit "$audit"
