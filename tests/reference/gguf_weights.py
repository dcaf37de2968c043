"""A gguf.GGUFReader for the reference forward passes of this folder, which
read a model's fields and tensors but never its tokenizer."""
import struct

import numpy as np
import gguf


class WeightsReader(gguf.GGUFReader):
    """gguf.GGUFReader that steps over the tokenizer's arrays, which the
    models never read: gguf makes numpy views of each of their elements (two
    a string), most of a run's time on the real vocabularies (up to 150k
    tokens and as many merges). Every other field and the tensors are read
    by gguf's own code."""

    def _build_fields(self, offs, count):
        if self.byte_order != "I":  # a file of the other byte order: as gguf reads it
            return super()._build_fields(offs, count)
        for _ in range(count):
            klen, kdata = self._get_str(offs)
            value = offs + int(klen.nbytes + kdata.nbytes)
            end = None
            if bytes(kdata).startswith(b"tokenizer.ggml.") and self._get(value, np.uint32)[0] == gguf.GGUFValueType.ARRAY:
                end = self._array_end(value + 4)
            offs = end if end is not None else super()._build_fields(offs, 1)
        return offs

    def _array_end(self, offs):
        """Where the array at `offs` (item type, count, items) ends; None for
        an array of arrays (left to gguf)."""
        itype, count = struct.unpack_from("=IQ", self.data, offs)
        offs += 12
        if itype == gguf.GGUFValueType.STRING:
            for _ in range(count):
                offs += 8 + struct.unpack_from("=Q", self.data, offs)[0]
            return offs
        if itype == gguf.GGUFValueType.ARRAY:
            return None
        return offs + count * np.dtype(self.gguf_scalar_to_np[gguf.GGUFValueType(itype)]).itemsize
