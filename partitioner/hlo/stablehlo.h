/* StableHLO text in: the MLIR form JAX prints by default
 * (jax.jit(f).lower(...).as_text()), read into the same IR as the HLO
 * text of the same program.
 *
 * The reader translates each func.func into an HLO computation, one HLO
 * instruction per StableHLO operation, and reads the result with the HLO
 * reader (ps_hlo_parse), so shapes, attributes and shardings are checked by
 * the same code as HLO text's. It takes the pretty forms JAX prints for the
 * ops of a training step (doc/hlo.md, "StableHLO text" lists them):
 * elementwise math, chlo.erf/tan, constant, convert, reshape, transpose,
 * broadcast_in_dim, slice, pad, concatenate, dynamic_(update_)slice,
 * dot_general, compare, select, iota, reduce (one-op reducer, a region, or
 * several operands), while, gather, scatter, convolution, get/set
 * dimension size, custom_call @Sharding, func.call and return (of several
 * values too: a tuple); bounded dynamic dims (#stablehlo.bounds<...>);
 * mhlo.sharding or Shardy's sdy.sharding (over an sdy.mesh, mapped to the
 * HLO sharding of the same meaning) on arguments, results and operations;
 * mhlo.num_partitions on the module. Functions come in any order: each
 * computation is placed after those it calls. An operation it does not
 * take is an error naming it at its FILE:LINE:COL.
 *
 * Names: a parameter takes its argument's name (%arg0 -> arg0), a result
 * its SSA name (%0 -> v0, %cst -> cst), result k of a several-result
 * operation %0#k the get-tuple-element v0.k, a function its symbol (@main),
 * a region region_N.
 *
 * Ownership: the text is borrowed; the module is returned transfer full.
 */
#ifndef PS_PARTITIONER_STABLEHLO_H
#define PS_PARTITIONER_STABLEHLO_H

#include <glib.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

/* Whether the text begins like MLIR (module @... / func.func), after
 * blanks and // comments. */
gboolean ps_stablehlo_looks_like (const char *text, gsize len);

PsModule *ps_stablehlo_parse (const char *text, gsize len, const char *filename, GError **error);

/* The HLO text the reader makes of `text` (for tests and --dump). transfer
 * full; NULL with an error. */
char *ps_stablehlo_to_hlo_text (const char *text, gsize len, const char *filename, GError **error);

G_END_DECLS

#endif
