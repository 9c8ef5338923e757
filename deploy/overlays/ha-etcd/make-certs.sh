#!/usr/bin/env bash
# The CA, etcd's member certificate and the controller's client certificate for overlays/ha-etcd and
# overlays/ha, then the two Secrets they mount (namespace ebb-system must exist):
#   etcd-server-tls      ca.crt, tls.crt, tls.key  etcd's members: server auth (clients, peers) and
#                                                  client auth (peers); every name they are reached by
#   ebb-etcd-client-tls  ca.crt, tls.crt, tls.key  the controller: client auth only
# Usage: make-certs.sh DIR   (DIR must not exist; the keys are written there, mode 0600)
# Valid DAYS (default 365) days: renew before then (delete both Secrets and run this again, with the
# same CA to roll without downtime), or issue the same Secrets with cert-manager Certificates.
# KUBECTL names the kubectl to run (default: kubectl). Needs OpenSSL >= 1.1.1 (-addext).
set -euo pipefail
dir=${1:?usage: make-certs.sh DIR (a new folder for the keys)}
days=${DAYS:-365}
kubectl=${KUBECTL:-kubectl}
ns=ebb-system
mkdir -m 0700 "$dir"
cd "$dir"
umask 077
openssl req -x509 -newkey rsa:3072 -nodes -days "$days" -subj "/CN=ebb-etcd-ca" -keyout ca.key -out ca.crt \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
# the members: the client Service (what --ledger names), each member's stable name under the headless
# Service etcd-peer (what --initial-cluster names), and localhost for etcdctl inside a pod
openssl req -newkey rsa:3072 -nodes -subj "/CN=etcd" -keyout etcd.key -out etcd.csr 2>/dev/null
printf '%s\n' \
  "subjectAltName=DNS:etcd.$ns.svc,DNS:etcd.$ns.svc.cluster.local,DNS:*.etcd-peer.$ns.svc,DNS:*.etcd-peer.$ns.svc.cluster.local,DNS:localhost,IP:127.0.0.1" \
  "extendedKeyUsage=serverAuth,clientAuth" "keyUsage=critical,digitalSignature,keyEncipherment" > etcd.ext
openssl x509 -req -in etcd.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -out etcd.crt \
  -extfile etcd.ext 2>/dev/null
# the controller: client auth only (etcd runs --client-cert-auth)
openssl req -newkey rsa:3072 -nodes -subj "/CN=ebb-controller" -keyout client.key -out client.csr 2>/dev/null
printf '%s\n' "extendedKeyUsage=clientAuth" "keyUsage=critical,digitalSignature,keyEncipherment" > client.ext
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -out client.crt \
  -extfile client.ext 2>/dev/null
"$kubectl" -n "$ns" create secret generic etcd-server-tls \
  --from-file=ca.crt --from-file=tls.crt=etcd.crt --from-file=tls.key=etcd.key
"$kubectl" -n "$ns" create secret generic ebb-etcd-client-tls \
  --from-file=ca.crt --from-file=tls.crt=client.crt --from-file=tls.key=client.key
echo "Secrets etcd-server-tls and ebb-etcd-client-tls created in $ns."
echo "$dir/ca.key signs whatever etcd will trust: move it offline (or shred -u it if you will never renew)."
