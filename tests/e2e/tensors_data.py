#!/usr/bin/env python3
"""tensors(...) and csv(...): the user's own arrays and tables (ctest e2e_tensors_data).

1. The same run from IDX and from tensors(...): Fashion-MNIST's IDX files written by NumPy
   as an .npz (np.savez), a compressed one (np.savez_compressed), a directory of .npy
   files and a safetensors file; also with int64 labels and with the features already
   scaled as float32 and float64 (no scale given). 20 AdamW steps of models/mlp.net in
   fp32 on the CPU from each: every tensor of the checkpoints equal to the IDX run's, bit
   for bit.
2. csv("FILE", test = "FILE2", label = "COLUMN", scale = S): a table of the same numbers
   as an .npz (integers scaled, floats printed exactly, the label column anywhere, quoted
   header names, CRLF, a BOM, blank lines) trains to the .npz run's checkpoint, bit for
   bit; ragged rows, a non-number, an empty cell, a label that is no class id, a missing
   label column and an unclosed quote are errors naming the line (and column).
3. --predict: a model trained a few steps, then run on new rows from an .npy, an .npz, a
   CSV and a directory: its outputs (.npy, and .safetensors with each row's class) against
   the same network written in NumPy from the checkpoint's weights, within 1e-5; against
   PyTorch's nn.Sequential holding them (where torch is installed); and on the test split,
   the cross-entropy of its outputs against the evaluation graph's test loss (--metrics),
   in bf16 too (its weights' half copies made from the checkpoint). Outputs larger than the inputs (205 MB from 0.5 MB) are written batch by batch: each
   file right, the process's peak memory under half the output's size.
4. Larger than memory: 400,000 rows of 784 bytes (.npy, 314 MB; 1.25 GB as f32) train
   under a 768 MB RLIMIT_DATA (malloc'd and anonymous memory; a control shows 1 GB cannot
   be allocated under it): the arrays stay in their mapped files, converted as gathered.
   And 1.1 GB of f32 features (.npy) train and evaluate in a 512 MB memory cgroup, where
   1 GB cannot be allocated (skipped where no cgroup can be made).
5. Reading ahead: prefetch = 0 gives prefetch = 2's checkpoint bit for bit, and a source
   slowed by $CGC_DATA_DELAY_MS (a third of a step a micro-batch) costs the steps that read
   ahead less than half of what it costs those that read in the step (-v's waits).
6. Hostile files, each an exit status of 1, a message that says what is wrong, and no
   checkpoint written: truncated arrays, headers that lie about their shapes (one claiming
   10 GB in a file of a few hundred bytes), a damaged archive member, an inflate bomb's
   claim, mismatched example counts, labels out of range or not integers, a missing
   array, big-endian and Fortran-ordered arrays, shapes that do not fit the inputs, a FIFO.
   NaN features train with a warning that counts them. --save onto the data file the run
   reads (or a link to it) is refused before the first step, the data left as it was.

    /usr/bin/python3 tests/e2e/tensors_data.py build/cgc
Needs numpy. Exits 77 without it.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

try:
    import numpy as np
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from npfiles import DATA, ROOT, idx, load_safetensors, save_formats, save_safetensors  # noqa: E402

failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += not ok


def run(command, work):
    return subprocess.run(command, cwd=work, capture_output=True, text=True, timeout=600)


def cgc(args, work):
    return run([os.path.abspath(sys.argv[1])] + args, work)



def same_run(work):
    x, y = idx("train-images-idx3").reshape(-1, 784), idx("train-labels-idx1")
    tx, ty = idx("t10k-images-idx3").reshape(-1, 784), idx("t10k-labels-idx1")
    for split, (a, b) in {"train": (x, y), "test": (tx, ty)}.items():
        save_formats(work, split, a, b)
        np.savez(f"{work}/{split}_64.npz", x=a, y=b.astype(np.int64))
        np.savez(f"{work}/{split}_f32.npz", x=(a * (1 / 255)).astype(np.float32), y=b)
        np.savez(f"{work}/{split}_f64.npz", x=a * (1 / 255), y=b)
    common = ["--device", "cpu", "-q", "--precision", "fp32", "--steps", "20"]
    net = os.path.join(ROOT, "models", "mlp.net")
    r = cgc([net] + common + ["--save", "idx.st"], work)
    check(r.returncode == 0, f"mlp.net from IDX: {r.stderr.strip()[-200:]}")
    want = load_safetensors(f"{work}/idx.st")
    sources = {   # the test split as IDX has it; absolute paths (a relative one is beside the .net)
        "an .npz (np.savez)": ("{}.npz", ", scale = 1/255"),
        "a compressed .npz": ("{}_c.npz", ", scale = 1/255"),
        "a directory of .npy files": ("{}_dir", ", scale = 1/255"),
        "a safetensors file": ("{}.safetensors", ", scale = 1/255"),
        "int64 labels": ("{}_64.npz", ", scale = 1/255"),
        "float32 features, scaled": ("{}_f32.npz", ""),
        "float64 features, scaled": ("{}_f64.npz", ""),
    }
    for i, (what, (name, scale)) in enumerate(sources.items()):
        data = f'tensors("{work}/{name.format("train")}", test = "{work}/{name.format("test")}"{scale})'
        r = cgc([net] + common + ["--data", data, "--save", f"t{i}.st"], work)
        got = load_safetensors(f"{work}/t{i}.st") if r.returncode == 0 else {}
        differ = [k for k in want if got.get(k) != want[k]]
        check(r.returncode == 0 and not differ and len(got) == len(want),
              f"mlp.net from {what}: {len(want)} tensors bit for bit as from IDX"
              + (f"; {r.stderr.strip()[-300:]}" if r.returncode else f"; differ: {differ[:3]}" if differ else ""))
    data = f'tensors("{work}/train.npz", test = "{work}/test.npz", scale = 1/255)'
    r = cgc([net] + common + ["--data", data, "--prefetch", "0", "--save", "p0.st"], work)
    check(r.returncode == 0 and load_safetensors(f"{work}/p0.st") == want,
          f"prefetch = 0 (rows read in the step): the checkpoint of prefetch = 2, bit for bit {r.stderr[-200:]}")
    reads_overlap(work, net, data)


def reads(r):
    """-v's figures: the ms the steps waited for their rows, and the ms reading them took."""
    m = re.search(r"cgc: data: the steps waited ([0-9.]+) ms in all for their rows; reading them took ([0-9.]+) ms",
                  r.stdout)
    return (float(m.group(1)), float(m.group(2))) if m else (None, None)


