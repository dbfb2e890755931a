#!/usr/bin/env python3
"""Build the real node's two local OCI images from Debian's ``busybox-static``, with no registry and no builder.

Owns the images the real node (``tests/harness/realnode.py``) runs: ``localhost/podtailor/pause`` (the sandbox:
busybox ``sleep`` forever) and ``localhost/podtailor/busybox`` (the workload: busybox as ``/bin/sh`` and its
applets). Each is one uncompressed layer (``/bin/busybox`` and a symlink per applet) written as an OCI image
layout tarball that ``ctr -n k8s.io images import`` loads; the layer's mtimes are fixed, so the digest only
changes with the busybox binary or this script's lists. Usage: ``scripts/build-images.py [OUT_DIR]`` (default
``~/.cache/podtailor/images``); prints one line per image, ``NAME PATH``.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
from pathlib import Path

BUSYBOX = Path(os.environ.get("PODTAILOR_BUSYBOX", "/bin/busybox"))
PAUSE_IMAGE = "localhost/podtailor/pause:1"
WORKLOAD_IMAGE = "localhost/podtailor/busybox:1"
APPLETS = ("sh", "sleep", "cat", "head", "tr", "dd", "echo", "ls", "ps", "grep", "true", "kill", "awk", "wc", "touch",
           "rm", "id")
DIRS = ("bin", "dev", "etc", "proc", "sys", "tmp", "var", "run")
IMAGES = {PAUSE_IMAGE: ["/bin/sleep", "infinity"], WORKLOAD_IMAGE: ["/bin/sh"]}


def _layer(busybox: bytes) -> bytes:
    """A tar of the root filesystem: the directories, /bin/busybox and one symlink per applet (mtime 0)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in DIRS:
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(busybox), 0o755
        tar.addfile(info, io.BytesIO(busybox))
        for applet in APPLETS:
            link = tarfile.TarInfo(f"bin/{applet}")
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, "busybox", 0o777
            tar.addfile(link)
    return out.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return {"digest": f"sha256:{digest}", "size": len(data)}


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def write_image(name: str, entrypoint: list[str], layer: bytes, path: Path) -> None:
    """The OCI image layout (oci-layout, index.json, blobs) of one image, as a tarball at ``path``."""
    layer_digest = f"sha256:{hashlib.sha256(layer).hexdigest()}"
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"], "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": [layer_digest]}}
    tmp = path.with_suffix(".tmp")
    with tarfile.open(tmp, mode="w") as tar:
        layer_ref = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(tar, layer)}
        config_ref = {"mediaType": "application/vnd.oci.image.config.v1+json", **_blob(tar, _json(config))}
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": config_ref, "layers": [layer_ref]}
        manifest_ref = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **_blob(tar, _json(manifest)),
                        "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
                        "platform": {"architecture": "amd64", "os": "linux"}}
        for member, data in (("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
                             ("index.json", _json({"schemaVersion": 2, "manifests": [manifest_ref]}))):
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(path)


def build(out_dir: Path) -> dict[str, Path]:
    """Both images in ``out_dir`` (written only when the busybox binary or the lists changed); name -> tarball."""
    if not BUSYBOX.is_file():
        raise SystemExit(f"{BUSYBOX} is missing: install Debian's busybox-static (scripts/setup.sh does)")
    busybox = BUSYBOX.read_bytes()
    stamp = hashlib.sha256(busybox + repr((APPLETS, DIRS, IMAGES)).encode()).hexdigest()[:16]
    out_dir.mkdir(parents=True, exist_ok=True)
    layer = b""
    paths = {}
    for name, entrypoint in IMAGES.items():
        base = name.rsplit("/", 1)[1].replace(":", "-")
        path = out_dir / f"{base}-{stamp}.tar"
        if not path.exists():
            layer = layer or _layer(busybox)
            write_image(name, entrypoint, layer, path)
            for stale in out_dir.glob(f"{base}-*.tar"):  # an older busybox's or list's
                if stale != path:
                    stale.unlink(missing_ok=True)
        paths[name] = path
    return paths


def main() -> None:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.home() / ".cache" / "podtailor" / "images"
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1].startswith("-")):
        raise SystemExit("usage: scripts/build-images.py [OUT_DIR]")
    for name, path in build(out_dir).items():
        print(name, path)


if __name__ == "__main__":
    if shutil.which("ctr") is None:
        print("note: ctr (Debian's containerd) is not installed; the images are built but cannot be loaded",
              file=sys.stderr)
    main()
