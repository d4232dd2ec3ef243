/* Check suite for partitioner/propagate: a dense Transformer layer in einsum
 * form on a 2D mesh, annotated as the published GSPMD runs were, whose every
 * other tensor must get the sharding worked out by hand; plus one focused
 * test per propagation rule. */
#include "config.h"

#include <check.h>
#include <json-glib/json-glib.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/propagate/propagate.h"
#include "partitioner/ir/sharding.h"

static PsModule *
parse (const char *text)
{
  GError *error = NULL;
  PsModule *m = ps_hlo_parse (text, strlen (text), "test.hlo", &error);
  ck_assert_msg (m != NULL, "parse failed: %s", error ? error->message : "?");
  return m;
}

/* Propagates with XLA's test defaults plus the given flags. */
static PsModule *
propagate (const char *text, gboolean spmd, gboolean to_output)
{
  PsModule *m = parse (text);
  PsPropagateOptions o;
  ps_propagate_options_init (&o);
  static const gboolean yes = TRUE, no = FALSE;
  o.is_spmd = spmd;
  o.to_output = to_output ? &yes : &no;
  o.to_parameters = &no;
  GError *error = NULL;
  ck_assert_msg (ps_propagate (m, &o, &error), "propagate failed: %s",
                 error ? error->message : "?");
  return m;
}

/* What `podsim propagate` prints reads back (JAX's with_sharding_constraint
 * is a Sharding custom-call, replaced by a copy in its place), for every
 * module of XLA's sharding test vectors that propagates. */
START_TEST (test_propagated_reads_back)
{
  static const char *const files[] = { "xla-propagation.jsonl", "xla-propagation_expanded.jsonl",
                                       "xla-partitioner.jsonl" };
  const char *src = g_getenv ("PS_SRCDIR");
  g_autofree char *path = g_build_filename (src ? src : PS_SRCDIR, "tests/data/conformance", files[_i], NULL);
  g_autofree char *text = NULL;
  ck_assert_msg (g_file_get_contents (path, &text, NULL, NULL), "cannot read %s", path);
  g_auto (GStrv) lines = g_strsplit (text, "\n", -1);
  JsonParser *jp = json_parser_new ();
  int n = 0, propagated = 0;
  for (int i = 0; lines[i]; i++)
    {
      if (!lines[i][0])
        continue;
      ck_assert (json_parser_load_from_data (jp, lines[i], -1, NULL));
      JsonObject *o = json_node_get_object (json_parser_get_root (jp));
      const char *name = json_object_get_string_member (o, "name");
      const char *hlo = json_object_get_string_member (o, "hlo");
      GError *error = NULL;
      PsModule *m = ps_hlo_parse (hlo, strlen (hlo), name, &error);
      ck_assert_msg (m != NULL, "%s: %s", name, error ? error->message : "");
      n++;
      if (ps_propagate (m, NULL, &error))
        {
          propagated++;
          g_autofree char *out = ps_hlo_print (m, NULL);
          PsModule *back = ps_hlo_parse (out, strlen (out), name, &error);
          ck_assert_msg (back != NULL, "%s: propagated module does not read back: %s\n%s", name,
                         error ? error->message : "", out);
          ps_module_free (back);
        }
      g_clear_error (&error);
      ps_module_free (m);
    }
  g_object_unref (jp);
  ck_assert_int_gt (n, 100);
  ck_assert_int_gt (propagated, n / 2);
}
END_TEST

static void
expect_sharding (const PsModule *m, const char *name, const char *want)
{
  const PsInstr *i = ps_module_find_instr (m, name);
  ck_assert_msg (i != NULL, "no instruction %s", name);
  if (!want)
    {
      ck_assert_msg (i->sharding == NULL, "%s should have no sharding", name);
      return;
    }
  ck_assert_msg (i->sharding != NULL, "%s has no sharding, expected %s", name, want);
  g_autoptr (PsSharding) w = ps_sharding_from_string (want, "test", NULL);
  ck_assert (w != NULL);
  g_autofree char *got = ps_sharding_to_string (i->sharding);
  ck_assert_msg (ps_sharding_equal_layout (i->sharding, w), "%s: expected %s, got %s", name,
                 want, got);
}

/* ---- the Transformer layer ---------------------------------------------- */

