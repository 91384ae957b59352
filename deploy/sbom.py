#!/usr/bin/env python3
"""The image's software bill of materials, as CycloneDX 1.5 JSON: every crate compiled into the
release binary for one target (cargo's resolve graph from csi-pv-controller through normal
dependencies, platform-filtered), each with its version, licence and package URL, which is how
scanners match crates to advisories. Deterministic: the same Cargo.lock gives the same file.

usage: sbom.py TARGET-TRIPLE OUT.cdx.json
"""

import json
import subprocess
import sys
import uuid

ROOT = "csi-pv-controller"


def metadata(target):
    out = subprocess.run(
        ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", target],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def compiled(meta):
    """The ids of the packages the binary links: the root and its normal dependencies."""
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(p["id"] for p in meta["packages"] if p["name"] == ROOT)
    seen, todo = set(), [root]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for dep in nodes[current]["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]):
                todo.append(dep["pkg"])
    return root, seen


def component(package):
    purl = f"pkg:cargo/{package['name']}@{package['version']}"
    entry = {
        "type": "library",
        "bom-ref": purl,
        "name": package["name"],
        "version": package["version"],
        "purl": purl,
    }
    if package.get("license"):
        entry["licenses"] = [{"expression": package["license"]}]
    if package.get("description"):
        entry["description"] = " ".join(package["description"].split())
    return entry


def main():
    target, out = sys.argv[1], sys.argv[2]
    meta = metadata(target)
    packages = {p["id"]: p for p in meta["packages"]}
    root, ids = compiled(meta)
    app = component(packages[root])
    app["type"] = "application"
    libraries = sorted(
        (component(packages[i]) for i in ids if i != root),
        key=lambda c: (c["name"], c["version"]),
    )
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    ref = {i: component(packages[i])["bom-ref"] for i in ids}
    dependencies = sorted(
        (
            {
                "ref": ref[i],
                "dependsOn": sorted(
                    ref[d["pkg"]]
                    for d in nodes[i]["deps"]
                    if d["pkg"] in ids and any(k["kind"] is None for k in d["dep_kinds"])
                ),
            }
            for i in ids
        ),
        key=lambda d: d["ref"],
    )
    body = {"components": libraries, "dependencies": dependencies}
    serial = uuid.uuid5(uuid.NAMESPACE_URL, target + json.dumps(body, sort_keys=True))
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{serial}",
        "version": 1,
        "metadata": {
            "component": app,
            "properties": [{"name": "cargo:target", "value": target}],
        },
        **body,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(bom, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"sbom: {len(libraries)} crates for {target} in {out}")


if __name__ == "__main__":
    main()
