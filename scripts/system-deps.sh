#!/usr/bin/env bash
# System packages the tests need (Debian): openssl for the signature check with stock
# OpenSSL, chromium for rendering review.html headless, postgresql for the release's database
# source (tests start a throwaway server; the package's own cluster is not used). Skips what
# is already there.
set -euo pipefail
need=()
command -v openssl >/dev/null || need+=(openssl)
command -v chromium >/dev/null || need+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "note: missing ${need[*]}; the tests that need them will be skipped" >&2
  fi
fi
