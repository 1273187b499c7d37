/* The int8 filter of the exact search on CPUs with AVX-512 VNNI (VPDPBUSD on four u8 x s8 products a lane):
 * kernels/int8_filter_body.h, built as it is. */
#include "int8_filter_body.h"