def reads_overlap(work, net, data):
    """A slow source ($CGC_DATA_DELAY_MS: each micro-batch's read sleeps first) overlaps the
    steps: read ahead, the steps wait for the first micro-batch only; read in the step, for
    every one. The delay is a third of a step, as measured here first, so the comparison
    holds on a fast machine and a loaded one alike."""
    steps = 40
    args = [net, "--device", "cpu", "-v", "--precision", "fp32", "--batch", "512", "--steps", str(steps),
            "--data", data]
    r = cgc(args, work)
    done = [l for l in r.stdout.splitlines() if l.startswith("cgc: done at step")]
    step_ms = float(done[0].split()[6]) * 1e3 / steps if done else 0
    delay = max(1, int(step_ms / 3))
    env = dict(os.environ, CGC_DATA_DELAY_MS=str(delay))
    ahead = subprocess.run([os.path.abspath(sys.argv[1])] + args, cwd=work, env=env, capture_output=True,
                           text=True, timeout=600)
    inline = subprocess.run([os.path.abspath(sys.argv[1])] + args + ["--prefetch", "0"], cwd=work, env=env,
                            capture_output=True, text=True, timeout=600)
    (w2, r2), (w0, r0) = reads(ahead), reads(inline)
    check(None not in (w2, r2, w0, r0) and r2 >= steps * delay and w0 >= steps * delay and w2 < w0 / 2,
          f"a source {delay} ms slow a micro-batch (a step {step_ms:.1f} ms): the steps waited {w2} ms reading "
          f"ahead (the reads took {r2} ms), {w0} ms reading in the step")


MODEL = """model small {
    input x: f32[N, 4]
    input y: i32[N]
    logits = linear(x, 3)
    output logits
    loss cross_entropy(logits, y)
}
train {
    data = tensors("d.npz")
    batch = 8
    steps = 2
}
"""


