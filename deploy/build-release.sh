#!/bin/sh
# The image's build stage (deploy/Dockerfile, deploy/Dockerfile.cuda) and its test
# (tests/deploy/test_image_build.sh) run this same script:
#   deploy/build-release.sh SRC BUILD DEST
# configures SRC in BUILD (Release, portable code for a cluster of mixed CPUs), builds the three
# programs and installs them into DEST/bin, with DEST/runtime-packages.txt naming the packages of
# the shared libraries they need. TAGC_CUDA=ON builds the CUDA kernels and NCCL backend
# (CMAKE_CUDA_ARCHITECTURES: default 80;90); JOBS sets the build's parallelism.
set -eu
[ $# -eq 3 ] || { echo "usage: $0 SRC BUILD DEST" >&2; exit 2; }
src=$1 build=$2 dest=$3
cuda=${TAGC_CUDA:-OFF}
set -- -DCMAKE_BUILD_TYPE=Release -DTAGC_NATIVE=OFF -DTAGC_CUDA="$cuda"
[ -z "${CMAKE_CUDA_ARCHITECTURES:-}" ] || set -- "$@" -DCMAKE_CUDA_ARCHITECTURES="$CMAKE_CUDA_ARCHITECTURES"
mkdir -p "$build"
cmake -S "$src" -B "$build" "$@" >"$build/configure.log" 2>&1 || { cat "$build/configure.log"; exit 1; }
cat "$build/configure.log"
# A CUDA image without nvcc or NCCL would build quietly for the CPU only: refuse.
if [ "$cuda" = ON ] && ! grep -q 'tagc: CUDA ON .*NCCL ON' "$build/configure.log"; then
  echo "build-release.sh: TAGC_CUDA=ON, but the CUDA compiler or NCCL was not found" >&2
  exit 1
fi
cmake --build "$build" -j"${JOBS:-$(nproc)}" --target tagc-worker tagc-coordinator tagctl
mkdir -p "$dest/bin"
for p in tagc-worker tagc-coordinator tagctl; do
  install -m 0755 "$build/bin/$p" "$dest/bin/$p"
done
# The packages that own the shared libraries the programs link: the runtime stage installs
# exactly these (on Debian and on the Ubuntu of the CUDA image alike).
: >"$build/runtime-packages.all"
for p in tagc-worker tagc-coordinator tagctl; do
  ldd "$dest/bin/$p" >"$build/ldd.txt"
  if grep 'not found' "$build/ldd.txt" >&2; then
    echo "build-release.sh: $p needs libraries that are not installed" >&2
    exit 1
  fi
  needed=$(objdump -p "$dest/bin/$p" | awk '$1 == "NEEDED" {print $2}')
  awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' "$build/ldd.txt" >"$build/libs.txt"
  while read -r soname path; do
    echo "$needed" | grep -qxF "$soname" || continue
    pkg=
    for f in "$path" "$(readlink -f "$path")"; do
      for g in "$f" "/usr${f#/usr}" "${f#/usr}"; do
        [ -n "$pkg" ] || pkg=$(dpkg -S "$g" 2>/dev/null | head -1 | cut -d: -f1)
      done
    done
    [ -n "$pkg" ] || { echo "build-release.sh: no package owns $path ($p needs $soname)" >&2; exit 1; }
    echo "$pkg" >>"$build/runtime-packages.all"
  done <"$build/libs.txt"
done
sort -u "$build/runtime-packages.all" >"$dest/runtime-packages.txt"
[ -s "$dest/runtime-packages.txt" ] || { echo "build-release.sh: no runtime packages found" >&2; exit 1; }
echo "build-release.sh: runtime packages: $(tr '\n' ' ' <"$dest/runtime-packages.txt")"
# The programs load (every shared library found) and parse their options.
"$dest/bin/tagc-worker" --help >/dev/null
"$dest/bin/tagc-coordinator" --help >/dev/null
"$dest/bin/tagctl" --help >/dev/null
echo "build-release.sh: installed tagc-worker tagc-coordinator tagctl into $dest/bin"
