#!/usr/bin/env bash
# Installs a Debian package for its binaries only, without running the system service it ships:
#     ops/apt-install.sh PACKAGE [SERVICE]        (SERVICE defaults to PACKAGE; run as root)
# `make test` uses it for prometheus (promtool and prometheus; the tests run their own on a temporary config)
# and ops/localstack.py for postgresql (the stack runs its own cluster under .run/pg). Left alone, the
# packages' maintainer scripts start a system server (prometheus on port 9090, a PostgreSQL cluster on 5432)
# and enable it at boot (a systemd unit and SysV rc links); here it is neither started nor left enabled.
#
# apt's own output (hundreds of lines) goes to .run/logs/apt-install-PACKAGE.log; this prints one line per
# package it installs, and on a failure the log's last lines and where the rest is.
set -euo pipefail

package=$1
service=${2:-$1}
root=$(cd "$(dirname "$0")/.." && pwd)
# Both overridable so that a test can run this script without touching the system.
policy=${APT_INSTALL_POLICY_RC_D:-/usr/sbin/policy-rc.d}
logs=${APT_INSTALL_LOG_DIR:-$root/.run/logs}

if mkdir -p "$logs" 2>/dev/null && [ -w "$logs" ]; then
  log=$logs/apt-install-$package.log
else
  log=$(mktemp -t "apt-install-$package.XXXXXX.log")
fi
: >"$log"

failed() {
  echo "ops/apt-install.sh: $1 failed (exit $2); the last lines of its log, $log:" >&2
  tail -n 30 "$log" | sed 's/^/  | /' >&2
  exit "$2"
}

# Runs a command with its output in the log only.
quietly() {
  local status=0
  "$@" >>"$log" 2>&1 || status=$?
  [ "$status" = 0 ] || failed "\`$*\`" "$status"
}

if [ ! -e "$policy" ]; then
  # invoke-rc.d and deb-systemd-invoke ask this script before they start a service; 101 means "not now".
  # Only while this install runs: an existing policy (Docker images ship one) is left as it is.
  trap 'rm -f "$policy"' EXIT
  printf '#!/bin/sh\n# written by ops/apt-install.sh for one apt-get install\nexit 101\n' >"$policy"
  chmod 755 "$policy"
fi

export DEBIAN_FRONTEND=noninteractive
echo "apt-get install $package (apt's output: $log)"
quietly apt-get update -q
# One line per package as dpkg sets it up: "Setting up NAME (VERSION) ...".
status=0
apt-get install -y -q --no-install-recommends "$package" 2>&1 | tee -a "$log" | awk '
  / newly installed, / { printf "  %d package%s to install\n", $3, $3 == 1 ? "" : "s"; fflush() }
  /^Setting up / { printf "  installed %s %s\n", $3, $4; fflush() }' || status=$?
[ "$status" = 0 ] || failed "apt-get install $package" "$status"

# Disabled this way, the package's later upgrades keep it disabled. systemctl also turns the SysV rc links
# off, and works without a running systemd (a container); without systemctl there are only the rc links.
if [ -d /run/systemd/system ]; then
  quietly systemctl disable --now "$service.service"
elif command -v systemctl >/dev/null; then
  quietly systemctl disable "$service.service"
else
  quietly update-rc.d "$service" disable
fi
echo "installed $package; its system service $service is not running and not enabled at boot"
