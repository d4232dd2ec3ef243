/* Scan loops (partitioner/builder/scan.h), checked by running programs on
 * the reference interpreter: a layer stack written as a scan gives the same
 * loss and the same gradients as the same stack unrolled, with and without
 * remat, forward and reverse, and its gradients match central finite
 * differences. f64 programs, so that differences are accurate. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>

#include "tests/build_testutil.h"
#include "tests/suite_main.h"
#include "partitioner/analysis/cost.h"
#include "partitioner/builder/autodiff.h"
#include "partitioner/builder/scan.h"
#include "partitioner/builder/builder.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/interp/interp.h"
#include "partitioner/ir/ir.h"

/* a reshaped to dims (a itself when it already has them). */
static PsInstr *
reshape_dims (PsComputation *c, PsInstr *a, int rank, const int64_t *dims)
{
  g_autoptr (PsBuilder) b = ps_builder_new_in (c->parent, c);
  return ps_build_reshape (b, a, rank, dims);
}

enum { L = 3, B = 2, D = 4 };

/* One layer: x + tanh(x . w + b) * scale. */
static PsInstr *
layer (PsComputation *c, PsInstr *x, PsInstr *w, PsInstr *b, PsInstr *scale)
{
  int64_t one = 1;
  PsInstr *ops[2] = { x, w };
  PsInstr *d = ps_computation_add_instr (c, PS_OP_DOT, NULL, ps_shape_copy (x->shape), 2, ops);
  ps_ints_set (&d->dot.lhs_contracting, 1, &one);
  int64_t zero = 0;
  ps_ints_set (&d->dot.rhs_contracting, 1, &zero);
  g_autoptr (PsBuilder) bd = ps_builder_new_in (c->parent, c);
  /* a closure body passes the caller's b and scale (the scan turns them
   * into invariants) */
  ps_builder_allow_closure (bd);
  PsInstr *h = ps_build_add (bd, d, ps_build_broadcast_to (bd, b, x->shape, &one));
  PsInstr *t = ps_build_unary (bd, PS_OP_TANH, h);
  t = ps_build_mul (bd, t, ps_build_broadcast_to (bd, scale, x->shape, &one));
  return ps_build_add (bd, x, t);
}

static gboolean
scan_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  (void) user;
  (void) error;
  carry_out[0] = layer (a->c, a->carry[0], a->xs[0], a->xs[1], a->consts[0]);
  return TRUE;
}

/* loss = sum(y * y) / 2 */
static PsInstr *
loss_of (PsComputation *c, PsInstr *y)
{
  int64_t all[2] = { 0, 1 };
  g_autoptr (PsBuilder) b = ps_builder_new_in (c->parent, c);
  return ps_build_sum (b, ps_build_mul (b, y, y), 2, all);
}

typedef struct {
  PsModule *m;
  PsInstr *x, *w, *b, *scale;
} Prog;

static void
prog_params (Prog *p, const char *name)
{
  p->m = ps_module_new (name);
  PsComputation *c = ps_computation_new (p->m, "main");
  c->is_entry = TRUE;
  p->m->entry = c;
  int64_t xd[2] = { B, D }, wd[3] = { L, D, D }, bd[2] = { L, D }, sd[1] = { D };
  p->x = build_test_param (c, "x", 2, xd);
  p->w = build_test_param (c, "w", 3, wd);
  p->b = build_test_param (c, "b", 2, bd);
  p->scale = build_test_param (c, "scale", 1, sd);
}

static void
set_root (PsComputation *c, PsInstr *loss, int n, PsInstr **grads)
{
  PsInstr *elems[8];
  elems[0] = loss;
  for (int i = 0; i < n; i++)
    elems[i + 1] = grads[i];
  g_autoptr (PsBuilder) b = ps_builder_new_in (c->parent, c);
  c->root = ps_build_tuple (b, n + 1, elems);
}

/* Layer l's slice of a stacked parameter, leading dim dropped. */
static PsInstr *
layer_slice (PsComputation *c, PsInstr *stack, int l)
{
  const PsShape *s = stack->shape;
  int64_t st[4], li[4], one[4], dims[4];
  for (int d = 0; d < s->rank; d++)
    {
      st[d] = d == 0 ? l : 0;
      li[d] = d == 0 ? l + 1 : s->dims[d];
      one[d] = 1;
      dims[d] = li[d] - st[d];
    }
  PsInstr *sl = ps_computation_add_instr (c, PS_OP_SLICE, NULL,
                                          ps_shape_new_array (s->etype, s->rank, dims), 1, &stack);
  ps_ints_set (&sl->slice_starts, s->rank, st);
  ps_ints_set (&sl->slice_limits, s->rank, li);
  ps_ints_set (&sl->slice_strides, s->rank, one);
  return reshape_dims (c, sl, s->rank - 1, s->dims + 1);
}

