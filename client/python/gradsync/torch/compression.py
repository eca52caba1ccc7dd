# SPDX-License-Identifier: Apache-2.0
"""Gradient compression applied around allreduce (Horovod's Compression)."""
import torch


class Compressor:
    @staticmethod
    def compress(tensor):
        """Returns (compressed tensor, context for decompress)."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Sends floating-point tensors as float16; others unchanged."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if dtype.is_floating_point:
            tensor = tensor.type(torch.float16)
        return tensor, dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None or not ctx.is_floating_point else tensor.type(ctx)


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
