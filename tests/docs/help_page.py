#!/usr/bin/env python3
"""Refreshes docs/reference/command-line.md's --help blocks from the files
the build writes (build/help/TOOL.txt, tests/docs/help_texts.cmake):

  help_page.py PAGE HELP_DIR

Each block marked <!-- excerpt: build/help/TOOL.txt --> is replaced by that
file's text; the rest of the page is left as it is. The docs check
(check_docs.py) is what fails when a block and its tool disagree; this is
the way to make them agree again (target docs_help_update).
"""
import os
import re
import sys

BLOCK = re.compile(r"(<!-- excerpt: build/help/(\S+) -->\n```text\n)(.*?)(\n```\n)", re.S)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    page, help_dir = sys.argv[1:]
    with open(page, encoding="utf-8") as f:
        text = f.read()
    missing = []

    def fresh(m):
        path = os.path.join(help_dir, m.group(2))
        if not os.path.exists(path):
            missing.append(path)
            return m.group(0)
        with open(path, encoding="utf-8") as f:
            return m.group(1) + f.read().rstrip("\n") + m.group(4)

    new = BLOCK.sub(fresh, text)
    if missing:
        print("help_page.py: not built: " + ", ".join(missing), file=sys.stderr)
        return 1
    if new != text:
        with open(page, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"help_page.py: {page} updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