/* B=8 batch, S=16 sequence, M=32 model, N=4 heads, D=8 per head, H=64 hidden,
 * on a 2x4 mesh whose device (i, j) is 4*i + j: mesh axis 0 has size 2,
 * axis 1 size 4. The annotations are those of the published runs:
 *   weights M x H: M on axis 0, H on axis 1        {devices=[2,4]<=[8]}
 *   attention weights M x N x D: M on 0, N on 1     {devices=[2,4,1]<=[8]}
 *   activations B x S x M: B on 0, M on 1           {devices=[2,1,4]<=[8]}
 * (the layer input, and the two sub-layer outputs that the runs annotate). */
static const char *transformer_hlo =
  "HloModule layer\n"
  "add_f32 { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
  "max_f32 { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] maximum(a, b) }\n"
  "ENTRY layer {\n"
  "  x = f32[8,16,32] parameter(0), sharding={devices=[2,1,4]<=[8]}\n"
  "  wq = f32[32,4,8] parameter(1), sharding={devices=[2,4,1]<=[8]}\n"
  "  wk = f32[32,4,8] parameter(2), sharding={devices=[2,4,1]<=[8]}\n"
  "  wv = f32[32,4,8] parameter(3), sharding={devices=[2,4,1]<=[8]}\n"
  "  wo = f32[32,4,8] parameter(4), sharding={devices=[2,4,1]<=[8]}\n"
  "  w_in = f32[32,64] parameter(5), sharding={devices=[2,4]<=[8]}\n"
  "  w_out = f32[32,64] parameter(6), sharding={devices=[2,4]<=[8]}\n"
  "  zero = f32[] constant(0)\n"
  "  sq = f32[8,16,32] multiply(x, x)\n"
  "  sumsq = f32[8,16] reduce(sq, zero), dimensions={2}, to_apply=add_f32\n"
  "  rstd = f32[8,16] rsqrt(sumsq)\n"
  "  rstd.b = f32[8,16,32] broadcast(rstd), dimensions={0,1}\n"
  "  h = f32[8,16,32] multiply(x, rstd.b)\n"
  "  q = f32[8,16,4,8] dot(h, wq), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
  "  k = f32[8,16,4,8] dot(h, wk), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
  "  v = f32[8,16,4,8] dot(h, wv), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
  "  logits = f32[8,4,16,16] dot(q, k), lhs_batch_dims={0,2}, rhs_batch_dims={0,2},"
  "    lhs_contracting_dims={3}, rhs_contracting_dims={3}\n"
  "  ninf = f32[] constant(-inf)\n"
  "  lmax = f32[8,4,16] reduce(logits, ninf), dimensions={3}, to_apply=max_f32\n"
  "  lmax.b = f32[8,4,16,16] broadcast(lmax), dimensions={0,1,2}\n"
  "  shifted = f32[8,4,16,16] subtract(logits, lmax.b)\n"
  "  e = f32[8,4,16,16] exponential(shifted)\n"
  "  esum = f32[8,4,16] reduce(e, zero), dimensions={3}, to_apply=add_f32\n"
  "  esum.b = f32[8,4,16,16] broadcast(esum), dimensions={0,1,2}\n"
  "  probs = f32[8,4,16,16] divide(e, esum.b)\n"
  "  ctx = f32[8,4,16,8] dot(probs, v), lhs_batch_dims={0,1}, rhs_batch_dims={0,2},"
  "    lhs_contracting_dims={3}, rhs_contracting_dims={1}\n"
  "  ctx.t = f32[8,16,4,8] transpose(ctx), dimensions={0,2,1,3}\n"
  "  attn = f32[8,16,32] dot(ctx.t, wo), lhs_contracting_dims={2,3}, rhs_contracting_dims={1,2},"
  "    sharding={devices=[2,1,4]<=[8]}\n"
  "  res1 = f32[8,16,32] add(x, attn)\n"
  "  hidden = f32[8,16,64] dot(res1, w_in), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
  "  zero.b = f32[8,16,64] broadcast(zero), dimensions={}\n"
  "  relu = f32[8,16,64] maximum(hidden, zero.b)\n"
  "  ffn = f32[8,16,32] dot(relu, w_out), lhs_contracting_dims={2}, rhs_contracting_dims={1},"
  "    sharding={devices=[2,1,4]<=[8]}\n"
  "  ROOT out = f32[8,16,32] add(res1, ffn)\n"
  "}\n";

