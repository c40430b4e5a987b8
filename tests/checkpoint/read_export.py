"""Runs export_parameters_main, then reads its safetensors file with Python's
safetensors package (the reference implementation users load weights with)
and checks every parameter's name, dtype, shape and values against the
expected.txt the exporter wrote.

    read_export.py <export_parameters_main> <dir>
"""
import subprocess
import sys

import numpy as np
from safetensors.numpy import load_file
from safetensors import safe_open


def main():
    exe, out = sys.argv[1], sys.argv[2]
    subprocess.run([exe, out], check=True)
    path = out + "/params.safetensors"
    tensors = load_file(path)
    with safe_open(path, framework="numpy") as f:
        assert f.metadata() == {"format": "sharc-parameters"}, f.metadata()
    expected = {}
    with open(out + "/expected.txt") as f:
        for line in f:
            name, shape, first, mid, last, total = line.split()
            shape = () if shape == "-" else tuple(int(d) for d in shape.split(","))
            expected[name] = (shape, np.float32(first), np.float32(mid), np.float32(last), float(total))
    assert set(tensors) == set(expected), (sorted(set(tensors) ^ set(expected)))
    for name, (shape, first, mid, last, total) in sorted(expected.items()):
        t = tensors[name]
        assert t.dtype == np.float32, (name, t.dtype)
        assert t.shape == shape, (name, t.shape, shape)
        flat = t.reshape(-1)
        assert flat[0] == first and flat[flat.size // 2] == mid and flat[-1] == last, (name, flat[:3])
        got = float(np.sum(flat, dtype=np.float64))
        assert abs(got - total) <= 1e-9 * max(1.0, abs(total)), (name, got, total)
    print(f"python safetensors read {len(tensors)} parameters: names, dtypes, shapes and values match")


if __name__ == "__main__":
    main()
