"""The compiler: TFLite graphs (captured into graph.py's model) to InferenceContexts.

One module per op family under ``ops/`` decides support and emits each node's GPU operation;
``partition.py`` turns a delegated partition into a context for the runtime.
"""
