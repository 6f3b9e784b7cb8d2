"""Do spiderd's dependencies install from wheels on every CPython it supports? (CI, next to the tests.)

This machine runs one Python; for the others, pip downloads each requirement as a wheel for that version
(markers evaluated for it), with no compiler involved.  x86_64 must be complete; for aarch64 the
requirements that would build from source are listed.  Exit 1 if an x86_64 wheel is missing.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

VERSIONS = ("3.11", "3.12", "3.13")
PLATFORMS = {
    "x86_64": ["manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_5_x86_64",
               "manylinux1_x86_64", "manylinux_2_34_x86_64", "any"],
    "aarch64": ["manylinux_2_17_aarch64", "manylinux2014_aarch64", "manylinux_2_28_aarch64",
                "manylinux_2_24_aarch64", "manylinux_2_34_aarch64", "any"],
}


def requirements(version: str) -> list[str]:
    config = configparser.ConfigParser()
    config.read(Path(__file__).resolve().parent.parent / "setup.cfg")
    environment = dict(default_environment(), python_version=version, python_full_version=version + ".0")
    wanted = []
    for line in config["options"]["install_requires"].strip().splitlines():
        requirement = Requirement(line.strip())
        if requirement.marker is None or requirement.marker.evaluate(environment):
            wanted.append(str(requirement.name) + str(requirement.specifier))
    return wanted


def missing(version: str, arch: str, wanted: list[str]) -> list[str]:
    """The requirements with no wheel for this Python and architecture (one pip run, then one each on a miss)."""
    with tempfile.TemporaryDirectory() as directory:
        def download(names: list[str]) -> bool:
            command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                       "--python-version", version, "-d", directory]
            for platform in PLATFORMS[arch]:
                command += ["--platform", platform]
            return subprocess.run(command + names, capture_output=True, text=True).returncode == 0

        if download(wanted):
            return []
        return [requirement for requirement in wanted if not download([requirement])]


def main() -> int:
    failed = False
    for version in VERSIONS:
        wanted = requirements(version)
        for arch in PLATFORMS:
            lacking = missing(version, arch, wanted)
            verdict = "all wheels" if not lacking else "from source: " + ", ".join(lacking)
            print(f"ci: CPython {version} {arch}: {len(wanted)} requirements, {verdict}")
            failed = failed or (arch == "x86_64" and bool(lacking))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
