#!/usr/bin/env python3
"""Adds musl to a cargo-cyclonedx SBOM: the binary links it statically, and no crate names it.
The version is read from the libc.a the binary was linked with (rustup's self-contained musl,
which carries its version string). Paths of the build machine in references are made relative,
so that the file does not depend on where the tree was checked out.

usage: sbom-musl.py IN.json LIBC.a OUT.json
"""

import json
import os
import re
import sys


def musl_version(libc):
    with open(libc, "rb") as f:
        found = set(re.findall(rb"\x00(1\.[0-9]+\.[0-9]+)\x00", f.read()))
    if len(found) != 1:
        sys.exit(f"sbom-musl: cannot tell musl's version in {libc}: found {sorted(found)}")
    return found.pop().decode()


def main():
    source, libc, out = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(source, encoding="utf-8") as f:
        text = f.read()
    text = text.replace("file://" + os.getcwd(), "file://.")
    bom = json.loads(text)
    version = musl_version(libc)
    purl = f"pkg:generic/musl@{version}?download_url=https://musl.libc.org/releases/musl-{version}.tar.gz"
    bom["components"].append(
        {
            "type": "library",
            "bom-ref": purl,
            "name": "musl",
            "version": version,
            "description": "The C standard library, linked statically (rustup's self-contained musl)",
            "scope": "required",
            "licenses": [{"license": {"id": "MIT"}}],
            "purl": purl,
            "externalReferences": [{"type": "website", "url": "https://musl.libc.org/"}],
        }
    )
    root = bom["metadata"]["component"]["bom-ref"]
    for dependency in bom.get("dependencies", []):
        if dependency["ref"] == root:
            dependency.setdefault("dependsOn", []).append(purl)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(bom, f, indent=1)
        f.write("\n")
    print(f"sbom: {len(bom['components'])} components (musl {version} among them) in {out}")


if __name__ == "__main__":
    main()
