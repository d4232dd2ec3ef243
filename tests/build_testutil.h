/* build_testutil.h: small program builders the builder-level suites share
 * (check_scan, check_vmap, check_pipeline, check_convnets, check_moe).
 *
 * They write parameters and row slices straight into a computation, the way
 * the reference programs of those tests are written by hand, so a test can
 * compare what vmap, scan or the pipeline builds against an unrolled program
 * built from the same pieces.  Header-only (static inline): each suite is its
 * own program and links these only where it includes them. */
#ifndef PS_TESTS_BUILD_TESTUTIL_H
#define PS_TESTS_BUILD_TESTUTIL_H

#include <check.h>
#include <glib.h>

#include "partitioner/builder/builder.h"
#include "partitioner/interp/interp.h"
#include "partitioner/ir/ir.h"

/* Appends an f64 parameter NAME of shape DIMS (RANK of them) to C's
 * parameter list, numbered in order; transfer none (C owns it). */
static inline PsInstr *
build_test_param (PsComputation *c, const char *name, int rank, const int64_t *dims)
{
  PsInstr *p = ps_computation_add_instr (c, PS_OP_PARAMETER, name,
                                         ps_shape_new_array (PS_F64, rank, dims), 0, NULL);
  p->parameter_number = c->params->len;
  g_ptr_array_add (c->params, p);
  return p;
}

/* Row K of X (rank 1 to 4) with the leading dimension dropped: a slice
 * [K, K+1) of dimension 0 and a reshape; transfer none. */
static inline PsInstr *
build_test_row (PsComputation *c, PsInstr *x, int64_t k)
{
  const PsShape *s = x->shape;
  g_assert (s->rank >= 1 && s->rank <= 4);
  int64_t st[4] = { 0 }, li[4], one[4], dims[4];
  for (int d = 0; d < s->rank; d++)
    {
      st[d] = d == 0 ? k : 0;
      li[d] = d == 0 ? k + 1 : s->dims[d];
      one[d] = 1;
      dims[d] = li[d] - st[d];
    }
  PsInstr *sl = ps_computation_add_instr (c, PS_OP_SLICE, NULL, ps_shape_new_array (s->etype, s->rank, dims), 1, &x);
  ps_ints_set (&sl->slice_starts, s->rank, st);
  ps_ints_set (&sl->slice_limits, s->rank, li);
  ps_ints_set (&sl->slice_strides, s->rank, one);
  g_autoptr (PsBuilder) b = ps_builder_new_in (c->parent, c);
  return ps_build_reshape (b, sl, s->rank - 1, s->dims + 1);
}

/* Runs M on the N values ARGS with the reference interpreter, fails the
 * test on an error, and frees ARGS (the values and the array); returns the
 * result (transfer full). */
static inline PsValue *
build_test_run_consuming (const PsModule *m, int n, PsValue **args)
{
  GError *error = NULL;
  PsValue *out = ps_interp_run (m, n, args, NULL, &error);
  ck_assert_msg (out != NULL, "interp: %s", error ? error->message : "");
  for (int i = 0; i < n; i++)
    ps_value_free (args[i]);
  g_free (args);
  return out;
}

#endif
