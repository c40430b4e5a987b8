#!/usr/bin/env python3
"""Docs that cannot rot (ctest label docs): checks README.md and docs/**.md.

  check_docs.py --source DIR --build DIR [FILE.md ...]
  check_docs.py --self-test

What it checks, each failure printed as FILE:LINE: what is wrong:
  - Every C++, CUDA and CMake block (```cpp, ```c++, ```cuda, ```cmake) is an
    excerpt of a named file (and so is any other block marked as one, a
    report's text, say): the line before its fence is
        <!-- excerpt: PATH -->
    with PATH relative to the source tree, or build/PATH for a file the build
    writes (generated programs, reports). Every non-blank line of the block
    must appear in that file, in the same order, with the same text (runs
    of spaces aside); lines the block leaves out of the file are allowed, so
    an excerpt may skip what it does not show, and a line that is only "...",
    "// ..." or "# ..." says so to the reader and is not looked for. A
    changed line in the file or in the block fails the check.
  - Every relative link or image, [text](path) or [text](path#anchor), names a file or
    folder that exists, and an anchor into a Markdown file names one of its
    headings (GitHub's heading ids).
"""
import argparse
import os
import re
import sys
import tempfile

CODE_LANGS = {"cpp", "c++", "cxx", "cuda", "cmake"}
ELISIONS = {"...", "// ...", "# ..."}
EXCERPT = re.compile(r"^<!--\s*excerpt:\s*(\S+)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```\s*([A-Za-z0-9+_-]*)")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")  # links and images


def normalise(line):
    return " ".join(line.split())


def blocks(lines):
    """(fence line number, lang, marker or None, [(line number, text)])."""
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, lang = i, m.group(2).lower()
        body = []
        i += 1
        while i < len(lines) and not lines[i].lstrip().startswith("```"):
            body.append((i + 1, lines[i]))
            i += 1
        j = start - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = EXCERPT.match(lines[j].strip()) if j >= 0 and start - j <= 2 else None
        out.append((start + 1, lang, marker.group(1) if marker else None, body))
        i += 1
    return out


def heading_ids(lines):
    ids, in_code = set(), False
    for line in lines:
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code or not line.startswith("#"):
            continue
        text = line.lstrip("#").strip().lower()
        text = re.sub(r"[^\w\- ]", "", text)
        ids.add(text.replace(" ", "-"))
    return ids


def resolve(path, source, build):
    if path.startswith("build/"):
        return os.path.join(build, path[len("build/"):])
    return os.path.join(source, path)


def check_excerpt(doc, fence, path, body, source, build, errors):
    where = resolve(path, source, build)
    if not os.path.isfile(where):
        errors.append(f"{doc}:{fence}: the excerpt's file {path} does not exist ({where})")
        return
    with open(where, encoding="utf-8", errors="replace") as f:
        have = [normalise(line) for line in f.read().splitlines()]
    at = 0
    for number, text in body:
        want = normalise(text)
        if not want or want in ELISIONS:
            continue
        try:
            at = have.index(want, at) + 1
        except ValueError:
            errors.append(f"{doc}:{number}: this line of the excerpt is not in {path}"
                          f" (after the lines before it): {text.strip()}")
            return


def check_links(doc, lines, source, errors):
    base = os.path.dirname(os.path.join(source, doc))
    in_code = False
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code:
            continue
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target) or target == "#":
                continue
            path, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(base, path)) if path else os.path.join(source, doc)
            if not os.path.exists(where):
                errors.append(f"{doc}:{number}: the link {target} names nothing ({os.path.relpath(where, source)})")
                continue
            if anchor and where.endswith(".md"):
                with open(where, encoding="utf-8") as f:
                    if anchor not in heading_ids(f.read().splitlines()):
                        errors.append(f"{doc}:{number}: the link {target} names no heading of "
                                      f"{os.path.relpath(where, source)}")


