#!/usr/bin/env bash
# System packages the tests need (Debian): openssl for the signature check with stock
# OpenSSL, chromium for rendering review.html headless. Skips what is already there.
set -euo pipefail
need=()
command -v openssl >/dev/null || need+=(openssl)
command -v chromium >/dev/null || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "note: missing ${need[*]}; the tests that need them will be skipped" >&2
  fi
fi
