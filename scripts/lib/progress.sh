# Progress for the long, silent setup steps (Go builds, Maven resolution): sourced by the
# scripts in scripts/. A Go build of kube-apiserver runs for many minutes and prints nothing;
# without a sign of life a newcomer cannot tell a slow build from a hung one.
#
#   with_progress LABEL UNIT COMMAND...
#
# runs COMMAND with its output in a log and prints, on stderr:
#   LABEL: started (every ${EO_PROGRESS_SECONDS:-30} s a line follows)
#   LABEL: 2m30s, 812 UNIT           (UNIT counts the log's lines: `go build -v` prints one
#                                     line per package it compiles; "" leaves the count out)
#   LABEL: done in 5m10s
# On failure it prints the log's last 60 lines and returns COMMAND's exit status. A caller that
# reads the output itself names the log in $progress_log: it is kept and not printed.

_eo_duration() { # SECONDS -> "1h02m03s" / "2m03s" / "7s"
  local s=$1
  if ((s >= 3600)); then
    printf '%dh%02dm%02ds' $((s / 3600)) $((s % 3600 / 60)) $((s % 60))
  elif ((s >= 60)); then
    printf '%dm%02ds' $((s / 60)) $((s % 60))
  else
    printf '%ds' "$s"
  fi
}

with_progress() {
  local label=$1 unit=$2
  shift 2
  local every=${EO_PROGRESS_SECONDS:-30} log started=$SECONDS pid status waited count
  log="${progress_log:-$(mktemp)}"
  printf '%s: started (a line every %ss)\n' "$label" "$every" >&2
  "$@" >"$log" 2>&1 &
  pid=$!
  waited=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    if ((waited % every == 0)) && kill -0 "$pid" 2>/dev/null; then
      if [[ -n "$unit" ]]; then
        count="$(wc -l <"$log")"
        printf '%s: %s, %d %s\n' "$label" "$(_eo_duration $((SECONDS - started)))" \
          "$count" "$unit" >&2
      else
        printf '%s: %s\n' "$label" "$(_eo_duration $((SECONDS - started)))" >&2
      fi
    fi
  done
  status=0
  wait "$pid" || status=$?
  if ((status == 0)); then
    printf '%s: done in %s\n' "$label" "$(_eo_duration $((SECONDS - started)))" >&2
  else
    printf '%s: failed (exit %d) after %s\n' "$label" "$status" \
      "$(_eo_duration $((SECONDS - started)))" >&2
    [[ -n "${progress_log:-}" ]] || tail -n 60 "$log" >&2
  fi
  [[ -n "${progress_log:-}" ]] || rm -f "$log"
  return "$status"
}
