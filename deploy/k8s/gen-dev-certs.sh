#!/bin/sh
# A development CA and the etcd certificates of deploy/k8s, made with openssl:
#   deploy/k8s/gen-dev-certs.sh OUTDIR [NAMESPACE]        (NAMESPACE: default "default")
# writes into OUTDIR
#   ca.crt ca.key           the CA (an existing pair in OUTDIR is reused, so that certificates
#                           issued before stay valid)
#   server.crt server.key   etcd's serving and peer certificate: the names of the tagc-etcd
#                           StatefulSet's pods and Service in NAMESPACE, localhost, 127.0.0.1
#   client.crt client.key   the certificate of tagc's coordinators and workers (CN tagc: the
#                           etcd user name once etcd auth is enabled)
# and prints the `kubectl create secret` commands for the Secrets the manifests mount.
# Environment: REPLICAS (etcd members, default 3), CLUSTER_DOMAIN (default cluster.local),
# DAYS (validity of the leaf certificates, default 365). For development and tests: a
# production cluster takes its certificates from its own CA (e.g. cert-manager), in Secrets of
# the same names and keys.
set -eu
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 OUTDIR [NAMESPACE]" >&2; exit 2; }
out=$1
ns=${2:-default}
replicas=${REPLICAS:-3}
domain=${CLUSTER_DOMAIN:-cluster.local}
days=${DAYS:-365}
command -v openssl >/dev/null || { echo "$0: openssl is not installed" >&2; exit 2; }
mkdir -p "$out"
umask 077
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [ -f "$out/ca.key" ] && [ -f "$out/ca.crt" ]; then
  echo "reusing the CA in $out" >&2
else
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$out/ca.key" -out "$out/ca.crt" -days 3650 -subj "/CN=tagc development CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    2>/dev/null
fi

# The names clients and peers use: tagc-etcd-N.tagc-etcd (same namespace), the longer forms,
# and wildcards (etcd checks a peer's certificate against the reverse DNS name of its address).
san="DNS:localhost,IP:127.0.0.1"
for base in tagc-etcd tagc-etcd.$ns tagc-etcd.$ns.svc tagc-etcd.$ns.svc.$domain; do
  san="$san,DNS:$base,DNS:*.$base"
done
i=0
while [ "$i" -lt "$replicas" ]; do
  for base in tagc-etcd tagc-etcd.$ns.svc tagc-etcd.$ns.svc.$domain; do
    san="$san,DNS:tagc-etcd-$i.$base"
  done
  i=$((i + 1))
done

issue() { # name subject extended-key-usage subject-alt-names
  openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 \
    -keyout "$out/$1.key" -out "$tmp/$1.csr" -subj "$2" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$3"
    [ -z "$4" ] || echo "subjectAltName=$4"
  } >"$tmp/$1.ext"
  openssl x509 -req -in "$tmp/$1.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial \
    -CAserial "$tmp/ca.srl" -days "$days" -sha256 -extfile "$tmp/$1.ext" -out "$out/$1.crt" 2>/dev/null
}
issue server "/CN=tagc-etcd" "serverAuth,clientAuth" "$san"
issue client "/CN=tagc" "clientAuth" ""
chmod 644 "$out/ca.crt" "$out/server.crt" "$out/client.crt"
openssl verify -CAfile "$out/ca.crt" "$out/server.crt" "$out/client.crt" >/dev/null

cat <<EOF
# Certificates in $out (namespace $ns, $replicas etcd members). Create the Secrets:
kubectl -n $ns create secret generic tagc-etcd-server-tls \\
  --from-file=ca.crt=$out/ca.crt --from-file=tls.crt=$out/server.crt --from-file=tls.key=$out/server.key
kubectl -n $ns create secret generic tagc-etcd-client-tls \\
  --from-file=ca.crt=$out/ca.crt --from-file=tls.crt=$out/client.crt --from-file=tls.key=$out/client.key
EOF
