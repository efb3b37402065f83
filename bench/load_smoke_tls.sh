#!/usr/bin/env bash
# graft_load --quick over mTLS: makes a throwaway CA, a server certificate for 127.0.0.1 and a
# client certificate with the openssl command, then checks that graftd and the echo floor serve
# mTLS and every request succeeds. Usage: load_smoke_tls.sh GRAFT_LOAD
set -euo pipefail
load="$1"
command -v openssl >/dev/null || { echo "FAIL: openssl not found (scripts/install-deps.sh --test)"; exit 1; }
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cd "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -days 1 -subj /CN=load-ca -keyout ca.key -out ca.pem 2>/dev/null
for name in server client; do
  openssl req "${ec[@]}" -subj "/CN=$name" -keyout "$name.key" -out "$name.csr" 2>/dev/null
done
echo "subjectAltName=IP:127.0.0.1" >server.ext
echo "extendedKeyUsage=clientAuth" >client.ext
for name in server client; do
  openssl x509 -req -days 1 -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
    -extfile "$name.ext" -out "$name.pem" 2>/dev/null
done
"$load" --quick --clients 1,2 --tls-cert-file server.pem --tls-key-file server.key \
  --tls-client-ca-file ca.pem --ca ca.pem --cert client.pem --key client.key >out.txt
cat out.txt
grep -q "over mTLS" out.txt