START_TEST (test_transformer_layer)
{
  g_autoptr (PsModule) m = parse (transformer_hlo);
  GError *error = NULL;
  ck_assert (ps_propagate (m, NULL, &error)); /* podsim defaults: SPMD, root may be sharded */

  /* User annotations are kept as written. */
  expect_sharding (m, "x", "{devices=[2,1,4]<=[8]}");
  expect_sharding (m, "wq", "{devices=[2,4,1]<=[8]}");
  expect_sharding (m, "w_in", "{devices=[2,4]<=[8]}");
  expect_sharding (m, "attn", "{devices=[2,1,4]<=[8]}");

  /* Layer norm. sq = x*x is elementwise: B x S x M, B on 0, M on 1.
   * sumsq reduces M away: B stays on axis 0 and the 4 devices that held the
   * M pieces now hold the same data, so axis 1 becomes replication:
   * [2,1] tiles + a replicated group of 4. rstd is elementwise on that;
   * broadcasting it back over M (aggressive forward rule) and multiplying
   * with x gives x's sharding again. */
  expect_sharding (m, "sq", "{devices=[2,1,4]<=[8]}");
  expect_sharding (m, "sumsq", "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
  expect_sharding (m, "rstd", "{devices=[2,1,4]<=[8] last_tile_dim_replicate}");
  expect_sharding (m, "h", "{devices=[2,1,4]<=[8]}");

  /* q = einsum(BSM, MND -> BSND). From h: B on axis 0; M is contracted, so
   * axis 1 becomes replication. From wq: M contracted (axis 0 becomes
   * replication), N on axis 1. The two partial shardings are compatible and
   * merge into B on 0 and N on 1: the attention activation B x S x N x D,
   * [2,1,4,1] with device 4*b + n. Same for k and v. */
  expect_sharding (m, "q", "{devices=[2,1,4,1]<=[8]}");
  expect_sharding (m, "k", "{devices=[2,1,4,1]<=[8]}");
  expect_sharding (m, "v", "{devices=[2,1,4,1]<=[8]}");

  /* logits = einsum(BSND, BTND -> BNST): batch dims B and N keep their axes
   * (B on 0, N on 1), S and T are not split: [2,4,1,1]. The softmax is
   * elementwise and reductions over T, so every B x N x S x T tensor is
   * [2,4,1,1] and every B x N x S one [2,4,1]. */
  expect_sharding (m, "logits", "{devices=[2,4,1,1]<=[8]}");
  expect_sharding (m, "lmax", "{devices=[2,4,1]<=[8]}");
  expect_sharding (m, "shifted", "{devices=[2,4,1,1]<=[8]}");
  expect_sharding (m, "esum", "{devices=[2,4,1]<=[8]}");
  expect_sharding (m, "probs", "{devices=[2,4,1,1]<=[8]}");

  /* ctx = einsum(BNST, BTND -> BNSD): batch B, N again on 0 and 1;
   * transposed back to B x S x N x D it is the attention activation again:
   * B on 0, N on 1. */
  expect_sharding (m, "ctx", "{devices=[2,4,1,1]<=[8]}");
  expect_sharding (m, "ctx.t", "{devices=[2,1,4,1]<=[8]}");

  /* The residual add joins two B x S x M activations (B on 0, M on 1). */
  expect_sharding (m, "res1", "{devices=[2,1,4]<=[8]}");

  /* FFN hidden = einsum(BSM, MH -> BSH): from res1 B on 0 (M contracted),
   * from w_in H on 1 (M contracted): merged B on 0 and H on 1, [2,1,4].
   * The ReLU keeps it. */
  expect_sharding (m, "hidden", "{devices=[2,1,4]<=[8]}");
  expect_sharding (m, "relu", "{devices=[2,1,4]<=[8]}");

  /* The layer output adds two B x S x M activations. */
  expect_sharding (m, "out", "{devices=[2,1,4]<=[8]}");

  /* Every instruction of the entry got a sharding, except the scalar init
   * value of the max reduction: XLA gives reduce init values nothing from
   * their user, and -inf has no other user. */
  for (guint k = 0; k < m->entry->instrs->len; k++)
    {
      PsInstr *i = g_ptr_array_index (m->entry->instrs, k);
      if (strcmp (i->name, "ninf") == 0)
        ck_assert (i->sharding == NULL);
      else
        ck_assert_msg (i->sharding != NULL, "%s has no sharding", i->name);
    }
}
END_TEST

/* ---- one test per rule --------------------------------------------------- */

START_TEST (test_elementwise_forward_backward)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[4,8] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
      "  p1 = f32[4,8] parameter(1)\n"
      "  c = f32[4,8] copy(p1)\n"
      "  a = f32[4,8] add(p0, c)\n"
      "  ROOT n = f32[4,8] negate(a)\n}\n", FALSE, FALSE);
  expect_sharding (m, "a", "{devices=[2,2]0,1,2,3}");
  /* Backward: c takes its user's sharding; p1 is a parameter (kept). */
  expect_sharding (m, "c", "{devices=[2,2]0,1,2,3}");
  expect_sharding (m, "p1", NULL);
  /* The root is the host's business unless propagation to output is on. */
  expect_sharding (m, "n", NULL);
}
END_TEST

