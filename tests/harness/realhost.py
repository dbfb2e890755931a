"""What the host must give a real node, and the host state a real node leaves behind: cgroups, mounts, a bridge.

Owns the facts about this machine that ``realnode.py`` needs and the clean-up it cannot leave to its children:
which cgroup layout the host has (v1, hybrid or not, or the v2 unified hierarchy), what is missing for a real
node (``missing()``: root, writable cgroups, Debian's containerd, runc, CNI plugins and busybox-static, the
kubelet), making and removing a node's cgroup parent in every hierarchy, killing what is still in it, and
undoing the mounts (overlay snapshots, shm, the kubelet's rshared root, volumes) and the CNI bridge that the
runtime made. The kubelet and containerd are stopped by then; what they started is found by where it lives
(a cgroup below the node's parent, a mount below its directory, a shim serving its socket), never by name.
"""

from __future__ import annotations

import contextlib
import enum
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_CONTROLLERS = ("cpu", "cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer", "hugetlb", "systemd",
                  "unified")
"""The v1 hierarchies a kubelet with the cgroupfs driver and runc create cgroups in (those the host has; on a
hybrid host runc also mirrors each container into the controller-less v2 hierarchy at ``unified``)."""
RUNTIME_BINARIES = ("containerd", "containerd-shim-runc-v2", "runc", "ctr")
CNI_BIN_DIR = Path("/usr/lib/cni")
BUSYBOX = Path("/bin/busybox")


class CgroupLayout(enum.Enum):
    V1 = "v1"
    """One hierarchy per controller (``/sys/fs/cgroup/cpu``, ``.../memory``; hybrid hosts also mount v2 at
    ``unified``, with no controllers in it). The kubelet needs ``failCgroupV1: false``; runc works, crun not."""
    V2 = "v2"
    """The unified hierarchy at ``/sys/fs/cgroup`` (``cgroup.controllers`` there)."""


def cgroup_layout() -> CgroupLayout:
    return CgroupLayout.V2 if (CGROUP_ROOT / "cgroup.controllers").exists() else CgroupLayout.V1


def hierarchies(layout: CgroupLayout) -> list[Path]:
    """The mounted hierarchies a node's cgroups live in."""
    if layout is CgroupLayout.V2:
        return [CGROUP_ROOT]
    return [CGROUP_ROOT / c for c in V1_CONTROLLERS if (CGROUP_ROOT / c / "cgroup.procs").exists()]


def missing() -> list[str]:
    """What this host lacks to run a real node, one phrase each (empty: it can)."""
    gaps = []
    if os.geteuid() != 0:
        gaps.append("root (the kubelet and containerd run as root)")
    layout = cgroup_layout()
    for h in hierarchies(layout) or [CGROUP_ROOT]:
        if not os.access(h, os.W_OK):
            gaps.append(f"a writable cgroup hierarchy at {h}")
            break
    if layout is CgroupLayout.V1 and not (CGROUP_ROOT / "memory" / "cgroup.procs").exists():
        gaps.append("the memory cgroup controller")
    gaps += [f"{b} on PATH (Debian's containerd and runc)" for b in RUNTIME_BINARIES if shutil.which(b) is None]
    for plugin in ("bridge", "host-local", "loopback"):
        if not (CNI_BIN_DIR / plugin).exists():
            gaps.append(f"{CNI_BIN_DIR / plugin} (Debian's containernetworking-plugins)")
    if not BUSYBOX.exists():
        gaps.append(f"{BUSYBOX} (Debian's busybox-static)")
    if shutil.which("ip") is None:
        gaps.append("the ip command (iproute2)")
    return gaps


def _chain(root: Path, path: Path) -> list[Path]:
    """``root``'s descendants from its child down to ``path``: ``/a``, ``/a/b``, ``/a/b/c`` for ``/a/b/c``."""
    rel = path.relative_to(root)
    return [root / p for p in reversed(rel.parents[:-1])] + [path]


def make_cgroup_parent(relative: str, layout: CgroupLayout) -> None:
    """Create ``/<relative>`` in every hierarchy (the kubelet's ``cgroupRoot`` must exist before it starts)."""
    for h in hierarchies(layout):
        path = h / relative.strip("/")
        path.mkdir(parents=True, exist_ok=True)
        if layout is CgroupLayout.V1 and h.name == "cpuset":  # a v1 cpuset child starts with no CPUs or nodes
            for d in _chain(h, path):
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (d / knob).read_text().strip():
                        (d / knob).write_text((d.parent / knob).read_text())
        if layout is CgroupLayout.V2:
            _enable_controllers(h, path)


def _enable_controllers(root: Path, path: Path) -> None:
    """v2: delegate cpu, memory and pids (cpuset, io, hugetlb where present) from the root down to ``path``."""
    available = (root / "cgroup.controllers").read_text().split()
    wanted = [c for c in ("cpu", "cpuset", "memory", "pids", "io", "hugetlb") if c in available]
    for d in [root, *_chain(root, path)]:
        for c in wanted:
            # Not delegable here (e.g. a threaded subtree): the kubelet then names what it lacks.
            with contextlib.suppress(OSError):
                (d / "cgroup.subtree_control").write_text(f"+{c}")


def kill_cgroup_tree(relative: str, layout: CgroupLayout) -> int:
    """SIGKILL every process in ``/<relative>`` and below (the containers a stopped node left); how many."""
    pids: set[int] = set()
    for h in hierarchies(layout):
        top = h / relative.strip("/")
        for procs in top.rglob("cgroup.procs") if top.exists() else ():
            pids.update(int(p) for p in procs.read_text().split())
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def remove_cgroup_tree(relative: str, layout: CgroupLayout, timeout_s: float = 10.0) -> list[str]:
    """Remove ``/<relative>`` and everything below it in every hierarchy, deepest first; what could not be
    removed (a cgroup whose killed processes had not exited within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    left: list[str] = []
    for h in hierarchies(layout):
        top = h / relative.strip("/")
        if not top.exists():
            continue
        for d in sorted((p for p in [top, *top.rglob("*")] if p.is_dir()), key=lambda p: -len(p.parts)):
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        left.append(str(d))
                        break
                    time.sleep(0.05)
    return left


def remove_if_empty(relative: str, layout: CgroupLayout) -> None:
    """Remove ``/<relative>`` in every hierarchy where it has no child cgroup and no process left."""
    for h in hierarchies(layout):
        with contextlib.suppress(OSError):
            (h / relative.strip("/")).rmdir()


def shims_of(socket: Path) -> list[int]:
    """The runc shims serving the containerd at ``socket`` (they outlive it: containers keep running)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            pids.append(int(proc.name))
    return pids


def unmount_below(directory: Path) -> list[str]:
    """Detach every mount at or below ``directory`` (deepest first); the ones that failed, with the reason."""
    prefix = str(directory.resolve())
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            mounts.append(point)
    failed = []
    for point in sorted(set(mounts), key=lambda p: -p.count("/")):
        result = subprocess.run(["umount", "-l", point], capture_output=True, text=True, check=False)
        if result.returncode != 0 and "not mounted" not in result.stderr:
            failed.append(f"{point}: {result.stderr.strip()}")
    return failed


def delete_link(name: str) -> None:
    """Delete a network link (the node's CNI bridge) if it is there."""
    subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)


def used_subnets() -> set[str]:
    """The IPv4 routes' destinations on this host (a node's pod subnet must not be one of them)."""
    out = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line}
