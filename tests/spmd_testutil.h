/* Test helper for the SPMD partitioner suites: partition a module, run the
 * original and the per-device program with the reference interpreter on the
 * same random inputs, and check every device's output against the piece of
 * the reference result its sharding says it holds.
 *
 * Inputs are small integers (also for floats), so sums in any order are
 * exact and results must match bit for bit. */
#ifndef PS_TESTS_SPMD_TESTUTIL_H
#define PS_TESTS_SPMD_TESTUTIL_H

#include <glib.h>

#include "partitioner/ir/ir.h"
#include "partitioner/spmd/spmd.h"

/* Partitions `m` (already sharded) for n devices and verifies it; on a
 * mismatch or error returns FALSE with a message. If out_text is not NULL
 * it receives the printed SPMD program (transfer full). */
gboolean spmd_test_verify (const PsModule *m, int64_t n, const PsSpmdOptions *opts,
                           guint32 seed, char **out_text, GError **error);
/* Same from HLO text; runs propagation first when `propagate` is TRUE. */
gboolean spmd_test_verify_text (const char *hlo, int64_t n, gboolean propagate,
                                const PsSpmdOptions *opts, char **out_text, GError **error);
/* Counts instructions of `op` in every computation of m. */
int spmd_test_count_op (const PsModule *m, PsOpcode op);

#endif