START_TEST (test_annotations_never_overwritten)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[4,8] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
      "  c = f32[4,8] copy(p0), sharding={replicated}\n"
      "  d = f32[4,8] copy(c)\n"
      "  ROOT n = f32[4,8] negate(d), sharding={devices=[1,4]0,1,2,3}\n}\n", TRUE, FALSE);
  expect_sharding (m, "c", "{replicated}");
  expect_sharding (m, "n", "{devices=[1,4]0,1,2,3}");
  /* d sits between a replicated and a tiled annotation: the more specific
   * (tiled) one wins. */
  expect_sharding (m, "d", "{devices=[1,4]0,1,2,3}");
}
END_TEST

START_TEST (test_dot_merges_batch_and_model)
{
  /* The paper's example: a batch-sharded LHS and a feature-sharded RHS give
   * an output sharded on both (data and model parallelism). */
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  x = f32[16,32] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
      "  w = f32[32,64] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}\n"
      "  y = f32[16,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
      "  ROOT c = f32[16,64] copy(y)\n}\n", TRUE, FALSE);
  expect_sharding (m, "y", "{devices=[2,2]0,1,2,3}");
}
END_TEST

START_TEST (test_dot_backward_to_operand)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[16,32] parameter(0)\n"
      "  x = f32[16,32] copy(p0)\n"
      "  w = f32[32,64] parameter(1), sharding={devices=[1,4]0,1,2,3}\n"
      "  y = f32[16,64] dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0},"
      "    sharding={devices=[2,2]0,1,2,3}\n"
      "  ROOT c = f32[16,64] copy(y)\n}\n", TRUE, FALSE);
  /* x keeps the batch split of y; the output feature split is replicated. */
  expect_sharding (m, "x", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
}
END_TEST

START_TEST (test_broadcast_and_reduce)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nadd { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
      "ENTRY e {\n"
      "  p0 = f32[8] parameter(0)\n"
      "  c = f32[8] copy(p0)\n"
      "  b = f32[8,16] broadcast(c), dimensions={0}\n"
      "  t = f32[8,16] copy(b), sharding={devices=[2,2]0,1,2,3}\n"
      "  z = f32[] constant(0)\n"
      "  r = f32[16] reduce(t, z), dimensions={0}, to_apply=add\n"
      "  ROOT o = f32[16] copy(r)\n}\n", TRUE, FALSE);
  /* Backward through the broadcast: dim 1 is new, its split becomes
   * replication. */
  expect_sharding (m, "b", "{devices=[2,2]0,1,2,3}");
  expect_sharding (m, "c", "{devices=[2,2]0,1,2,3 last_tile_dim_replicate}");
  /* Reducing dim 0 away keeps dim 1's split, dim 0's becomes replication. */
  expect_sharding (m, "r", "{devices=[2,2]0,2,1,3 last_tile_dim_replicate}");
}
END_TEST

/* Batch norm: operand-shaped values share one sharding; per-feature values
 * keep only the feature dim's split. */
