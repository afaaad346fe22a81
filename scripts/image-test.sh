#!/usr/bin/env bash
# Prove the enclave image works with no network, and that it carries no key and no private
# data (make image-test; docs/deployment.md). Needs root and podman.
#
#   1. Canaries are planted in this checkout where private things live (keys/, out/) before
#      the image is built (scripts/image.sh release): a real private key and a canary row.
#   2. Every layer of localhost/selpe-audit:release is searched for them and for any PEM
#      private key: none may be there.
#   3. Inside the image, with no network: `doctor`; the whole demo (keygen, release with the
#      public pool: counts and selection, review, approve, model decode, audits); a release of
#      rows holding a canary person (patient id and complaint in three rows); `review`; and a
#      release that names another ledger folder, which the image must refuse.
#      `podman run` does not work on this kind of VM (cgroups v1 in hybrid mode, setrlimit
#      refused), so these run as build steps of a throwaway image FROM the release image, in a
#      network namespace of their own (`unshare --net`), as the image's user (10001).
#   4. Outside, the artifacts are copied out (`podman create` + `podman cp`) and verified with
#      stock OpenSSL; the canary must appear in no file of the canary release nor in any
#      console output, only in the input.
#
# Environment: IMAGE=name (default localhost/selpe-audit:release), KEEP=1 keeps the work folder.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/selpe-audit:release}
CANARY_ID=IMGCNRY7731
CANARY_TEXT="image canary zebra-quokka-7731 complaint"
start=$SECONDS
work=$(mktemp -d)
cleanup() {
  rm -f keys/zz-image-canary.pem out/zz-image-canary.csv
  podman rm -f selpe-audit-image-test >/dev/null 2>&1 || true
  podman rmi -f localhost/selpe-audit:image-test >/dev/null 2>&1 || true
  [ "${KEEP:-0}" = 1 ] && echo "kept $work" || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { printf '%4d s  %s\n' "$((SECONDS - start))" "$*"; }

# ---- 1. canaries where private things live, then the image -----------------------------
mkdir -p keys out
openssl genpkey -algorithm ed25519 -out keys/zz-image-canary.pem 2>/dev/null
key_canary=$(sed -n 2p keys/zz-image-canary.pem)   # the key's base64 body
printf 'patient_id,chief_complaint\n%s,%s\n' "$CANARY_ID" "$CANARY_TEXT" >out/zz-image-canary.csv
step "building $IMAGE (scripts/image.sh release)"
scripts/image.sh release

# ---- 2. the image's layers: no canary, no private key ----------------------------------
step "searching every layer of $IMAGE"
podman save --quiet --format docker-dir -o "$work/layers" "$IMAGE"
# Each layer on its own (a file a later layer replaces or deletes is still in the image):
# extracted, searched, deleted, so one layer's files are on disk at a time.
search_layer() {
  local fs=$1 needle hits
  for needle in "$key_canary" "$CANARY_ID" "zebra-quokka-7731"; do
    if hits=$(grep -rlaF -- "$needle" "$fs" 2>/dev/null); then
      fail "a canary planted in the checkout is in the image: $hits"
    fi
  done
  # A private key file: a PEM private key block at the start of a file, or anywhere in a
  # file named like a key (*.pem, *.key, id_*). (Keys compiled into a library as self-test
  # vectors, as in Debian's libgnutls, are neither.)
  hits=$(python3 - "$fs" <<'PY'
import os
import re
import sys

# The marker is split so this script does not match the repository's own key test.
pem = re.compile(rb"-----BEGIN ([A-Z0-9]+ )?PRIVATE" + rb" KEY-----\r?\n[A-Za-z0-9+/=]{16,}\r?\n")
for top, _, files in os.walk(sys.argv[1]):
    for name in files:
        path = os.path.join(top, name)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        keyish = name.endswith((".pem", ".key")) or name.startswith("id_")
        if pem.match(data.lstrip()) or (keyish and pem.search(data)):
            print(path)
PY
)
  [ -z "$hits" ] || fail "the image holds a private key file: $hits"
}
installed=0
for blob in "$work"/layers/*; do
  tar -tf "$blob" >/dev/null 2>&1 || continue   # the config and manifest are JSON, not tars
  mkdir "$work/fs"
  tar -xf "$blob" -C "$work/fs" 2>/dev/null || true
  rm "$blob"
  [ -x "$work/fs/opt/selpe-audit/bin/selpe-audit" ] && installed=1
  search_layer "$work/fs"
  rm -rf "$work/fs"
done
[ "$installed" = 1 ] || fail "no layer of the image holds the install"
rm -rf "$work/fs" "$work/layers"

# ---- 3. the image at work, with no network ------------------------------------------------
step "running doctor, the demo and a canary release inside the image (no network)"
ctx="$work/context"
mkdir -p "$ctx"
python3 - "$ctx/canary.csv" "$CANARY_ID" "$CANARY_TEXT" <<'PY'
import csv
import sys

from pathlib import Path

sample = Path("selpe_audit/data/ed_triage_sample.csv")
out, canary_id, canary_text = sys.argv[1:]
rows = list(csv.DictReader(sample.open(newline="")))
for r in rows[5:8]:  # one person, three visits, the canary's own complaint
    r.update(patient_id=canary_id, chief_complaint=canary_text)
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0]))
    w.writeheader()
    w.writerows(rows)
PY
cat >"$ctx/in-image.sh" <<'EOF'
# Runs inside the image as its user, with no network; each command's output to a file.
set -eu
mkdir /tmp/image-test
cd /tmp/image-test
run() {  # run OUT COMMAND...: a failure shows the command and its output's last lines
  out=$1; shift
  "$@" >"$out" 2>&1 || { echo "inside the image: $* failed:"; tail -n 25 "$out"; exit 1; }
}
schema=$(python -c 'from selpe_audit.schema import demo_schema_path as p; print(p())')
config=$(dirname "$schema")/demo_release.toml
run doctor.txt selpe-audit doctor
run demo.txt selpe-audit demo --out demo --llm-n 0
run canary-release.txt selpe-audit release --config "$config" --data /tmp/canary.csv \
  --schema "$schema" --dataset ed_triage_demo --candidates demo/candidate_pool.jsonl \
  --key demo/keys/release.pem --out canary-release
run canary-review.txt selpe-audit review canary-release \
  --release-key demo/keys/release.pub.pem
if selpe-audit release --config "$config" --data /tmp/canary.csv --schema "$schema" \
    --dataset other --candidates demo/candidate_pool.jsonl --key demo/keys/release.pem \
    --out elsewhere --lifetime-ledger /tmp/image-test/fresh-ledger >ledger.txt 2>&1; then
  echo "inside the image: a release charged another ledger folder"; exit 1
fi
rm -f /tmp/canary.csv
id -u >uid.txt
EOF
cat >"$ctx/Containerfile" <<EOF
FROM $IMAGE
COPY --chown=10001:10001 canary.csv in-image.sh /tmp/
RUN bash /tmp/in-image.sh
EOF
cp "$ctx/canary.csv" "$work/canary.csv"
rm_build() { podman rmi -f localhost/selpe-audit:image-test >/dev/null 2>&1 || true; }
if ! unshare --net podman build --isolation=chroot --tag localhost/selpe-audit:image-test \
    "$ctx" >"$work/build.log" 2>&1; then
  tail -n 30 "$work/build.log" >&2
  rm_build
  fail "a step inside the image failed (above)"
fi
podman create --name selpe-audit-image-test localhost/selpe-audit:image-test >/dev/null
podman cp selpe-audit-image-test:/tmp/image-test "$work/got"

# ---- 4. outside: the results, stock OpenSSL, the canary ------------------------------------
got=$work/got
step "checking the results outside the image"
[ "$(cat "$got/uid.txt")" = 10001 ] || fail "the steps ran as uid $(cat "$got/uid.txt"), not 10001"
grep -q "fixes the lifetime ledger folder" "$got/ledger.txt" \
  || fail "a flag naming another ledger folder was not refused: $(tail -n 2 "$got/ledger.txt")"
[ ! -e "$got/elsewhere" ] || fail "the refused release wrote an artifact"
[ ! -e "$got/fresh-ledger" ] || fail "the refused release made a ledger folder"
grep -q "everything the main job needs works" "$got/doctor.txt" || fail "doctor: $(tail -n 3 "$got/doctor.txt")"
for art in demo/release canary-release; do
  [ -s "$got/$art/release.json" ] || fail "$art/release.json was not written"
  n=0
  for sig in "$got/$art"/signatures/*.sig; do
    id=$(basename "$sig" .sig)
    pub=""
    for k in "$got"/demo/keys/*.pub.pem; do
      if openssl pkey -pubin -in "$k" -noout 2>/dev/null \
         && openssl pkeyutl -verify -pubin -inkey "$k" -rawin -in "$got/$art/release.json" \
              -sigfile "$sig" >/dev/null 2>&1; then pub=$k; fi
    done
    [ -n "$pub" ] || fail "$art: signature $id verifies with none of the image's public keys"
    n=$((n + 1))
  done
  [ "$n" -ge 1 ] || fail "$art has no signature"
  echo "        $art: $n signature(s) verified with openssl pkeyutl"
done
grep -q '"selection"' "$got/canary-release/release.json" || fail "the canary release has no selection"
for needle in "$CANARY_ID" "zebra-quokka-7731"; do
  hits=$(grep -rlaF -- "$needle" "$got" | grep -v '/canary.csv$' || true)
  [ -z "$hits" ] || fail "the canary reached: $hits"
done
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
step "passed: $IMAGE ($(numfmt --to=iec "$size")) released, reviewed and refused" \
  "a foreign ledger with no network; no key or canary in its layers or outputs"
printf '{"image": "%s", "bytes": %d, "seconds": %d}\n' "$IMAGE" "$size" \
  "$((SECONDS - start))" >out/image-test.json
