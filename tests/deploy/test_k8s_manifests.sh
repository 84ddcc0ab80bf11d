#!/usr/bin/env bash
# Renders both kustomize overlays and validates every object offline (validator/validate.cjs:
# Kubernetes 1.27 OpenAPI schemas from the npm package kubernetes-models, unknown fields,
# references between the objects); then checks that the validator rejects broken manifests:
# each file in broken/ (its first line names the expected error) and the real render with
# etcd's `replicas: 3` turned into "three".
# Needs kubectl (with kustomize v4 or newer built in), node and npm; exits 77 (skipped) without
# them. The npm packages go into the build tree, never into the sources.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${TAGC_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
build=${TAGC_BUILD_DIR:-$src/build/deploy-test}

skip() { echo "SKIP: $*"; exit 77; }
for tool in kubectl node npm; do
  command -v "$tool" >/dev/null || skip "$tool is not installed (scripts/dev.sh deps installs it)"
done
kustomize_version=$(kubectl version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\([0-9]*\).*/\1/p')
[ -n "$kustomize_version" ] && [ "$kustomize_version" -ge 4 ] ||
  skip "kubectl has no kustomize v4+ built in ($(kubectl version --client 2>&1 | head -1))"

# kubernetes-models and js-yaml, at the versions of validator/package.json, in the build tree.
node_dir=$build/tests/deploy/node
stamp=$node_dir/.installed
if ! cmp -s "$here/validator/package.json" "$stamp"; then
  rm -rf "$node_dir" && mkdir -p "$node_dir" && cp "$here/validator/package.json" "$node_dir/"
  if ! (cd "$node_dir" && npm install --no-package-lock --no-audit --no-fund --loglevel=error >npm.log 2>&1); then
    tail -5 "$node_dir/npm.log"
    skip "npm install of kubernetes-models and js-yaml failed (is the npm registry reachable?)"
  fi
  cp "$here/validator/package.json" "$stamp"
fi
export NODE_PATH=$node_dir/node_modules
validate() { node "$here/validator/validate.cjs" "$@"; }

failed=0
passed=0
ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
out=$build/tests/deploy/rendered
mkdir -p "$out"

for overlay in cpu gpu; do
  echo "== kubectl kustomize deploy/k8s/overlays/$overlay"
  if ! kubectl kustomize "$src/deploy/k8s/overlays/$overlay" >"$out/$overlay.yaml" 2>"$out/$overlay.err"; then
    cat "$out/$overlay.err"
    bad "overlay $overlay does not render"
    continue
  fi
  if validate "$out/$overlay.yaml"; then ok "overlay $overlay: every object valid"; else bad "overlay $overlay: invalid objects"; fi
done

# What each overlay must contain, beyond being valid.
check() { # overlay description pattern
  if grep -qE -- "$3" "$out/$1.yaml"; then ok "$1: $2"; else bad "$1: $2 (no match for /$3/)"; fi
}
for overlay in cpu gpu; do
  check $overlay "workers are an Indexed Job" '^  completionMode: Indexed$'
  check $overlay "worker id from the completion index" "batch.kubernetes.io/job-completion-index"
  check $overlay "etcd serves clients over TLS with client certificates" '--client-cert-auth=true'
  check $overlay "the workers' headless Service exists" '^  name: tagc-worker$'
done
check gpu "one GPU per worker" 'nvidia.com/gpu: 1'
check gpu "workers compute on cuda" '--device=cuda'
if grep -q 'nvidia.com/gpu' "$out/cpu.yaml"; then bad "cpu: asks for GPUs"; else ok "cpu: asks for no GPU"; fi

# The validator must reject broken manifests, each with the error its first line names.
reject() { # description expected-substring file
  local log
  log=$(validate "$3" 2>&1)
  local rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$2" <<<"$log"; then
    ok "rejected: $1"
  else
    echo "$log"
    bad "not rejected as expected (rc $rc, wanted '$2'): $1"
  fi
}
for f in "$here"/broken/*.yaml; do
  reject "broken/$(basename "$f")" "$(sed -n '1s/^# expect: //p' "$f")" "$f"
done
sed 's/^  replicas: 3$/  replicas: "three"/' "$out/cpu.yaml" >"$out/cpu-broken.yaml"
if cmp -s "$out/cpu.yaml" "$out/cpu-broken.yaml"; then
  bad "the cpu render has no 'replicas: 3' to break"
else
  reject 'the cpu render with etcd replicas: "three"' "data/spec/replicas must be integer" "$out/cpu-broken.yaml"
fi

echo "$passed checks passed, $failed failed"
[ "$failed" -eq 0 ]