def npy_bytes(a, header=None, order="C"):
    """An .npy file of A; HEADER replaces its dict (padded as NumPy pads)."""
    d = header or "{'descr': '%s', 'fortran_order': %s, 'shape': %r, }" % (
        np.lib.format.dtype_to_descr(a.dtype), order == "F", a.shape)
    d += " " * (-(10 + len(d) + 1) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode() + a.tobytes(order=order)


def refused(work, name, data, want, files):
    """Each of FILES written, then a run from DATA: status 1, WANT in its message, no save."""
    for path, content in files.items():
        with open(os.path.join(work, path), "wb") as f:
            f.write(content)
    if os.path.exists(os.path.join(work, "out.st")):
        os.remove(os.path.join(work, "out.st"))
    r = cgc(["m.net", "--device", "cpu", "-q", "--data", data, "--save", "out.st"], work)
    saved = os.path.exists(os.path.join(work, "out.st"))
    check(r.returncode == 1 and want in r.stderr and not saved,
          f"{name}: status {r.returncode}, '{want}' said{'' if want in r.stderr else ' NOT'}: {r.stderr.strip()[:240]}")


def data_kept(work):
    """--save onto the safetensors file the run trains from, as named and through a link:
    refused before any step, the data as it was."""
    with open(f"{work}/m.net", "w") as f:
        f.write(MODEL)
    rng = np.random.default_rng(2)
    save_safetensors(f"{work}/d.safetensors", {"x": rng.standard_normal((64, 4)).astype(np.float32),
                                               "y": (np.arange(64) % 3).astype(np.int32)})
    os.symlink("d.safetensors", f"{work}/link.st")
    before = open(f"{work}/d.safetensors", "rb").read()
    for name in ("d.safetensors", "link.st"):
        r = cgc(["m.net", "--device", "cpu", "--data", 'tensors("d.safetensors")', "--save", name], work)
        kept = open(f"{work}/d.safetensors", "rb").read() == before
        check(r.returncode == 1 and f"cannot save to {name}: it is a file this run reads" in r.stderr
              and "step" not in r.stdout and kept,
              f"--save {name} onto the data: refused before a step, the data kept "
              f"(status {r.returncode}, kept {kept}): {r.stderr.strip()[:200]}")


def zip_of(members):
    import io
    import zipfile
    b = io.BytesIO()
    with zipfile.ZipFile(b, "w") as z:
        for name, content in members.items():
            z.writestr(name, content)
    return bytearray(b.getvalue())


def hostile(work):
    with open(f"{work}/m.net", "w") as f:
        f.write(MODEL)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((100, 4)).astype(np.float32), rng.integers(0, 3, 100).astype(np.int64)
    good = npy_bytes(x)
    os.mkdir(f"{work}/dir")
    refused(work, "no y.npy in the directory", 'tensors("dir")', "no y.npy for the input 'y'", {
        "dir/x.npy": good})
    refused(work, "a truncated .npy", 'tensors("dir")', "truncated", {
        "dir/x.npy": good[:len(good) // 2], "dir/y.npy": npy_bytes(y)})
    refused(work, "a header that claims 10 GB", 'tensors("dir")', "(10000000000): 40000000000 bytes of data; the file holds 64", {
        "dir/x.npy": npy_bytes(x[:4], "{'descr': '<f4', 'fortran_order': False, 'shape': (10000000000,), }")})
    refused(work, "an .npy with bytes after its data", 'tensors("dir")', "float32 of shape (100, 4): 1600 bytes of data; the file holds 1604", {
        "dir/x.npy": good + b"\0\0\0\0"})
    refused(work, "a header whose shape is larger than its data", 'tensors("dir")', "the file holds 1600", {
        "dir/x.npy": npy_bytes(x, "{'descr': '<f4', 'fortran_order': False, 'shape': (200, 4), }")})
    npz = zip_of({"x.npy": good, "y.npy": npy_bytes(y)})
    damaged = bytearray(npz)
    damaged[npz.find(b"\x93NUMPY") + 200] ^= 1
    refused(work, "a damaged member", 'tensors("d.npz")', "CRC-32", {"d.npz": bytes(damaged)})
    refused(work, "a truncated archive", 'tensors("d.npz")', "not a readable .npz", {"d.npz": bytes(npz[:300])})
    bomb = zip_of({"x.npy": good, "y.npy": npy_bytes(y)})
    at = bomb.find(b"PK\x01\x02")   # the first member's directory entry: deflated, 4 GB
    bomb[at + 10:at + 12] = struct.pack("<H", 8)
    bomb[at + 24:at + 28] = struct.pack("<I", 0xFFFFFFF0)
    refused(work, "a member claiming 4 GB from a few hundred bytes", 'tensors("d.npz")',
            "more than deflate can give", {"d.npz": bytes(bomb)})

    def arrays(name, want, **a):
        np.savez(f"{work}/d.npz", **a)
        refused(work, name, 'tensors("d.npz")', want, {})
    arrays("mismatched example counts", "one row per example of the first input", x=x, y=y[:99])
    arrays("a label out of range", "holds 3 at element 7, outside 0 to 2", x=x, y=np.where(np.arange(100) == 7, 3, y))
    arrays("a negative label", "holds -1 at element 0", x=x, y=np.where(np.arange(100) == 0, -1, y))
    arrays("float labels", "integers (class ids", x=x, y=y.astype(np.float32))
    arrays("a missing array", "no array 'y' (y.npy); the archive holds 'x.npy', 'z.npy'", x=x, z=y)
    arrays("features of another shape", "'x' is float32 [100 x 2 x 2], but the input 'x' needs [100 x 4]",
           x=x.reshape(100, 2, 2), y=y)
    arrays("a big-endian array", "big-endian", x=x.astype(">f4"), y=y)
    arrays("a complex array", "is not one cgc reads", x=x.astype(np.complex64), y=y)
    with open(f"{work}/d.npz", "wb") as f:
        f.write(bytes(zip_of({"x.npy": npy_bytes(x, order="F"), "y.npy": npy_bytes(y)})))
    refused(work, "a Fortran-ordered array", 'tensors("d.npz")', "Fortran order", {})
    np.save(f"{work}/one.npy", x)
    refused(work, "one .npy for two inputs", 'tensors("one.npy")', "one .npy array", {})
    os.mkfifo(f"{work}/fifo")
    refused(work, "a FIFO", 'tensors("fifo")', "is a FIFO", {})
    refused(work, "a file that is not there", 'tensors("none.npz")', 'tensors: the file "none.npz" not found', {})
    nan = x.copy()
    nan[[3, 50, 99], 1] = np.nan
    np.savez(f"{work}/d.npz", x=nan, y=y)
    r = cgc(["m.net", "--device", "cpu", "-q"], work)
    check("holds 3 NaN values (the first at element 13)" in r.stderr,
          f"NaN features: a warning that counts them: {r.stderr.splitlines()[0][:200]}")
    np.savez(f"{work}/d.npz", x=x, y=y)
    r1 = cgc(["m.net", "--device", "cpu", "-q", "--save", "one.st"], work)
    r2 = cgc(["m.net", "--device", "cpu", "-q", "--save", "two.st", "--data", 'tensors("d.npz", scale = 2)'], work)
    same = r1.returncode == r2.returncode == 0 and load_safetensors(f"{work}/one.st") == load_safetensors(f"{work}/two.st")
    check(same and "multiplies integer features only" in r2.stderr,
          f"float features with a scale: a warning, and taken as they are: {r2.stderr.strip()[:160]}")
    r = cgc(["m.net", "--device", "cpu", "--metrics", "m1.jsonl", "--save", "s1.st"], work)
    np.savez(f"{work}/head.npz", x=x[:90], y=y[:90])
    np.savez(f"{work}/tail.npz", x=x[90:], y=y[90:])
    r2 = cgc(["m.net", "--device", "cpu", "-q", "--metrics", "m2.jsonl", "--save", "s2.st", "--data",
              'tensors("head.npz", test = "tail.npz")'], work)
    import zipfile
    with zipfile.ZipFile(f"{work}/z64.npz", "w") as z:   # zip64 extra fields in the local headers
        for name, a in (("x.npy", x), ("y.npy", y)):
            with z.open(name, "w", force_zip64=True) as f:
                f.write(npy_bytes(a))
    r4 = cgc(["m.net", "--device", "cpu", "-q", "--save", "s4.st", "--data", 'tensors("z64.npz")'], work)
    check(r4.returncode == 0 and load_safetensors(f"{work}/s4.st") == load_safetensors(f"{work}/s1.st"),
          f"an archive with zip64 local headers: the plain one's checkpoint {r4.stderr.strip()[:200]}")
    if shutil.which("mpirun"):   # each rank checks and hashes the rows it mapped; the hashes agree
        os.environ["LSAN_OPTIONS"] = (f"suppressions={ROOT}/tests/e2e/lsan_mpi.supp:fast_unwind_on_malloc=0"
                                      + (":" + os.environ["LSAN_OPTIONS"] if "LSAN_OPTIONS" in os.environ else ""))
        r3 = cgc(["m.net", "--device", "cpu", "-q", "--nproc", "2", "--save", "s3.st"], work)
        check(r3.returncode == 0, f"two ranks from one .npz: the ranks' data hashes agree {r3.stderr.strip()[:200]}")
    keys = ("train_loss", "test_loss", "test_accuracy")
    last = [{k: v for k, v in json.loads(open(f"{work}/{m}").read().splitlines()[-1]).items() if k in keys}
            for m in ("m1.jsonl", "m2.jsonl")] if r.returncode == r2.returncode == 0 else [{}, {1: 1}]
    check(r.returncode == 0 and "90 train, 10 test (its last tenth)" in r.stdout and last[0] == last[1]
          and load_safetensors(f"{work}/s1.st") == load_safetensors(f"{work}/s2.st"),
          f"no test file: the last tenth evaluates, as the same rows given as a test file do "
          f"(test loss {last[0].get('test_loss')} and {last[1].get('test_loss')})")


def table(work):
    """csv(...) against tensors(...) from the same numbers, and broken tables."""
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (200, 4)).astype(np.uint8)
    y = rng.integers(0, 3, 200)
    np.savez(f"{work}/d.npz", x=x, y=y)
    rows = [f'"a, first",b,"the ""label""",c,d']
    rows += [f"{r[0]},{r[1]},{l},{r[2]}, {r[3]}" for r, l in zip(x, y)]
    with open(f"{work}/d.csv", "wb") as f:
        f.write(b"\xef\xbb\xbf" + "\r\n".join(rows[:100]).encode() + b"\r\n\r\n" + "\n".join(rows[100:]).encode() + b"\n\n\n")
    with open(f"{work}/m.net", "w") as f:
        f.write(MODEL)
    common = ["m.net", "--device", "cpu", "-q", "--steps", "5"]
    r1 = cgc(common + ["--data", 'tensors("d.npz", scale = 1/255)', "--save", "npz.st"], work)
    r2 = cgc(common + ["--data", 'csv("d.csv", label = "the \\"label\\"", scale = 1/255)', "--save", "csv.st"], work)
    same = r1.returncode == r2.returncode == 0 and load_safetensors(f"{work}/npz.st") == load_safetensors(f"{work}/csv.st")
    check(same, f"csv against tensors, the same numbers: the same checkpoint bit for bit {r2.stderr.strip()[:300]}")
    floats = rng.standard_normal((200, 4)).astype(np.float32)
    np.savez(f"{work}/f.npz", x=floats, y=y)
    with open(f"{work}/f.csv", "w") as f:
        f.write("p,q,r,s,label\n" + "".join(",".join(repr(float(v)) for v in r) + f",{l}\n" for r, l in zip(floats, y)))
    r1 = cgc(common + ["--data", 'tensors("f.npz")', "--save", "f1.st"], work)
    r2 = cgc(common + ["--data", 'csv("f.csv", label = "label")', "--save", "f2.st"], work)
    same = r1.returncode == r2.returncode == 0 and load_safetensors(f"{work}/f1.st") == load_safetensors(f"{work}/f2.st")
    check(same, f"csv of float32 values printed exactly: the .npz's checkpoint bit for bit {r2.stderr.strip()[:300]}")
    header = "a,b,c,d,y\n"
    good = "".join(f"1,2,3,4,{i % 3}\n" for i in range(20))
    broken = {
        "a ragged row": (header + good + "1,2,3,0\n", 'label = "y"', "line 22 has 4 fields; the header has 5"),
        "a cell that is not a number": (header + good + "1,2,x3,4,0\n", 'label = "y"', "line 22, column 3 ('c'): 'x3' is not a number"),
        "an empty cell": (header + "1,,3,4,0\n" + good, 'label = "y"', "line 2, column 2 ('b'): an empty cell"),
        "a label that is no class id": (header + good + "1,2,3,4,1.5\n", 'label = "y"', "line 22: the label 1.5 is not a class id from 0 to 2"),
        "a label out of range": (header + good + "1,2,3,4,3\n", 'label = "y"', "the label 3 is not a class id"),
        "no such label column": (header + good, 'label = "z"', "no column 'z' for the labels; the header names 'a', 'b', 'c', 'd', 'y'"),
        "no label given": (header + good, "", "say which column holds them"),
        "an unclosed quote": (header + good + '1,2,"3,4,0\n', 'label = "y"', "line 22: a quoted field is not closed"),
        "text after a closing quote": (header + '1,2,"3"x,4,0\n' + good, 'label = "y"', "line 2: text after a field's closing quote"),
        "another width": ("a,b,y\n" + "1,2,0\n" * 20, 'label = "y"', "2 feature columns and one label, but the model's first input takes 4"),
        "a header and no rows": (header, 'label = "y"', "a header and no rows"),
        "an empty file": ("", 'label = "y"', "empty: a header line"),
    }
    for what, (text, label, want) in broken.items():
        with open(f"{work}/b.csv", "w") as f:
            f.write(text)
        refused(work, f"csv: {what}", f'csv("b.csv"{", " + label if label else ""})', want, {})


PREDICT_MODEL = """model two {
    input x: f32[N, 5]
    input y: i32[N]
    h = relu(linear(x, 16))
    logits = linear(h, 4)
    output logits
    loss cross_entropy(logits, y)
}
train {
    data = tensors("d.npz")
    batch = 8
    steps = 30
    optimizer = adamw(lr = 1e-2)
}
"""


def against_torch_and_eval(work, w, x, y, test_loss):
    """--predict's outputs against PyTorch's nn.Sequential holding cgc's weights (where
    Debian's python3-torch is installed), and against the evaluation graph: the mean
    cross-entropy of its outputs on the test split (the last tenth) is the test loss the
    training run reported (--metrics)."""
    np.save(f"{work}/test.npy", x[180:])
    r = cgc(["p.net", "--device", "cpu", "-q", "--resume", "p.st", "--predict", "test.npy", "--out", "t.npy"], work)
    got = np.load(f"{work}/t.npy").astype(np.float64) if r.returncode == 0 else np.zeros((20, 4))
    z = got - got.max(1, keepdims=True)
    loss = float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(20), y[180:]]))
    check(abs(loss - test_loss) <= 1e-6 * abs(test_loss),
          f"--predict on the test split: cross-entropy {loss:.9g}, the evaluation graph's test loss {test_loss:.9g}")
    try:
        import torch
    except ImportError:
        print("skip --predict against PyTorch: no torch")
        return
    net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with torch.no_grad():
        for layer, name in ((net[0], "h"), (net[2], "logits")):
            layer.weight.copy_(torch.from_numpy(w[f"{name}.weight"].reshape(layer.weight.shape).copy()))
            layer.bias.copy_(torch.from_numpy(w[f"{name}.bias"].copy()))
        want = net.eval()(torch.from_numpy(x[180:])).numpy()
    err = float(np.abs(got - want).max() / np.abs(want).max())
    check(err <= 1e-5, f"--predict against PyTorch's forward with cgc's weights: within {err:.2g}")


