#!/usr/bin/env bash
# CMAKE_CUDA_ARCHITECTURES: tagc's default "80;90" (A100, H100/H200) must be what CMake really
# compiles for. enable_language(CUDA) caches the compiler's own default (75) when the variable is
# unset, so the default has to be set before it (top-level CMakeLists.txt).
#   test_cuda_arch.sh BUILD_DIR TAGC_HAVE_CUDA
# Checks the build tree's cache and the nvcc flags of its CUDA kernels, then configures the
# sources afresh three ways: no choice (80;90), -DCMAKE_CUDA_ARCHITECTURES=86 (kept), and a tree
# configured before the fix (75 cached by CMake: moved to 80;90 once).
# Exits 77 (skipped) when the build has no CUDA.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${TAGC_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
tree=${1:?usage: test_cuda_arch.sh BUILD_DIR TAGC_HAVE_CUDA}
have_cuda=${2:-OFF}
[ "$have_cuda" = ON ] || { echo "SKIP: this build has no CUDA (TAGC_HAVE_CUDA=$have_cuda)"; exit 77; }

failed=0
passed=0
ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
cached() { sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$1/CMakeCache.txt"; }
# Every architecture of the list ("80;90", "86-real" ...) appears as sm_N in the kernels' flags.
flags_have() { # tree list
  local flags
  flags=$(grep -h '^CUDA_FLAGS' "$1"/CMakeFiles/tagc_kernels_cuda.dir/flags.make "$1"/kernels/CMakeFiles/tagc_kernels_cuda.dir/flags.make 2>/dev/null)
  [ -n "$flags" ] || return 1
  local a
  for a in ${2//;/ }; do
    grep -q -- "sm_${a%%-*}" <<<"$flags" || return 1
  done
  ! grep -q 'sm_75' <<<"$flags" || [ "$2" = 75 ]
}

# 1. The build tree this test belongs to.
value=$(cached "$tree")
help=$(grep -B1 '^CMAKE_CUDA_ARCHITECTURES:' "$tree/CMakeCache.txt" | head -1)
echo "$tree: CMAKE_CUDA_ARCHITECTURES=$value ($help)"
if [ "$help" = "//CUDA architectures (tagc default 80;90)" ]; then
  if [ "$value" = "80;90" ]; then ok "build tree: tagc's default 80;90"; else bad "build tree: tagc's default is $value, not 80;90"; fi
else
  echo "note: the build tree's architectures were chosen by its user"
fi
if flags_have "$tree" "$value"; then ok "build tree: nvcc generates code for $value"; else bad "build tree: nvcc flags do not match $value"; fi

# 2. Fresh configures of the sources (configure only, no build).
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tagc-cuda-arch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
configure() { # dir args...
  local dir=$1
  shift
  env -u CUDAARCHS cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DTAGC_NATIVE=OFF "$@" >"$dir.log" 2>&1 ||
    { tail -20 "$dir.log"; return 1; }
}
if configure "$tmp/default"; then
  v=$(cached "$tmp/default")
  if [ "$v" = "80;90" ] && flags_have "$tmp/default" "80;90"; then ok "fresh configure: 80;90 (sm_80, sm_90)"; else bad "fresh configure: $v"; fi
  # A tree configured before the fix: CMake's own default cached, no tagc marker.
  sed -i -e 's|^//CUDA architectures (tagc default 80;90)$|//CUDA architectures|' \
    -e 's|^CMAKE_CUDA_ARCHITECTURES:STRING=.*|CMAKE_CUDA_ARCHITECTURES:STRING=75|' \
    -e '/^TAGC_CUDA_ARCHITECTURES_DECIDED:/d' "$tmp/default/CMakeCache.txt"
  if configure "$tmp/default"; then
    v=$(cached "$tmp/default")
    if [ "$v" = "80;90" ]; then ok "old tree with 75 cached: moved to 80;90"; else bad "old tree with 75 cached: still $v"; fi
  else
    bad "reconfigure of an old tree failed"
  fi
else
  bad "fresh configure failed"
fi
if configure "$tmp/user" -DCMAKE_CUDA_ARCHITECTURES=86 && configure "$tmp/user"; then
  v=$(cached "$tmp/user")
  if [ "$v" = "86" ] && flags_have "$tmp/user" "86"; then ok "-DCMAKE_CUDA_ARCHITECTURES=86 kept over two configures"; else bad "-DCMAKE_CUDA_ARCHITECTURES=86 became $v"; fi
else
  bad "configure with -DCMAKE_CUDA_ARCHITECTURES=86 failed"
fi

echo "$passed checks passed, $failed failed"
[ "$failed" -eq 0 ]
