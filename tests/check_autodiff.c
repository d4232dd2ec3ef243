/* Autodiff and optimizers, checked by running programs: gradients from
 * ps_autodiff_gradients() must match central finite differences of the
 * forward program computed with the reference interpreter (f64 programs so
 * that differences are accurate), and one optimizer step must match a
 * straight C implementation of the same formulas. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/builder/autodiff.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/interp/interp.h"
#include "partitioner/ir/ir.h"
#include "partitioner/builder/optimizer.h"

static PsModule *
parse (const char *text)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, strlen (text), "test.hlo", &error);
  if (!m)
    ck_abort_msg ("parse: %s", error->message);
  return m;
}

static guint32 rng_state = 12345;

static double
rnd (void)
{
  rng_state = rng_state * 1664525u + 1013904223u;
  return ((double) (rng_state >> 8) / (double) (1u << 24)) * 2.0 - 1.0;
}

static PsValue *
random_value (const PsShape *s, double lo_abs)
{
  PsValue *v = ps_value_new (s);
  for (int64_t i = 0; i < v->n; i++)
    {
      double x = rnd ();
      /* Keep away from 0 where the program divides or takes logs. */
      if (lo_abs > 0)
        x = (x < 0 ? -1 : 1) * (lo_abs + fabs (x));
      ps_value_set (v, i, x);
    }
  return v;
}

static double
run_scalar (const PsModule *m, int n, PsValue **args)
{
  GError *error = NULL;
  PsValue *out = ps_interp_run (m, n, args, NULL, &error);
  if (!out)
    ck_abort_msg ("interp: %s", error->message);
  double r = ps_value_get (out, 0);
  ps_value_free (out);
  return r;
}

/* Checks the gradient of the entry root with respect to every parameter. */
static void
check_gradients (const char *text, double lo_abs)
{
  PsModule *fwd = parse (text);
  PsModule *m = ps_module_clone (fwd);
  PsComputation *c = m->entry;
  int n = (int) c->params->len;
  GError *error = NULL;
  PsInstr *loss = c->root;
  GPtrArray *grads = ps_autodiff_gradients (c, loss, n, (PsInstr **) c->params->pdata, &error);
  ck_assert_msg (grads != NULL, "autodiff: %s", error ? error->message : "");
  PsShape *shapes[65];
  PsInstr *elems[65];
  shapes[0] = loss->shape;
  elems[0] = loss;
  for (int i = 0; i < n; i++)
    {
      elems[i + 1] = grads->pdata[i];
      shapes[i + 1] = elems[i + 1]->shape;
    }
  PsInstr *root = ps_computation_add_instr (c, PS_OP_TUPLE, "ad_root",
                                            ps_shape_new_tuple (n + 1, shapes), n + 1, elems);
  c->root = root;
  g_ptr_array_free (grads, TRUE);
  ck_assert_msg (ps_module_validate (m, "grad.hlo", &error), "validate: %s",
                 error ? error->message : "");

  PsValue *args[64];
  for (int i = 0; i < n; i++)
    args[i] = random_value (((PsInstr *) c->params->pdata[i])->shape, lo_abs);
  PsValue *out = ps_interp_run (m, n, args, NULL, &error);
  ck_assert_msg (out != NULL, "interp: %s", error ? error->message : "");
  for (int p = 0; p < n; p++)
    {
      PsValue *g = out->elems[p + 1];
      for (int64_t k = 0; k < args[p]->n; k++)
        {
          double x0 = ps_value_get (args[p], k);
          double h = 1e-6 * fmax (1.0, fabs (x0));
          ps_value_set (args[p], k, x0 + h);
          double fp = run_scalar (fwd, n, args);
          ps_value_set (args[p], k, x0 - h);
          double fm = run_scalar (fwd, n, args);
          ps_value_set (args[p], k, x0);
          double fd = (fp - fm) / (2 * h);
          double ad = ps_value_get (g, k);
          ck_assert_msg (fabs (fd - ad) <= 1e-5 * fmax (1.0, fabs (fd)),
                         "param %d element %" G_GINT64_FORMAT ": autodiff %.9g, finite difference %.9g",
                         p, k, ad, fd);
        }
    }
  ps_value_free (out);
  for (int i = 0; i < n; i++)
    ps_value_free (args[i]);
  ps_module_free (m);
  ps_module_free (fwd);
}