/* The stack unrolled; reverse runs the layers L-1 .. 0. Root: (loss, dx,
 * dw, db, dscale). */
static PsModule *
build_unrolled (gboolean reverse)
{
  Prog p;
  prog_params (&p, "unrolled");
  PsComputation *c = p.m->entry;
  PsInstr *x = p.x;
  for (int i = 0; i < L; i++)
    {
      int l = reverse ? L - 1 - i : i;
      x = layer (c, x, layer_slice (c, p.w, l), layer_slice (c, p.b, l), p.scale);
    }
  PsInstr *loss = loss_of (c, x);
  PsInstr *wrt[4] = { p.x, p.w, p.b, p.scale };
  GError *error = NULL;
  GPtrArray *g = ps_autodiff_gradients (c, loss, 4, wrt, &error);
  ck_assert_msg (g != NULL, "%s", error ? error->message : "");
  set_root (c, loss, 4, (PsInstr **) g->pdata);
  g_ptr_array_free (g, TRUE);
  return p.m;
}

static PsModule *
build_scan (gboolean reverse, gboolean remat, gboolean grads)
{
  Prog p;
  prog_params (&p, "scanned");
  PsComputation *c = p.m->entry;
  PsInstr *xs[2] = { p.w, p.b };
  PsScanSpec spec = { .name = "layers", .length = L, .reverse = reverse,
                      .n_carry = 1, .carry = &p.x, .n_xs = 2, .xs = xs,
                      .n_consts = 1, .consts = &p.scale, .body = scan_body,
                      .differentiable = grads, .remat = remat };
  GError *error = NULL;
  PsScan *s = ps_scan_build (c, &spec, &error);
  ck_assert_msg (s != NULL, "%s", error ? error->message : "");
  PsInstr *y = ps_scan_carry_out (s, 0);
  PsInstr *loss = loss_of (c, y);
  if (!grads)
    {
      c->root = loss;
      ps_scan_free (s);
      return p.m;
    }
  GPtrArray *dy = ps_autodiff_vjp (c, loss, NULL, 1, &y, &error);
  ck_assert_msg (dy != NULL, "%s", error ? error->message : "");
  PsInstr *out[4];
  ck_assert_msg (ps_scan_vjp (s, (PsInstr **) dy->pdata, &out[0], &out[1], &out[3], &error),
                 "%s", error ? error->message : "");
  /* out[1], out[2]: dw, db (the xs order); out[3]: dscale */
  g_ptr_array_free (dy, TRUE);
  ps_scan_free (s);
  set_root (c, loss, 4, out);
  return p.m;
}

static guint32 rng = 99;

static PsValue *
random_value (const PsShape *s)
{
  PsValue *v = ps_value_new (s);
  for (int64_t i = 0; i < v->n; i++)
    {
      rng = rng * 1664525u + 1013904223u;
      ps_value_set (v, i, ((double) (rng >> 8) / (double) (1u << 24)) - 0.5);
    }
  return v;
}

static PsValue *
run (const PsModule *m, PsValue **args)
{
  GError *error = NULL;
  ck_assert_msg (ps_module_validate (m, m->name, &error), "validate: %s",
                 error ? error->message : "");
  PsValue *out = ps_interp_run (m, 4, args, NULL, &error);
  ck_assert_msg (out != NULL, "interp: %s", error ? error->message : "");
  return out;
}

static void
assert_close (const PsValue *a, const PsValue *b, const char *what)
{
  ck_assert_int_eq (a->n, b->n);
  for (int64_t i = 0; i < a->n; i++)
    {
      double x = ps_value_get (a, i), y = ps_value_get (b, i);
      ck_assert_msg (fabs (x - y) <= 1e-12 * fmax (1.0, fabs (x)), "%s[%" G_GINT64_FORMAT
                     "]: %.17g vs %.17g", what, i, x, y);
    }
}

static PsValue **
random_args (const PsModule *m)
{
  PsValue **args = g_new0 (PsValue *, 4);
  for (int i = 0; i < 4; i++)
    args[i] = random_value (((PsInstr *) m->entry->params->pdata[i])->shape);
  return args;
}

static void
free_args (PsValue **args)
{
  for (int i = 0; i < 4; i++)
    ps_value_free (args[i]);
  g_free (args);
}

