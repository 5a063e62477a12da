#!/usr/bin/env python3
"""bench_parsers.py ROOT: the lines the benchmark scripts read from cgc's output are the
lines cgc prints.

bench/bench_default.py (parse_cgc_verbose: step times, launches as run, memory) and bench/bench_modes.py
(parse_autotune: tuning time, candidates, choices read back, untimed, refused) read
lines that runtime/train_device.c prints. Each sample line here is made from the
format string found in that file, with known values, and each parser must read those
values back: a message changed on one side only fails here, on a machine without a
GPU, instead of leaving a benchmark table empty on the GPU machine. The parsers are
loaded alone (the scripts import PyTorch, which this machine need not have)."""
import ast
import os
import re
import sys

ROOT = sys.argv[1]
SOURCE = open(os.path.join(ROOT, "runtime", "train_device.c")).read()
failures = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print(f"FAILED: {what}")


def parsers(script, names):
    """The top-level functions NAMES of bench/SCRIPT, with `re` their only import."""
    path = os.path.join(ROOT, "bench", script)
    tree = ast.parse(open(path).read(), path)
    found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in names]
    if len(found) != len(names):
        sys.exit(f"bench_parsers.py: {script} lacks one of {names}")
    ns = {"re": re}
    exec(compile(ast.Module(found, []), path, "exec"), ns)
    return [ns[n] for n in names]


LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"\s*')


def c_format(key):
    """The format string, its adjacent literals joined, of the literal of train_device.c
    that holds KEY."""
    at = SOURCE.find(key)
    if at < 0:
        sys.exit(f"bench_parsers.py: runtime/train_device.c no longer prints '{key}'")
    pos, parts = SOURCE.rindex('"', 0, at), []
    while (m := LITERAL.match(SOURCE, pos)):
        parts.append(m.group(1))
        pos = m.end()
    return "".join(parts).encode().decode("unicode_escape")


def line(key, *values):
    """The line train_device.c prints with the format that holds KEY, given VALUES (C's
    integer conversions as Python's %d)."""
    fmt = re.sub(r"%(z|ll|l)([du])", r"%d", c_format(key))
    return fmt % values


parse_cgc_verbose, = parsers("bench_default.py", ["parse_cgc_verbose"])
parse_autotune, = parsers("bench_modes.py", ["parse_autotune"])

# -v on a device: the step times, then the memory (two printf calls make its line)
text = (line("cgc: median step ", 1.25, 1.0, 2.5, 10, 50) +
        line("launches per step as run", 17, 6) +
        line("cgc: device memory: plan arena ", 123456, 0.1) +
        line("in use %zu bytes", 654321, 0.6))
r = parse_cgc_verbose(text)
check((r["step_ms"], r["p10_ms"], r["p90_ms"]) == (1.25, 1.0, 2.5), f"step times: {r} from {text!r}")
check((r["arena_bytes"], r["in_use_bytes"]) == (123456, 654321), f"memory: {r} from {text!r}")
check((r["launches_as_run"], r["gemms_as_run"]) == (17, 6), f"launches as run: {r} from {text!r}")

# max-autotune: say_autotune puts its prefix before each line
prefix = "cgc: autotune: "   # the refused line is a warning: cgc_warning's prefix, checked below
check(re.search(r'cgc_warning\("autotune: %d candidate%s refused', SOURCE),
      "the refused line is no longer a cgc_warning")
check(re.search(r'static void say_autotune\(.*?fprintf\(stderr, "cgc: autotune: "\);', SOURCE, re.S),
      "say_autotune no longer begins its line with 'cgc: autotune: '")
tuned = (prefix + line("candidates timed for", 41, 6, 5, 1, 11.5) + "\n" +
         prefix + line("the time ran out:", 3) + "\n" +
         "cgc: warning: " + line("candidate%s refused by the device", 8, "s", "s are", "were", "them"))
r = parse_autotune(tuned)
check((r["candidates"], r["tuning_s"]) == (41, 11.5), f"candidates and tuning time: {r} from {tuned!r}")
check(r["untimed"] == 3 and r["refused"] == 8, f"untimed and refused: {r} from {tuned!r}")
check(not r["read_back"], f"a tuning run read back: {r}")
convs = prefix + line("GEMMs, %d fused MLP runs and", 43, 6, 5, 1, 2, 12.5) + "\n"
r = parse_autotune(convs)
check((r["candidates"], r["tuning_s"]) == (43, 12.5), f"with convolutions: {r} from {convs!r}")
again = prefix + line("choices from %s (tuned in", 22, "/x/mlp.sm_90.H100.tune", 11.5) + "\n"
r = parse_autotune(again)
check(r["read_back"] and r["choices"] == 22 and r["tuned_when_written_s"] == 11.5,
      f"read back: {r} from {again!r}")

if failures:
    sys.exit(f"bench_parsers.py: {failures} failed")
print("bench_parsers.py: the benchmark scripts read cgc's step time, memory and autotune lines")
