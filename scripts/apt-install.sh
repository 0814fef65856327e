#!/usr/bin/env bash
# Installs Debian packages for the test scripts: through sudo unless root, and with the package
# lists refreshed once if the first try fails (a fresh machine's lists can be missing or stale).
#
#     scripts/apt-install.sh PACKAGE...
set -euo pipefail
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
install() { $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
install "$@" || { $sudo apt-get update -qq >/dev/null && install "$@"; }
