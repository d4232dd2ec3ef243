/* What the compute benchmarks (podsim bench matmul|conv, cli/cmd_bench_*.c)
 * read alike: sizes and the operand type and precision. In cmd_bench.c. */
#ifndef PS_CLI_BENCH_H
#define PS_CLI_BENCH_H

#include <glib.h>

#include <json-glib/json-glib.h>

#include "cli/target_options.h"
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
/* Parses a compute benchmark's command line: ENTRIES beside --hw (the only
 * target option a one-core benchmark reads), then exactly N_ARGS positional
 * arguments. On success returns TRUE with *to_out (transfer full) and argv
 * holding the program name and the N_ARGS arguments. Else FALSE with
 * *status the exit status: PS_EXIT_USAGE after GLib's message, or after
 * "TAKES, got N arguments (see 'PROG --help')" when the count is wrong
 * (TAKES as "bench matmul takes three sizes M K N"). The strings ENTRIES
 * point at are set either way: the caller frees them. */
gboolean ps_bench_parse (GOptionContext *ctx, const GOptionEntry *entries, int n_args, const char *takes,
                         int *argc, char ***argv, PsTargetOptions **to_out, int *status);

/* The members of a benchmark's --json that matmul and conv share, in their
 * order (keys in doc/compute-model.md): the operand type and the hardware
 * (dtype .. peak_flops_per_s); the useful work and the MXU passes (flops ..
 * stationary); the units' cycles and the result (mxu_cycles ..
 * mxu_utilization). */
void ps_bench_json_target (JsonBuilder *b, const PsHardware *hw, const PsComputeOp *op);
void ps_bench_json_passes (JsonBuilder *b, const PsComputeOp *op, const PsComputeCost *c);
void ps_bench_json_cycles (JsonBuilder *b, const PsComputeCost *c);

#endif