/* Scan and unrolled forms agree on the loss and every gradient. */
static void
check_against_unrolled (gboolean reverse, gboolean remat)
{
  PsModule *u = build_unrolled (reverse), *s = build_scan (reverse, remat, TRUE);
  PsValue **args = random_args (u);
  PsValue *ou = run (u, args), *os = run (s, args);
  static const char *names[5] = { "loss", "dx", "dw", "db", "dscale" };
  for (int e = 0; e < 5; e++)
    assert_close (ou->elems[e], os->elems[e], names[e]);
  ps_value_free (ou);
  ps_value_free (os);
  free_args (args);
  ps_module_free (u);
  ps_module_free (s);
}

START_TEST (test_scan_matches_unrolled)
{
  check_against_unrolled (FALSE, TRUE);
  check_against_unrolled (FALSE, FALSE);
  check_against_unrolled (TRUE, TRUE);
  check_against_unrolled (TRUE, FALSE);
}
END_TEST

/* The scan's gradients against central finite differences of its loss. */
START_TEST (test_scan_finite_differences)
{
  for (int remat = 0; remat < 2; remat++)
    {
      PsModule *g = build_scan (FALSE, remat, TRUE), *f = build_scan (FALSE, remat, FALSE);
      PsValue **args = random_args (g);
      PsValue *out = run (g, args);
      for (int p = 0; p < 4; p++)
        for (int64_t k = 0; k < args[p]->n; k++)
          {
            double x0 = ps_value_get (args[p], k), h = 1e-6;
            ps_value_set (args[p], k, x0 + h);
            PsValue *fp = run (f, args);
            ps_value_set (args[p], k, x0 - h);
            PsValue *fm = run (f, args);
            ps_value_set (args[p], k, x0);
            double fd = (ps_value_get (fp, 0) - ps_value_get (fm, 0)) / (2 * h);
            double ad = ps_value_get (out->elems[p + 1], k);
            ck_assert_msg (fabs (fd - ad) <= 1e-6 * fmax (1.0, fabs (fd)),
                           "remat %d param %d element %" G_GINT64_FORMAT ": scan %.12g, finite "
                           "difference %.12g", remat, p, k, ad, fd);
            ps_value_free (fp);
            ps_value_free (fm);
          }
      ps_value_free (out);
      free_args (args);
      ps_module_free (g);
      ps_module_free (f);
    }
}
END_TEST

/* The loops print as HLO that reads back, with their trip counts known
 * both from backend_config and from the counter pattern; the scratch
 * computation is gone; remat saves only the carry. */
START_TEST (test_scan_hlo)
{
  for (int remat = 0; remat < 2; remat++)
    {
      PsModule *m = build_scan (TRUE, remat, TRUE);
      g_autofree char *text = ps_hlo_print (m, NULL);
      ck_assert_msg (strstr (text, "scratch") == NULL, "%s", text);
      GError *error = NULL;
      PsModule *back = ps_hlo_parse (text, strlen (text), "scan.hlo", &error);
      ck_assert_msg (back != NULL, "%s\n%s", error ? error->message : "", text);
      int loops = 0;
      for (guint k = 0; k < back->computations->len; k++)
        {
          PsComputation *c = back->computations->pdata[k];
          for (guint i = 0; i < c->instrs->len; i++)
            {
              PsInstr *in = c->instrs->pdata[i];
              if (in->opcode != PS_OP_WHILE)
                continue;
              loops++;
              int64_t n = 0;
              ck_assert (ps_while_trip_count (in, &n));
              ck_assert_int_eq (n, L);
              g_free (in->backend_config);
              in->backend_config = NULL;
              n = 0;
              ck_assert (ps_while_trip_count (in, &n));
              ck_assert_int_eq (n, L);
              /* forward state: counter, x, w, b, scale and the saved stacks;
               * with remat only x is saved */
              if (g_str_has_suffix (in->called[1]->name, "layers.body") && remat)
                ck_assert_int_eq (in->shape->n_elems, 6);
              if (g_str_has_suffix (in->called[1]->name, "layers.body") && !remat)
                ck_assert_int_gt (in->shape->n_elems, 6);
            }
        }
      ck_assert_int_eq (loops, 2);
      PsValue **args = random_args (m);
      PsValue *a = run (m, args), *b = run (back, args);
      ck_assert (ps_value_equal (a, b));
      ps_value_free (a);
      ps_value_free (b);
      free_args (args);
      ps_module_free (back);
      ps_module_free (m);
    }
}
END_TEST

static gboolean
bad_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  (void) error;
  /* reads an instruction of a computation other than the caller (written
   * raw: the builder would refuse it before the scan could) */
  PsInstr *ops[2] = { a->carry[0], user };
  carry_out[0] = ps_computation_add_instr (a->c, PS_OP_ADD, NULL, ps_shape_copy (a->carry[0]->shape), 2, ops);
  return TRUE;
}