def predicting(work):
    """--predict against NumPy's forward pass of the saved weights, PyTorch's and the
    evaluation graph's loss."""
    with open(f"{work}/p.net", "w") as f:
        f.write(PREDICT_MODEL)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((200, 5)).astype(np.float32), rng.integers(0, 4, 200)
    np.savez(f"{work}/d.npz", x=x, y=y)
    r = cgc(["p.net", "--device", "cpu", "-q", "--save", "p.st", "--metrics", "m.jsonl"], work)
    check(r.returncode == 0, f"--predict: a model to predict with: {r.stderr.strip()[:200]}")
    test_loss = json.loads(open(f"{work}/m.jsonl").read().splitlines()[-1])["test_loss"] if r.returncode == 0 else 0
    raw = load_safetensors(f"{work}/p.st")
    w = {k: np.frombuffer(v, np.float32) for k, v in raw.items()}
    new = rng.standard_normal((45, 5)).astype(np.float32)
    h = np.maximum(new.astype(np.float64) @ w["h.weight"].reshape(16, 5).T + w["h.bias"], 0)
    want = h @ w["logits.weight"].reshape(4, 16).T + w["logits.bias"]
    np.save(f"{work}/new.npy", new)
    np.savez(f"{work}/new.npz", x=new)
    os.mkdir(f"{work}/newdir")
    np.save(f"{work}/newdir/x.npy", new)
    with open(f"{work}/new.csv", "w") as f:
        f.write("a,b,c,d,e\n" + "".join(",".join(repr(float(v)) for v in row) + "\n" for row in new))
    for source in ("new.npy", "new.npz", "newdir", "new.csv"):
        r = cgc(["p.net", "--device", "cpu", "--resume", "p.st", "--predict", source, "--out", "o.npy"], work)
        got = np.load(f"{work}/o.npy") if r.returncode == 0 else np.zeros(0)
        err = float(np.abs(got - want).max() / np.abs(want).max()) if got.shape == want.shape else float("inf")
        check(err <= 1e-5, f"--predict {source} --out o.npy: {got.shape} within {err:.2g} of NumPy's "
                           f"forward pass {r.stderr.strip()[:200]}")
    against_torch_and_eval(work, w, x, y, test_loss)
    r = cgc(["p.net", "--device", "cpu", "-q", "--resume", "p.st", "--predict", "new.npy", "--out", "o.safetensors"], work)
    out = load_safetensors(f"{work}/o.safetensors") if r.returncode == 0 else {}
    cls = np.frombuffer(out.get("class", b""), np.int32)
    check(r.returncode == 0 and (cls == want.argmax(1)).all() and len(cls) == 45
          and np.allclose(np.frombuffer(out.get("logits", b""), np.float32).reshape(45, 4), want, atol=1e-5),
          f"--out o.safetensors: 'logits' and each row's 'class' {r.stderr.strip()[:200]}")
    r = cgc(["p.net", "--resume", "p.st", "--predict", "new.npy", "--explain"], work)
    check(r.returncode == 0 and "no optimizer state" in r.stdout
          and "Kernels per batch predicted: 2 launches, of which 2 GEMMs" in r.stdout
          and "train" not in r.stdout.split("Memory plan")[-1].split("Kernels")[0],
          f"--explain --predict: the inference plan's memory, no optimizer state or train graph {r.stderr.strip()[:200]}")
    os.mkdir(f"{work}/dir.npy")
    with open(f"{work}/p.st", "rb") as src, open(f"{work}/p.safetensors", "wb") as dst:
        dst.write(src.read())
    for what, args, want_msg in (
            ("onto a directory", ["--resume", "p.st", "--predict", "new.npy", "--out", "dir.npy"], "it is a directory"),
            ("onto the checkpoint it reads", ["--resume", "p.safetensors", "--predict", "new.npy", "--out",
                                              "p.safetensors"], "it is the checkpoint --resume reads"),
            ("onto the model", ["--resume", "p.st", "--predict", "new.npy", "--out", "p.net.npy"], None),
            ("without --out", ["--resume", "p.st", "--predict", "new.npy"], "give --resume FILE"),
            ("another extension", ["--resume", "p.st", "--predict", "new.npy", "--out", "o.txt"], "end the name in one of them"),
            ("rows of another width", ["--resume", "p.st", "--predict", "d.npz", "--out", "o.npy"], None),
            ("--out without --predict", ["--out", "o.npy"], "give --predict INPUT too"),
            ("onto its own input", ["--resume", "p.st", "--predict", "new.npy", "--out", "new.npy"],
             "cannot write the predictions to new.npy: it is the input of --predict")):
        if want_msg is None and what == "onto the model":   # a name that is the model's, through a link
            os.symlink("p.net", f"{work}/p.net.npy")
            want_msg = "cannot write the predictions to p.net.npy"
        if want_msg is None:   # d.npz's x is [200, 5]: it predicts; a file of 3 columns does not
            np.save(f"{work}/narrow.npy", new[:, :3])
            args, want_msg = ["--resume", "p.st", "--predict", "narrow.npy", "--out", "o.npy"], "but the input 'x' needs [45 x 5]"
        before = open(f"{work}/new.npy", "rb").read()
        r = cgc(["p.net", "--device", "cpu"] + args, work)
        check(r.returncode in (1, 2) and want_msg in r.stderr and open(f"{work}/new.npy", "rb").read() == before,
              f"--predict {what}: {r.stderr.strip()[:200]}")


