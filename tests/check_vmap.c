/* Vectorization over a leading dim (partitioner/builder/vmap.h), checked
 * on the reference interpreter: a function written for one element
 * (dot of two batched operands, dot of a batched and an unbatched one,
 * broadcast, elementwise ops, reduce, transpose, slice, pad, concatenate,
 * dynamic-slice) vectorized over N = 3 gives, in row k, what the function
 * gives on row k of its batched inputs; a root that depends on no batched
 * input comes out broadcast; an unsupported op is an error naming it. f64
 * programs, compared exactly. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>

#include "tests/build_testutil.h"
#include "tests/suite_main.h"
#include "partitioner/builder/builder.h"
#include "partitioner/builder/vmap.h"
#include "partitioner/interp/interp.h"
#include "partitioner/ir/ir.h"

enum { N = 3, R = 4, K = 5, C = 6, Q = 3, OUTS = 5 };

static PsInstr *
dot (PsComputation *c, PsInstr *a, PsInstr *b, int64_t ca, int64_t cb, int64_t rows, int64_t cols)
{
  PsInstr *ops[2] = { a, b };
  int64_t dims[2] = { rows, cols };
  PsInstr *d = ps_computation_add_instr (c, PS_OP_DOT, NULL, ps_shape_new_array (PS_F64, 2, dims), 2, ops);
  ps_ints_set (&d->dot.lhs_contracting, 1, &ca);
  ps_ints_set (&d->dot.rhs_contracting, 1, &cb);
  return d;
}

static PsInstr *
slice2 (PsComputation *c, PsInstr *x, int64_t r0, int64_t r1, int64_t c0, int64_t c1)
{
  int64_t st[2] = { r0, c0 }, li[2] = { r1, c1 }, one[2] = { 1, 1 }, dims[2] = { r1 - r0, c1 - c0 };
  PsInstr *s = ps_computation_add_instr (c, PS_OP_SLICE, NULL, ps_shape_new_array (PS_F64, 2, dims), 1, &x);
  ps_ints_set (&s->slice_starts, 2, st);
  ps_ints_set (&s->slice_limits, 2, li);
  ps_ints_set (&s->slice_strides, 2, one);
  return s;
}

/* The function for one element: x [R, K] and w [K, C] batched, b [C] and
 * m [C, Q] not. Outputs: e = tanh(x.w + b) [R, C]; its row sums [R];
 * rows 2..4 of concat(pad(s), s) with s = transpose(e)[1:5] (a
 * dynamic-slice) [3, R]; e.m [R, Q]; and b * 2 (no batched input). */
static void
function (PsComputation *c, PsInstr *x, PsInstr *w, PsInstr *b, PsInstr *m, PsInstr **out)
{
  int64_t one = 1;
  g_autoptr (PsBuilder) bd = ps_builder_new_in (c->parent, c);
  PsInstr *d = dot (c, x, w, 1, 0, R, C);
  PsInstr *e = ps_build_unary (bd, PS_OP_TANH, ps_build_add (bd, d, ps_build_broadcast_to (bd, b, d->shape, &one)));
  out[0] = e;
  out[1] = ps_build_sum (bd, e, 1, &one);
  int64_t perm[2] = { 1, 0 };
  PsInstr *t = ps_build_transpose (bd, e, perm);                      /* [C, R] */
  PsInstr *s = slice2 (c, t, 1, 5, 0, R);                         /* [4, R] */
  int64_t pd[2] = { 6, R };
  PsInstr *pops[2] = { s, ps_build_scalar (bd, PS_F64, 0.5) };
  PsInstr *p = ps_computation_add_instr (c, PS_OP_PAD, NULL, ps_shape_new_array (PS_F64, 2, pd), 2, pops);
  p->n_pad = 2;
  p->padding = g_new0 (PsPadDim, 2);
  p->padding[0].lo = 1;
  p->padding[0].hi = 1;
  PsInstr *cops[2] = { p, s };
  int64_t cd[2] = { 10, R };
  PsInstr *cat = ps_computation_add_instr (c, PS_OP_CONCATENATE, NULL, ps_shape_new_array (PS_F64, 2, cd), 2, cops);
  int64_t zero = 0;
  ps_ints_set (&cat->dimensions, 1, &zero);
  PsInstr *i2 = ps_build_scalar_int (bd, PS_S32, 2), *i0 = ps_build_scalar_int (bd, PS_S32, 0);
  PsInstr *starts[2] = { i2, i0 };
  int64_t sizes[2] = { 3, R };
  out[2] = ps_build_dynamic_slice (bd, cat, starts, sizes);
  out[3] = dot (c, e, m, 1, 0, R, Q);
  out[4] = ps_build_mul (bd, b, ps_build_full_like (bd, b->shape, 2.0));
}