/* The body reads the caller's scale directly (a closure) instead of as a
 * const: the same loss and gradients, the scale's gradient excepted. */
static gboolean
closure_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  (void) error;
  carry_out[0] = layer (a->c, a->carry[0], a->xs[0], a->xs[1], user);
  return TRUE;
}

START_TEST (test_scan_captures_caller_values)
{
  PsModule *u = build_unrolled (FALSE);
  Prog p;
  prog_params (&p, "closure");
  PsComputation *c = p.m->entry;
  PsInstr *xs[2] = { p.w, p.b };
  PsScanSpec spec = { .name = "layers", .length = L, .n_carry = 1, .carry = &p.x, .n_xs = 2,
                      .xs = xs, .body = closure_body, .user = p.scale, .differentiable = TRUE,
                      .remat = TRUE };
  GError *error = NULL;
  PsScan *s = ps_scan_build (c, &spec, &error);
  ck_assert_msg (s != NULL, "%s", error ? error->message : "");
  PsInstr *y = ps_scan_carry_out (s, 0);
  PsInstr *loss = loss_of (c, y);
  GPtrArray *dy = ps_autodiff_vjp (c, loss, NULL, 1, &y, &error);
  PsInstr *out[4];
  ck_assert (ps_scan_vjp (s, (PsInstr **) dy->pdata, &out[0], &out[1], NULL, &error));
  g_ptr_array_free (dy, TRUE);
  ps_scan_free (s);
  out[3] = p.scale; /* no gradient: stands in the root */
  set_root (c, loss, 4, out);
  PsValue **args = random_args (u);
  PsValue *ou = run (u, args), *oc = run (p.m, args);
  static const char *names[4] = { "loss", "dx", "dw", "db" };
  for (int e = 0; e < 4; e++)
    assert_close (ou->elems[e], oc->elems[e], names[e]);
  ps_value_free (ou);
  ps_value_free (oc);
  free_args (args);
  ps_module_free (u);
  ps_module_free (p.m);
}
END_TEST

/* One microbatch's dw: the layer scan over (w, b) from x (a row [1, D]),
 * built in c, which may be the body of an enclosing scan: w, b and scale
 * are then the entry's (test_scan_nested). */
static PsInstr *
microbatch_dw (PsComputation *c, PsInstr *x, PsInstr *w, PsInstr *b, PsInstr *scale)
{
  PsInstr *xs[2] = { w, b };
  PsScanSpec spec = { .name = "layers", .length = L, .n_carry = 1, .carry = &x, .n_xs = 2,
                      .xs = xs, .body = closure_body, .user = scale, .differentiable = TRUE,
                      .remat = TRUE };
  GError *error = NULL;
  PsScan *s = ps_scan_build (c, &spec, &error);
  ck_assert_msg (s != NULL, "%s", error ? error->message : "");
  PsInstr *y = ps_scan_carry_out (s, 0);
  PsInstr *loss = loss_of (c, y);
  GPtrArray *dy = ps_autodiff_vjp (c, loss, NULL, 1, &y, &error);
  PsInstr *dxs[2];
  ck_assert (ps_scan_vjp (s, (PsInstr **) dy->pdata, NULL, dxs, NULL, &error));
  g_ptr_array_free (dy, TRUE);
  ps_scan_free (s);
  return dxs[0];
}

static gboolean
outer_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  (void) error;
  const Prog *p = user;
  int64_t row[2] = { 1, D };
  PsInstr *x = reshape_dims (a->c, a->xs[0], 2, row);
  g_autoptr (PsBuilder) b = ps_builder_new_in (a->c->parent, a->c);
  carry_out[0] = ps_build_add (b, a->carry[0], microbatch_dw (a->c, x, p->w, p->b, p->scale));
  return TRUE;
}

/* A scan inside another scan's body (a layer loop in a microbatch loop):
 * the inner scan takes and reads the entry's values, the outer one makes
 * them its invariants; the sum of each row's dw over an outer loop equals
 * the same two layer scans written one after the other, and the scratch
 * computations of both levels are gone. */