def larger_than_memory(work):
    """Rows that as f32 would not fit the process's data limit train from their mapped file."""
    n, limit = 400000, 768 << 20
    x = np.lib.format.open_memmap(f"{work}/x.npy", mode="w+", dtype=np.uint8, shape=(n, 784))
    rng = np.random.default_rng(4)
    for i in range(0, n, 50000):
        x[i:i + 50000] = rng.integers(0, 256, (50000, 784), dtype=np.uint8)
    x.flush()
    del x
    np.save(f"{work}/y.npy", rng.integers(0, 10, n).astype(np.uint8))
    prlimit = ["prlimit", f"--data={limit}"]
    control = subprocess.run(prlimit + [sys.executable, "-c", "bytearray(1 << 30)"], capture_output=True)
    net = os.path.join(ROOT, "models", "mlp.net")
    r = run(prlimit + [os.path.abspath(sys.argv[1]), net, "--device", "cpu", "--steps", "3",
                       "--precision", "fp32", "--data", f'tensors("{work}", scale = 1/255)'], work)
    if "AddressSanitizer failed to allocate" in r.stderr:   # its shadow memory needs the address space
        print("skip larger than memory: a sanitizer build cannot run under a data limit")
        return
    check(control.returncode != 0 and r.returncode == 0 and "360000 train, 40000 test" in r.stdout,
          f"{n} rows, {n * 784 * 4 >> 20} MB as f32, under a {limit >> 20} MB data limit (1 GB refused "
          f"under it: {control.returncode != 0}): status {r.returncode} {r.stderr.strip()[:200]}")
    # a CSV table whose rows as f32 would not fit a 512 MB limit (OpenBLAS's buffers need
    # more than 256 MB): converted into a temporary file, mapped
    n, limit = 200000, 512 << 20
    with open(f"{work}/big.csv", "wb") as f:
        f.write(("label," + ",".join(f"p{i}" for i in range(784)) + "\n").encode())
        for _ in range(0, n, 20000):   # three digits and a comma a cell
            cells = rng.integers(0, 256, (20000, 785), dtype=np.uint16)
            cells[:, 0] %= 10
            digits = np.empty((20000, 785, 4), np.uint8)
            for k, d in enumerate((100, 10, 1)):
                digits[:, :, k] = ord("0") + cells // d % 10
            digits[:, :, 3] = ord(",")
            digits[:, -1, 3] = ord("\n")
            f.write(digits.tobytes())
    r = run(prlimit[:1] + [f"--data={limit}", os.path.abspath(sys.argv[1]), net, "--device", "cpu", "--steps", "3",
                           "--precision", "fp32", "--data", f'csv("{work}/big.csv", label = "label", scale = 1/255)'],
            work)
    check(r.returncode == 0 and "180000 train, 20000 test" in r.stdout,
          f"a CSV of {n} rows ({os.path.getsize(work + '/big.csv') >> 20} MB; {n * 784 * 4 >> 20} MB as f32) under a "
          f"{limit >> 20} MB data limit: status {r.returncode} {r.stderr.strip()[:200]}")


