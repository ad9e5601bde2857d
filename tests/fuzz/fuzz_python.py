"""atheris driver for the Python fuzz targets (tests/fuzz/targets.py).

    python -m tests.fuzz.fuzz_python TARGET [libFuzzer options] [CORPUS_DIR...]

TARGET is one of context, settings, events; the rest goes to libFuzzer, e.g.
``-max_total_time=60 -artifact_prefix=.fuzz/artifacts/context/ .fuzz/corpus/context``.
The delegate package is instrumented for coverage feedback; its native reader is fuzzed by the
libFuzzer target tests/fuzz/ctx_fuzz.c.
"""

from __future__ import annotations

import sys

import atheris

with atheris.instrument_imports(include=["delegate", "tests.fuzz"]):
    from tests.fuzz.targets import TARGETS


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: python -m tests.fuzz.fuzz_python {{{','.join(TARGETS)}}} [libFuzzer options] [CORPUS...]")
    target = TARGETS[sys.argv.pop(1)]
    atheris.Setup(sys.argv, target)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
