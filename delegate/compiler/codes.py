"""Which tensors carry int8 codes between the integer matrix products, rather than float values.

An integer matrix product (kernels/cpu/gemm_blocks.integer_slice_loop) multiplies its input's
codes, not its values: reading a carried tensor (quant.py) it converts every FLT4 back to its four
codes (a multiply, an add, two conversions) in every work-item and window tap that reads it, so a
1x1 layer converts its input once per block of output groups and a 3x3 one each pixel nine times
per work-item. A tensor that only such products read is better stored as those codes: one 32-bit
word of four codes per slice and pixel, offset by ``zero_point - low`` as the products take them
(its descriptor marked context/model.CODES: the schema's DataType has no 8-bit type). Its writer
converts once, with the products' arithmetic (quant_step.codes_code), so the codes, and the sums
over them, are the ones the products made of the floats; its readers load the word.

A tensor carries codes when all of these hold, so that nothing but those products ever sees one:
- it is not a partition input or output (the plugin converts those from and to TFLite's types,
  and a tool reading an intermediate tensor makes it an output; the runtime refuses a context
  whose input or output holds codes, context/semantics.py);
- one kernel writes it, whose writes all go through its write hooks (``Kernel.codes_writer``: a
  matrix product's, integer or float: a squeeze-excite block's gated projection too; a
  concatenation's; a binary elementwise op's) and
  whose last step rounds the result onto the tensor's grid (``Kernel.rounds_onto``), looks it
  up in a table of the grid's values or copies values on the grid (``Kernel.on_grid``): the value
  converted is on the grid, as the stored float would be;
- every kernel reading it reads it as its input ``src_tensor`` through ``CodesRead`` pieces on the
  same grid (``Kernel.codes_input``) and nowhere else: no op fused into the read, no linked op
  reading it as an operand.
"""

from __future__ import annotations

from .graph import Graph
from .kernel import KernelNode


def carry_codes(kernels: list[KernelNode], graph: Graph, edges: set[int]) -> set[int]:
    """The tensors of ``kernels`` (the partition's, scheduled) that carry codes (module
    docstring), with their writers' and readers' kernels set to write and load them; ``edges``:
    the partition's inputs and outputs."""
    writers: dict[int, list[KernelNode]] = {}
    readers: dict[int, list[KernelNode]] = {}
    for placed in kernels:
        for i in placed.output_ids:
            writers.setdefault(i, []).append(placed)
        for i in dict.fromkeys(placed.input_ids):
            readers.setdefault(i, []).append(placed)
    chosen: set[int] = set()
    for index, written in writers.items():
        grid = graph.tensor(index).carried
        if grid is None or index in edges or len(written) != 1 or not readers.get(index):
            continue
        writer = written[0].kernel
        if not writer.codes_writer or grid not in (writer.rounds_onto, writer.on_grid):
            continue
        if written[0].output_ids != [index]:
            continue
        if all(
            r.kernel.codes_input == grid and r.input_ids[0] == index and index not in r.input_ids[1:]
            for r in readers[index]
        ):
            chosen.add(index)
    for index in chosen:
        writers[index][0].kernel.writes_codes = graph.tensor(index).carried
        for r in readers[index]:
            r.kernel.reads_codes = True
    return chosen
