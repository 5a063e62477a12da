#!/usr/bin/env python3
"""layers.py ROOT: the sources include downward only, and the runtime speaks no flags.

The stages, lowest first: base, grammar, compiler, codegen, runtime, driver. A file may
include headers of its own stage and of the stages below it, never above, without
exception: base/ (diagnostics, random numbers, the clock, text) needs nothing of cgc's,
and the grammar builds its own AST (grammar/ast.h), which the compiler reads. Passes are
run by the driver alone: below it, only compiler/ includes compiler/passes.h. Generated headers (parser.h, lexer.h,
build_config.h) live in the build tree and are not checked.

The runtime is a library with no command-line vocabulary: no string in runtime/ names one
of cgc's flags (those driver/main.c's usage text lists); its messages name train keys
and files ("set seed to '42'", "the trace file t.json").
"""
import os
import re
import sys

STAGES = ["base", "grammar", "compiler", "codegen", "runtime", "driver"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def stage_of(rel):
    top = rel.split("/", 1)[0]
    return STAGES.index(top) if top in STAGES else None


def resolve(root, src_dir, name):
    """The included file as a path relative to ROOT, or None when it is not in the tree."""
    for base in (src_dir, root):
        path = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(path):
            return os.path.relpath(path, root)
    return None


def problems(root):
    found = []
    for stage in STAGES:
        for dirpath, _, files in os.walk(os.path.join(root, stage)):
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".y", ".l", ".cu", ".cpp")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                text = open(path, encoding="utf-8", errors="replace").read()
                for name in INCLUDE.findall(text):
                    target = resolve(root, dirpath, name)
                    if target is None:
                        continue
                    want = stage_of(target)
                    own = STAGES.index(stage)
                    if want is None:
                        found.append(f"{rel}: includes {target}, outside the stages")
                    elif want > own:
                        found.append(f"{rel}: includes {target}, a stage above {stage}/")
                    elif target == "compiler/passes.h" and stage not in ("compiler", "driver"):
                        found.append(f"{rel}: includes compiler/passes.h: only the driver runs passes")
    return found


STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
FLAG = re.compile(r"--([a-z][a-z0-9-]*)")


def cgc_flags(root):
    """The long flags cgc's usage text lists."""
    text = open(os.path.join(root, "driver", "main.c"), encoding="utf-8").read()
    usage = text[text.index("usage_text[]"):]
    usage = usage[:re.search(r'"\s*;', usage).end()]
    return set(FLAG.findall(usage))


def runtime_flags(root):
    """Strings in runtime/ that name a cgc flag."""
    flags, found = cgc_flags(root), []
    for dirpath, _, files in os.walk(os.path.join(root, "runtime")):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            for n, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                for lit in STRING.findall(line):
                    named = [x for x in FLAG.findall(lit) if x in flags]
                    if named:
                        rel = os.path.relpath(path, root)
                        found.append(f"{rel}:{n}: a message names --{named[0]}: the runtime speaks no flags")
    return found, len(flags)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    found = problems(root)
    spoken, nflags = runtime_flags(root)
    for p in found + spoken:
        print(p)
    checked = sum(len(fs) for s in STAGES for _, _, fs in os.walk(os.path.join(root, s)))
    print(f"layers: {checked} files checked, {len(found)} upward includes; "
          f"{len(spoken)} runtime strings name one of cgc's {nflags} flags")
    return 1 if found or spoken or checked == 0 or nflags < 20 else 0


if __name__ == "__main__":
    sys.exit(main())
