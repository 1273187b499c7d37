"""CPU kernels compiled from C (``hf_textdp/kernels/``): the fused bf16 filter of the exact search.

Each has a torch twin that gives the same answers; the kernels run where a C compiler and the CPU
feature they need are found (:mod:`hf_textdp.utils.native`), and the ``native`` switch of
:mod:`hf_textdp.settings` turns them off.
"""
