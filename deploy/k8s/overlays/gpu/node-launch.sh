#!/bin/bash
# One pod per node, one tagc-worker per GPU: the pod's entry point in overlays/gpu (mounted
# from a ConfigMap; started by tini). Its arguments go to every worker, which also gets
# --device=cuda:I, --worker-id=tagc-worker-INDEX-I (INDEX: $WORKER_INDEX, the pod's
# completion index; I: 0 .. N-1) and --metrics-addr=HOST:PORT+I. All workers of the pod share one IPC namespace and /dev/shm,
# so NCCL connects them through NVLink/P2P and shared memory, and one failure domain
# ($NODE_NAME), so their in-memory copies go to another node.
#
#   a worker that crashes (any status but 0, 2, 3, 4) is restarted here, in place, up to
#     $TAGC_LOCAL_RESTARTS times (default 3) per worker, after 1 s: it rejoins and heals from
#     its live peers while the pod's other workers train on; past that the pod fails (its
#     index's backoff counts it);
#   status 2 (configuration error), 3 (the training cannot go on) or 4 (I/O failure): the
#     other workers are stopped and the pod exits with that status (the Job's
#     podFailurePolicy fails the Job on 2 and 3);
#   SIGTERM/SIGINT (eviction, scale-down, suspend): forwarded once to every worker, which
#     leaves the job at a step boundary; the pod exits 143 (0 if the job was done by then);
#   every worker exits 0 (the job is done): the pod exits 0.
#
# Environment: WORKER_INDEX (required), TAGC_LOCAL_WORKERS (default: the /dev/nvidiaN devices
# the container sees), TAGC_LOCAL_RESTARTS, TAGC_WORKER_BIN (default
# /usr/local/bin/tagc-worker), TAGC_LOCAL_DEVICE (default cuda:%d, the %d replaced by I;
# "cpu" runs the same launcher on CPU workers, as the tests do), TAGC_LOCAL_METRICS (default
# 0.0.0.0:9100: local worker I serves /metrics and /healthz on port 9100+I; "none": no
# --metrics-addr), TAGC_THREADS (the pod's compute threads, from its CPU request: each
# worker gets an equal part, at least 1).
set -u

die() { echo "node-launch: $*" >&2; exit 2; }

index=${WORKER_INDEX:-}
[[ $index =~ ^[0-9]+$ ]] || die "WORKER_INDEX must be the pod's completion index (got '${index}')"
n=${TAGC_LOCAL_WORKERS:-}
if [ -z "$n" ]; then
  n=0
  for d in /dev/nvidia[0-9]*; do [ -e "$d" ] && n=$((n + 1)); done
  [ "$n" -gt 0 ] || die "no GPU in this container (/dev/nvidia0 ...) and no TAGC_LOCAL_WORKERS"
fi
[[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 64 ] ||
  die "TAGC_LOCAL_WORKERS must be 1..64 (got '$n')"
restarts=${TAGC_LOCAL_RESTARTS:-3}
[[ $restarts =~ ^[0-9]+$ ]] || die "TAGC_LOCAL_RESTARTS must be a count (got '$restarts')"
bin=${TAGC_WORKER_BIN:-/usr/local/bin/tagc-worker}
[ -x "$bin" ] || die "$bin is not an executable"
device=${TAGC_LOCAL_DEVICE:-cuda:%d}
metrics=${TAGC_LOCAL_METRICS:-0.0.0.0:9100}
if [ "$metrics" != none ]; then
  metrics_host=${metrics%:*}
  metrics_port=${metrics##*:}
  [[ $metrics_port =~ ^[0-9]+$ ]] && [ "$metrics_port" -ge 1 ] && [ $((metrics_port + n)) -le 65536 ] ||
    die "TAGC_LOCAL_METRICS must be HOST:PORT with room for $n ports, or none (got '$metrics')"
fi

if [ -n "${TAGC_THREADS:-}" ]; then
  [[ $TAGC_THREADS =~ ^[0-9]+$ ]] || die "TAGC_THREADS must be a count (got '$TAGC_THREADS')"
  export TAGC_THREADS=$((TAGC_THREADS / n > 0 ? TAGC_THREADS / n : 1))
fi

declare -A pid_of   # local index -> pid
declare -A local_of # pid -> local index
declare -a used     # restarts per local index
stopping=0

start() { # local index
  local i=$1 extra=()
  [ "$metrics" = none ] || extra=(--metrics-addr="$metrics_host:$((metrics_port + i))")
  "$bin" "${args[@]}" --device="${device//%d/$i}" --worker-id="tagc-worker-$index-$i" "${extra[@]}" &
  pid_of[$i]=$!
  local_of[$!]=$i
  echo "node-launch: worker tagc-worker-$index-$i started (pid $!, device ${device//%d/$i})" >&2
}

stop_all() { # signal
  local p
  for p in "${pid_of[@]}"; do kill -"$1" "$p" 2>/dev/null; done
}

on_signal() {
  if [ "$stopping" -eq 0 ]; then
    stopping=1
    echo "node-launch: $1: every worker leaves the job" >&2
    stop_all TERM
  fi
}
trap 'on_signal SIGTERM' TERM
trap 'on_signal SIGINT' INT

args=("$@")
for ((i = 0; i < n; i++)); do
  used[$i]=0
  start "$i"
done

result=0 # the pod's status once every worker is gone
while [ "${#pid_of[@]}" -gt 0 ]; do
  done_pid=
  wait -n -p done_pid
  rc=$?
  [ -n "${done_pid:-}" ] || continue # a trapped signal interrupted the wait (done_pid unset)
  i=${local_of[$done_pid]}
  unset "local_of[$done_pid]" "pid_of[$i]"
  if [ "$rc" -eq 0 ]; then
    continue
  fi
  if [ "$stopping" -eq 1 ]; then
    [ "$result" -ne 0 ] || result=143
    continue
  fi
  case $rc in
    2|3|4)
      echo "node-launch: tagc-worker-$index-$i exited with status $rc: stopping the pod's workers" >&2
      result=$rc
      stopping=1
      stop_all TERM
      ;;
    *)
      if [ "${used[$i]}" -lt "$restarts" ]; then
        used[$i]=$((used[$i] + 1))
        echo "node-launch: tagc-worker-$index-$i exited with status $rc: restart ${used[$i]} of $restarts in 1 s" >&2
        sleep 1
        [ "$stopping" -eq 1 ] || start "$i"
      else
        echo "node-launch: tagc-worker-$index-$i exited with status $rc after $restarts restarts: the pod fails" >&2
        result=$rc
        stopping=1
        stop_all TERM
      fi
      ;;
  esac
done
if [ "$stopping" -eq 1 ] && [ "$result" -eq 0 ]; then
  result=0 # signalled, but every worker exited 0: the job was done
fi
exit "$result"
