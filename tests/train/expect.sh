# Shared by the bad-input tests of tests/train (sourced): expect SUBSTRING PROGRAM ARGS...
# passes when PROGRAM exits 2 with exactly one line on stderr containing SUBSTRING
# (case-insensitive); counts into $pass and $fail.
pass=0 fail=0
expect() {
  local want=$1; shift
  local err code lines
  err=$("$@" 2>&1 >/dev/null); code=$?
  lines=$(printf '%s\n' "$err" | grep -c .)
  if [ "$code" -eq 2 ] && [ "$lines" -eq 1 ] && printf '%s' "$err" | grep -qi -- "$want"; then
    pass=$((pass + 1))
  else
    echo "FAILED: $* -> exit $code, $lines stderr lines, wanted '$want':"; printf '%s\n' "$err" | head -5
    fail=$((fail + 1))
  fi
}