def check(docs, source, build):
    errors = []
    count = {"excerpts": 0, "links": 0}
    for doc in docs:
        with open(os.path.join(source, doc), encoding="utf-8") as f:
            lines = f.read().splitlines()
        for fence, lang, marker, body in blocks(lines):
            if marker is None and lang not in CODE_LANGS:
                continue  # text, shell: checked where marked
            if marker is None:
                errors.append(f"{doc}:{fence}: a {lang} block that is not marked as an excerpt of a file "
                              f"(put <!-- excerpt: PATH --> on the line before its fence)")
                continue
            count["excerpts"] += 1
            check_excerpt(doc, fence, marker, body, source, build, errors)
        check_links(doc, lines, source, errors)
        count["links"] += sum(len(LINK.findall(l)) for l in lines)
    return errors, count


def default_docs(source):
    docs = ["README.md"]
    for root, _, files in os.walk(os.path.join(source, "docs")):
        docs += sorted(os.path.relpath(os.path.join(root, f), source) for f in files if f.endswith(".md"))
    return docs


def self_test():
    """The check fails when a documented line changes, naming the line."""
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "src"))
        os.makedirs(os.path.join(d, "build", "gen"))
        with open(os.path.join(d, "src", "model.cpp"), "w") as f:
            f.write("#include <x>\nint f() {\n  return  1;\n}\nint g();\n")
        with open(os.path.join(d, "build", "gen", "out.cpp"), "w") as f:
            f.write("// generated\nvoid k();\n")
        doc = ("# Title\n\nSee [the model](src/model.cpp) and [title](#title).\n\n"
               "<!-- excerpt: src/model.cpp -->\n```cpp\nint f() {\n  return 1;\n// ...\n```\n\n"
               "<!-- excerpt: build/gen/out.cpp -->\n```cpp\nvoid k();\n```\n")
        with open(os.path.join(d, "doc.md"), "w") as f:
            f.write(doc)
        build = os.path.join(d, "build")
        failures = []

        def expect(errors, want):
            if want is None and errors:
                failures.append(f"expected no errors, got {errors}")
            if want is not None and not any(want in e for e in errors):
                failures.append(f"expected an error with {want!r}, got {errors}")

        expect(check(["doc.md"], d, build)[0], None)
        with open(os.path.join(d, "src", "model.cpp"), "w") as f:
            f.write("#include <x>\nint f() {\n  return 2;\n}\n")
        expect(check(["doc.md"], d, build)[0], "doc.md:8: this line of the excerpt is not in src/model.cpp")
        with open(os.path.join(d, "doc.md"), "w") as f:
            f.write(doc.replace("<!-- excerpt: src/model.cpp -->\n", "").replace("(#title)", "(#nothing)")
                    .replace("src/model.cpp)", "src/gone.cpp)"))
        errors = check(["doc.md"], d, build)[0]
        expect(errors, "doc.md:5: a cpp block that is not marked as an excerpt of a file")
        expect(errors, "doc.md:3: the link src/gone.cpp names nothing")
        expect(errors, "doc.md:3: the link #nothing names no heading of doc.md")
        for f in failures:
            print("self-test:", f)
        if not failures:
            print("self-test: a changed line, an unmarked block, a missing file and a missing heading all fail")
        return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="the source tree (README.md, docs/)")
    parser.add_argument("--build", help="the build folder (build/PATH excerpts)")
    parser.add_argument("--self-test", action="store_true", help="check the checker")
    parser.add_argument("docs", nargs="*", help="Markdown files relative to --source (default: README.md, docs/**.md)")
    a = parser.parse_args()
    if a.self_test:
        return self_test()
    if not a.source or not a.build:
        parser.error("--source and --build are required")
    docs = a.docs or default_docs(a.source)
    errors, count = check(docs, a.source, a.build)
    for e in errors:
        print(e)
    print(f"{len(docs)} documents, {count['excerpts']} code excerpts, {count['links']} links: "
          f"{'ok' if not errors else str(len(errors)) + ' problems'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
