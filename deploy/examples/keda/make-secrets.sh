#!/usr/bin/env bash
# The Secrets deploy/examples/keda mounts (namespaces ebb-system and serving must exist):
#   ebb-system/ebb-keda-tls         tls.crt, tls.key, ca.crt  Ebb's KEDA port: server certificate for
#                                                             ebb-keda.ebb-system.svc; ca.crt checks KEDA's
#   ebb-system/ebb-keda-token       token                     --keda-token-file
#   serving/ebb-keda-client-tls     ca.crt, tls.crt, tls.key  TriggerAuthentication ebb-keda (KEDA's side)
#   serving/ebb-keda-token          token                     vllm's EBB_KEDA_TOKEN (the trigger's tokenFromEnv)
# One CA signs both certificates. Usage: make-secrets.sh DIR (DIR must not exist; keys go there, 0600).
# Valid DAYS (default 365) days: renew before then (delete the four Secrets and run this again), or
# issue the TLS Secrets with cert-manager Certificates. KUBECTL names the kubectl to run.
set -euo pipefail
dir=${1:?usage: make-secrets.sh DIR (a new folder for the keys)}
days=${DAYS:-365}
kubectl=${KUBECTL:-kubectl}
mkdir -m 0700 "$dir"
cd "$dir"
umask 077
openssl req -x509 -newkey rsa:3072 -nodes -days "$days" -subj "/CN=ebb-keda-ca" -keyout ca.key -out ca.crt \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
# Ebb's side: the name KEDA dials (the ScaledObject's scalerAddress host)
openssl req -newkey rsa:3072 -nodes -subj "/CN=ebb-keda" -keyout server.key -out server.csr 2>/dev/null
printf '%s\n' "subjectAltName=DNS:ebb-keda.ebb-system.svc,DNS:ebb-keda.ebb-system.svc.cluster.local" \
  "extendedKeyUsage=serverAuth" "keyUsage=critical,digitalSignature,keyEncipherment" > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -out server.crt \
  -extfile server.ext 2>/dev/null
# KEDA's side: a client certificate only
openssl req -newkey rsa:3072 -nodes -subj "/CN=keda-operator" -keyout client.key -out client.csr 2>/dev/null
printf '%s\n' "extendedKeyUsage=clientAuth" "keyUsage=critical,digitalSignature,keyEncipherment" > client.ext
openssl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days "$days" -out client.crt \
  -extfile client.ext 2>/dev/null
openssl rand -hex 32 | tr -d '\n' > token
"$kubectl" -n ebb-system create secret generic ebb-keda-tls \
  --from-file=tls.crt=server.crt --from-file=tls.key=server.key --from-file=ca.crt
"$kubectl" -n ebb-system create secret generic ebb-keda-token --from-file=token
"$kubectl" -n serving create secret generic ebb-keda-client-tls \
  --from-file=ca.crt --from-file=tls.crt=client.crt --from-file=tls.key=client.key
"$kubectl" -n serving create secret generic ebb-keda-token --from-file=token
echo "Secrets created: ebb-system/ebb-keda-tls, ebb-system/ebb-keda-token, serving/ebb-keda-client-tls, serving/ebb-keda-token."
echo "$dir/ca.key signs whatever Ebb's KEDA port will trust: move it offline (or shred -u it)."
