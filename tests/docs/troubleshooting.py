#!/usr/bin/env python3
"""docs/guide/troubleshooting.md, made from the error messages sharc's tests
assert: every user error a test checks goes through
tests/common/error_log.h's log_error_message() (expect_error.h's
user_message() for the DSL's), which, with SHARC_ERROR_LOG set, appends
"Suite.Test<TAB>message" to that file. This script runs the
given test binaries with it set and writes the page, one entry per message:
the message (the test's file:line written as FILE:LINE, so moving a test
does not move the page) and the test that asserts it, whose name says the
cause. Each message says what to do.

  troubleshooting.py --write docs/guide/troubleshooting.md BINARY[@FILTER]|mpi=MPIEXEC|ARG|......
  troubleshooting.py --check docs/guide/troubleshooting.md ...   (ctest)
"""
import os
import re
import subprocess
import sys
import tempfile

HEADER = """# Troubleshooting: sharc's errors

Every error sharc reports for a mistake in a model names the file and line of
the user's code that caused it, says what is wrong in the model's terms
(names, shapes, specs, never an IR node) and, where there is one, what to do.
Errors about files name the file: a checkpoint that is corrupt, truncated or
of another model (suites `CheckpointErrors`, `CheckpointIndex`,
`Safetensors`), a Hugging Face folder that does not fit the program
(`HfInterop`, `HfInteropErrors`), and the generator's own run as the build
makes it (`GeneratorErrors`). A generated program's API names the tensor and the
sizes (`ProgramApi`); a `BACKEND cuda` program refuses a world or a device it
cannot run on (`CudaPrograms`); many processes name the rank and the process
that failed or kept them waiting (`MpiWorld`). This page lists every such message that sharc's tests
assert, grouped by the test suite that asserts it; the test's name says the
cause. It is generated from the tests (`tests/docs/troubleshooting.py`), and
`ctest -L docs` fails when a message changes and the page does not, so the
page cannot drift. `FILE:LINE` stands for the line of your code, `DIR` and
`OUT` for the test's folders where yours would be.

For the errors of `sharc_add_program` and `sharc_add_golden_test` when CMake
configures, see the [CMake reference](../reference/cmake.md).
"""

FOOTER = """
---

Next: [getting started](getting-started.md), or the page of the feature the
message names.
"""

LOCATION = re.compile(r"[\w./+-]+\.(?:cpp|h|cc|cu|hpp):\d+")


def collect(binaries):
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "errors.log")
        env = dict(os.environ, SHARC_ERROR_LOG=log, OPENBLAS_NUM_THREADS="1")
        for b in binaries:
            if b.startswith("mpi="):
                # mpi=MPIEXEC|ARG|...: a test that is a program mpiexec runs
                # (tests/mpi), as root and with more processes than cores
                # where need be, as its ctest does.
                mpi_env = dict(env, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                               OMPI_MCA_rmaps_base_oversubscribe="1")
                subprocess.run(b[len("mpi="):].split("|"), env=mpi_env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=False, timeout=120)
                continue
            # BINARY@FILTER runs only the tests FILTER names (a suite whose
            # other tests take minutes).
            path, _, only = b.rpartition("@") if "@" in os.path.basename(b) else (b, "", "")
            args = [path, "--gtest_brief=1"] + ([f"--gtest_filter={only}"] if only else [])
            subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        if not os.path.exists(log):
            return {}
        with open(log, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    by_suite = {}
    for line in lines:
        test, _, message = line.partition("\t")
        message = LOCATION.sub("FILE:LINE", message.replace("\\n", "\n"))
        suite = test.split(".")[0]
        entries = by_suite.setdefault(suite, {})
        entries.setdefault(message, set()).add(test)
    return by_suite


def render(by_suite):
    out = [HEADER]
    count = sum(len(v) for v in by_suite.values())
    out.append(f"{count} messages, asserted by {sum(len(t) for v in by_suite.values() for t in v.values())} "
               f"test checks in {len(by_suite)} suites.\n")
    for suite in sorted(by_suite):
        out.append(f"## {suite}\n")
        for message in sorted(by_suite[suite]):
            tests = ", ".join(f"`{t.split('.', 1)[1]}`" for t in sorted(by_suite[suite][message]))
            out.append(f"Asserted by {tests}:\n")
            out.append("```text\n" + message.rstrip("\n") + "\n```\n")
    out.append(FOOTER)
    return "\n".join(out)


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("--write", "--check"):
        print(__doc__)
        return 2
    mode, page, binaries = sys.argv[1], sys.argv[2], sys.argv[3:]
    text = render(collect(binaries))
    if mode == "--write":
        with open(page, "w", encoding="utf-8") as f:
            f.write(text)
        print(f"wrote {page}")
        return 0
    with open(page, encoding="utf-8") as f:
        have = f.read()
    if have != text:
        import difflib
        sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), text.splitlines(True), page,
                                                   "what the tests assert now", n=1))
        print(f"\n{page} no longer lists what the tests assert; to accept the messages they assert now:\n"
              f"  python3 tests/docs/troubleshooting.py --write {page} <the test binaries>\n"
              f"  (or: cmake --build <build> --target docs_troubleshooting_update)")
        return 1
    print(f"{page} lists the {text.count('```text')} messages the tests assert")
    return 0


if __name__ == "__main__":
    sys.exit(main())
