"""A software prefetch for the compiled loops: ``prefetch(array, index)`` asks the CPU to bring the cache line of
``array[index]`` closer, without waiting for it and without faulting (an index out of range is never read).

Why the tracker needs it: a new tree's anchor lands in a random slot of tombstone sets several megabytes large, so
its lookup, and the burial of the tree a few messages later, miss the caches. The loop's branches depend on that
load, so the CPU meets these misses one at a time. Issued for the message a few places ahead, the loads overlap
and the loop finds the line in the cache (`acker.columnar._kernels.process`).

numba has no prefetch of its own; this is LLVM's ``llvm.prefetch`` intrinsic (read, high locality, data cache)
on the element's address.

numba's on-disk cache of the loops that call this is keyed by their own file only: after an edit here, touch
``_kernels.py`` (or clear ``__pycache__``) so that they are compiled again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from llvmlite import ir
from numba import types
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic

cgutils: Any = _cgutils  # numba's code-generation helpers carry no annotations

_READ, _KEEP, _DATA = 0, 3, 1  # llvm.prefetch arguments: a read, keep in all cache levels, the data cache


@intrinsic
def _prefetch(typingctx: Any, array: Any, index: Any) -> Any:
    """Typing and code of ``prefetch(array, i)`` or ``prefetch(array, (i, j))``: integer indices, one per dimension
    (of any integer types: each is widened to ``intp``)."""
    index_types = list(cast(Any, index).types) if isinstance(index, types.BaseTuple) else [index]
    if not isinstance(array, types.Array) or len(index_types) != array.ndim:
        return None
    if not all(isinstance(t, types.Integer) for t in index_types):
        return None
    signature = types.void(array, index)

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        array_type = sig.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        values = cgutils.unpack_tuple(builder, args[1]) if isinstance(sig.args[1], types.BaseTuple) else [args[1]]
        indices = [context.cast(builder, v, t, types.intp) for v, t in zip(values, index_types, strict=True)]
        pointer = cgutils.get_item_pointer(context, builder, array_type, view, indices, wraparound=False)
        # As a byte pointer, the intrinsic's name is right with typed pointers (llvm.prefetch.p0i8, older numba) as
        # with opaque ones (llvm.prefetch.p0).
        pointer = builder.bitcast(pointer, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        function_type = ir.FunctionType(ir.VoidType(), [pointer.type, i32, i32, i32])
        function = builder.module.declare_intrinsic("llvm.prefetch", [pointer.type], function_type)
        builder.call(function, [pointer, i32(_READ), i32(_KEEP), i32(_DATA)])
        return context.get_dummy_value()

    return signature, codegen


prefetch = cast(Callable[[Any, Any], None], _prefetch)  # as the compiled loops call it