/* Row k of a [N, ...] value, the leading dim dropped. */
START_TEST (test_vmap_matches_rows)
{
  PsModule *m = ps_module_new ("vmap");
  PsComputation *main = ps_computation_new (m, "main");
  main->is_entry = TRUE;
  m->entry = main;
  int64_t xd[3] = { N, R, K }, wd[3] = { N, K, C }, bd[1] = { C }, md[2] = { C, Q };
  PsInstr *X = build_test_param (main, "x", 3, xd), *W = build_test_param (main, "w", 3, wd);
  PsInstr *Bp = build_test_param (main, "b", 1, bd), *Mp = build_test_param (main, "m", 2, md);

  /* the function for one element, in a scratch computation */
  PsComputation *f = ps_computation_new (m, "f");
  int64_t fx[2] = { R, K }, fw[2] = { K, C };
  PsInstr *x = build_test_param (f, "x", 2, fx), *w = build_test_param (f, "w", 2, fw);
  PsInstr *b = build_test_param (f, "b", 1, bd), *mm = build_test_param (f, "m", 2, md);
  PsInstr *fo[OUTS];
  function (f, x, w, b, mm, fo);

  g_autoptr (GHashTable) inputs = g_hash_table_new (NULL, NULL);
  g_autoptr (GHashTable) batched = g_hash_table_new (NULL, NULL);
  g_hash_table_insert (inputs, x, X);
  g_hash_table_insert (inputs, w, W);
  g_hash_table_insert (inputs, b, Bp);
  g_hash_table_insert (inputs, mm, Mp);
  g_hash_table_add (batched, x);
  g_hash_table_add (batched, w);
  PsVmapOptions vo = { N, NULL, NULL };
  PsInstr *vout[OUTS];
  GError *error = NULL;
  ck_assert_msg (ps_vmap (main, f, OUTS, fo, inputs, batched, &vo, vout, &error), "%s",
                 error ? error->message : "");
  ps_module_remove_computation (m, f);

  /* the reference: the function on each row */
  PsInstr *elems[OUTS * (N + 1)];
  for (int i = 0; i < OUTS; i++)
    elems[i] = vout[i];
  for (int k = 0; k < N; k++)
    function (main, build_test_row (main, X, k), build_test_row (main, W, k), Bp, Mp, elems + OUTS * (k + 1));
  g_autoptr (PsBuilder) bm = ps_builder_new_in (m, main);
  main->root = ps_build_tuple (bm, OUTS * (N + 1), elems);
  ck_assert_msg (ps_module_validate (m, "vmap", &error), "%s", error ? error->message : "");

  PsValue *args[4];
  guint32 rng = 7;
  for (int i = 0; i < 4; i++)
    {
      args[i] = ps_value_new (((PsInstr *) main->params->pdata[i])->shape);
      for (int64_t j = 0; j < args[i]->n; j++)
        {
          rng = rng * 1664525u + 1013904223u;
          ps_value_set (args[i], j, (double) (rng >> 8) / (double) (1u << 24) - 0.5);
        }
    }
  PsValue *out = ps_interp_run (m, 4, args, NULL, &error);
  ck_assert_msg (out != NULL, "%s", error ? error->message : "");
  for (int i = 0; i < OUTS; i++)
    {
      const PsValue *v = out->elems[i];
      ck_assert_int_eq (v->n % N, 0);
      int64_t per = v->n / N;
      for (int k = 0; k < N; k++)
        {
          const PsValue *ref = out->elems[OUTS * (k + 1) + i];
          ck_assert_int_eq (ref->n, per);
          for (int64_t j = 0; j < per; j++)
            ck_assert_msg (ps_value_get (v, k * per + j) == ps_value_get (ref, j),
                           "output %d row %d [%" G_GINT64_FORMAT "]: %.17g vs %.17g", i, k, j,
                           ps_value_get (v, k * per + j), ps_value_get (ref, j));
        }
    }
  ps_value_free (out);
  for (int i = 0; i < 4; i++)
    ps_value_free (args[i]);
  ps_module_free (m);
}
END_TEST

/* An op vmap has no rule for, on a batched path: an error naming it. */
START_TEST (test_vmap_unsupported)
{
  PsModule *m = ps_module_new ("vmap");
  PsComputation *main = ps_computation_new (m, "main");
  main->is_entry = TRUE;
  m->entry = main;
  int64_t xd[2] = { N, R }, fx[1] = { R };
  PsInstr *X = build_test_param (main, "x", 2, xd);
  PsComputation *f = ps_computation_new (m, "f");
  PsInstr *x = build_test_param (f, "x", 1, fx);
  PsInstr *y = ps_computation_add_instr (f, PS_OP_SORT, NULL, ps_shape_copy (x->shape), 1, &x);
  g_autoptr (GHashTable) inputs = g_hash_table_new (NULL, NULL);
  g_autoptr (GHashTable) batched = g_hash_table_new (NULL, NULL);
  g_hash_table_insert (inputs, x, X);
  g_hash_table_add (batched, x);
  PsVmapOptions vo = { N, NULL, NULL };
  PsInstr *out = NULL;
  GError *error = NULL;
  ck_assert (!ps_vmap (main, f, 1, &y, inputs, batched, &vo, &out, &error));
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_UNSUPPORTED));
  ck_assert_msg (strstr (error->message, "sort") != NULL, "%s", error->message);
  g_error_free (error);
  ps_module_free (m);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("vmap");
  ps_check_case (s, "vmap", 0,
                 PS_CHECK_TESTS (test_vmap_matches_rows,
                                 test_vmap_unsupported));
  return ps_check_run (s, CK_FORK_GETENV);
}