START_TEST (test_mlp)
{
  /* tanh(x . w + b) summed: dot, broadcast, add, tanh, reduce. */
  check_gradients (
    "HloModule mlp\n"
    "add { a = f64[] parameter(0) b = f64[] parameter(1) ROOT s = f64[] add(a, b) }\n"
    "ENTRY e {\n"
    "  x = f64[3,4] parameter(0)\n"
    "  w = f64[4,5] parameter(1)\n"
    "  b = f64[5] parameter(2)\n"
    "  d = f64[3,5] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
    "  bb = f64[3,5] broadcast(b), dimensions={1}\n"
    "  h = f64[3,5] add(d, bb)\n"
    "  t = f64[3,5] tanh(h)\n"
    "  z = f64[] constant(0)\n"
    "  ROOT l = f64[] reduce(t, z), dimensions={0,1}, to_apply=add\n"
    "}\n", 0);
}
END_TEST

START_TEST (test_batched_dot_transposed)
{
  /* Attention-like einsum bnsd,bntd->bnst with batch dims and a contracting
   * dim that is not last, then a transpose and a product with itself. */
  check_gradients (
    "HloModule att\n"
    "add { a = f64[] parameter(0) b = f64[] parameter(1) ROOT s = f64[] add(a, b) }\n"
    "ENTRY e {\n"
    "  q = f64[2,3,4,2] parameter(0)\n"
    "  k = f64[2,2,3,4] parameter(1)\n"
    "  d = f64[2,2,3,3] dot(q, k), lhs_batch_dims={0,3}, rhs_batch_dims={0,1}, lhs_contracting_dims={2}, rhs_contracting_dims={3}\n"
    "  t = f64[2,2,3,3] transpose(d), dimensions={1,0,3,2}\n"
    "  r = f64[4,9] reshape(t)\n"
    "  s = f64[4,9] multiply(r, r)\n"
    "  z = f64[] constant(0)\n"
    "  ROOT l = f64[] reduce(s, z), dimensions={0,1}, to_apply=add\n"
    "}\n", 0);
}
END_TEST

START_TEST (test_softmax_cross_entropy)
{
  /* log-softmax with max subtraction, exp, log, divide, one-hot labels. */
  check_gradients (
    "HloModule ce\n"
    "add { a = f64[] parameter(0) b = f64[] parameter(1) ROOT s = f64[] add(a, b) }\n"
    "max { a = f64[] parameter(0) b = f64[] parameter(1) ROOT s = f64[] maximum(a, b) }\n"
    "ENTRY e {\n"
    "  x = f64[4,6] parameter(0)\n"
    "  y = f64[4,6] parameter(1)\n"
    "  ninf = f64[] constant(-1e300)\n"
    "  m = f64[4] reduce(x, ninf), dimensions={1}, to_apply=max\n"
    "  mb = f64[4,6] broadcast(m), dimensions={0}\n"
    "  xs = f64[4,6] subtract(x, mb)\n"
    "  ex = f64[4,6] exponential(xs)\n"
    "  z = f64[] constant(0)\n"
    "  se = f64[4] reduce(ex, z), dimensions={1}, to_apply=add\n"
    "  ls = f64[4] log(se)\n"
    "  lb = f64[4,6] broadcast(ls), dimensions={0}\n"
    "  lp = f64[4,6] subtract(xs, lb)\n"
    "  p = f64[4,6] multiply(lp, y)\n"
    "  tot = f64[] reduce(p, z), dimensions={0,1}, to_apply=add\n"
    "  n = f64[] constant(-4)\n"
    "  ROOT l = f64[] divide(tot, n)\n"
    "}\n", 0);
}
END_TEST

