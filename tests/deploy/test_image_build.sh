#!/usr/bin/env bash
# The container images' build stage, without a container runtime: runs deploy/build-release.sh
# (the script that deploy/Dockerfile's build stage runs) on a `git archive` copy of HEAD in a
# temporary directory, CUDA off, then checks what the runtime stage relies on: the three
# programs, runtime-packages.txt (installed packages, no -dev package), the extra runtime
# packages, and a 3-step training run of the staged programs.
# Exits 77 (skipped) outside a git checkout or without a build dependency of the image.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${TAGC_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
build=${TAGC_BUILD_DIR:-$src/build/deploy-test}

skip() { echo "SKIP: $*"; exit 77; }
failed=0
passed=0
ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "ok installed"; }

command -v git >/dev/null || skip "git is not installed"
git -C "$src" rev-parse --verify -q HEAD >/dev/null || skip "$src is not a git checkout with a commit"
command -v dpkg-query >/dev/null || skip "not a Debian system (dpkg-query missing)"
while read -r p; do
  installed "$p" || skip "build dependency $p of deploy/Dockerfile is not installed"
done < <(sed 's/#.*//' "$src/deploy/packages-build.txt" | tr -s ' \t' '\n' | grep .)

# The Dockerfiles' build stages run the script this test runs.
for f in Dockerfile Dockerfile.cuda; do
  if grep -q '/src/deploy/build-release.sh /src /build /opt/tagc' "$src/deploy/$f"; then
    ok "deploy/$f builds with deploy/build-release.sh"
  else
    bad "deploy/$f does not run deploy/build-release.sh /src /build /opt/tagc"
  fi
  if grep -q '^COPY --from=build /opt/tagc/runtime-packages.txt' "$src/deploy/$f"; then
    ok "deploy/$f installs the build stage's runtime-packages.txt"
  else
    bad "deploy/$f does not install runtime-packages.txt"
  fi
  if grep -qE '^USER [1-9][0-9]*' "$src/deploy/$f"; then ok "deploy/$f runs as a numeric non-root user"; else bad "deploy/$f: no numeric non-root USER"; fi
done
# A clone after scripts/dev.sh holds build/ and out/: they must stay out of the build context.
for p in .git build out; do
  if grep -qxF "$p" "$src/.dockerignore"; then ok ".dockerignore excludes $p"; else bad ".dockerignore does not exclude $p"; fi
done

mkdir -p "$build/tests/deploy"
tmp=$(mktemp -d "$build/tests/deploy/image.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
git -C "$src" archive --format=tar HEAD | tar -x -C "$tmp/src" || { bad "git archive HEAD"; exit 1; }
script=$tmp/src/deploy/build-release.sh
if [ ! -f "$script" ]; then
  # HEAD predates the script (uncommitted work): the working tree's script, on HEAD's sources.
  echo "note: HEAD has no deploy/build-release.sh; running the working tree's"
  script=$src/deploy/build-release.sh
fi

echo "== deploy/build-release.sh on git archive HEAD ($(git -C "$src" rev-parse --short HEAD)), TAGC_CUDA=OFF"
start=$(date +%s)
if TAGC_CUDA=OFF sh "$script" "$tmp/src" "$tmp/build" "$tmp/opt" >"$tmp/build.log" 2>&1; then
  ok "build stage script succeeded in $(($(date +%s) - start)) s"
else
  tail -40 "$tmp/build.log"
  bad "build stage script failed"
  echo "$passed checks passed, $failed failed"
  exit 1
fi
grep 'tagc: CUDA' "$tmp/build.log"
for p in tagc-worker tagc-coordinator tagctl; do
  if [ -x "$tmp/opt/bin/$p" ]; then ok "installed bin/$p"; else bad "bin/$p missing"; fi
done

# runtime-packages.txt: what the runtime stage installs for the programs' shared libraries.
echo "runtime packages: $(tr '\n' ' ' <"$tmp/opt/runtime-packages.txt")"
for p in libgloo0 libjansson4 libmicrohttpd12; do
  if grep -qxF "$p" "$tmp/opt/runtime-packages.txt"; then ok "runtime packages include $p"; else bad "runtime packages lack $p"; fi
done
if grep -E -- '-dev$' "$tmp/opt/runtime-packages.txt"; then bad "a -dev package among the runtime packages"; else ok "no -dev package at run time"; fi
while read -r p; do
  if installed "$p" || apt-cache show "$p" >/dev/null 2>&1; then ok "runtime extra $p is a package"; else bad "runtime extra $p is not a Debian package"; fi
done < <(sed 's/#.*//' "$src/deploy/packages-runtime.txt" | tr -s ' \t' '\n' | grep .)

# The staged programs train (tagctl finds tagc-worker beside itself, as in /usr/local/bin).
if "$tmp/opt/bin/tagctl" run --steps 3 --out "$tmp/out" >"$tmp/run.log" 2>&1 && [ -s "$tmp/out/summary.json" ]; then
  ok "staged tagctl run trains 3 steps"
else
  tail -20 "$tmp/run.log"
  bad "staged tagctl run failed"
fi

echo "$passed checks passed, $failed failed"
[ "$failed" -eq 0 ]
