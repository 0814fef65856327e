#!/bin/sh
# Installs ollamars and runs it as a service: the binary in PREFIX/bin, and
#   Linux (systemd): a system user `ollamars`, its state directory /var/lib/ollamars (models in
#     /var/lib/ollamars/models), /etc/ollamars/ollamars.env for settings, and the unit
#     ollamars.service, enabled and started;
#   macOS (launchd): a LaunchAgent for the current user, loaded.
# Running it again brings an existing installation up to date (idempotent).
#
# Usage: packaging/install.sh [--prefix DIR] [--binary FILE] [--no-service] [--uninstall [--purge]]
#   --prefix DIR    install the binary in DIR/bin (default /usr/local)
#   --binary FILE   install this built binary (default: build with cargo from this checkout)
#   --no-service    install the binary only (no user, no unit); needs no root for a prefix you own
#   --uninstall     stop and remove the service and the binary; models and settings are kept
#   --purge         with --uninstall: also remove the models, the settings and the user
set -eu

prefix=/usr/local
binary=""
service=yes
action=install
purge=no
here=$(cd "$(dirname "$0")" && pwd)

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "install.sh: $*"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --binary) [ $# -ge 2 ] || die "--binary needs a file"; binary=$2; shift 2 ;;
    --binary=*) binary=${1#--binary=}; shift ;;
    --no-service) service=no; shift ;;
    --uninstall) action=uninstall; shift ;;
    --purge) purge=yes; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[ "$purge" = no ] || [ "$action" = uninstall ] || die "--purge only goes with --uninstall"
case "$prefix" in /*) ;; *) prefix="$(pwd)/$prefix" ;; esac
prefix=${prefix%/}
bindir="$prefix/bin"
target="$bindir/ollamars"

os=$(uname -s)
is_root=no
[ "$(id -u)" -eq 0 ] && is_root=yes

unit_dir=/etc/systemd/system
unit="$unit_dir/ollamars.service"
env_dir=/etc/ollamars
state_dir=/var/lib/ollamars
agent_label=ai.ollamars.serve
agent="${HOME:-}/Library/LaunchAgents/$agent_label.plist"

# Refuse, before changing anything, what this user cannot do, and say why.
need_root_for_service() {
  [ "$service" = yes ] || return 0
  [ "$os" = Linux ] || return 0
  [ "$is_root" = yes ] && return 0
  die "the system service needs root: it creates the 'ollamars' user, /var/lib/ollamars and \
$unit, and enables the unit. Re-run with sudo, or add --no-service to $action only the binary."
}
check_prefix_writable() {
  dir=$bindir
  while [ ! -e "$dir" ]; do dir=$(dirname "$dir"); done
  [ -w "$dir" ] || die "cannot write to $dir (for $bindir): re-run with sudo, or choose a \
--prefix you own (e.g. --prefix \"\$HOME/.local\")"
}

has_systemd() { [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; }

install_binary() {
  if [ -z "$binary" ]; then
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust (https://rustup.rs), or pass --binary FILE"
    say "building ollamars (cargo build --release)..."
    (cd "$here/.." && cargo build --release --bin ollamars)
    binary="$here/../target/release/ollamars"
  fi
  if [ ! -f "$binary" ] || [ ! -x "$binary" ]; then die "$binary is not an executable file"; fi
  mkdir -p "$bindir"
  # Through a temporary name in the same directory: a running ollamars keeps its old file and
  # no half-copied binary ever has the final name.
  tmp="$bindir/.ollamars.install.$$"
  cp "$binary" "$tmp"
  chmod 0755 "$tmp"
  mv -f "$tmp" "$target"
  say "installed $target"
}

install_systemd() {
  if ! getent group ollamars >/dev/null 2>&1; then
    groupadd --system ollamars
  fi
  if ! id -u ollamars >/dev/null 2>&1; then
    useradd --system --gid ollamars --home-dir "$state_dir" --no-create-home \
      --shell /usr/sbin/nologin --comment "ollamars daemon" ollamars
    say "created the system user 'ollamars'"
  fi
  mkdir -p "$state_dir/models" "$env_dir"
  chown -R ollamars:ollamars "$state_dir"
  chmod 0750 "$state_dir"
  if [ ! -e "$env_dir/ollamars.env" ]; then
    cat >"$env_dir/ollamars.env" <<'EOF'
# Settings of the ollamars service, one VAR=value a line (`ollamars serve --help` lists them).
# Restart the service after a change: systemctl restart ollamars
#OLLAMARS_HOST=127.0.0.1:11434
#OLLAMARS_KEEP_ALIVE=5m
#OLLAMARS_NUM_PARALLEL=1
EOF
    chmod 0644 "$env_dir/ollamars.env"
  fi
  mkdir -p "$unit_dir"
  sed "s#^ExecStart=.*#ExecStart=$target serve#" "$here/systemd/ollamars.service" >"$unit.tmp"
  mv -f "$unit.tmp" "$unit"
  say "installed $unit (settings in $env_dir/ollamars.env)"
  if has_systemd; then
    systemctl daemon-reload
    systemctl enable ollamars.service
    systemctl restart ollamars.service
    say "ollamars.service is enabled and running: systemctl status ollamars"
  else
    say "systemd is not running here: the unit is installed but not started"
  fi
}

install_launchd() {
  [ -n "${HOME:-}" ] || die "HOME is not set: cannot find ~/Library/LaunchAgents"
  mkdir -p "$(dirname "$agent")" "$HOME/Library/Logs"
  sed -e "s#<string>/usr/local/bin/ollamars</string>#<string>$target</string>#" \
      -e "s#<string>/tmp/ollamars.log</string>#<string>$HOME/Library/Logs/ollamars.log</string>#" \
      "$here/launchd/$agent_label.plist" >"$agent.tmp"
  mv -f "$agent.tmp" "$agent"
  launchctl unload "$agent" >/dev/null 2>&1 || true
  launchctl load -w "$agent"
  say "installed and loaded $agent (log in ~/Library/Logs/ollamars.log)"
}

uninstall_systemd() {
  if has_systemd && systemctl list-unit-files ollamars.service >/dev/null 2>&1; then
    systemctl disable --now ollamars.service >/dev/null 2>&1 || true
  fi
  if [ -e "$unit" ]; then
    rm -f "$unit"
    has_systemd && systemctl daemon-reload
    say "removed $unit"
  fi
  if [ "$purge" = yes ]; then
    rm -rf "$state_dir" "$env_dir"
    if id -u ollamars >/dev/null 2>&1; then userdel ollamars; fi
    if getent group ollamars >/dev/null 2>&1; then groupdel ollamars; fi
    say "removed the models ($state_dir), the settings ($env_dir) and the user 'ollamars'"
  else
    say "kept the models in $state_dir and the settings in $env_dir (--purge removes them)"
  fi
}

uninstall_launchd() {
  if [ -e "$agent" ]; then
    launchctl unload -w "$agent" >/dev/null 2>&1 || true
    rm -f "$agent"
    say "removed $agent"
  fi
}

need_root_for_service
check_prefix_writable

if [ "$action" = install ]; then
  install_binary
  if [ "$service" = yes ]; then
    case "$os" in
      Linux) install_systemd ;;
      Darwin) install_launchd ;;
      *) say "no service for $os: run '$target serve' yourself" ;;
    esac
  fi
else
  if [ "$service" = yes ]; then
    case "$os" in
      Linux) uninstall_systemd ;;
      Darwin) uninstall_launchd ;;
    esac
  fi
  if [ -e "$target" ]; then
    rm -f "$target"
    say "removed $target"
  else
    say "$target is not installed"
  fi
fi
