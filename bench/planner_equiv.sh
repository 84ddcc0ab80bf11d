#!/bin/sh
# Same decisions as the planner of commit REF on N random inputs (bench/planner_equiv.c).
#   bench/planner_equiv.sh REF [N] [BUILD]      e.g. bench/planner_equiv.sh 5367350 1000000
# BUILD (default build/dev) must hold this tree's libraries (cmake --build BUILD).
set -eu
ref=$1; n=${2:-100000}; build=${3:-$(cd "$(dirname "$0")/.." && pwd)/build/dev}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/planner-equiv.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
git -C "$root" show "$ref:coordinator/planner.c" > "$tmp/planner_old.c"
cc -O1 -std=c11 -D_GNU_SOURCE -I"$root" -Dtagc_planner_decide=old_planner_decide \
  -Dtagc_planner_decision_free=old_planner_decision_free -c "$tmp/planner_old.c" -o "$tmp/old.o"
cc -O1 -std=c11 -D_GNU_SOURCE -I"$root" "$root/bench/planner_equiv.c" "$tmp/old.o" \
  "$build/coordinator/libtagc_coord.a" "$build/cluster/libtagc_etcd.a" \
  "$build/common/libtagc_common.a" -ljansson -lcurl -lm -lpthread -o "$tmp/planner_equiv"
"$tmp/planner_equiv" "$n"
