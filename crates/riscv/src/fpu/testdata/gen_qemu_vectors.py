#!/usr/bin/env python3
"""Regenerates qemu_vectors.txt: F/D results and fflags as computed by qemu-riscv64.

Usage (needs riscv64-linux-gnu-gcc and qemu-riscv64, i.e. Debian's
gcc-riscv64-linux-gnu and qemu-user):
    python3 gen_qemu_vectors.py > qemu_vectors.txt
Each output line: op rm a b c result fflags (hex; rm in decimal).
"""
import os
import random
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(20261130)

FORMATS = {"f32": (8, 23), "f64": (11, 52)}


def pack(fmt, sign, exp, frac):
    e, m = FORMATS[fmt]
    return (sign << (e + m)) | ((exp & ((1 << e) - 1)) << m) | (frac & ((1 << m) - 1))


def fraction(fmt):
    m = FORMATS[fmt][1]
    mask = (1 << m) - 1
    k = rng.randrange(m)
    return rng.choice([
        rng.getrandbits(m), rng.getrandbits(m), 0, mask, 1, 1 << k, mask >> k,
        (mask << k) & mask, rng.getrandbits(m) & ~((1 << k) - 1) & mask,
    ])


def exponent(fmt):
    e = FORMATS[fmt][0]
    top = (1 << e) - 1
    bias = (1 << (e - 1)) - 1
    return rng.choice([
        rng.randrange(top + 1), rng.randrange(4), top - rng.randrange(4),
        bias + rng.randrange(-30, 31), bias + rng.randrange(-30, 31), rng.randrange(1, 40),
    ])


def value(fmt):
    e, m = FORMATS[fmt]
    if rng.random() < 0.15:
        return rng.getrandbits(e + m + 1)
    return pack(fmt, rng.getrandbits(1), exponent(fmt), fraction(fmt))


def near(fmt, base, spread):
    e, m = FORMATS[fmt]
    top = (1 << e) - 1
    exp = (base >> m) & top
    exp = min(max(exp + rng.randrange(-spread, spread + 1), 0), top)
    return pack(fmt, rng.getrandbits(1), exp, fraction(fmt))


def integer():
    k = rng.randrange(64)
    return rng.choice([
        rng.getrandbits(64), rng.getrandbits(64) >> k, (1 << k) + rng.randrange(-1, 2),
        (-(1 << k) + rng.randrange(-1, 2)) & (2**64 - 1), rng.randrange(-5, 5) & (2**64 - 1),
    ]) & (2**64 - 1)


