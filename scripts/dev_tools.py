#!/usr/bin/env python3
"""Install the cargo subcommands the checks run, pinned, into tfserve's cache.

    python3 scripts/dev_tools.py            # installs what is missing, prints the bin dirs
    export PATH="$(python3 scripts/dev_tools.py):$PATH"

Each tool is built once from crates.io with `cargo install --locked` at the
version below, into `<cache>/tools/<name>-<version>/bin` (the cache is
$TFSERVE_CACHE_DIR, or ~/.cache/tfserve); a second run finds it and does
nothing. Progress goes to stderr; stdout is the directories to put on PATH.
"""
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from tfvenv import cache_root  # noqa: E402  (scripts/ is on sys.path when run as a script)

# crate -> (version, the binary it installs)
TOOLS = {
    "cargo-deny": ("0.20.2", "cargo-deny"),
    "cargo-fuzz": ("0.13.2", "cargo-fuzz"),
}


def install(crate: str, version: str, binary: str) -> pathlib.Path:
    """The tool's bin directory, building it there first when it is missing."""
    root = cache_root() / "tools" / f"{crate}-{version}"
    if not (root / "bin" / binary).exists():
        print(f"dev_tools: building {crate} {version} (once; cached in {root})", file=sys.stderr)
        subprocess.run(
            ["cargo", "install", "--locked", "--quiet", "--version", version, "--root", str(root), crate],
            check=True,
            stdout=sys.stderr,
        )
    return root / "bin"


def main() -> int:
    dirs = [install(crate, version, binary) for crate, (version, binary) in TOOLS.items()]
    print(os.pathsep.join(str(d) for d in dirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
