/* What the compute benchmarks (podsim bench matmul|conv, cli/cmd_bench_*.c)
 * read alike: sizes and the operand type and precision. In cmd_bench.c. */
#ifndef PS_CLI_BENCH_H
#define PS_CLI_BENCH_H

#include <glib.h>

#include "sim/compute.h"
#include "topology/hardware.h"

/* The first len bytes of text as a size in [1, 2^40] (2^40 keeps every
 * product of the model well inside a double's exact range); else a
 * PS_ERROR_OPTION error "WHAT 'TEXT' is not a whole number between 1 and
 * 2^40". */
gboolean ps_bench_size (const char *text, gsize len, const char *what, gint64 *out, GError **error);
/* --dtype (NULL: bf16) and --precision (NULL: default); else a
 * PS_ERROR_OPTION error naming the option and its choices. */
gboolean ps_bench_compute_type (const char *dtype, const char *precision, PsComputeDtype *dtype_out,
                                PsMxuPrecision *precision_out, GError **error);

#endif