START_TEST (test_layer_norm_gelu)
{
  /* Layer norm (mean, rsqrt), a gated GELU (erf, multiply), relu (maximum),
   * logistic, copy and select. (A convert through f32 would make the finite
   * differences themselves too coarse to compare.) */
  check_gradients (
    "HloModule ln\n"
    "add { a = f64[] parameter(0) b = f64[] parameter(1) ROOT s = f64[] add(a, b) }\n"
    "ENTRY e {\n"
    "  x = f64[3,8] parameter(0)\n"
    "  g = f64[8] parameter(1)\n"
    "  z = f64[] constant(0)\n"
    "  sq = f64[3,8] multiply(x, x)\n"
    "  ss = f64[3] reduce(sq, z), dimensions={1}, to_apply=add\n"
    "  k = f64[3] constant({0.125, 0.125, 0.125})\n"
    "  ms = f64[3] multiply(ss, k)\n"
    "  eps = f64[3] constant({1e-3, 1e-3, 1e-3})\n"
    "  mse = f64[3] add(ms, eps)\n"
    "  r = f64[3] rsqrt(mse)\n"
    "  rb = f64[3,8] broadcast(r), dimensions={0}\n"
    "  gb = f64[3,8] broadcast(g), dimensions={1}\n"
    "  n = f64[3,8] multiply(x, rb)\n"
    "  y = f64[3,8] multiply(n, gb)\n"
    "  e = f64[3,8] erf(y)\n"
    "  ge = f64[3,8] multiply(e, y)\n"
    "  zb = f64[3,8] broadcast(z), dimensions={}\n"
    "  re = f64[3,8] maximum(ge, y)\n"
    "  lg = f64[3,8] logistic(re)\n"
    "  c64 = f64[3,8] copy(lg)\n"
    "  p = pred[3,8] compare(y, zb), direction=GT\n"
    "  s = f64[3,8] select(p, c64, y)\n"
    "  ROOT l = f64[] reduce(s, z), dimensions={0,1}, to_apply=add\n"
    "}\n", 0.2);
}
END_TEST

START_TEST (test_slice_pad_concat)
{
  check_gradients (
    "HloModule sp\n"
    "add { a = f64[] parameter(0) b = f64[] parameter(1) ROOT s = f64[] add(a, b) }\n"
    "ENTRY e {\n"
    "  x = f64[4,6] parameter(0)\n"
    "  w = f64[4,3] parameter(1)\n"
    "  s = f64[2,3] slice(x), slice={[1:3], [2:5]}\n"
    "  z = f64[] constant(0)\n"
    "  p = f64[4,3] pad(s, z), padding=1_1x0_0\n"
    "  c = f64[4,9] concatenate(x, p), dimensions={1}\n"
    "  cc = f64[4,9] concatenate(w, x), dimensions={1}\n"
    "  m = f64[4,9] multiply(c, cc)\n"
    "  d = f64[4,9] divide(m, cc)\n"
    "  q = f64[4,9] multiply(d, c)\n"
    "  ROOT l = f64[] reduce(q, z), dimensions={0,1}, to_apply=add\n"
    "}\n", 0.3);
}
END_TEST

/* Convolutions as the models write them: 2-D with stride, uneven padding
 * and window dilation; a depthwise 1-D (Conformer's conv module); a
 * grouped conv with a feature multiplier and stride; a transposed
 * up-sampling conv (base dilation); a strided 3-D conv; and other dim
 * labels. Each output is weighted by a parameter so every gradient
 * element is exercised. */
