#!/usr/bin/env bash
# Renders the kustomize overlays (cpu, gpu, gpu-rdma) and validates every object offline
# (validator/validate.cjs: OpenAPI schemas from the npm package kubernetes-models, unknown
# fields, references between the objects), then how the worker Job fails and recovers and the
# GPU pod layout (check_policy.py); then checks that both reject broken manifests: each file in
# broken/ (its first line names the expected error), the real render with etcd's
# `replicas: 3` turned into "three", and renders with the failure policy or the GPU layout
# broken.
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

for overlay in cpu gpu gpu-rdma; do
  echo "== kubectl kustomize deploy/k8s/overlays/$overlay"
  if ! kubectl kustomize "$src/deploy/k8s/overlays/$overlay" >"$out/$overlay.yaml" 2>"$out/$overlay.err"; then
    cat "$out/$overlay.err"
    bad "overlay $overlay does not render"
    continue
  fi
  if validate "$out/$overlay.yaml"; then ok "overlay $overlay: every object valid"; else bad "overlay $overlay: invalid objects"; fi
  if python3 "$here/check_policy.py" "$out/$overlay.yaml" "$overlay" "$src/deploy/k8s/overlays/gpu/node-launch.sh"; then
    ok "overlay $overlay: failure policy and pod layout"
  else
    bad "overlay $overlay: failure policy or pod layout"
  fi
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
check gpu "a pod holds its node's 8 GPUs" 'nvidia.com/gpu: 8'
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

# check_policy.py must reject renders with the failure policy or the GPU layout broken.
reject_policy() { # description overlay expected-substring sed-expression
  sed "$4" "$out/$2.yaml" >"$out/$2-policy-broken.yaml"
  if cmp -s "$out/$2.yaml" "$out/$2-policy-broken.yaml"; then
    bad "the $2 render has nothing for '$4' to break"
    return
  fi
  local log rc
  log=$(python3 "$here/check_policy.py" "$out/$2-policy-broken.yaml" "$2" 2>&1)
  rc=$?
  if [ $rc -eq 1 ] && grep -qF -- "$3" <<<"$log"; then ok "policy rejected: $1"; else
    echo "$log"; bad "policy not rejected as expected (rc $rc, wanted '$3'): $1"; fi
}
reject_policy "restartPolicy OnFailure" cpu "restartPolicy Never" 's/restartPolicy: Never/restartPolicy: OnFailure/'
reject_policy "no leave exit code" cpu "--leave-exit-code=143" '/--leave-exit-code=143/d'
reject_policy "DisruptionTarget counted" cpu "DisruptionTarget" 's/type: DisruptionTarget/type: Ready/'
reject_policy "8 workers on 4 GPUs" gpu "TAGC_LOCAL_WORKERS 8 = the pod's GPUs 4" 's/nvidia.com\/gpu: 8/nvidia.com\/gpu: 4/g'
reject_policy "GPU pods may share a node" gpu "one worker pod per node" 's/topologyKey: kubernetes.io\/hostname/topologyKey: topology.kubernetes.io\/zone/'

echo "$passed checks passed, $failed failed"
[ "$failed" -eq 0 ]