def memory_cgroup(limit):
    """A new memory cgroup of LIMIT bytes under this process's (v1, or v2 where its memory
    controller is on), as (directory, its file of processes, its peak usage's file, a count
    of the times it hit the limit: a function), or None where none can be made."""
    try:
        lines = open("/proc/self/cgroup").read().splitlines()
    except OSError:
        return None
    v1 = [l.split(":", 2)[2] for l in lines if l.split(":", 2)[1] == "memory"]
    v2 = [l.split(":", 2)[2] for l in lines if l.startswith("0::")]
    if v1:
        base, limit_file, peak = "/sys/fs/cgroup/memory" + v1[0], "memory.limit_in_bytes", "memory.max_usage_in_bytes"
        hits = lambda d: int(open(f"{d}/memory.failcnt").read())
    elif v2 and "memory" in open("/sys/fs/cgroup/cgroup.controllers").read().split():
        base, limit_file, peak = "/sys/fs/cgroup" + v2[0], "memory.max", "memory.peak"
        hits = lambda d: int(dict(l.split() for l in open(f"{d}/memory.events"))["max"])
    else:
        return None
    d = f"{base.rstrip('/')}/cgc-test-{os.getpid()}"
    try:
        os.mkdir(d)
        with open(f"{d}/{limit_file}", "w") as f:
            f.write(str(limit))
    except OSError:
        return None
    return d, f"{d}/cgroup.procs", f"{d}/{peak}", hits