START_TEST (test_scan_nested)
{
  Prog u, n;
  prog_params (&u, "rows");
  prog_params (&n, "nested");
  /* one after the other */
  PsComputation *c = u.m->entry;
  PsInstr *sum = NULL;
  for (int r = 0; r < B; r++)
    {
      int64_t st[2] = { r, 0 }, li[2] = { r + 1, D }, one[2] = { 1, 1 }, rd[2] = { 1, D };
      PsInstr *row = ps_computation_add_instr (c, PS_OP_SLICE, NULL, ps_shape_new_array (PS_F64, 2, rd),
                                               1, &u.x);
      ps_ints_set (&row->slice_starts, 2, st);
      ps_ints_set (&row->slice_limits, 2, li);
      ps_ints_set (&row->slice_strides, 2, one);
      PsInstr *dw = microbatch_dw (c, row, u.w, u.b, u.scale);
      g_autoptr (PsBuilder) b = ps_builder_new_in (c->parent, c);
      sum = sum ? ps_build_add (b, sum, dw) : dw;
    }
  c->root = sum;
  /* as a loop over the rows */
  c = n.m->entry;
  int64_t bd[3] = { B, 1, D };
  PsInstr *rows = reshape_dims (c, n.x, 3, bd);
  g_autoptr (PsBuilder) b = ps_builder_new_in (c->parent, c);
  PsInstr *zero = ps_build_full_like (b, n.w->shape, 0.0);
  PsScanSpec spec = { .name = "rows", .length = B, .n_carry = 1, .carry = &zero, .n_xs = 1,
                      .xs = &rows, .body = outer_body, .user = &n };
  GError *error = NULL;
  PsScan *s = ps_scan_build (c, &spec, &error);
  ck_assert_msg (s != NULL, "%s", error ? error->message : "");
  c->root = ps_scan_carry_out (s, 0);
  ps_scan_free (s);
  /* every computation but the entry is called: the inner loops built in
   * the outer scratch went with it (their copies are the outer body's) */
  for (guint i = 0; i < n.m->computations->len; i++)
    {
      const PsComputation *k = n.m->computations->pdata[i];
      gboolean called = k == n.m->entry;
      for (guint j = 0; j < n.m->computations->len && !called; j++)
        {
          const PsComputation *o = n.m->computations->pdata[j];
          for (guint q = 0; q < o->instrs->len && !called; q++)
            {
              const PsInstr *in = o->instrs->pdata[q];
              for (int t = 0; t < in->n_called; t++)
                called |= in->called[t] == k;
            }
        }
      ck_assert_msg (called, "computation %s is left, called by nothing", k->name);
    }
  PsValue **args = random_args (u.m);
  PsValue *ou = run (u.m, args), *on = run (n.m, args);
  assert_close (ou, on, "dw");
  ps_value_free (ou);
  ps_value_free (on);
  free_args (args);
  ps_module_free (u.m);
  ps_module_free (n.m);
}
END_TEST

static gboolean
wrong_shape_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  (void) user;
  (void) error;
  carry_out[0] = a->xs[0];
  return TRUE;
}

START_TEST (test_scan_errors)
{
  Prog p;
  prog_params (&p, "bad");
  PsComputation *c = p.m->entry;
  PsInstr *xs[2] = { p.w, p.b };
  PsComputation *other = ps_computation_new (p.m, "other");
  PsInstr *foreign = ps_computation_add_instr (other, PS_OP_PARAMETER, "f",
                                               ps_shape_copy (p.x->shape), 0, NULL);
  g_ptr_array_add (other->params, foreign);
  other->root = foreign;
  PsScanSpec spec = { .name = "layers", .length = L, .n_carry = 1, .carry = &p.x, .n_xs = 2,
                      .xs = xs, .body = bad_body, .user = foreign };
  GError *error = NULL;
  ck_assert (ps_scan_build (c, &spec, &error) == NULL);
  ck_assert_msg (strstr (error->message, "pass it to the scan as a const") != NULL, "%s",
                 error->message);
  g_clear_error (&error);
  spec.body = wrong_shape_body;
  ck_assert (ps_scan_build (c, &spec, &error) == NULL);
  ck_assert_msg (strstr (error->message, "carry 0") != NULL, "%s", error->message);
  g_clear_error (&error);
  spec.length = L + 1;
  ck_assert (ps_scan_build (c, &spec, &error) == NULL);
  ck_assert_msg (strstr (error->message, "leading dim") != NULL, "%s", error->message);
  g_clear_error (&error);
  /* nothing of the failed attempts is left but the entry and "other" */
  ck_assert_int_eq (p.m->computations->len, 2);
  ps_module_free (p.m);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("scan");
  ps_check_case (s, "scan", 120,
                 PS_CHECK_TESTS (test_scan_matches_unrolled,
                                 test_scan_finite_differences, test_scan_hlo,
                                 test_scan_errors,
                                 test_scan_captures_caller_values,
                                 test_scan_nested));
  return ps_check_run (s, CK_FORK_GETENV);
}
