#!/usr/bin/env bash
# Make sure Debian's Chromium and its chromedriver are installed: the buyer's page's browser
# tests (tests/e2e/test_page.py) drive them. Installs whichever is missing (as root, with
# apt-get); no browser is ever downloaded by the tests themselves.
set -euo pipefail

PACKAGES=(chromium chromium-driver)

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
  echo "Chromium is not installed (as root on Debian: apt-get install ${PACKAGES[*]})" >&2
  exit 2
fi
echo "installing Chromium and chromedriver (Debian: ${PACKAGES[*]})"
export DEBIAN_FRONTEND=noninteractive
# The package lists may be older than the archive's files: update once if the first try fails.
apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null ||
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" >/dev/null; }
