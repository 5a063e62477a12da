#!/usr/bin/env python3
"""mutate.py: mutation testing. Plants each bug of tests/mutate/mutants.txt, one at a
time, in a scratch copy of the tree, and runs the tests meant to catch it.

A mutant is killed when a test fails (or times out) with it, survives when they all pass,
and is stillborn when the copy does not build (a mutant the compiler catches tells
nothing about the tests; it is listed apart). One marked `equivalent:` changes no
behaviour, by the reason given, and is not run. The report (Markdown) goes to
build-mutate/report.md and stdout; the exit status is 1 when a mutant that is not
marked equivalent survives.

    scripts/mutate.py                 every mutant (make mutate)
    scripts/mutate.py -k NAME ...     the mutants whose id contains a NAME
    scripts/mutate.py --check         only check the catalogue: each `find` occurs exactly
                                      once in its file (a ctest, so that it cannot rot)
    scripts/mutate.py --list          the catalogue's ids

The scratch copy (build-mutate/src, the working tree's files as they are, tracked and
untracked but not ignored) is configured and built once; each mutant then rebuilds only
what its file touches, and the file is put back before the next one. A mutant marked
`build: sanitize` is run in a second build of the copy, with CGC_SANITIZE (its tests are
the sanitizer build's, as `make test-sanitize` runs them); it is made only when one is
chosen.
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CATALOGUE = os.path.join(ROOT, "tests", "mutate", "mutants.txt")
FIELDS = ("id", "file", "find", "replace", "tests", "why", "equivalent", "build")
BUILDS = {"plain": ["-DCMAKE_BUILD_TYPE=Release"],
          "sanitize": ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCGC_SANITIZE=ON"]}
REQUIRED = ("id", "file", "find", "replace", "tests", "why")


class CatalogueError(Exception):
    pass


def unescape(text):
    """A field's value: \\n is a newline, \\t a tab, \\\\ a backslash."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            out.append({"n": "\n", "t": "\t", "\\": "\\"}.get(text[i + 1], "\\" + text[i + 1]))
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def parse(path):
    """The mutants: blocks of `key: value` lines separated by blank lines; # comments."""
    mutants, cur, where = [], {}, path
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines + [""], 1):
        if line.startswith("#"):
            continue
        if not line.strip():
            if cur:
                missing = [k for k in REQUIRED if k not in cur]
                if missing:
                    raise CatalogueError(f"{where}:{cur['_line']}: mutant lacks {', '.join(missing)}")
                mutants.append(cur)
                cur = {}
            continue
        key, sep, value = line.partition(": ")
        if not sep or key not in FIELDS:
            raise CatalogueError(f"{path}:{n}: expected `key: value` with key one of "
                                 f"{', '.join(FIELDS)}")
        if key in cur:
            raise CatalogueError(f"{path}:{n}: {key} given twice")
        cur.setdefault("_line", n)
        cur[key] = unescape(value) if key in ("find", "replace") else value
    ids = [m["id"] for m in mutants]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise CatalogueError(f"{path}: ids used twice: {', '.join(dup)}")
    return mutants


def check(mutants, root):
    """Each mutant's `find` occurs exactly once in its file, and differs from `replace`."""
    bad = []
    for m in mutants:
        path = os.path.join(root, m["file"])
        if not os.path.isfile(path):
            bad.append(f"{m['id']}: no file {m['file']}")
            continue
        with open(path, encoding="utf-8") as f:
            count = f.read().count(m["find"])
        if count != 1:
            bad.append(f"{m['id']}: `find` occurs {count} times in {m['file']} (must be once)")
        if m["find"] == m["replace"]:
            bad.append(f"{m['id']}: `replace` is `find`")
        if m.get("build", "plain") not in BUILDS:
            bad.append(f"{m['id']}: build `{m['build']}` is none of {', '.join(BUILDS)}")
    return bad


def run(cmd, cwd, timeout, log):
    """Runs CMD; returns (exit status, seconds); 124 on a timeout."""
    t0 = time.time()
    try:
        r = subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, timeout=timeout)
        rc = r.returncode
    except subprocess.TimeoutExpired:
        rc = 124
    return rc, time.time() - t0


def copy_tree(src, dst):
    """The working tree's files (tracked and untracked, not ignored) into DST, as they are."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=src, capture_output=True, check=True).stdout.decode().split("\0")
    for rel in filter(None, files):
        s, d = os.path.join(src, rel), os.path.join(dst, rel)
        if not os.path.isfile(s):
            continue   # deleted in the working tree
        os.makedirs(os.path.dirname(d), exist_ok=True)
        with open(s, "rb") as a:
            data = a.read()
        old = None
        if os.path.isfile(d):
            with open(d, "rb") as b:
                old = b.read()
        if old != data:   # untouched files keep their times: the build stays incremental
            with open(d, "wb") as b:
                b.write(data)
            shutil.copymode(s, d)


def matching_tests(build, regex):
    """The names of the tests REGEX selects, in the suite's order."""
    out = subprocess.run(["ctest", "-N", "-R", regex], cwd=build, capture_output=True,
                         text=True).stdout
    return [line.split(": ", 1)[1].strip() for line in out.splitlines()
            if line.strip().startswith("Test") and ": " in line]


