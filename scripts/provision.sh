#!/usr/bin/env bash
# Provision the container runtimes anyswe needs on a Debian 12 machine, idempotently.
#
#   scripts/provision.sh            docker + apptainer + the base image (and its SIF)
#   scripts/provision.sh docker     only the docker engine
#   scripts/provision.sh apptainer  only apptainer
#   scripts/provision.sh image      only the base image
#   scripts/provision.sh helper     a C compiler and static libc (anyswe builds its in-sandbox helper)
#   scripts/provision.sh browser    headless Chromium (for the report tests)
#   scripts/provision.sh registry   Debian's docker-registry (a real registry for the pull tests)
#   scripts/provision.sh harbor     Harbor 0.26.0 and a private `docker compose` for bench/harbor.py (not in all)
#
# Every step is a no-op where the thing already works: a workstation with a running docker
# daemon, or an HPC node with apptainer installed, is left alone. Nothing is pulled from a
# container registry: the base image is built from Debian packages with mmdebstrap. The Debian
# mirror is read from this machine's own apt sources, never written down here.
set -euo pipefail

ANYSWE_HOME=${ANYSWE_HOME:-/var/lib/anyswe}
APPTAINER_ROOT=${ANYSWE_APPTAINER_ROOT:-$ANYSWE_HOME/apptainer-root}
BASE_IMAGE=${ANYSWE_BASE_IMAGE:-anyswe/base:bookworm}
BASE_PACKAGES=python3,python3-pytest,git,patch,ca-certificates,procps
OLD_BASE_IMAGE=anyswe/base:bullseye
LOG_DIR=${ANYSWE_LOG_DIR:-$ANYSWE_HOME/log}
BIN_DIR=${ANYSWE_BIN_DIR:-/usr/local/bin}

log() { printf '[provision] %s\n' "$*" >&2; }
die() { printf '[provision] error: %s\n' "$*" >&2; exit 1; }

apt_updated=0
apt_install() {
  local missing=()
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || die "need root to install: ${missing[*]}"
  if [ $apt_updated -eq 0 ]; then
    log "apt-get update"
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# The first Debian mirror URI of this machine's apt sources (deb822 or one-line format).
debian_mirror() {
  local uri=""
  if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
    uri=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /debian\/?$/) {print $i; exit}}' \
      /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n1)
  fi
  if [ -z "$uri" ] && [ -f /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):\/\/.*debian\/?$/) {print $i; exit} }' \
      /etc/apt/sources.list | head -n1)
  fi
  [ -n "$uri" ] || die "no Debian mirror found in /etc/apt/sources.list{,.d}"
  printf '%s\n' "${uri%/}"
}

docker_ok() { timeout 20 docker info >/dev/null 2>&1; }

