#!/usr/bin/env bash
# Builds, on this machine, the GPU check's bundle for a lent GPU machine (docs/gpu.md,
# "Running the GPU checks"): that machine has CUDA, PyTorch's wheels, CMake and ninja, but no
# package registry and none of jansson, libcurl, libmicrohttpd, OpenBLAS, Gloo or toml++.
#   bench/gpu/make_bundle.sh    # -> gpu-bundle/ and gpu-bundle.tar.xz (ignored by git)
# The GPU machine's command carries the archive and unpacks it (docs/gpu.md).
# The bundle holds the GPU programs built portable (no -march=native; sm_80 and sm_90 code),
# stripped, in bin/; every shared library they need except CUDA's (cudart, cuBLAS, NCCL come
# from the GPU machine) and the C/C++ runtime in lib/; and the check itself, check.sh. It then
# checks that every program's libraries resolve from lib/ plus a CUDA directory alone (ldd in
# a clean environment), runs check.sh here as a dry run (without a GPU it must skip cleanly,
# status 77, after checking its own inputs), and packs the archive (xz; at most 40 MiB: the
# whole tree a device call carries is limited to 64 MiB).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-gpu-bundle}
DEST=${DEST:-$ROOT/gpu-bundle}
JOBS=${JOBS:-$(nproc)}
ARCHS=${CMAKE_CUDA_ARCHITECTURES:-80;90}
CUDA_LIB=${CUDA_LIB:-/usr/local/cuda/lib64}
MAX_MIB=40
PROGRAMS=(test_kernels_gpu test_model_gpu test_attention_flash test_engine_gpu test_comm_nccl
          bench_kernels_gpu bench_model_gpu tagc-worker)
# provided by the GPU machine (the toolkit or PyTorch's nvidia-* wheels) or by its C runtime
SYSTEM_RE='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|librt\.|libpthread\.|libresolv\.|libgcc_s\.|libstdc\+\+\.|libcuda\.|libcudart\.|libcublas|libcublasLt|libnccl\.|libnvidia)'

mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DTAGC_NATIVE=OFF -DTAGC_CUDA=ON \
  -DTAGC_SANITIZE=OFF "-DCMAKE_CUDA_ARCHITECTURES=$ARCHS" >"$BUILD/bundle-configure.log" 2>&1 ||
  { cat "$BUILD/bundle-configure.log"; exit 1; }
grep -q 'tagc: CUDA ON .*NCCL ON' "$BUILD/bundle-configure.log" ||
  { echo "make_bundle.sh: nvcc or NCCL not found (see $BUILD/bundle-configure.log)" >&2; exit 1; }
cmake --build "$BUILD" -j"$JOBS" --target "${PROGRAMS[@]}"

rm -rf "$DEST"
mkdir -p "$DEST/bin" "$DEST/lib"
for p in "${PROGRAMS[@]}"; do
  install -m 0755 "$BUILD/bin/$p" "$DEST/bin/$p"
  strip --strip-unneeded "$DEST/bin/$p"
done
for p in "${PROGRAMS[@]}"; do
  ldd "$DEST/bin/$p" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ $soname =~ $SYSTEM_RE ]] && continue
  [[ $path == /usr/local/cuda* ]] && continue
  cp -L "$path" "$DEST/lib/$soname"
  strip --strip-unneeded "$DEST/lib/$soname" 2>/dev/null || true # a library that cannot be stripped is kept whole
done
install -m 0755 "$ROOT/bench/gpu/run_gpu_checks.sh" "$DEST/check.sh"
git -C "$ROOT" rev-parse HEAD >"$DEST/commit.txt"

# every program resolves from the bundle plus CUDA's own directory, nothing else
bad=0
for p in "${PROGRAMS[@]}"; do
  missing=$(env -i PATH=/usr/bin:/bin LD_LIBRARY_PATH="$DEST/lib:$CUDA_LIB" ldd "$DEST/bin/$p" |
            grep 'not found' || true)
  if [ -n "$missing" ]; then
    echo "make_bundle.sh: $p: $missing" >&2
    bad=1
  fi
done
[ $bad -eq 0 ] || exit 1
echo "make_bundle.sh: $DEST: ${#PROGRAMS[@]} programs, $(ls "$DEST/lib" | wc -l) libraries, $(du -sm "$DEST" | cut -f1) MiB"

# dry run: no GPU here, so the check must stop cleanly (77) once its inputs are in order
set +e
BUNDLE="$DEST" OUT="$BUILD/dry-run" "$DEST/check.sh"
rc=$?
set -e
if [ $rc -ne 77 ] && command -v nvidia-smi >/dev/null && nvidia-smi >/dev/null 2>&1; then
  echo "make_bundle.sh: a GPU is here: the check ran (status $rc)"
  exit $rc
fi
[ $rc -eq 77 ] || { echo "make_bundle.sh: the dry run ended with status $rc, not 77" >&2; exit 1; }
echo "make_bundle.sh: the dry run skipped cleanly without a GPU"
tar -C "$(dirname "$DEST")" -cJf "$DEST.tar.xz" "$(basename "$DEST")"
mib=$(( ($(stat -c %s "$DEST.tar.xz") + (1 << 20) - 1) >> 20 ))
[ "$mib" -le $MAX_MIB ] || { echo "make_bundle.sh: $DEST.tar.xz is $mib MiB, over $MAX_MIB" >&2; exit 1; }
echo "make_bundle.sh: $DEST.tar.xz, $mib MiB: carry it to the GPU machine (docs/gpu.md)"
