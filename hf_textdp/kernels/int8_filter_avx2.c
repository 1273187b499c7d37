/* The int8 filter of the exact search on CPUs with AVX2 (VPMADDUBSW and VPMADDWD, queries within +-63 so that
 * the int16 pair sums never saturate): kernels/int8_filter_body.h built with INT8_FILTER_AVX2. */
#define INT8_FILTER_AVX2 1
#include "int8_filter_body.h"
