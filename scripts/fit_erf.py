#!/usr/bin/env python3
"""Fits the coefficients of the f32 erf and exp that gelu and its gradient use
(codegen/cgc_math.h's cgc_erff and cgc_expf) and prints them as float literals, highest
degree first (the order of Horner's rule in the C).

    python3 scripts/fit_erf.py

Each is a near-minimax polynomial by Lawson's algorithm (least squares on Chebyshev
points, reweighted by the error until it levels), the reference in 40 digits (mpmath):
  - P(s), degree 6, s = x^2 in [0, 1]: erf(x)/x - 1 (the C adds the 1 as x + x P), error
    relative to erf(x)/x;
  - R(u), degree 9, u = a - 2.5 for a in [1, 4]: log(erfc(a)) + a^2 (the C subtracts the
    a^2 exactly with an fma), absolute error, which is erfc's relative error;
  - E(r), degree 6, r in [-ln2/2, ln2/2]: e^r, relative error.
tests/test_exec.c's test_erf_exp measures the results in f32 against libm in double.
Needs NumPy and mpmath (Debian's python3-numpy, python3-mpmath)."""
import mpmath as mp
import numpy as np

mp.mp.dps = 40


def lawson(f, lo, hi, degree, shift=0.0, relative=False, points=4000, rounds=60):
    """Coefficients (lowest degree first) of a polynomial in (t - SHIFT) near the minimax
    approximation of F on [LO, HI], and its largest error on the points."""
    t = np.cos(np.linspace(0, np.pi, points)) * (hi - lo) / 2 + (hi + lo) / 2
    y = np.array([float(f(mp.mpf(float(v)))) for v in t])
    v = np.vander(t - shift, degree + 1, increasing=True)
    scale = np.abs(y) if relative else np.ones_like(y)
    w = np.ones_like(t)
    for _ in range(rounds):
        sw = np.sqrt(w) / scale
        c, *_ = np.linalg.lstsq(v * sw[:, None], y * sw, rcond=None)
        err = np.abs(v @ c - y) / scale
        w = w * err
        w /= w.sum()
    return c, err.max()


def show(name, c, err):
    print(f"{name} (error {err:.2e}):", ", ".join(repr(np.float32(x)) + "f" for x in c[::-1]))


def main():
    c, err = lawson(lambda s: mp.erf(mp.sqrt(s)) / mp.sqrt(s) if s > 0 else 2 / mp.sqrt(mp.pi),
                    0, 1, 6, relative=True)
    c[0] -= 1
    show("erf, |x| < 1: P", c, err)
    c, err = lawson(lambda a: mp.log(mp.erfc(a)) + a * a, 1, 4, 9, shift=2.5)
    show("erf, |x| >= 1: R", c, err)
    half = float(mp.log(2)) / 2
    c, err = lawson(mp.exp, -half, half, 6, relative=True)
    show("exp: E", c, err)


if __name__ == "__main__":
    main()