START_TEST (test_convolutions)
{
  check_gradients (
    "HloModule cg\n"
    "add { a = f64[] parameter(0) b = f64[] parameter(1) ROOT s = f64[] add(a, b) }\n"
    "ENTRY e {\n"
    "  z = f64[] constant(0)\n"
    "  x1 = f64[2,7,6,3] parameter(0)\n  k1 = f64[3,2,3,4] parameter(1)\n  w1 = f64[2,3,5,4] parameter(2)\n"
    "  c1 = f64[2,3,5,4] convolution(x1, k1), window={size=3x2 stride=2x1 pad=1_0x0_1 rhs_dilate=1x2},"
    " dim_labels=b01f_01io->b01f\n"
    "  m1 = f64[2,3,5,4] multiply(c1, w1)\n  l1 = f64[] reduce(m1, z), dimensions={0,1,2,3}, to_apply=add\n"
    "  x2 = f64[2,9,3] parameter(3)\n  k2 = f64[5,1,3] parameter(4)\n  w2 = f64[2,9,3] parameter(5)\n"
    "  c2 = f64[2,9,3] convolution(x2, k2), window={size=5 pad=2_2}, dim_labels=b0f_0io->b0f,"
    " feature_group_count=3\n"
    "  m2 = f64[2,9,3] multiply(c2, w2)\n  l2 = f64[] reduce(m2, z), dimensions={0,1,2}, to_apply=add\n"
    "  x3 = f64[1,6,4] parameter(6)\n  k3 = f64[3,2,6] parameter(7)\n  w3 = f64[1,3,6] parameter(8)\n"
    "  c3 = f64[1,3,6] convolution(x3, k3), window={size=3 stride=2 pad=1_1}, dim_labels=b0f_0io->b0f,"
    " feature_group_count=2\n"
    "  m3 = f64[1,3,6] multiply(c3, w3)\n  l3 = f64[] reduce(m3, z), dimensions={0,1,2}, to_apply=add\n"
    "  x4 = f64[2,3,3,2] parameter(9)\n  k4 = f64[2,2,2,3] parameter(10)\n  w4 = f64[2,6,6,3] parameter(11)\n"
    "  c4 = f64[2,6,6,3] convolution(x4, k4), window={size=2x2 pad=1_1x1_1 lhs_dilate=2x2},"
    " dim_labels=b01f_01io->b01f\n"
    "  m4 = f64[2,6,6,3] multiply(c4, w4)\n  l4 = f64[] reduce(m4, z), dimensions={0,1,2,3}, to_apply=add\n"
    "  x5 = f64[1,5,4,6,2] parameter(12)\n  k5 = f64[3,3,3,2,2] parameter(13)\n  w5 = f64[1,3,2,3,2] parameter(14)\n"
    "  c5 = f64[1,3,2,3,2] convolution(x5, k5), window={size=3x3x3 stride=2x2x2 pad=1_1x1_1x1_1},"
    " dim_labels=b012f_012io->b012f\n"
    "  m5 = f64[1,3,2,3,2] multiply(c5, w5)\n  l5 = f64[] reduce(m5, z), dimensions={0,1,2,3,4}, to_apply=add\n"
    "  x6 = f64[2,3,5,4] parameter(15)\n  k6 = f64[4,3,2,3] parameter(16)\n  w6 = f64[2,4,5,4] parameter(17)\n"
    "  c6 = f64[2,4,5,4] convolution(x6, k6), window={size=2x3 pad=0_1x1_1}, dim_labels=bf01_oi01->bf01\n"
    "  m6 = f64[2,4,5,4] multiply(c6, w6)\n  l6 = f64[] reduce(m6, z), dimensions={0,1,2,3}, to_apply=add\n"
    "  s1 = f64[] add(l1, l2)\n  s2 = f64[] add(s1, l3)\n  s3 = f64[] add(s2, l4)\n  s4 = f64[] add(s3, l5)\n"
    "  ROOT s5 = f64[] add(s4, l6)\n"
    "}\n", 0);
}
END_TEST

/* Batch norm: training's gradient through the batch statistics (what
 * batch-norm-grad computes) and inference's with respect to all five
 * operands; the variance kept positive (v * v + 1/2). */
