#!/usr/bin/env bash
# The integration layer's system packages, from Debian: chromium and its driver (the page's browser test) and nginx
# (the reverse-proxy configuration of docs/SERVING.md), both in tests/test_serve_integration.py. Installs only what is
# missing, without recommended packages (a fresh Debian 12: about a minute).
#
#   bash .ci/install_browser.sh
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need+=(chromium-driver)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx)
if [ ${#need[@]} -eq 0 ]; then
    echo "chromium, chromedriver and nginx are installed"
    exit 0
fi
SUDO=
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "+ apt-get install --no-install-recommends ${need[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
