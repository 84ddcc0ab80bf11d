#!/usr/bin/env bash
# deploy/k8s/gen-dev-certs.sh against a real etcd with the TLS flags of deploy/k8s/base/etcd.yaml
# (https only, client certificates required): etcdctl with the client certificate reads and
# writes; without it, or over http, it is refused; the coordinator (tagc's own etcd client)
# turns healthy with the client certificate when it is built.
# Exits 77 (skipped) without openssl, etcd, etcdctl or python3.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${TAGC_SOURCE_DIR:-$(cd "$here/../.." && pwd)}
build=${TAGC_BUILD_DIR:-$src/build}

for tool in openssl etcd etcdctl python3 curl; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done
failed=0
passed=0
ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tagc-certs.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

if sh "$src/deploy/k8s/gen-dev-certs.sh" "$tmp/certs" tagc >"$tmp/gen.out" 2>&1; then ok "gen-dev-certs.sh"; else cat "$tmp/gen.out"; bad "gen-dev-certs.sh failed"; exit 1; fi
if grep -q 'create secret generic tagc-etcd-server-tls' "$tmp/gen.out" && grep -q 'create secret generic tagc-etcd-client-tls' "$tmp/gen.out"; then
  ok "prints the kubectl create secret commands of both Secrets"
else
  bad "no kubectl create secret commands"
fi
sans=$(openssl x509 -in "$tmp/certs/server.crt" -noout -text)
for name in tagc-etcd-0.tagc-etcd tagc-etcd-2.tagc-etcd.tagc.svc.cluster.local '*.tagc-etcd.tagc.svc.cluster.local'; do
  if grep -qF "DNS:$name" <<<"$sans"; then ok "server certificate names $name"; else bad "server certificate lacks $name"; fi
done

read -r cport pport mport hport < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
c=$tmp/certs
etcd --name m0 --data-dir "$tmp/etcd" \
  --listen-client-urls "https://127.0.0.1:$cport" --advertise-client-urls "https://127.0.0.1:$cport" \
  --listen-peer-urls "https://127.0.0.1:$pport" --initial-advertise-peer-urls "https://127.0.0.1:$pport" \
  --initial-cluster "m0=https://127.0.0.1:$pport" --listen-metrics-urls "http://127.0.0.1:$mport" \
  --client-cert-auth=true --trusted-ca-file "$c/ca.crt" --cert-file "$c/server.crt" --key-file "$c/server.key" \
  --peer-client-cert-auth=true --peer-trusted-ca-file "$c/ca.crt" --peer-cert-file "$c/server.crt" \
  --peer-key-file "$c/server.key" >"$tmp/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$mport/health" >/dev/null && break
  sleep 0.1
done
if curl -fs "http://127.0.0.1:$mport/health" | grep -q true; then ok "etcd with TLS and client-cert-auth is healthy (/health on the metrics port)"; else tail -20 "$tmp/etcd.log"; bad "etcd did not start"; exit 1; fi

export ETCDCTL_API=3
ctl() { etcdctl --endpoints "https://localhost:$cport" --dial-timeout 3s --command-timeout 3s "$@"; }
if ctl --cacert "$c/ca.crt" --cert "$c/client.crt" --key "$c/client.key" put tagc/probe yes >/dev/null &&
   [ "$(ctl --cacert "$c/ca.crt" --cert "$c/client.crt" --key "$c/client.key" get --print-value-only tagc/probe)" = yes ]; then
  ok "client certificate: put and get"
else
  bad "client certificate refused"
fi
if ctl --cacert "$c/ca.crt" put tagc/probe no >/dev/null 2>&1; then bad "a client without certificate could write"; else ok "a client without certificate is refused"; fi
if etcdctl --endpoints "http://127.0.0.1:$cport" --dial-timeout 2s --command-timeout 2s put tagc/probe no >/dev/null 2>&1; then
  bad "plain http was accepted"
else
  ok "plain http is refused"
fi

coord=$build/bin/tagc-coordinator
if [ -x "$coord" ]; then
  "$coord" --etcd "https://localhost:$cport" --job certs --http "127.0.0.1:$hport" \
    --etcd-ca "$c/ca.crt" --etcd-cert "$c/client.crt" --etcd-key "$c/client.key" >"$tmp/coord.log" 2>&1 &
  pids+=($!)
  healthy=
  for _ in $(seq 100); do
    curl -fs "http://127.0.0.1:$hport/healthz" >/dev/null && { healthy=1; break; }
    sleep 0.1
  done
  if [ -n "$healthy" ]; then ok "tagc-coordinator with the client certificate: /healthz 200"; else tail -5 "$tmp/coord.log"; bad "tagc-coordinator did not become healthy"; fi
else
  echo "note: $coord is not built; the coordinator check is left out"
fi

echo "$passed checks passed, $failed failed"
[ "$failed" -eq 0 ]
