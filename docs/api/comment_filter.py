#!/usr/bin/env python3
"""Doxygen's INPUT_FILTER for sharc's headers (docs/api/Doxyfile.in).

sharc's headers document their names with ordinary // comments, written for
people reading the header. Doxygen reads only ///, so this filter hands it
the same file with
  - a line that is only a // comment turned into a /// comment (the
    comment above a declaration documents it);
  - a trailing // comment after a declaration's ';', ',' or '{' turned into
    ///< (it documents that member);
  - //@{ and //@} (a group of declarations one comment documents) turned
    into Doxygen's ///@{ and ///@}.
Line numbers are kept, so warnings point at the header's own lines.
"""
import re
import sys

WHOLE = re.compile(r"^(\s*)//(?![/!])(.*)$")
TRAILING = re.compile(r"^(.*?[;,{])(\s*)//(?![/!<]) ?(.*)$")


def filtered(line):
    m = WHOLE.match(line)
    if m:
        rest = m.group(2)
        if rest.startswith("@{") or rest.startswith("@}"):
            return f"{m.group(1)}///{rest}"
        return f"{m.group(1)}///{rest}"
    m = TRAILING.match(line)
    if m and m.group(1).count('"') % 2 == 0:
        return f"{m.group(1)}{m.group(2)}///< {m.group(3)}"
    return line


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            print(filtered(line.rstrip("\n")))


if __name__ == "__main__":
    main()
