"""A host process that never imports the package: loads the plugin library by path into the host's
own interpreter, runs each model on it and on the host's CPU kernels with the same inputs, and
prints one JSON line per model: its largest output difference (relative to the output's largest
magnitude, at least 1) and how many of its nodes the delegate took, and of how many, and how many
composites' decompositions it compiled into their composite's partition, as the package (imported by
the library itself) reports them.

    python tests/hosts/run_by_path.py HOST LIBRARY MODEL... [--option KEY=VALUE ...]

HOST: ``litert`` (ai_edge_litert's Interpreter) or ``tensorflow`` (tf.lite.Interpreter). Runs in
another environment's Python too (TensorFlow's), so it uses only numpy and the host.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import numpy as np


def _host(name: str) -> tuple[Any, Any]:
    """The host's (load_delegate, Interpreter)."""
    if name == "tensorflow":
        import tensorflow as tf

        return tf.lite.experimental.load_delegate, tf.lite.Interpreter
    from ai_edge_litert.interpreter import Interpreter, load_delegate

    return load_delegate, Interpreter


def _inputs(interpreter: Any, seed: int) -> list[tuple[int, np.ndarray]]:
    rng = np.random.default_rng(seed)
    made = []
    for detail in interpreter.get_input_details():
        shape, dtype = detail["shape"], np.dtype(detail["dtype"])
        if dtype.kind == "f":
            value = rng.standard_normal(shape).astype(dtype)
        else:
            info = np.iinfo(dtype)
            value = rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
        made.append((detail["index"], value))
    return made


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("host", choices=["litert", "tensorflow"])
    parser.add_argument("library")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--option", action="append", default=[])
    args = parser.parse_args()
    load_delegate, interpreter_class = _host(args.host)
    options = dict(item.split("=", 1) for item in args.option)
    for model in args.models:
        host_delegate = load_delegate(args.library, options)
        delegated = interpreter_class(model_path=model, experimental_delegates=[host_delegate])
        reference = interpreter_class(model_path=model)
        for interpreter in (delegated, reference):
            interpreter.allocate_tensors()
        for index, value in _inputs(reference, 0):
            delegated.set_tensor(index, value)
            reference.set_tensor(index, value)
        delegated.invoke()
        reference.invoke()
        difference = 0.0
        for detail in reference.get_output_details():
            ours = delegated.get_tensor(detail["index"]).astype(np.float64)
            theirs = reference.get_tensor(detail["index"]).astype(np.float64)
            scale = max(1.0, float(np.abs(theirs).max()))
            difference = max(difference, float(np.abs(ours - theirs).max()) / scale)
        package = sys.modules["delegate"]  # imported by the library itself, never by this script
        state = package.delegate_state(host_delegate)
        inlined = sum(1 for r in state.subgraphs if r.inlined_into)  # decompositions, loop bodies: compiled in
        result = {"model": model, "difference": difference, "delegated_nodes": len(state.delegated_nodes)}
        print(json.dumps({**result, "total_nodes": state.total_nodes, "inlined_subgraphs": inlined}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
