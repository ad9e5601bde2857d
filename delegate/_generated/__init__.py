"""Code generated from schemas/ by scripts/generate_bindings.py. Do not edit by hand.

- serialization_generated.py: flatc's Python bindings of serialization.fbs
  (object API included; the reference reader the native one is checked against).
- configuration_pb2.py / .pyi: protoc's Python bindings of configuration.proto.
"""
