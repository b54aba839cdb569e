"""What a command sees of its sandbox: run by the parity test on every runtime, its JSON compared key by key."""

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time


def caps() -> dict[str, str]:
    with open("/proc/self/status") as fh:
        return {k: v.strip() for k, v in (line.split(":", 1) for line in fh) if k.startswith("Cap")}


def shell_status(command: str) -> int:
    """The exit status a shell reports for ``command`` (128+N for a death by signal N)."""
    out = subprocess.run(["sh", "-c", f"{command}; echo $?"], capture_output=True, text=True, check=False)
    return int(out.stdout.split()[-1])


def size(path: str) -> int | None:
    try:
        return shutil.disk_usage(path).total
    except OSError:
        return None


limits = {
    name: resource.getrlimit(getattr(resource, name))
    for name in ("RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_AS", "RLIMIT_MEMLOCK")
}
probe = {
    "uid_gid_groups": [os.getuid(), os.getgid(), sorted(os.getgroups())],
    "caps": caps(),
    "umask": oct(os.umask(0o022)),
    "cwd": os.getcwd(),
    "env": {k: v for k, v in sorted(os.environ.items())},
    "limits": limits,
    "hostname": socket.gethostname(),
    "tmp_writable": os.access("/tmp", os.W_OK),
    "tmp_size": size("/tmp"),
    "dev_shm_size": size("/dev/shm"),
    "locale": os.environ.get("LANG"),
    "timezone": time.tzname,
    "shell_sigterm": shell_status("sh -c 'kill -TERM $$'"),
    "shell_not_found": shell_status("/no/such/binary 2>/dev/null"),
    "python": sys.version.split()[0],
    "write_readonly_as_root": None,
}
with open("/tmp/.probe-ro", "w") as fh:
    fh.write("x")
os.chmod("/tmp/.probe-ro", 0o444)
try:
    with open("/tmp/.probe-ro", "w") as fh:
        fh.write("y")
    probe["write_readonly_as_root"] = True
except PermissionError:
    probe["write_readonly_as_root"] = False
os.unlink("/tmp/.probe-ro")
print(json.dumps(probe, indent=1, sort_keys=True))
