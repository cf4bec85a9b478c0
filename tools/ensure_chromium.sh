#!/usr/bin/env bash
# Make sure headless Chromium is available for the built-book check (tests/test_book_browser.py).
# Installs Debian's `chromium` when missing and we are root; otherwise explains. Under CI the
# check is never skipped, so a missing browser there is an error.
set -u
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium: installing Debian's chromium (once)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq chromium >/dev/null && exit 0
fi
if [ "${CI:-}" = "true" ]; then
  echo "chromium: not installed and could not be installed; the browser check cannot be skipped under CI" >&2
  exit 1
fi
echo "chromium: not available and not installable here (needs root + apt-get); the browser check will be skipped"
exit 0