def mutate_one(m, src, builds, a, logdir):
    build = builds[m.get("build", "plain")]
    path = os.path.join(src, m["file"])
    with open(path, encoding="utf-8") as f:
        original = f.read()
    log_path = os.path.join(logdir, m["id"] + ".log")
    with open(path, "w", encoding="utf-8") as f:
        f.write(original.replace(m["find"], m["replace"], 1))
    try:
        with open(log_path, "w") as log:
            rc, t_build = run(["cmake", "--build", build, "-j", str(a.jobs)], src, a.build_timeout, log)
            if rc != 0:
                return {"result": "stillborn", "detail": "does not build", "s": t_build}
            names = matching_tests(build, m["tests"])
            if not names:
                return {"result": "error", "detail": f"no test matches `{m['tests']}`", "s": t_build}
            failed, t_test = [], 0.0
            for name in names:   # in the suite's order, cheap ones first; the first failure decides
                rc, t = run(["ctest", "-R", f"^{name}$", "--timeout", str(a.test_timeout),
                             "--output-on-failure"], build, None, log)
                t_test += t
                if rc != 0:
                    failed.append(name)
                    break
        if not failed:
            return {"result": "survived", "detail": f"`{m['tests']}` passed", "s": t_build + t_test}
        return {"result": "killed", "detail": ", ".join(failed), "s": t_build + t_test}
    finally:
        with open(path, "w", encoding="utf-8") as f:
            f.write(original)


def report(results, mutants, out_path, elapsed):
    count = {k: sum(r["result"] == k for r in results.values())
             for k in ("killed", "survived", "stillborn", "error")}
    equivalent = [m for m in mutants if m.get("equivalent")]
    live = count["killed"] + count["survived"]
    lines = ["# Mutation report", "",
             f"{len(results)} mutants run in {elapsed:.0f} s: {count['killed']} killed, "
             f"{count['survived']} survived, {count['stillborn']} stillborn (do not build), "
             f"{count['error']} errors; {len(equivalent)} marked equivalent (not run). "
             f"Kill rate {count['killed']}/{live}"
             + (f" = {100.0 * count['killed'] / live:.1f}%" if live else "") + ".", "",
             "| mutant | file | result | tests failed or why | s |", "|---|---|---|---|---|"]
    for m in mutants:
        r = results.get(m["id"])
        if r:
            detail = r["detail"].replace("|", "\\|")   # a test regex's bars would split the row
            lines.append(f"| {m['id']} | {m['file']} | {r['result']} | {detail} | {r['s']:.0f} |")
    if equivalent:
        lines += ["", "Equivalent (not run):", ""]
        lines += [f"- {m['id']} ({m['file']}): {m['equivalent']}" for m in equivalent]
    text = "\n".join(lines) + "\n"
    with open(out_path, "w") as f:
        f.write(text)
    return text, count


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-k", nargs="+", default=[], help="run the mutants whose id contains one of these")
    ap.add_argument("--check", action="store_true", help="only check the catalogue")
    ap.add_argument("--list", action="store_true", help="list the catalogue's ids")
    ap.add_argument("--catalogue", default=CATALOGUE)
    ap.add_argument("--root", default=ROOT, help="the tree the catalogue is checked against")
    ap.add_argument("--out", default=os.path.join(ROOT, "build-mutate"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--build-timeout", type=int, default=900)
    ap.add_argument("--test-timeout", type=int, default=600, help="seconds per test")
    a = ap.parse_args()
    try:
        mutants = parse(a.catalogue)
    except (CatalogueError, OSError) as e:
        sys.exit(f"mutate: {e}")
    if a.list:
        print("\n".join(m["id"] for m in mutants))
        return 0
    bad = check(mutants, a.root)
    if a.check or bad:
        for b in bad:
            print(f"mutate: {b}", file=sys.stderr)
        if not bad:
            print(f"mutate: {len(mutants)} mutants, each `find` found once")
        return 1 if bad else 0
    chosen = [m for m in mutants if not m.get("equivalent") and
              (not a.k or any(k in m["id"] for k in a.k))]
    if not chosen:
        sys.exit("mutate: no mutant matches " + " ".join(a.k))
    src, logs = os.path.join(a.out, "src"), os.path.join(a.out, "logs")
    os.makedirs(logs, exist_ok=True)
    copy_tree(ROOT, src)
    builds = {"plain": os.path.join(a.out, "build")}
    if any(m.get("build") == "sanitize" for m in chosen):
        builds["sanitize"] = os.path.join(a.out, "build-sanitize")
    for kind, build in builds.items():
        with open(os.path.join(logs, f"_configure_{kind}.log"), "w") as log:
            rc, _ = run(["cmake", "-S", src, "-B", build] + BUILDS[kind], src, None, log)
            if rc == 0:
                rc, _ = run(["cmake", "--build", build, "-j", str(a.jobs)], src, None, log)
        if rc != 0:
            sys.exit(f"mutate: the unmutated copy does not build; see {logs}/_configure_{kind}.log")
    t0, results = time.time(), {}
    for i, m in enumerate(chosen, 1):
        print(f"[{i}/{len(chosen)}] {m['id']} ({m['file']}) ...", end=" ", flush=True)
        results[m["id"]] = r = mutate_one(m, src, builds, a, logs)
        print(f"{r['result']}: {r['detail']} ({r['s']:.0f} s)", flush=True)
    with open(os.path.join(logs, "_restore.log"), "w") as log:   # the copy unmutated again
        for build in builds.values():
            run(["cmake", "--build", build, "-j", str(a.jobs)], src, None, log)
    text, count = report(results, mutants, os.path.join(a.out, "report.md"), time.time() - t0)
    print("\n" + text)
    return 1 if count["survived"] or count["error"] else 0


if __name__ == "__main__":
    sys.exit(main())
