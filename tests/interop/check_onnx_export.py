#!/usr/bin/python3
"""Interop test: a model parallax imported from ONNX, trained and exported
back (parallax export's nn::export_onnx) loads into the original PyTorch
module and gives the loss parallax computes (relative difference < 1e-5).

usage: check_onnx_export.py ROUNDTRIP FIXTURES_DIR NAME WORKDIR
ROUNDTRIP is px_interop_onnx_roundtrip; NAME a fixture of FIXTURES_DIR
(make_fixtures.py's models). The exported file is read with ONNX's own
protobuf definitions (protoc --python_out from libonnx-dev's onnx.proto;
python3-protobuf). Exits 77 (CTest SKIP_RETURN_CODE) without torch or
protobuf for Python, 1 on mismatch.
"""
import os
import subprocess
import sys

SKIP = 77
TOLERANCE = 1e-5


def main():
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    roundtrip, fixtures, name, workdir = sys.argv[1:]
    try:
        import numpy as np
        import torch
        import google.protobuf  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {e}; install python3-torch and python3-protobuf", file=sys.stderr)
        return SKIP
    os.makedirs(workdir, exist_ok=True)
    subprocess.run(["protoc", "-I/usr/include/onnx", f"--python_out={workdir}", "/usr/include/onnx/onnx.proto"],
                   check=True)
    sys.path.insert(0, workdir)
    sys.path.insert(0, fixtures)
    import onnx_pb2
    import make_fixtures

    base = os.path.join(fixtures, name)
    subprocess.run([roundtrip, base + ".onnx", base + ".reference.safetensors", workdir], check=True)
    model_proto = onnx_pb2.ModelProto()
    with open(os.path.join(workdir, "trained.onnx"), "rb") as f:
        model_proto.ParseFromString(f.read())
    initializers = {}
    for t in model_proto.graph.initializer:
        if t.data_type == onnx_pb2.TensorProto.FLOAT:
            initializers[t.name] = torch.from_numpy(
                np.frombuffer(t.raw_data, dtype="<f4").reshape(tuple(t.dims)).copy())
    module = {"mlp": make_fixtures.Mlp, "cnn": make_fixtures.Cnn, "gpt": make_fixtures.Gpt,
              "regression": make_fixtures.Regression, "gpt_dynamic": make_fixtures.GptDynamic}[name]()
    params = dict(module.named_parameters())
    missing = [p for p in params if p not in initializers]
    if missing:
        print(f"FAIL: the exported file has no initializer for {missing}")
        return 1
    with torch.no_grad():
        for p, tensor in params.items():
            tensor.copy_(initializers[p])
    batch = read_safetensors(base + ".reference.safetensors")
    inputs, targets = batch["inputs"], batch["targets"].long()
    with torch.no_grad():
        flat = name in ("mlp", "regression")  # the model reads (N, 784)
        loss = module.loss(inputs.view(inputs.shape[0], -1) if flat else inputs, targets).item()
    with open(os.path.join(workdir, "loss.txt")) as f:
        parallax_loss = float(f.read())
    rel = abs(loss - parallax_loss) / abs(loss)
    print(f"{name}: PyTorch loss {loss:.9g} from the exported file, parallax {parallax_loss:.9g}, relative {rel:.2e}")
    return 0 if rel <= TOLERANCE else 1


def read_safetensors(path):
    import json
    import struct
    import numpy as np
    import torch
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = {"F32": "<f4", "I32": "<i4"}[entry["dtype"]]
        out[key] = torch.from_numpy(np.frombuffer(data[8 + n + begin:8 + n + end], dtype=dtype)
                                    .reshape(entry["shape"]).copy())
    return out


if __name__ == "__main__":
    sys.exit(main())