# A live, non-zombie process with this pid (a killed daemon lingers as a zombie for a while).
process_running() {
  local pid=$1 state
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

provision_docker() {
  if docker_ok; then log "docker: daemon answers"; return 0; fi
  command -v dockerd >/dev/null 2>&1 || apt_install docker.io
  command -v docker >/dev/null 2>&1 || apt_install docker.io
  mkdir -p "$LOG_DIR"
  # A daemon killed with SIGKILL (a machine's session ending) leaves pid files that make the next
  # dockerd refuse to start; remove them when their process is gone.
  local f pid
  for f in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
    [ -f "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if ! process_running "$pid"; then rm -f "$f"; fi
  done
  log "docker: starting dockerd (log: $LOG_DIR/dockerd.log)"
  # setsid: the daemon must outlive this script and the shell that ran it.
  setsid dockerd >>"$LOG_DIR/dockerd.log" 2>&1 </dev/null &
  local daemon=$!
  for _ in $(seq 1 60); do
    docker_ok && { log "docker: daemon answers"; return 0; }
    kill -0 "$daemon" 2>/dev/null || break
    sleep 1
  done
  tail -n 30 "$LOG_DIR/dockerd.log" >&2 || true
  die "dockerd did not start (see the log above)"
}

apptainer_ok() { timeout 20 apptainer --version >/dev/null 2>&1; }

provision_apptainer() {
  # Our own root: its wrapper and configuration are kept current (they land with the next provision).
  if [ -x "$APPTAINER_ROOT/usr/bin/apptainer" ]; then configure_apptainer; install_apptainer_wrapper; fi
  if apptainer_ok; then log "apptainer: $(apptainer --version)"; return 0; fi
  apt_install mmdebstrap util-linux
  if [ ! -x "$APPTAINER_ROOT/usr/bin/apptainer" ]; then
    # Debian 12 has no apptainer package, and sid's needs a newer glibc than Debian 12's: it
    # runs from a sid root file system of its own, entered through the wrapper below.
    local mirror tmp
    mirror=$(debian_mirror)
    tmp="$APPTAINER_ROOT.tmp"
    rm -rf "$tmp"
    mkdir -p "$(dirname "$APPTAINER_ROOT")"
    log "apptainer: building a sid root file system in $APPTAINER_ROOT"
    # The mirror's sid Release file can be past its Valid-Until date.
    mmdebstrap --variant=apt --quiet \
      --aptopt='Acquire::Check-Valid-Until "false"' \
      --include=apptainer,squashfs-tools,e2fsprogs,mount,ca-certificates \
      sid "$tmp" "deb $mirror sid main" >&2
    cp /etc/hosts /etc/resolv.conf "$tmp/etc/" 2>/dev/null || true
    rm -f "$tmp/etc/localtime"
    cp -L /etc/localtime "$tmp/etc/localtime" 2>/dev/null || cp "$tmp/usr/share/zoneinfo/UTC" "$tmp/etc/localtime"
    # With `full`, apptainer aborts: root on some VMs lacks one of the capabilities it asks for.
    sed -i 's/^root default capabilities = .*/root default capabilities = file/' "$tmp/etc/apptainer/apptainer.conf"
    mv "$tmp" "$APPTAINER_ROOT"
  fi
  configure_apptainer
  install_apptainer_wrapper
  apptainer_ok || die "apptainer wrapper installed in $BIN_DIR but 'apptainer --version' fails"
  log "apptainer: $(apptainer --version)"
}

configure_apptainer() {
  # A sandbox's memory and pids limits are cgroups. Apptainer's default manager for them is systemd's,
  # which needs systemd as PID 1 (a container host or CI machine often has another init): without it
  # every limited instance fails to start. cgroupfs, the other manager, needs nothing.
  if [ "$(cat /proc/1/comm 2>/dev/null)" != systemd ]; then
    sed -i 's/^systemd cgroups = yes/systemd cgroups = no/' "$APPTAINER_ROOT/etc/apptainer/apptainer.conf"
  fi
}

install_apptainer_wrapper() {
  local src
  src="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/apptainer-wrapper.sh"
  mkdir -p "$BIN_DIR"
  # Written beside it and renamed over it: a job running apptainer meanwhile reads the old whole
  # script or the new one, never a truncated one.
  sed "s|@APPTAINER_ROOT@|$APPTAINER_ROOT|" "$src" >"$BIN_DIR/.apptainer.$$"
  chmod 0755 "$BIN_DIR/.apptainer.$$"
  mv -f "$BIN_DIR/.apptainer.$$" "$BIN_DIR/apptainer"
  # spython runs `singularity`.
  ln -sf "$BIN_DIR/apptainer" "$BIN_DIR/singularity"
}

# A Debian rootfs from Debian packages, imported into docker: $1 image name, $2 Debian suite.
build_base_image() {
  local image=$1 suite=$2
  docker_ok || die "docker is not running (run: $0 docker)"
  if docker image inspect "$image" >/dev/null 2>&1; then
    log "image: $image present"; return 0
  fi
  apt_install mmdebstrap
  local mirror tar
  mirror=$(debian_mirror)
  tar=$(mktemp --suffix=.tar)
  log "image: building $image from Debian $suite packages ($BASE_PACKAGES)"
  mmdebstrap --variant=apt --quiet --include="$BASE_PACKAGES" \
    --customize-hook='chroot "$1" git config --system init.defaultBranch main' \
    --customize-hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*' \
    "$suite" "$tar" "deb $mirror $suite main" >&2
  docker import --change 'CMD ["/bin/bash"]' --change 'ENV LANG=C.UTF-8' "$tar" "$image" >/dev/null
  rm -f "$tar"
  log "image: $image built"
}

provision_image() { build_base_image "$BASE_IMAGE" bookworm; }

# An older base (Debian 11: glibc 2.31) on which the agent bundles, built on Debian 12, are tried.
provision_image_bullseye() { build_base_image "$OLD_BASE_IMAGE" bullseye; }

# anyswe compiles a small static helper (anyswe/sandbox/helper/anyswe-exec.c) that every sandbox
# runs its commands through; it needs a C compiler and a static libc.
provision_helper() {
  local probe
  probe=$(mktemp)
  if ! { command -v cc >/dev/null 2>&1 && printf 'int main(void){return 0;}\n' | cc -static -x c - -o "$probe" 2>/dev/null; }; then
    apt_install gcc libc6-dev
  fi
  rm -f "$probe"
  log "helper: $(cc --version | head -n1)"
}

# Agent bundles are built on the host: Claude Code and OpenClaw with `npm ci` from committed locks,
# Hermes on Debian's own CPython 3.11; OpenClaw's bundle carries the host's libatomic as a fallback.
provision_agents() {
  if ! command -v npm >/dev/null 2>&1; then apt_install npm; fi
  apt_install python3.11 libatomic1
  log "agents: npm $(npm --version) (node $(node --version 2>/dev/null)), $(/usr/bin/python3.11 --version)"
}

# Headless Chromium checks the HTML report in the tests (Debian's package; nothing downloaded by npm).
provision_browser() {
  if command -v chromium >/dev/null 2>&1; then log "browser: $(chromium --version 2>/dev/null)"; return 0; fi
  apt_install chromium fonts-dejavu-core
  log "browser: $(chromium --version 2>/dev/null)"
}

# The reference distribution registry: the tests start their own on a loopback port (the package's
# own service is stopped and disabled: nothing listens unless a test asks for it).
provision_registry() {
  if ! command -v docker-registry >/dev/null 2>&1; then
    apt_install docker-registry
    if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
      systemctl disable --now docker-registry >/dev/null 2>&1 || true
    fi
    pkill -x docker-registry 2>/dev/null || true
  fi
  log "registry: $(docker-registry --version 2>/dev/null | head -n1)"
}

# bench/harbor.py compares anyswe with Harbor (PyPI `harbor`, pinned), which needs Python >= 3.12 and
# `docker compose` v2. Both go in a directory of their own under anyswe's cache, nothing system-wide:
# Harbor's venv, and a DOCKER_CONFIG whose cli-plugins holds the compose plugin (Debian 12's docker
# has none; trixie's docker-compose package has the static binary, taken from its .deb alone, the
# chain of checksums from the mirror's signed InRelease checked on the way).
HARBOR_VERSION=0.26.0
HARBOR_PYTHON=${ANYSWE_HARBOR_PYTHON:-/root/.pyenv/versions/3.12.1/bin/python}

harbor_dir() { printf '%s/bench/harbor\n' "${ANYSWE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/anyswe}"; }

# The SHA256 that the stanza of $2 (a Packages index or the text of a Release file) gives for $1.
sha256_of() {
  awk -v f="$1" '/^SHA256:/ {on = 1; next} /^[^ ]/ {on = 0} on && $3 == f {print $1; exit}' "$2"
}

provision_compose_plugin() {
  local dir plugin mirror arch tmp pkgs_sha deb deb_sha
  dir=$(harbor_dir)/docker-config
  plugin=$dir/cli-plugins/docker-compose
  if [ -x "$plugin" ] && DOCKER_CONFIG=$dir docker compose version >/dev/null 2>&1; then
    log "harbor: $(DOCKER_CONFIG=$dir docker compose version)"; return 0
  fi
  apt_install curl xz-utils gpgv debian-archive-keyring
  mirror=$(debian_mirror)
  arch=$(dpkg --print-architecture)
  tmp=$(mktemp -d)
  log "harbor: docker compose plugin from Debian trixie's docker-compose package"
  curl -fsS -o "$tmp/InRelease" "$mirror/dists/trixie/InRelease"
  gpgv --quiet --keyring /usr/share/keyrings/debian-archive-keyring.gpg --output "$tmp/Release" "$tmp/InRelease" 2>/dev/null \
    || die "trixie's InRelease does not verify against debian-archive-keyring"
  pkgs_sha=$(sha256_of "main/binary-$arch/Packages.xz" "$tmp/Release")
  curl -fsS -o "$tmp/Packages.xz" "$mirror/dists/trixie/main/binary-$arch/Packages.xz"
  [ -n "$pkgs_sha" ] && echo "$pkgs_sha  $tmp/Packages.xz" | sha256sum -c --quiet - || die "trixie's Packages.xz: checksum mismatch"
  xz -d "$tmp/Packages.xz"
  # The docker-compose stanza alone (paragraphs are separated by blank lines).
  awk -v RS= '/(^|\n)Package: docker-compose\n/' "$tmp/Packages" >"$tmp/stanza"
  deb=$(awk '/^Filename:/ {print $2; exit}' "$tmp/stanza")
  deb_sha=$(awk '/^SHA256:/ {print $2; exit}' "$tmp/stanza")
  [ -n "$deb" ] && [ -n "$deb_sha" ] || die "no docker-compose package in trixie's index"
  curl -fsS -o "$tmp/compose.deb" "$mirror/$deb"
  echo "$deb_sha  $tmp/compose.deb" | sha256sum -c --quiet - || die "$deb: checksum mismatch"
  mkdir -p "$tmp/x" "$dir/cli-plugins"
  dpkg-deb --fsys-tarfile "$tmp/compose.deb" | tar -x -C "$tmp/x" ./usr/libexec/docker/cli-plugins/docker-compose
  install -m 0755 "$tmp/x/usr/libexec/docker/cli-plugins/docker-compose" "$plugin.tmp"
  mv -f "$plugin.tmp" "$plugin"
  rm -rf "$tmp"
  log "harbor: $(DOCKER_CONFIG=$dir docker compose version) (from $deb)"
}

provision_harbor() {
  local venv lock stamp
  venv=$(harbor_dir)/venv
  # Every package of Harbor's tree pinned with its hashes (litellm among them: a compromised release
  # has existed), so the venv is the one the lock names; a changed lock makes a new venv.
  lock=$(cd "$(dirname "$0")/.." && pwd)/bench/locks/harbor.txt
  stamp=$(sha256sum "$lock" | cut -d' ' -f1)
  command -v uv >/dev/null 2>&1 || die "harbor: uv is not on PATH"
  [ -x "$HARBOR_PYTHON" ] || die "harbor: needs Python >= 3.12 at $HARBOR_PYTHON (set ANYSWE_HARBOR_PYTHON)"
  if [ "$(cat "$venv/.anyswe-lock" 2>/dev/null)" != "$stamp" ]; then
    log "harbor: installing harbor==$HARBOR_VERSION from $lock in $venv"
    rm -rf "$venv"
    # Compiled once here: with PYTHONDONTWRITEBYTECODE set (as on some machines) every harbor process
    # would compile its imports from source, CPU that is not Harbor's own (the Justfile compiles anyswe's).
    uv venv --quiet --python "$HARBOR_PYTHON" "$venv"
    uv pip install --quiet --compile-bytecode --require-hashes --python "$venv/bin/python" -r "$lock"
    echo "$stamp" >"$venv/.anyswe-lock"
  fi
  log "harbor: harbor $("$venv/bin/harbor" --version 2>/dev/null || echo "harbor $HARBOR_VERSION") in $venv"
  provision_compose_plugin
}

main() {
  local what=${1:-all}
  case "$what" in
    docker) provision_docker ;;
    apptainer) provision_apptainer ;;
    image) provision_image ;;
    image-bullseye) provision_image_bullseye ;;
    helper) provision_helper ;;
    browser) provision_browser ;;
    agents) provision_agents ;;
    registry) provision_registry ;;
    harbor) provision_harbor ;;
    all) provision_docker; provision_apptainer; provision_image; provision_helper; provision_agents; provision_registry ;;
    *) die "unknown target '$what' (docker, apptainer, image, image-bullseye, helper, agents, registry, browser, harbor, all)" ;;
  esac
}
main "$@"
