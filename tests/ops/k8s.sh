#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# client/examples/kubernetes/preduce.yaml, as far as this machine can check
# it (no Kubernetes tool runs here, so the manifests are untested against a
# cluster): the file parses as YAML documents, holds the kinds that
# docs/operations.md names, and every --set the daemons get is one `preduced -t` accepts
# (an unknown key or a bad value would stop the pod at start). Root is not
# needed; python3-yaml is Debian's. Bounded: about 1 s.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
. tests/ops/lib.sh

BUILD=${BUILD:-build}
Y=client/examples/kubernetes/preduce.yaml
PY=/usr/bin/python3

if ! $PY -c 'import yaml' 2>/dev/null; then
    skip k8s "python3-yaml missing (apt-get install python3-yaml)"
    finish
    exit
fi

kinds=$($PY - "$Y" <<'PYEOF'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
print(" ".join(sorted(d["kind"] for d in docs)))
PYEOF
)
if [ "$kinds" = "DaemonSet Deployment Namespace Secret Service" ]; then
    pass "the manifests parse: $kinds"
else
    fail kinds "got '$kinds'"
fi

# Each container's options, one per line, with $(NODE_IP) made an address.
sets=$($PY - "$Y" <<'PYEOF'
import shlex, sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if not d or d["kind"] not in ("Deployment", "DaemonSet"):
        continue
    for c in d["spec"]["template"]["spec"]["containers"]:
        words = c["command"] + c.get("args", [])
        if words[:2] == ["/bin/sh", "-c"]:
            words = shlex.split(words[2])[1:]
        words = [w.replace("$(NODE_IP)", "10.0.0.1") for w in words]
        print(d["metadata"]["name"], " ".join(w for w in words
                                              if w.startswith("--")))
PYEOF
)
T=$(mktemp -d /tmp/preduce-k8s.XXXXXX)
trap 'rm -rf "$T"' EXIT
head -c 32 /dev/urandom >"$T/cluster.key"
: >"$T/empty.conf"
chmod 600 "$T/cluster.key"
while read -r name opts; do
    [ -n "$name" ] || continue
    # The key's path is the Secret's mount: checked with a real key here.
    opts=${opts//\/etc\/preduce\/key\/cluster.key/$T/cluster.key}
    # shellcheck disable=SC2086
    check "$name: preduced -t accepts its options" \
        "$BUILD/preduced" -t -c "$T/empty.conf" $opts
done <<<"$sets"
finish
