"""Writes the two files generated from torch_tpu/settings.py: docs/settings.md (the
table users read) and csrc/core/settings_table.inc (the C++ accessor's table).

    python -m torch_tpu.tools.settings_doc            # rewrite both
    python -m torch_tpu.tools.settings_doc --check    # exit 1 when either is stale
"""
import argparse
import os
import sys

from torch_tpu import settings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOC = os.path.join(ROOT, "docs", "settings.md")
CXX_TABLE = os.path.join(ROOT, "csrc", "core", "settings_table.inc")

_SCOPE_TITLES = {
    "runtime": "Read by torch_tpu at import or first use",
    "c++": "Read by the C++ extension",
    "vllm": "Read by vLLM",
    "build": "Read by the build (setup.py)",
    "test": "Read by the test suite",
    "internal": "Internal (written and read by torch_tpu)",
}


def _cell(text):
    return text.replace("|", "\\|")


def render_markdown():
    lines = [
        "# Settings (environment variables)",
        "",
        "Generated from `torch_tpu/settings.py` by `python -m torch_tpu.tools.settings_doc`;",
        "do not edit by hand. `python -m torch_tpu.tools.env` prints the ones set in a process.",
        "Booleans take `1/true/yes/on` and `0/false/no/off`; sizes take a number of bytes or",
        "a unit (`512MiB`, `16G`). A malformed value fails `import torch_tpu` with a message",
        "naming the variable.",
    ]
    for scope in settings.SCOPES:
        rows = [s for s in settings.SETTINGS if s.scope == scope]
        if not rows:
            continue
        lines += ["", f"## {_SCOPE_TITLES[scope]}", "",
                  "| Variable | Type | Default | Meaning |", "|---|---|---|---|"]
        for s in rows:
            kind = s.type
            if s.choices:
                kind += ": " + ", ".join(f"`{c}`" for c in s.choices)
            default = f"`{s.default}`" if s.default else "unset"
            name = f"`{s.name}`" + "".join(f" (alias `{a}`)" for a in s.aliases)
            lines.append(f"| {name} | {_cell(kind)} | {default} | {_cell(s.meaning)} |")
    return "\n".join(lines) + "\n"


def render_cxx_table():
    lines = ["// Generated from torch_tpu/settings.py by python -m torch_tpu.tools.settings_doc;",
             "// do not edit. {name, type, default} of every declared setting."]
    for s in settings.SETTINGS:
        lines.append(f'{{"{s.name}", "{s.type}", "{s.default}"}},')
    return "\n".join(lines) + "\n"


def outputs():
    return {DOC: render_markdown(), CXX_TABLE: render_cxx_table()}


def stale():
    """Paths whose content differs from what the table generates."""
    out = []
    for path, text in outputs().items():
        try:
            with open(path) as f:
                if f.read() == text:
                    continue
        except FileNotFoundError:
            pass
        out.append(path)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 when a generated file is stale")
    args = p.parse_args(argv)
    if args.check:
        bad = stale()
        for path in bad:
            print(f"stale: {os.path.relpath(path, ROOT)} (run python -m torch_tpu.tools.settings_doc)")
        return 1 if bad else 0
    for path, text in outputs().items():
        with open(path, "w") as f:
            f.write(text)
        print("wrote", os.path.relpath(path, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