START_TEST (test_batch_norm)
{
  check_gradients (
    "HloModule bn\n"
    "add { a = f64[] parameter(0) b = f64[] parameter(1) ROOT s = f64[] add(a, b) }\n"
    "ENTRY e {\n"
    "  z = f64[] constant(0)\n"
    "  x = f64[3,2,4] parameter(0)\n  s = f64[2] parameter(1)\n  o = f64[2] parameter(2)\n"
    "  w = f64[3,2,4] parameter(3)\n"
    "  t = (f64[3,2,4], f64[2], f64[2]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=1\n"
    "  y = f64[3,2,4] get-tuple-element(t), index=0\n"
    "  m = f64[3,2,4] multiply(y, w)\n  l1 = f64[] reduce(m, z), dimensions={0,1,2}, to_apply=add\n"
    "  mu = f64[2] parameter(4)\n  v = f64[2] parameter(5)\n"
    "  h = f64[] constant(0.5)\n  hb = f64[2] broadcast(h), dimensions={}\n"
    "  vv = f64[2] multiply(v, v)\n  var = f64[2] add(vv, hb)\n"
    "  i = f64[3,2,4] batch-norm-inference(x, s, o, mu, var), epsilon=0.01, feature_index=1\n"
    "  mi = f64[3,2,4] multiply(i, i)\n  l2 = f64[] reduce(mi, z), dimensions={0,1,2}, to_apply=add\n"
    "  ROOT l = f64[] add(l1, l2)\n"
    "}\n", 0);
}
END_TEST

START_TEST (test_unsupported_rule)
{
  PsModule *m = parse (
    "HloModule u\n"
    "ENTRY e {\n"
    "  x = f64[4] parameter(0)\n"
    "  ROOT c = f64[4] cosine(x)\n"
    "}\n");
  GError *error = NULL;
  PsComputation *c = m->entry;
  GPtrArray *g = ps_autodiff_gradients (c, c->root, 1, (PsInstr **) c->params->pdata, &error);
  ck_assert_ptr_null (g);
  ck_assert_int_eq (error->code, PS_ERROR_UNSUPPORTED);
  ck_assert_msg (strstr (error->message, "cosine") != NULL, "%s", error->message);
  g_error_free (error);
  ps_module_free (m);
}
END_TEST