START_TEST (test_batch_norm)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  x = f32[2,8,4] parameter(0), sharding={devices=[1,2,2]0,1,2,3}\n"
      "  s = f32[4] parameter(1)\n  o = f32[4] parameter(2)\n"
      "  t = (f32[2,8,4], f32[4], f32[4]) batch-norm-training(x, s, o), epsilon=0.001, feature_index=2\n"
      "  y = f32[2,8,4] get-tuple-element(t), index=0\n"
      "  m = f32[4] get-tuple-element(t), index=1\n  v = f32[4] get-tuple-element(t), index=2\n"
      "  g = (f32[2,8,4], f32[4], f32[4]) batch-norm-grad(x, s, m, v, y), epsilon=0.001, feature_index=2\n"
      "  gx = f32[2,8,4] get-tuple-element(g), index=0\n"
      "  zp = f32[2,8,4] parameter(3)\n  z = f32[2,8,4] copy(zp)\n"
      "  i = f32[2,8,4] batch-norm-inference(z, s, o, m, v), epsilon=0.001, feature_index=2\n"
      "  c = f32[2,8,4] copy(i), sharding={devices=[2,1,2]0,1,2,3}\n"
      "  ROOT r = (f32[2,8,4], f32[2,8,4]) tuple(gx, c)\n}\n", TRUE, FALSE);
  expect_sharding (m, "t", "{{devices=[1,2,2]0,1,2,3}, {devices=[2,2]0,2,1,3 last_tile_dim_replicate},"
                           " {devices=[2,2]0,2,1,3 last_tile_dim_replicate}}");
  expect_sharding (m, "g", "{{devices=[1,2,2]0,1,2,3}, {devices=[2,2]0,2,1,3 last_tile_dim_replicate},"
                           " {devices=[2,2]0,2,1,3 last_tile_dim_replicate}}");
  /* Backward from the inference's user to its operand. */
  expect_sharding (m, "i", "{devices=[2,1,2]0,1,2,3}");
  expect_sharding (m, "z", "{devices=[2,1,2]0,1,2,3}");
}
END_TEST

START_TEST (test_reshape_and_transpose)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[8,6,4] parameter(0), sharding={devices=[2,1,2]0,1,2,3}\n"
      "  r = f32[8,24] reshape(p0)\n"
      "  t = f32[24,8] transpose(r), dimensions={1,0}\n"
      "  s = f32[4,2,24] reshape(r)\n"
      "  ROOT o = (f32[24,8], f32[4,2,24]) tuple(t, s)\n}\n", TRUE, FALSE);
  /* 6x4 merge into 24 with only the minor dim split: only dim 0 maps, the
   * rest is partial (XLA's partial reshape propagation). */
  expect_sharding (m, "r", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
  /* Transposing moves the split to dim 1; the replication groups stay. */
  expect_sharding (m, "t", "{devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}");
  /* 8 -> 4x2 split: the 2 shards go to the major dim. */
  expect_sharding (m, "s", "{devices=[2,1,1,2]0,1,2,3 last_tile_dim_replicate}");
}
END_TEST

START_TEST (test_slice_pad_concat_dynamic_slice)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[8,16] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
      "  s = f32[8,8] slice(p0), slice={[0:8], [0:8]}\n"
      "  z = f32[] constant(0)\n"
      "  pd = f32[8,20] pad(p0, z), padding=0_0x2_2\n"
      "  c = f32[8,32] concatenate(p0, p0), dimensions={1}\n"
      "  i = s32[] constant(0)\n"
      "  ds = f32[8,4] dynamic-slice(p0, i, i), dynamic_slice_sizes={8,4}\n"
      "  ROOT t = (f32[8,8], f32[8,20], f32[8,32], f32[8,4]) tuple(s, pd, c, ds)\n}\n",
      TRUE, FALSE);
  expect_sharding (m, "s", "{devices=[2,2]0,1,2,3}");
  expect_sharding (m, "pd", "{devices=[2,2]0,1,2,3}");
  expect_sharding (m, "c", "{devices=[2,2]0,1,2,3}");
  /* The sliced dim cannot stay split: it becomes replication. */
  expect_sharding (m, "ds", "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}");
}
END_TEST

