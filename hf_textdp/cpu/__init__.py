"""CPU kernels compiled from C (``hf_textdp/kernels/``): the fused bf16 (AVX-512) and fp32 (AVX2) filters of the
exact search, the sampler's integer keys (VNNI, AVX2), the verification's distances and the noise.

Each has a torch twin that gives the same answers; the kernels run where a C compiler and the CPU
feature they need are found (:mod:`hf_textdp.utils.native`; which arithmetic is native: :mod:`.features`),
and the ``native`` switch of :mod:`hf_textdp.settings` turns them off.
"""
