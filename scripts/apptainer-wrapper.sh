#!/usr/bin/env bash
# anyswe's apptainer wrapper (installed by scripts/provision.sh as `apptainer` and `singularity`).
#
# Apptainer comes from a Debian sid root file system at @APPTAINER_ROOT@ because Debian 12 has no
# package of it. This enters that root in a private mount namespace: the root is bind-mounted onto
# itself, /proc, /sys, /dev and the host directories that sandboxes use are rbind-mounted at the
# same paths, and pivot_root (apptainer refuses a plain chroot) makes it the root. Paths given to
# apptainer, and the cwd, therefore mean the same inside and out.
set -euo pipefail
ROOT=${ANYSWE_APPTAINER_ROOT:-@APPTAINER_ROOT@}
if [ "${1:-}" = "__enter" ]; then
  # A failure of the wrapper itself is the runtime's failure: apptainer's own way of saying so (exit
  # 255, FATAL), so that anyswe reports an infra error instead of passing the exit code off as the
  # command's.
  trap 'echo "FATAL:   anyswe apptainer wrapper: line $LINENO failed: $BASH_COMMAND" >&2; exit 255' ERR
  shift
  cwd=$1; shift
  mount --bind "$ROOT" "$ROOT"
  for d in /proc /sys /dev; do mount --rbind "$d" "$ROOT$d"; done
  # Host directories that hold images, overlays, checkouts, temp files and caches.
  binds=(/tmp /var/tmp /root /home /work /srv /mnt /var/lib/anyswe)
  [ -n "${HOME:-}" ] && binds+=("$HOME")
  [ -n "${TMPDIR:-}" ] && binds+=("$TMPDIR")
  [ -n "${XDG_CACHE_HOME:-}" ] && binds+=("$XDG_CACHE_HOME")
  binds+=("$cwd")
  IFS=: read -r -a extra <<<"${ANYSWE_APPTAINER_BINDS:-}"
  binds+=("${extra[@]}")
  # Every host path the command names (a SIF, an overlay, a pid file, each `--bind src:dst` source),
  # or the directory that holds it: a checkout outside the directories above (a CI clone under /check)
  # binds files from itself, and a process whose cwd is elsewhere in it (a notebook's kernel) must
  # still find them.
  for a in "$@"; do
    case "$a" in /*) ;; *) continue ;; esac
    IFS=, read -r -a specs <<<"$a"
    for s in "${specs[@]}"; do
      p=${s%%:*}
      case "$p" in /?*) ;; *) continue ;; esac
      if [ -d "$p" ]; then binds+=("$p"); elif [ -d "${p%/*}" ]; then binds+=("${p%/*}"); fi
    done
  done
  # Every apptainer call passes through here (a task makes several): the checks are bash builtins
  # over one read of the mount table, not a `mountpoint` and a `mkdir` process per directory.
  declare -A bound=()
  # Read whole, then parsed: `read` on a /proc file reads in pieces and seeks back between them.
  mounts=$(</proc/self/mountinfo)
  while read -r _ _ _ _ mp _; do if [ -n "$mp" ]; then bound[$mp]=1; fi; done <<<"$mounts"
  done_dirs=()
  for d in "${binds[@]}"; do
    [ -n "$d" ] && [ -d "$d" ] || continue
    case "$d" in /|/usr|/usr/*|/etc|/etc/*|/lib*|/bin|/sbin|/var) continue ;; esac
    [ -n "${bound[$ROOT$d]:-}" ] && continue
    # Under a directory bound already (recursively): its contents are there.
    for b in "${done_dirs[@]}"; do case "$d/" in "$b"/*) continue 2 ;; esac; done
    [ -d "$ROOT$d" ] || mkdir -p "$ROOT$d"
    mount --rbind "$d" "$ROOT$d"
    bound[$ROOT$d]=1
    done_dirs+=("$d")
  done
  cd "$ROOT"
  [ -d .oldroot ] || mkdir .oldroot
  pivot_root . .oldroot
  umount -l /.oldroot
  cd "$cwd" 2>/dev/null || cd /
  exec /usr/bin/apptainer "$@"
fi
[ -x "$ROOT/usr/bin/apptainer" ] || { echo "apptainer wrapper: no apptainer in $ROOT (run scripts/provision.sh apptainer)" >&2; exit 127; }
exec unshare --mount --propagation private "$0" __enter "$PWD" "$@"