/* One Adafactor step on a 3x4 weight against the formulas in C. */
START_TEST (test_adafactor_step)
{
  PsModule *m = ps_module_new ("opt");
  PsComputation *c = ps_computation_new (m, "step");
  c->is_entry = TRUE;
  m->entry = c;
  int64_t wd[2] = { 3, 4 }, rd[1] = { 3 }, cd[1] = { 4 };
  const char *names[] = { "w", "g", "vr", "vc", "lr", "decay" };
  PsShape *shapes[] = { ps_shape_new_array (PS_F32, 2, wd), ps_shape_new_array (PS_F32, 2, wd),
                        ps_shape_new_array (PS_F32, 1, rd), ps_shape_new_array (PS_F32, 1, cd),
                        ps_shape_new_scalar (PS_F32), ps_shape_new_scalar (PS_F32) };
  PsInstr *p[6];
  for (int i = 0; i < 6; i++)
    {
      p[i] = ps_computation_add_instr (c, PS_OP_PARAMETER, names[i], shapes[i], 0, NULL);
      p[i]->parameter_number = i;
      g_ptr_array_add (c->params, p[i]);
    }
  PsOptimizerHyper h;
  ps_optimizer_hyper_defaults (PS_OPTIMIZER_ADAFACTOR, &h);
  h.lr = p[4];
  h.decay = p[5];
  PsInstr *nw, *ns[2];
  PsInstr *st[2] = { p[2], p[3] };
  ps_optimizer_apply (c, PS_OPTIMIZER_ADAFACTOR, &h, p[0], p[1], st, &nw, ns);
  PsShape *ts[3] = { nw->shape, ns[0]->shape, ns[1]->shape };
  PsInstr *te[3] = { nw, ns[0], ns[1] };
  c->root = ps_computation_add_instr (c, PS_OP_TUPLE, "out", ps_shape_new_tuple (3, ts), 3, te);

  double W[12], G[12], VR[3], VC[4], lr = 0.01, decay = 0.8;
  PsValue *args[6];
  for (int i = 0; i < 6; i++)
    args[i] = ps_value_new (p[i]->shape);
  for (int i = 0; i < 12; i++)
    {
      W[i] = ps_etype_round (PS_F32, rnd ());
      G[i] = ps_etype_round (PS_F32, rnd ());
      ps_value_set (args[0], i, W[i]);
      ps_value_set (args[1], i, G[i]);
    }
  for (int i = 0; i < 3; i++)
    ps_value_set (args[2], i, VR[i] = ps_etype_round (PS_F32, 0.5 + fabs (rnd ())));
  for (int i = 0; i < 4; i++)
    ps_value_set (args[3], i, VC[i] = ps_etype_round (PS_F32, 0.5 + fabs (rnd ())));
  ps_value_set (args[4], 0, ps_etype_round (PS_F32, lr));
  ps_value_set (args[5], 0, ps_etype_round (PS_F32, decay));
  lr = ps_etype_round (PS_F32, lr);
  decay = ps_etype_round (PS_F32, decay);

  GError *error = NULL;
  PsValue *out = ps_interp_run (m, 6, args, NULL, &error);
  ck_assert_msg (out != NULL, "interp: %s", error ? error->message : "");

  double nvr[3], nvc[4], u[12], rowmean = 0, usq = 0, wsq = 0;
  for (int i = 0; i < 3; i++)
    {
      double s = 0;
      for (int j = 0; j < 4; j++)
        s += G[i * 4 + j] * G[i * 4 + j] + 1e-30;
      nvr[i] = decay * VR[i] + (1 - decay) * s / 4;
      rowmean += nvr[i] / 3;
    }
  for (int j = 0; j < 4; j++)
    {
      double s = 0;
      for (int i = 0; i < 3; i++)
        s += G[i * 4 + j] * G[i * 4 + j] + 1e-30;
      nvc[j] = decay * VC[j] + (1 - decay) * s / 3;
    }
  for (int i = 0; i < 12; i++)
    {
      u[i] = G[i] / sqrt (nvr[i / 4] * nvc[i % 4] / rowmean);
      usq += u[i] * u[i] / 12;
      wsq += W[i] * W[i] / 12;
    }
  double den = fmax (1.0, sqrt (usq) / 1.0);
  double step = lr * fmax (1e-3, sqrt (wsq));
  for (int i = 0; i < 12; i++)
    {
      double want = W[i] - step * u[i] / den;
      double got = ps_value_get (out->elems[0], i);
      ck_assert_msg (fabs (got - want) < 1e-5, "w[%d] = %g, want %g", i, got, want);
    }
  for (int i = 0; i < 3; i++)
    ck_assert (fabs (ps_value_get (out->elems[1], i) - nvr[i]) < 1e-5 * fmax (1, nvr[i]));
  for (int j = 0; j < 4; j++)
    ck_assert (fabs (ps_value_get (out->elems[2], j) - nvc[j]) < 1e-5 * fmax (1, nvc[j]));
  ps_value_free (out);
  for (int i = 0; i < 6; i++)
    ps_value_free (args[i]);
  ps_module_free (m);
}
END_TEST

START_TEST (test_adam_state_shapes)
{
  int64_t d[3] = { 2, 3, 4 };
  PsShape *w = ps_shape_new_array (PS_F32, 3, d);
  PsShape *out[2];
  ck_assert_int_eq (ps_optimizer_state_shapes (PS_OPTIMIZER_ADAFACTOR, w, out), 2);
  ck_assert_int_eq (out[0]->rank, 2);
  ck_assert_int_eq (out[0]->dims[1], 3);
  ck_assert_int_eq (out[1]->dims[1], 4);
  ps_shape_free (out[0]);
  ps_shape_free (out[1]);
  ck_assert_int_eq (ps_optimizer_state_shapes (PS_OPTIMIZER_ADAM, w, out), 2);
  ck_assert (ps_shape_equal (out[0], w));
  ps_shape_free (out[0]);
  ps_shape_free (out[1]);
  ps_shape_free (w);
}
END_TEST

int
main (void)
{
  Suite *s = suite_create ("autodiff");
  ps_check_case (s, "gradients_match_finite_differences", 120,
                 PS_CHECK_TESTS (test_mlp, test_batched_dot_transposed,
                                 test_softmax_cross_entropy,
                                 test_layer_norm_gelu, test_slice_pad_concat,
                                 test_convolutions, test_batch_norm,
                                 test_unsupported_rule, test_adafactor_step,
                                 test_adam_state_shapes));
  return ps_check_run (s, CK_FORK_GETENV);
}