def vectors():
    out = []
    for fmt in FORMATS:
        e, m = FORMATS[fmt]
        bias = (1 << (e - 1)) - 1
        for op in ["add", "sub", "mul", "div"]:
            for _ in range(130):
                a = value(fmt)
                b = near(fmt, a, 3 if rng.random() < 0.4 else 70) if rng.random() < 0.6 else value(fmt)
                out.append((f"{fmt}_{op}", a, b, 0))
        for op in ["fmadd", "fmsub", "fnmsub", "fnmadd"]:
            for _ in range(80):
                a, b = value(fmt), value(fmt)
                if rng.random() < 0.6:
                    exp = ((a >> m) & ((1 << e) - 1)) + ((b >> m) & ((1 << e) - 1)) - bias
                    exp = min(max(exp + rng.randrange(-30, 31), 0), (1 << e) - 2)
                    c = pack(fmt, rng.getrandbits(1), exp, fraction(fmt))
                else:
                    c = value(fmt)
                out.append((f"{fmt}_{op}", a, b, c))
        for op in ["min", "max", "eq", "lt", "le"]:
            for _ in range(30):
                a = value(fmt)
                b = a if rng.random() < 0.2 else near(fmt, a, 1) if rng.random() < 0.5 else value(fmt)
                out.append((f"{fmt}_{op}", a, b, 0))
        for op in ["sqrt", "classify", "to_i32", "to_u32", "to_i64", "to_u64"]:
            for _ in range(75):
                a = value(fmt)
                if op.startswith("to_") and rng.random() < 0.5:
                    a = pack(fmt, rng.getrandbits(1), bias + rng.randrange(-3, 66), fraction(fmt))
                out.append((f"{fmt}_{op}", a, 0, 0))
        for src in ["i32", "u32", "i64", "u64"]:
            for _ in range(50):
                out.append((f"{src}_to_{fmt}", integer(), 0, 0))
    for _ in range(100):
        out.append(("f32_to_f64", value("f32"), 0, 0))
    for _ in range(150):
        a = value("f64")
        if rng.random() < 0.5:
            a = pack("f64", rng.getrandbits(1), 1023 + rng.choice([rng.randrange(-160, -120), rng.randrange(120, 130)]), fraction("f64"))
        out.append(("f64_to_f32", a, 0, 0))
    vectors = [(op, rng.randrange(5), a, b, c) for (op, a, b, c) in out]
    # Fixed cases that pin RISC-V conventions, in every rounding mode.
    fixed = [
        ("f32_mul", 0x3F7FFFFF, 0x00800000, 0),  # 2^-126 - 2^-150 exactly: tiny after rounding, UF
        ("f64_mul", 0x3FEFFFFFFFFFFFFF, 0x0010000000000000, 0),
        ("f64_to_f32", 0x380FFFFFF0000000, 0, 0),  # 2^-126 - 2^-151: a tie at 24 bits
        ("f64_to_f32", 0x380FFFFFE0080000, 0, 0),  # 2^-126 - 2^-150 + 2^-160: between the midpoints
        ("f32_mul", 0x00000001, 0x3F000000, 0),
        ("f32_fmadd", 0x00000000, 0x7F800000, 0x7FC00001),  # NV despite the qNaN addend
        ("f64_fmadd", 0x7FF0000000000000, 0x8000000000000000, 0x7FF8000000000000),
        ("f32_fmadd", 0x7FC00000, 0x00000000, 0x7F800000),
        ("f32_fmsub", 0x3F800000, 0x3F800000, 0x3F800000),  # exact zero: sign by mode
        ("f32_min", 0x7F800001, 0x3F800000, 0),
        ("f32_max", 0x7FC00000, 0x7FC00000, 0),
        ("f64_min", 0x0000000000000000, 0x8000000000000000, 0),
        ("f32_to_u32", 0xBF000000, 0, 0),  # -0.5: in range or not depending on mode
        ("f32_to_i32", 0x7FC00000, 0, 0),
        ("f64_to_u64", 0xFFF0000000000000, 0, 0),
        ("f64_to_i32", 0x41DFFFFFFFE00000, 0, 0),  # 2147483647.5
        ("f32_add", 0x7F7FFFFF, 0x7F7FFFFF, 0),  # overflow: inf or max by mode
        ("f32_sub", 0x3F800000, 0x3F800000, 0),
        ("f64_sqrt", 0x8000000000000000, 0, 0),
        ("f64_sqrt", 0xBFF0000000000000, 0, 0),
        ("f32_div", 0x3F800000, 0x80000000, 0),
        ("f64_to_f32", 0x7FF0000000000001, 0, 0),
        ("f32_to_f64", 0x7F800001, 0, 0),
    ]
    vectors += [(op, rm, a, b, c) for (op, a, b, c) in fixed for rm in range(5)]
    return vectors


def main():
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "qemu_vectors")
        subprocess.run(["riscv64-linux-gnu-gcc", "-O1", "-static", "-march=rv64gc", "-o", exe,
                        os.path.join(HERE, "qemu_vectors.c")], check=True)
        lines = "".join(f"{op} {rm} {a:x} {b:x} {c:x}\n" for (op, rm, a, b, c) in vectors())
        result = subprocess.run(["qemu-riscv64", exe], input=lines, capture_output=True, text=True, check=True)
        print(result.stdout, end="")


if __name__ == "__main__":
    main()