START_TEST (test_gather_passthrough_and_index)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[3,9] parameter(0), sharding={devices=[1,2]0,1}\n"
      "  idx = s32[5] parameter(1), sharding={devices=[2]0,1}\n"
      "  g = f32[5,9] gather(p0, idx), offset_dims={1}, collapsed_slice_dims={0},"
      "    start_index_map={0}, index_vector_dim=1, slice_sizes={1,9}\n"
      "  ROOT c = f32[5,9] copy(g)\n}\n", TRUE, FALSE);
  /* Index dim 0 passes to output dim 0; operand dim 1 (a full-size offset
   * dim) passes to output dim 1. They cannot both use devices 0,1: the
   * index-derived sharding comes first. */
  expect_sharding (m, "g", "{devices=[2,1]0,1}");
}
END_TEST

START_TEST (test_while_body_shares_sharding)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\n"
      "cond { p = (f32[8], s32[]) parameter(0)  i = s32[] get-tuple-element(p), index=1\n"
      "  n = s32[] constant(4)  ROOT lt = pred[] compare(i, n), direction=LT }\n"
      "body { p = (f32[8], s32[]) parameter(0)  x = f32[8] get-tuple-element(p), index=0\n"
      "  i = s32[] get-tuple-element(p), index=1  one = s32[] constant(1)\n"
      "  i1 = s32[] add(i, one)  y = f32[8] negate(x)\n"
      "  ROOT t = (f32[8], s32[]) tuple(y, i1) }\n"
      "ENTRY e {\n"
      "  a = f32[8] parameter(0), sharding={devices=[4]0,1,2,3}\n"
      "  z = s32[] constant(0)\n"
      "  t = (f32[8], s32[]) tuple(a, z)\n"
      "  w = (f32[8], s32[]) while(t), condition=cond, body=body\n"
      "  ROOT r = f32[8] get-tuple-element(w), index=0\n}\n", TRUE, TRUE);
  PsComputation *body = ps_module_find_computation (m, "body");
  ck_assert (body != NULL);
  const PsInstr *y = ps_computation_find_instr (body, "y");
  g_autoptr (PsSharding) w = ps_sharding_from_string ("{devices=[4]0,1,2,3}", "t", NULL);
  ck_assert (y && y->sharding && ps_sharding_equal_layout (y->sharding, w));
  expect_sharding (m, "r", "{devices=[4]0,1,2,3}");
}
END_TEST

START_TEST (test_manual_regions)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[8,4] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
      "  c0 = f32[8,4] custom-call(p0), custom_call_target=\"Sharding\", sharding={devices=[4,1]0,1,2,3}\n"
      "  m0 = f32[2,4] custom-call(c0), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n"
      "  n = f32[2,4] negate(m0)\n"
      "  m1 = f32[2,4] copy(n)\n"
      "  c1 = f32[8,4] custom-call(m1), custom_call_target=\"SPMDShardToFullShape\","
      "    sharding={devices=[4,1]0,1,2,3}\n"
      "  ROOT o = f32[8,4] copy(c1)\n}\n", TRUE, FALSE);
  /* Inside the manual region everything is manual. */
  expect_sharding (m, "n", "{manual}");
  expect_sharding (m, "m1", "{manual}");
  /* The Sharding custom-call became a copy that keeps its name. */
  const PsInstr *c0 = ps_module_find_instr (m, "c0");
  ck_assert (c0 && c0->opcode == PS_OP_COPY);
}
END_TEST

START_TEST (test_unspecified_dims)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[6,3] parameter(0)\n"
      "  c = f32[6,3] copy(p0), sharding={devices=[1,2,2]0,1,2,3 last_tile_dim_replicate}\n"
      "  a = f32[6,3] custom-call(c), custom_call_target=\"Sharding\","
      "    backend_config=\"unspecified_dims=[1]\","
      "    sharding={devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}\n"
      "  c2 = f32[6,3] copy(a)\n"
      "  ROOT c3 = f32[6,3] copy(c2)\n}\n", TRUE, FALSE);
  /* Dim 1 was left open: it takes the operand's split of dim 1. */
  expect_sharding (m, "c2", "{devices=[2,2]0,2,1,3}");
}
END_TEST