def in_cgroup(procs):
    def enter():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    return enter


def larger_than_a_cgroup(work):
    """A 1.1 GB .npy of f32 features trains, and evaluates, in a 512 MB memory cgroup: its
    pages come and go through the page cache, which the cgroup's limit counts, and a
    control allocating 1 GB there is killed. Skipped where no cgroup can be made (not
    root)."""
    limit, n = 512 << 20, 350000
    made = memory_cgroup(limit)
    if not made:
        print("skip larger than a memory cgroup: none can be made here (root and cgroup v1 or v2 needed)")
        return
    d, procs, peak, hits = made
    try:
        x = np.lib.format.open_memmap(f"{work}/x.npy", mode="w+", dtype=np.float32, shape=(n, 784))
        rng = np.random.default_rng(5)
        for i in range(0, n, 50000):
            x[i:i + 50000] = rng.random((min(50000, n - i), 784), dtype=np.float32)
        x.flush()
        del x
        np.save(f"{work}/y.npy", rng.integers(0, 10, n).astype(np.uint8))
        for name in ("x.npy", "y.npy"):   # out of the page cache, so that the run's reads count
            fd = os.open(f"{work}/{name}", os.O_RDONLY)
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        control = subprocess.run([sys.executable, "-c", "bytearray(1 << 30)"], preexec_fn=in_cgroup(procs),
                                 capture_output=True)
        before = hits(d)
        net = os.path.join(ROOT, "models", "mlp.net")
        r = subprocess.run([os.path.abspath(sys.argv[1]), net, "--device", "cpu", "--steps", "20", "--precision",
                            "fp32", "--data", f'tensors("{work}")'], cwd=work, preexec_fn=in_cgroup(procs),
                           capture_output=True, text=True, timeout=600)
        pressed = hits(d) - before
        check(control.returncode != 0 and r.returncode == 0 and "315000 train, 35000 test" in r.stdout
              and "test_loss" in r.stdout and pressed > 0,
              f"{n * 784 * 4 >> 20} MB of f32 features in a {limit >> 20} MB memory cgroup: status {r.returncode}, "
              f"the cgroup at its limit {pressed} times, its peak {int(open(peak).read()) >> 20} MB (1 GB "
              f"allocated there: killed {control.returncode != 0}) {r.stderr.strip()[:200]}")
    finally:
        os.rmdir(d)


MAX_RSS = """import resource, subprocess, sys
r = subprocess.run(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)
sys.exit(r.returncode)
"""


