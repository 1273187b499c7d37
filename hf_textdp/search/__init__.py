"""Exact chunked nearest-neighbour search (space.md §5).

``ExactIndex(matrix).search(Q, k)`` returns, for each query row, the ``k`` positions with the
smallest *exact* squared distance ``‖q − e_c‖²`` (real arithmetic on the fp32 values), ties to the
lowest position. This equals float64 brute force whenever that brute force is itself exact, and is
the exact answer when it is not (space.md §5, cases N4/N5). The result never depends on the chunk size,
the query block, the thread count, the device or which filter ran.

Algorithm (filter and verify):

1. **Filter.** Scores of every position by one matrix product per chunk of positions, in one of two
   precisions, each with a proven bound on its error (below). Positions are grouped in blocks of
   ``G`` (64) strided positions; one vectorised pass takes every block's best score, the k-th best
   block score bounds the k-th best score, and only blocks that can hold a winner are read again.
   So the work beyond the product is one pass over the scores plus O(candidates).

   * ``fp32`` (space.md §5's reference, and always on CUDA): ``s̃_c = fl(‖e_c‖² − 2 q·e_c)`` by
     ``addmm`` with TF32 and reduced-precision reductions off; ``|s̃_c − s_c| ≤ 0.51·η`` with
     ``η = 2(d+3)u(R² + 2‖q‖R)``, u = 2⁻²⁴, R = max row norm; candidates ``s̃_c ≤ m + 2η``.
   * ``int8`` (CPUs with AVX-512 VNNI, or AVX2, and no AMX): an exact integer product of rows and query quantised
     to int8 (per row, per query), with per-position bounds [Lo_c, Up_c] of t_c and a per-query rounding margin η
     (:func:`~hf_textdp.cpu.int8_filter.int8_filter_bound`); candidates Up_c ≥ (k-th largest Lo) − 2η, kept in
     running lists by the kernel. A query whose list overflows is filtered again by the next filter below.
   * ``bf16`` (CPUs whose bf16 matrix product is fast, e.g. AMX): a bf16 product with fp32
     accumulation of an augmented matrix, ``P̃_c ≈ t_c = q·e_c − ‖e_c‖²/2`` (the nearest position has
     the largest t), with the bound of :func:`bf16_filter_bound` (proof there). When the filter keeps
     too many candidates for a query (near-duplicate clusters), that query is filtered again in fp32.

2. **Verify.** Float64 distances ``D_c = Σ (q_j − e_cj)²`` of the candidates, error ≤ (d+2)u₆₄·D;
   if the top-k intervals ``[D ± 2(d+3)u₆₄D]`` are disjoint from each other and from the rest they
   decide; otherwise exact rational arithmetic (``fractions.Fraction``) orders each group of
   overlapping intervals among the first k.

Memory is O(query_block·chunk + V·d): never V × V.
"""

from .bf16 import BF16_MAX_CANDIDATES, BF16_MAX_K, bf16_filter_available
from .bounds import BF16_MAX_MAGNITUDE, U32, U64, UBF16, bf16_filter_bound, exact_fp32_matmul
from .index import BLOCK, FILTERS, FUSED_CPU_QUERIES, FUSED_QUERIES, ExactIndex, FilterName, int8_filter_runs


__all__ = [
    "ExactIndex",
    "exact_fp32_matmul",
    "bf16_filter_bound",
    "bf16_filter_available",
    "int8_filter_runs",
    "FILTERS",
    "FilterName",
    "BLOCK",
    "BF16_MAX_CANDIDATES",
    "BF16_MAX_K",
    "BF16_MAX_MAGNITUDE",
    "FUSED_CPU_QUERIES",
    "FUSED_QUERIES",
    "U32",
    "U64",
    "UBF16",
]