START_TEST (test_shard_as_group)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[8,8] parameter(0), sharding={devices=[4,1]0,1,2,3}\n"
      "  p1 = f32[8,8] parameter(1), sharding={devices=[1,4]0,1,2,3}\n"
      "  a = f32[8,8] add(p0, p0)\n"
      "  s0 = f32[8,8] custom-call(a), custom_call_target=\"Sharding\", sharding={unknown shard_as 0}\n"
      "  b = f32[8,8] add(p1, p1)\n"
      "  s1 = f32[8,8] custom-call(b), custom_call_target=\"Sharding\", sharding={unknown shard_as 0}\n"
      "  ROOT t = (f32[8,8], f32[8,8]) tuple(s0, s1)\n}\n", TRUE, TRUE);
  const PsInstr *a = ps_module_find_instr (m, "a");
  const PsInstr *b = ps_module_find_instr (m, "b");
  ck_assert (a->sharding && b->sharding);
  ck_assert (ps_sharding_equal_layout (a->sharding, b->sharding));
}
END_TEST

START_TEST (test_barrier_stops_forward_flow)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[8,8] parameter(0), sharding={devices=[2,2]0,1,2,3}\n"
      "  b = f32[8,8] custom-call(p0), custom_call_target=\"ShardBarrierFrom\","
      "    custom_call_has_side_effect=true\n"
      "  n = f32[8,8] negate(b)\n"
      "  ROOT c = f32[8,8] copy(n)\n}\n", TRUE, FALSE);
  expect_sharding (m, "n", NULL);
  /* The barrier is gone afterwards. */
  ck_assert (ps_module_find_instr (m, "b") == NULL);
}
END_TEST

START_TEST (test_partial_replication_merge)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[8,8] parameter(0), sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}\n"
      "  p1 = f32[8,8] parameter(1), sharding={devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}\n"
      "  a = f32[8,8] add(p0, p1)\n"
      "  ROOT c = f32[8,8] copy(a)\n}\n", TRUE, FALSE);
  expect_sharding (m, "a", "{devices=[2,2]0,1,2,3}");
}
END_TEST

START_TEST (test_while_device_conflict_is_an_error)
{
  g_autoptr (PsModule) m = parse (
      "HloModule m\n"
      "cond { p = (f32[], token[]) parameter(0)  ROOT t = pred[] constant(true) }\n"
      "body { p = (f32[], token[]) parameter(0)  tok = token[] get-tuple-element(p), index=1\n"
      "  r = (f32[], u32[], token[]) recv(tok), channel_id=1, sharding={{maximal device=1}, {maximal device=1}, {maximal device=1}}\n"
      "  rd = (f32[], token[]) recv-done(r), channel_id=1, sharding={{maximal device=1}, {maximal device=1}}\n"
      "  ROOT o = (f32[], token[]) copy(rd) }\n"
      "ENTRY e {\n"
      "  a = f32[] parameter(0)  tk = token[] after-all()\n"
      "  t = (f32[], token[]) tuple(a, tk)\n"
      "  ROOT w = (f32[], token[]) while(t), condition=cond, body=body, sharding={{maximal device=0}, {maximal device=0}}\n"
      "}\n");
  GError *error = NULL;
  ck_assert (!ps_propagate (m, NULL, &error));
  ck_assert (error != NULL);
  ck_assert_msg (strstr (error->message, "conflicts with device: 1") != NULL, "%s", error->message);
  g_error_free (error);
}
END_TEST

START_TEST (test_index_parallel_gather)
{
  /* Indices built from an iota along dim 1: gather dim 0 of the operand is
   * index-parallel with the indices' dim 1, so the operand's split on dim 0
   * carries to the output's batch dim 0. */
  g_autoptr (PsModule) m = propagate (
      "HloModule m\nENTRY e {\n"
      "  a0 = s32[8,4,2,2] parameter(0), sharding={devices=[8,1,1,1]0,1,4,5,2,3,6,7}\n"
      "  a1 = s32[1,8,4] parameter(1)\n"
      "  op = s32[8,4,2,2] copy(a0)\n"
      "  idx = s32[1,8,4] copy(a1)\n"
      "  iota = s32[1,8,4] iota(), iota_dimension=1\n"
      "  cat = s32[2,8,4] concatenate(iota, idx), dimensions={0}\n"
      "  g = s32[8,4,2,2] gather(op, cat), offset_dims={2,3}, collapsed_slice_dims={0,1},"
      "    start_index_map={0,1}, index_vector_dim=0, slice_sizes={1,1,2,2}\n"
      "  ROOT c = s32[8,4,2,2] copy(g)\n}\n", TRUE, FALSE);
  expect_sharding (m, "g", "{devices=[8,1,1,1]0,1,4,5,2,3,6,7}");
}
END_TEST

