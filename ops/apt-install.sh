#!/usr/bin/env bash
# Installs a Debian package for its binaries only, without running the system service it ships:
#     ops/apt-install.sh PACKAGE [SERVICE]        (SERVICE defaults to PACKAGE; run as root)
# `make test` uses it for prometheus (promtool and prometheus; the tests run their own on a temporary config)
# and ops/localstack.py for postgresql (the stack runs its own cluster under .run/pg). Left alone, the
# packages' maintainer scripts start a system server (prometheus on port 9090, a PostgreSQL cluster on 5432)
# and enable it at boot (a systemd unit and SysV rc links); here it is neither started nor left enabled.
set -euo pipefail

package=$1
service=${2:-$1}

policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
  # invoke-rc.d and deb-systemd-invoke ask this script before they start a service; 101 means "not now".
  # Only while this install runs: an existing policy (Docker images ship one) is left as it is.
  trap 'rm -f "$policy"' EXIT
  printf '#!/bin/sh\n# written by ops/apt-install.sh for one apt-get install\nexit 101\n' >"$policy"
  chmod 755 "$policy"
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "$package"

# Disabled this way, the package's later upgrades keep it disabled. systemctl also turns the SysV rc links
# off, and works without a running systemd (a container); without systemctl there are only the rc links.
if [ -d /run/systemd/system ]; then
  systemctl disable --now "$service.service"
elif command -v systemctl >/dev/null; then
  systemctl disable "$service.service"
else
  update-rc.d "$service" disable
fi
echo "installed $package; its system service $service is not running and not enabled at boot"