def predicting_half(work):
    """--predict of a bf16 model: its evaluation graph reads the weights' half copies,
    which a checkpoint does not hold, so they are made from the weights it does; the
    test split's cross-entropy is the test loss the training run reported."""
    with open(f"{work}/p.net", "w") as f:
        f.write(PREDICT_MODEL)
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((200, 5)).astype(np.float32), rng.integers(0, 4, 200)
    np.savez(f"{work}/d.npz", x=x, y=y)
    half = ["--device", "cpu", "-q", "--precision", "bf16"]
    r = cgc(["p.net", *half, "--save", "p.st", "--metrics", "m.jsonl"], work)
    check(r.returncode == 0, f"--predict in bf16: a model to predict with: {r.stderr.strip()[:200]}")
    test_loss = json.loads(open(f"{work}/m.jsonl").read().splitlines()[-1])["test_loss"] if r.returncode == 0 else 0
    np.save(f"{work}/test.npy", x[180:])
    r = cgc(["p.net", *half, "--resume", "p.st", "--predict", "test.npy", "--out", "t.npy"], work)
    got = np.load(f"{work}/t.npy").astype(np.float64) if r.returncode == 0 else np.zeros((20, 4))
    z = got - got.max(1, keepdims=True)
    loss = float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(20), y[180:]]))
    # --predict adds the last bias in the GEMM's epilogue, which rounds the product once,
    # where the run's evaluation rounded it to bf16 before the add: within a unit of bf16
    # (2^-8). Other weights, such as copies never made (zeros: log 4), are a tenth off.
    check(abs(loss - test_loss) <= 2 ** -8 * abs(test_loss),
          f"--predict in bf16 on the test split: cross-entropy {loss:.9g}, the run's test loss {test_loss:.9g} "
          f"{r.stderr.strip()[:200]}")
    r = cgc(["p.net", "--precision", "bf16", "--resume", "p.st", "--predict", "test.npy", "--explain"], work)
    check(r.returncode == 0 and "Precision (bf16): parameters are f32.\nThe prediction reads the casts of the "
          "weights from bf16 copies" in r.stdout and "gradients" not in r.stdout.split("Memory plan")[0],
          f"--explain --predict in bf16: copies made from the checkpoint, no gradients {r.stdout[:400]}")


def predicting_streams(work):
    """--predict's output written as its batches are computed, not held whole."""
    rows, width = 25000, 2048
    with open(f"{work}/w.net", "w") as f:
        f.write(f"""model wide_out {{
    input x: f32[N, 5]
    input y: f32[N, {width}]
    out = linear(x, {width})
    output out
    loss mse(out, y)
}}
train {{
    data      = synthetic(samples = 64)
    batch     = 64
    optimizer = sgd(lr = 0.01)
}}
""")
    r = cgc(["w.net", "--device", "cpu", "-q", "--save", "w.st"], work)
    check(r.returncode == 0, f"a model of wide outputs to predict with: {r.stderr.strip()[:200]}")
    raw = load_safetensors(f"{work}/w.st") if r.returncode == 0 else {}
    w = {k: np.frombuffer(v, np.float32) for k, v in raw.items()}
    x = np.random.default_rng(5).standard_normal((rows, 5)).astype(np.float32)
    np.save(f"{work}/x.npy", x)
    want = x.astype(np.float64) @ w["out.weight"].reshape(width, 5).T.astype(np.float64) + w["out.bias"] \
        if w else np.zeros((rows, width))
    for out in ("o.npy", "o.safetensors"):
        # A child's peak counts the memory of the process it was forked from, so a small
        # Python without NumPy starts it and reports its peak (RUSAGE_CHILDREN).
        p = run([sys.executable, "-c", MAX_RSS, os.path.abspath(sys.argv[1]), "w.net", "--device", "cpu", "-q",
                 "--resume", "w.st", "--predict", "x.npy", "--out", out], work)
        err, peak = p.stderr, int(p.stdout.split()[-1]) if p.stdout.split() else 0
        if out.endswith(".npy"):
            got = np.load(f"{work}/{out}") if p.returncode == 0 else np.zeros(0)
        else:
            got = np.frombuffer(load_safetensors(f"{work}/{out}").get("out", b""), np.float32) \
                if p.returncode == 0 else np.zeros(0)
            got = got.reshape(rows, width) if got.size == rows * width else got
        dev = float(np.abs(got - want).max() / np.abs(want).max()) if got.shape == want.shape else float("inf")
        output = rows * width * 4
        check(p.returncode == 0 and dev <= 1e-5 and peak < output / 2,
              f"--predict --out {out}: {rows} x {width} outputs within {dev:.2g} of NumPy's, the process's "
              f"peak {peak >> 20} MB against {output >> 20} MB of output (want under half) {err.strip()[:200]}")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory() as work:
        hostile(work)
    with tempfile.TemporaryDirectory() as work:
        data_kept(work)
    with tempfile.TemporaryDirectory() as work:
        table(work)
    with tempfile.TemporaryDirectory() as work:
        predicting(work)
    with tempfile.TemporaryDirectory() as work:
        predicting_half(work)
    with tempfile.TemporaryDirectory() as work:
        predicting_streams(work)
    with tempfile.TemporaryDirectory() as work:
        larger_than_memory(work)
    with tempfile.TemporaryDirectory() as work:
        larger_than_a_cgroup(work)
    if os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        with tempfile.TemporaryDirectory() as work:
            same_run(work)
    else:
        print(f"skipped the runs from IDX: {DATA} has no Fashion-MNIST")
    print(f"{failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
