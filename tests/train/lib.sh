# Shared by the checkpoint and output-folder tests of tests/train (sourced): a temporary
# folder $tmp removed at exit (on_exit adds clean-up before that), a tiny model, pass/fail
# counting, and waits bounded by deadlines the tests derive from their settings.
tmp=$(mktemp -d)
exit_cmds=
on_exit() { exit_cmds="$1; $exit_cmds"; }
trap 'eval "$exit_cmds"; rm -rf "$tmp"' EXIT
TINY="--layers 1 --dim 32 --heads 2 --ctx 32 --batch 4 --eval-every 0 --eval-windows 2 --threads 1 --log info"
pass=0 fail=0
check() { # check STATUS DESCRIPTION
  if [ "$1" = 0 ]; then pass=$((pass + 1)); else echo "FAILED: $2"; fail=$((fail + 1)); fi
}
# wait_for SECONDS COMMAND...: polls until COMMAND succeeds; status 1 when SECONDS pass first.
wait_for() {
  local end=$(( $(date +%s) + $1 )); shift
  until "$@"; do
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.05
  done
}
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; }