START_TEST (test_to_parameters_and_output)
{
  g_autoptr (PsModule) m = parse (
      "HloModule m\nENTRY e {\n"
      "  p0 = f32[8,6] parameter(0)\n"
      "  p1 = f32[8,6] parameter(1)\n"
      "  a = f32[8,6] add(p0, p1), sharding={devices=[4,1]0,1,2,3}\n"
      "  b = f32[8,6] add(p0, p1), sharding={devices=[1,4]0,1,2,3}\n"
      "  ROOT t = (f32[8,6], f32[8,6]) tuple(a, b)\n}\n");
  PsPropagateOptions o;
  ps_propagate_options_init (&o);
  static const gboolean out[2] = { TRUE, TRUE }, par[2] = { TRUE, FALSE };
  o.n_to_output = 2;
  o.to_output = out;
  o.n_to_parameters = 2;
  o.to_parameters = par;
  GError *error = NULL;
  ck_assert (ps_propagate (m, &o, &error));
  /* p0 may be sharded; p1 may not and had nothing, so it stays bare. */
  expect_sharding (m, "p0", "{devices=[4,1]0,1,2,3}");
  expect_sharding (m, "p1", NULL);
  /* 6 does not split 4 ways: that output element becomes replicated. */
  expect_sharding (m, "t", "{{devices=[4,1]0,1,2,3}, {replicated}}");
}
END_TEST

START_TEST (test_conditional_branches)
{
  g_autoptr (PsModule) m = propagate (
      "HloModule m\n"
      "tb { tp = (f32[4,6]) parameter(0)  g = f32[4,6] get-tuple-element(tp), index=0\n"
      "  n = f32[4,6] negate(g)  ROOT r = (f32[4,6]) tuple(n) }\n"
      "fb { fp = (f32[4,6]) parameter(0)  g2 = f32[4,6] get-tuple-element(fp), index=0\n"
      "  ROOT r2 = (f32[4,6]) tuple(g2) }\n"
      "ENTRY e {\n"
      "  c = pred[] parameter(0)\n"
      "  x = f32[4,6] parameter(1), sharding={devices=[2,1]0,1}\n"
      "  t = (f32[4,6]) tuple(x)\n"
      "  cond = (f32[4,6]) conditional(c, t, t), true_computation=tb, false_computation=fb\n"
      "  ROOT o = f32[4,6] get-tuple-element(cond), index=0\n}\n", TRUE, TRUE);
  /* Branch parameters take the operands' sharding; the branch roots and the
   * conditional share one. */
  expect_sharding (m, "n", "{devices=[2,1]0,1}");
  expect_sharding (m, "cond", "{{devices=[2,1]0,1}}");
  expect_sharding (m, "r2", "{{devices=[2,1]0,1}}");
  expect_sharding (m, "o", "{devices=[2,1]0,1}");
}
END_TEST

static Suite *
propagate_suite (void)
{
  Suite *s = suite_create ("propagate");
  ps_check_case (s, "transformer", 0, PS_CHECK_TESTS (test_transformer_layer));
  ps_check_case (s, "rules", 0,
                 PS_CHECK_TESTS (test_elementwise_forward_backward,
                                 test_annotations_never_overwritten,
                                 test_dot_merges_batch_and_model,
                                 test_dot_backward_to_operand,
                                 test_broadcast_and_reduce,
                                 test_reshape_and_transpose, test_batch_norm,
                                 test_slice_pad_concat_dynamic_slice,
                                 test_gather_passthrough_and_index,
                                 test_while_body_shares_sharding,
                                 test_manual_regions, test_unspecified_dims,
                                 test_shard_as_group,
                                 test_barrier_stops_forward_flow,
                                 test_partial_replication_merge,
                                 test_while_device_conflict_is_an_error,
                                 test_index_parallel_gather,
                                 test_to_parameters_and_output,
                                 test_conditional_branches));
  TCase *tcr = ps_check_case (s, "read back", 600, NULL);
  tcase_add_loop_test (tcr, test_propagated_reads_back, 0, 3);
  return s;
}

int
main (void)
{
  return ps_check_run (propagate_suite (), CK_FORK_GETENV);
}
