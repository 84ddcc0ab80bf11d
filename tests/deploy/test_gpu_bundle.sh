#!/usr/bin/env bash
# The GPU check's bundle (bench/gpu/make_bundle.sh) built from this source into the build
# tree: every program resolves its libraries from the bundle plus CUDA's directory, the dry
# run skips cleanly without a GPU (status 77 inside the script), the archive is under 40 MiB
# and holds bin/, lib/ and check.sh. Skipped (77) without nvcc and NCCL.
set -euo pipefail
src=${TAGC_SOURCE_DIR:?} build=${TAGC_BUILD_DIR:?}
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  echo "no nvcc: skipped"
  exit 77
fi
dest=$build/gpu-bundle-test
rm -rf "$dest" "$dest.tar.xz"
log=$build/gpu-bundle-test.log
if ! BUILD=$build/gpu-bundle-build DEST=$dest "$src/bench/gpu/make_bundle.sh" >"$log" 2>&1; then
  if grep -q "nvcc or NCCL not found" "$log"; then
    echo "no NCCL: skipped"
    exit 77
  fi
  tail -n 30 "$log"
  echo "FAILED: make_bundle.sh"
  exit 1
fi
fail=0
grep -q "check: every program's libraries resolve" "$log" || { echo "FAILED: libraries not checked"; fail=1; }
grep -q "check: no GPU here" "$log" || { echo "FAILED: the dry run did not skip"; fail=1; }
listing=$(tar -tJf "$dest.tar.xz")
for f in gpu-bundle-test/check.sh gpu-bundle-test/bin/tagc-worker gpu-bundle-test/bin/test_model_gpu \
         gpu-bundle-test/lib/libjansson.so.4 gpu-bundle-test/lib/libgloo.so.0; do
  echo "$listing" | grep -qx "$f" || { echo "FAILED: $f not in the archive"; fail=1; }
done
if echo "$listing" | grep -E -q '/lib/lib(cudart|cublas|nccl|c)\.so'; then
  echo "FAILED: the archive carries CUDA's or the C library"
  fail=1
fi
mib=$(( ($(stat -c %s "$dest.tar.xz") + (1 << 20) - 1) >> 20 ))
echo "bundle: $(echo "$listing" | grep -c '/lib/') libraries, archive $mib MiB"
[ "$mib" -le 40 ] || { echo "FAILED: over 40 MiB"; fail=1; }
rm -rf "$dest" "$dest.tar.xz"
[ $fail -eq 0 ] && echo "ok"
exit $fail
