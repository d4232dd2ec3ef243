/* Check suite for the graph IR (partitioner/ir/ir.c, shape_infer.c): element
 * types, shapes, the instruction API (users, replace, remove), clone, post
 * order, shape inference for the main opcodes and module validation. */
#include "config.h"

#include <check.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"

static PsShape *
arr (PsElemType t, int rank, ...)
{
  int64_t dims[16];
  va_list ap;
  va_start (ap, rank);
  for (int i = 0; i < rank; i++)
    dims[i] = va_arg (ap, int);
  va_end (ap);
  return ps_shape_new_array (t, rank, dims);
}

static void
shape_is (const PsShape *s, const char *want)
{
  ck_assert_ptr_nonnull (s);
  g_autofree char *got = ps_shape_to_string (s, TRUE);
  ck_assert_str_eq (got, want);
}

START_TEST (test_etypes)
{
  PsElemType t;
  ck_assert (ps_etype_from_name ("bf16", 4, &t) && t == PS_BF16);
  ck_assert (!ps_etype_from_name ("tuple", 5, &t));
  ck_assert (!ps_etype_from_name ("f3", 2, &t));
  ck_assert_int_eq (ps_etype_size_bytes (PS_PRED), 1);
  ck_assert_int_eq (ps_etype_size_bytes (PS_BF16), 2);
  ck_assert_int_eq (ps_etype_size_bytes (PS_C64), 8);
  ck_assert_int_eq (ps_etype_size_bytes (PS_TOKEN), 0);
  for (int i = 0; i < PS_TUPLE; i++)
    {
      const char *n = ps_etype_name ((PsElemType) i);
      ck_assert (ps_etype_from_name (n, strlen (n), &t) && t == (PsElemType) i);
    }
  ck_assert (ps_etype_is_float (PS_BF16) && !ps_etype_is_float (PS_S32));
  ck_assert (ps_etype_is_integral (PS_U8) && !ps_etype_is_integral (PS_PRED));
  ck_assert (ps_etype_is_signed (PS_S16) && !ps_etype_is_signed (PS_U16));
  ck_assert (ps_etype_is_complex (PS_C64));
}
END_TEST

START_TEST (test_opcodes)
{
  PsOpcode op;
  for (int i = 0; i < PS_OP_COUNT; i++)
    {
      const char *n = ps_opcode_name ((PsOpcode) i);
      ck_assert (ps_opcode_from_name (n, strlen (n), &op) && op == (PsOpcode) i);
    }
  ck_assert (ps_opcode_from_name ("get-tuple-element", 17, &op) && op == PS_OP_GET_TUPLE_ELEMENT);
  ck_assert (!ps_opcode_from_name ("addd", 4, &op));
  ck_assert (ps_opcode_is_elementwise (PS_OP_ADD) && ps_opcode_is_elementwise (PS_OP_SELECT));
  ck_assert (!ps_opcode_is_elementwise (PS_OP_DOT) && !ps_opcode_is_elementwise (PS_OP_BROADCAST));
  ck_assert (ps_opcode_is_collective (PS_OP_ALL_REDUCE) && !ps_opcode_is_collective (PS_OP_ADD));
}
END_TEST

START_TEST (test_shapes)
{
  g_autoptr (PsShape) a = arr (PS_F32, 2, 8, 16);
  shape_is (a, "f32[8,16]");
  ck_assert_int_eq (ps_shape_elements (a), 128);
  ck_assert_int_eq (ps_shape_bytes (a), 512);
  g_autoptr (PsShape) s = ps_shape_new_scalar (PS_S32);
  shape_is (s, "s32[]");
  ck_assert_int_eq (ps_shape_elements (s), 1);
  PsShape *inner_elems[2] = { a, s };
  g_autoptr (PsShape) inner = ps_shape_new_tuple (2, inner_elems);
  g_autoptr (PsShape) tok = ps_shape_new_scalar (PS_TOKEN);
  PsShape *outer_elems[2] = { inner, tok };
  g_autoptr (PsShape) t = ps_shape_new_tuple (2, outer_elems);
  shape_is (t, "((f32[8,16], s32[]), token[])");
  ck_assert (ps_shape_is_tuple (t) && !ps_shape_is_array (t));
  ck_assert_int_eq (ps_shape_leaf_count (t), 3);
  ck_assert_int_eq (ps_shape_bytes (t), 516);
  GPtrArray *leaves = ps_shape_leaves (t);
  ck_assert_int_eq (leaves->len, 3);
  ck_assert_ptr_eq (g_ptr_array_index (leaves, 1), t->elems[0]->elems[1]);
  g_ptr_array_free (leaves, TRUE);

  /* Layouts print but do not take part in equality. */
  g_autoptr (PsShape) l = ps_shape_copy (a);
  l->layout_n = 2;
  l->layout = g_new (int64_t, 2);
  l->layout[0] = 0, l->layout[1] = 1;
  shape_is (l, "f32[8,16]{0,1}");
  g_autofree char *nolayout = ps_shape_to_string (l, FALSE);
  ck_assert_str_eq (nolayout, "f32[8,16]");
  ck_assert (ps_shape_equal (a, l));
  g_autoptr (PsShape) b = arr (PS_F32, 2, 8, 17);
  ck_assert (!ps_shape_equal (a, b));
  g_autoptr (PsShape) c = arr (PS_BF16, 2, 8, 16);
  ck_assert (!ps_shape_equal (a, c));
  g_autoptr (PsShape) t2 = ps_shape_copy (t);
  ck_assert (ps_shape_equal (t, t2));
  ck_assert (!ps_shape_equal (t, inner));
}
END_TEST

/* p0, p1 -> add -> negate -> root multiply(add, negate) */
static PsModule *
small_module (PsInstr **out_add, PsInstr **out_neg)
{
  PsModule *m = ps_module_new ("small");
  PsComputation *c = ps_computation_new (m, "main");
  c->is_entry = TRUE;
  m->entry = c;
  PsInstr *p0 = ps_computation_add_instr (c, PS_OP_PARAMETER, "p0", arr (PS_F32, 1, 8), 0, NULL);
  PsInstr *p1 = ps_computation_add_instr (c, PS_OP_PARAMETER, "p1", arr (PS_F32, 1, 8), 0, NULL);
  p1->parameter_number = 1;
  g_ptr_array_add (c->params, p0);
  g_ptr_array_add (c->params, p1);
  PsInstr *ops[2] = { p0, p1 };
  PsInstr *add = ps_computation_add_instr (c, PS_OP_ADD, NULL, arr (PS_F32, 1, 8), 2, ops);
  PsInstr *neg = ps_computation_add_instr (c, PS_OP_NEGATE, NULL, arr (PS_F32, 1, 8), 1, &add);
  PsInstr *ops2[2] = { add, neg };
  c->root = ps_computation_add_instr (c, PS_OP_MULTIPLY, "root", arr (PS_F32, 1, 8), 2, ops2);
  if (out_add)
    *out_add = add;
  if (out_neg)
    *out_neg = neg;
  return m;
}

START_TEST (test_instr_api)
{
  PsInstr *add, *neg;
  g_autoptr (PsModule) m = small_module (&add, &neg);
  PsComputation *c = m->entry;
  /* Fresh names come from the opcode and are unique. */
  ck_assert (g_str_has_prefix (add->name, "add."));
  ck_assert (g_str_has_prefix (neg->name, "negate."));
  ck_assert_ptr_eq (ps_module_find_instr (m, add->name), add);
  ck_assert_ptr_eq (ps_computation_find_instr (c, "root"), c->root);
  ck_assert_ptr_null (ps_module_find_instr (m, "nope"));
  ck_assert_ptr_eq (ps_module_find_computation (m, "main"), c);
  ck_assert_ptr_null (ps_module_find_computation (m, "other"));
  PsInstr *p0 = ps_computation_find_instr (c, "p0");
  /* A user is listed once even if it uses the operand twice. */
  PsInstr *twice[2] = { p0, p0 };
  PsInstr *sq = ps_computation_add_instr (c, PS_OP_MULTIPLY, "sq", arr (PS_F32, 1, 8), 2, twice);
  ck_assert_int_eq (p0->users->len, 2); /* add and sq */
  ck_assert_int_eq (add->users->len, 2); /* negate and root */
  ck_assert (add->id != neg->id);

  /* set_operand keeps users in sync. */
  ps_instr_set_operand (sq, 0, add);
  ck_assert_int_eq (p0->users->len, 2); /* still used by sq's slot 1 */
  ps_instr_set_operand (sq, 1, add);
  ck_assert_int_eq (p0->users->len, 1);
  ck_assert_int_eq (add->users->len, 3);

  /* replace_all_uses moves every user and the root. */
  ps_instr_replace_all_uses (add, neg);
  ck_assert_ptr_eq (c->root->operands[0], neg);
  ck_assert_ptr_eq (sq->operands[1], neg);
  /* neg used add itself: it keeps doing so rather than using itself. */
  ck_assert_ptr_eq (neg->operands[0], add);
  ck_assert_int_eq (add->users->len, 1);
  ck_assert_int_eq (neg->users->len, 2); /* root and sq */
  ps_instr_replace_all_uses (c->root, sq);
  ck_assert_ptr_eq (c->root, sq);

  /* Removing a dead instruction detaches it from its operands. */
  PsInstr *old_root = ps_computation_find_instr (c, "root");
  guint before = c->instrs->len;
  ps_computation_remove_instr (c, old_root);
  ck_assert_int_eq (c->instrs->len, before - 1);
  ck_assert_ptr_null (ps_module_find_instr (m, "root"));
  ck_assert_int_eq (neg->users->len, 1);

  /* Raw attributes keep their order and value. */
  ps_instr_add_raw_attr (sq, "frontend_attributes", "{a=\"1\"}");
  ck_assert_str_eq (ps_instr_get_raw_attr (sq, "frontend_attributes"), "{a=\"1\"}");
  ck_assert_ptr_null (ps_instr_get_raw_attr (sq, "other"));

  PsInts v = { 0 };
  int64_t xs[3] = { 4, 5, 6 };
  ps_ints_set (&v, 3, xs);
  ck_assert (ps_ints_contains (&v, 5) && !ps_ints_contains (&v, 7));
  ps_ints_clear (&v);
  ck_assert_int_eq (v.n, 0);
  ck_assert_ptr_null (v.v);
}
END_TEST

START_TEST (test_fresh_name_avoids_parsed_names)
{
  g_autoptr (PsModule) m = ps_module_new ("m");
  PsComputation *c = ps_computation_new (m, "c");
  /* A name that the id-based scheme would produce next is already taken. */
  PsInstr *a = ps_computation_add_instr (c, PS_OP_PARAMETER, "negate.1", arr (PS_F32, 0), 0, NULL);
  PsInstr *n = ps_computation_add_instr (c, PS_OP_NEGATE, NULL, arr (PS_F32, 0), 1, &a);
  ck_assert_str_ne (n->name, "negate.1");
  ck_assert_ptr_eq (ps_module_find_instr (m, n->name), n);
  ck_assert_ptr_eq (ps_module_find_instr (m, "negate.1"), a);
}
END_TEST

START_TEST (test_post_order)
{
  /* Program order deliberately lists a user before its operand. */
  g_autoptr (PsModule) m = ps_module_new ("m");
  PsComputation *c = ps_computation_new (m, "c");
  PsInstr *p = ps_computation_add_instr (c, PS_OP_PARAMETER, "p", arr (PS_F32, 1, 4), 0, NULL);
  PsInstr *late = ps_computation_add_instr (c, PS_OP_NEGATE, "late", arr (PS_F32, 1, 4), 1, &p);
  PsInstr *user = ps_computation_add_instr (c, PS_OP_ABS, "user", arr (PS_F32, 1, 4), 1, &p);
  /* Rewire: user now consumes `late2`, created after it. */
  PsInstr *late2 = ps_computation_add_instr (c, PS_OP_EXP, "late2", arr (PS_F32, 1, 4), 1, &late);
  ps_instr_set_operand (user, 0, late2);
  c->root = user;
  GPtrArray *po = ps_computation_post_order (c);
  ck_assert_int_eq (po->len, 4);
  const char *want[] = { "p", "late", "late2", "user" };
  for (guint i = 0; i < po->len; i++)
    ck_assert_str_eq (((PsInstr *) g_ptr_array_index (po, i))->name, want[i]);
  g_ptr_array_free (po, TRUE);

  /* A long chain does not recurse on the C stack. */
  PsInstr *x = p;
  for (int i = 0; i < 50000; i++)
    x = ps_computation_add_instr (c, PS_OP_NEGATE, NULL, arr (PS_F32, 1, 4), 1, &x);
  po = ps_computation_post_order (c);
  ck_assert_int_eq (po->len, c->instrs->len);
  GHashTable *pos = g_hash_table_new (g_direct_hash, g_direct_equal);
  for (guint i = 0; i < po->len; i++)
    g_hash_table_insert (pos, g_ptr_array_index (po, i), GUINT_TO_POINTER (i + 1));
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *in = g_ptr_array_index (c->instrs, i);
      for (int j = 0; j < in->n_operands; j++)
        ck_assert_uint_lt (GPOINTER_TO_UINT (g_hash_table_lookup (pos, in->operands[j])),
                           GPOINTER_TO_UINT (g_hash_table_lookup (pos, in)));
    }
  g_hash_table_destroy (pos);
  g_ptr_array_free (po, TRUE);
}
END_TEST

START_TEST (test_clone)
{
  static const char text[] =
    "HloModule m, num_partitions=4\n"
    "add { a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b) }\n"
    "ENTRY e {\n"
    "  p = f32[8,4]{1,0} parameter(0), sharding={devices=[2,2]0,1,2,3}, metadata={op_name=\"x\"}\n"
    "  z = f32[] constant(0)\n"
    "  r = f32[8] reduce(p, z), dimensions={1}, to_apply=add, frontend_attributes={k=\"v\"}\n"
    "  c = s32[3] constant({1, 2, 3})\n"
    "  ROOT t = tuple(r, c)\n"
    "}\n";
  GError *error = NULL;
  g_autoptr (PsModule) m = ps_hlo_parse (text, strlen (text), "clone.hlo", &error);
  ck_assert_msg (m != NULL, "%s", error ? error->message : "");
  g_autoptr (PsModule) c = ps_module_clone (m);
  g_autofree char *a = ps_hlo_print (m, NULL);
  g_autofree char *b = ps_hlo_print (c, NULL);
  ck_assert_str_eq (a, b);
  /* Deep: nothing is shared, and called computations point into the clone. */
  PsInstr *r = ps_module_find_instr (c, "r");
  PsInstr *r0 = ps_module_find_instr (m, "r");
  ck_assert_ptr_ne (r, r0);
  ck_assert_ptr_eq (r->called[0], ps_module_find_computation (c, "add"));
  ck_assert_ptr_eq (r->operands[0], ps_module_find_instr (c, "p"));
  ck_assert_ptr_eq (r->parent, c->entry);
  PsInstr *p = ps_module_find_instr (c, "p");
  ck_assert_ptr_nonnull (p->sharding);
  ck_assert_ptr_ne (p->sharding, ps_module_find_instr (m, "p")->sharding);
  ck_assert (ps_sharding_equal (p->sharding, ps_module_find_instr (m, "p")->sharding));
  ck_assert_str_eq (p->metadata, "op_name=\"x\"");
  ck_assert_ptr_eq (c->entry->root, ps_module_find_instr (c, "t"));
  ck_assert_int_eq (p->users->len, 1);
  ck_assert (ps_module_validate (c, "clone", &error));
  /* Editing the clone leaves the original alone. */
  ps_instr_set_sharding (ps_module_find_instr (c, "p"), NULL);
  ck_assert_ptr_nonnull (ps_module_find_instr (m, "p")->sharding);
  ck_assert_int_eq (c->next_id, m->next_id);
}
END_TEST

/* Builds `op` over operands of the given shapes with a prototype
 * instruction and infers its shape. */
typedef struct {
  PsModule *m;
  PsComputation *c;
} Fixture;

static Fixture fx;

static void
setup (void)
{
  fx.m = ps_module_new ("infer");
  fx.c = ps_computation_new (fx.m, "c");
}

static void
teardown (void)
{
  ps_module_free (fx.m);
}

static PsInstr *
param (PsShape *s)
{
  return ps_computation_add_instr (fx.c, PS_OP_PARAMETER, NULL, s, 0, NULL);
}

static PsInstr *
proto (PsOpcode op, int n, ...)
{
  PsInstr *ops[8];
  va_list ap;
  va_start (ap, n);
  for (int i = 0; i < n; i++)
    ops[i] = va_arg (ap, PsInstr *);
  va_end (ap);
  return ps_computation_add_instr (fx.c, op, NULL, NULL, n, ops);
}

static void
infer_is (PsInstr *in, const char *want)
{
  GError *error = NULL;
  g_autoptr (PsShape) s = ps_infer_shape (in, &error);
  ck_assert_msg (s != NULL, "%s: %s", ps_opcode_name (in->opcode), error ? error->message : "");
  shape_is (s, want);
}

static void
infer_fails (PsInstr *in, PsErrorCode code, const char *substr)
{
  GError *error = NULL;
  PsShape *s = ps_infer_shape (in, &error);
  ck_assert_msg (s == NULL, "%s inferred a shape", ps_opcode_name (in->opcode));
  ck_assert_int_eq (error->code, code);
  ck_assert_msg (strstr (error->message, substr), "'%s' lacks '%s'", error->message, substr);
  g_error_free (error);
}

static void
ints (PsInts *dst, int n, ...)
{
  int64_t v[16];
  va_list ap;
  va_start (ap, n);
  for (int i = 0; i < n; i++)
    v[i] = va_arg (ap, int);
  va_end (ap);
  ps_ints_set (dst, n, v);
}

START_TEST (test_infer_elementwise)
{
  PsInstr *a = param (arr (PS_F32, 2, 8, 16));
  PsInstr *b = param (arr (PS_F32, 2, 8, 16));
  PsInstr *c = param (arr (PS_F32, 2, 8, 4));
  PsInstr *pr = param (arr (PS_PRED, 2, 8, 16));
  infer_is (proto (PS_OP_ADD, 2, a, b), "f32[8,16]");
  infer_is (proto (PS_OP_EXP, 1, a), "f32[8,16]");
  infer_is (proto (PS_OP_COMPARE, 2, a, b), "pred[8,16]");
  infer_is (proto (PS_OP_SELECT, 3, pr, a, b), "f32[8,16]");
  infer_fails (proto (PS_OP_ADD, 2, a, c), PS_ERROR_INVALID, "different shapes");
  infer_fails (proto (PS_OP_ADD, 3, a, b, b), PS_ERROR_INVALID, "takes 2 operands, got 3");
  infer_fails (proto (PS_OP_SELECT, 3, a, a, b), PS_ERROR_INVALID, "pred");
  /* convert needs the written element type. */
  infer_fails (proto (PS_OP_CONVERT, 1, a), PS_ERROR_UNSUPPORTED, "write it");
}
END_TEST

START_TEST (test_infer_dot)
{
  PsInstr *x = param (arr (PS_BF16, 3, 8, 16, 32));  /* bsm */
  PsInstr *w = param (arr (PS_BF16, 3, 32, 4, 8));   /* mnd */
  PsInstr *d = proto (PS_OP_DOT, 2, x, w);
  ints (&d->dot.lhs_contracting, 1, 2);
  ints (&d->dot.rhs_contracting, 1, 0);
  infer_is (d, "bf16[8,16,4,8]");
  /* Batch dims first, then lhs free, then rhs free. */
  PsInstr *q = param (arr (PS_BF16, 4, 8, 16, 4, 8)); /* bsnd */
  PsInstr *k = param (arr (PS_BF16, 4, 8, 12, 4, 8)); /* btnd */
  PsInstr *l = proto (PS_OP_DOT, 2, q, k);
  ints (&l->dot.lhs_batch, 2, 0, 2);
  ints (&l->dot.rhs_batch, 2, 0, 2);
  ints (&l->dot.lhs_contracting, 1, 3);
  ints (&l->dot.rhs_contracting, 1, 3);
  infer_is (l, "bf16[8,4,16,12]");
  PsInstr *bad = proto (PS_OP_DOT, 2, x, x);
  ints (&bad->dot.lhs_contracting, 1, 2);
  ints (&bad->dot.rhs_contracting, 1, 1);
  infer_fails (bad, PS_ERROR_INVALID, "sizes 32 and 16");
  PsInstr *range = proto (PS_OP_DOT, 2, x, w);
  ints (&range->dot.lhs_contracting, 1, 3);
  ints (&range->dot.rhs_contracting, 1, 0);
  infer_fails (range, PS_ERROR_INVALID, "out of range");
}
END_TEST

START_TEST (test_infer_shape_ops)
{
  PsInstr *a = param (arr (PS_F32, 3, 2, 3, 4));
  PsInstr *t = proto (PS_OP_TRANSPOSE, 1, a);
  ints (&t->dimensions, 3, 2, 0, 1);
  infer_is (t, "f32[4,2,3]");
  PsInstr *tb = proto (PS_OP_TRANSPOSE, 1, a);
  ints (&tb->dimensions, 3, 0, 0, 1);
  infer_fails (tb, PS_ERROR_INVALID, "permutation");

  PsInstr *z = param (ps_shape_new_scalar (PS_F32));
  PsInstr *r = proto (PS_OP_REDUCE, 2, a, z);
  ints (&r->dimensions, 2, 0, 2);
  infer_is (r, "f32[3]");

  PsInstr *s = proto (PS_OP_SLICE, 1, a);
  ints (&s->slice_starts, 3, 0, 1, 0);
  ints (&s->slice_limits, 3, 2, 3, 4);
  ints (&s->slice_strides, 3, 1, 1, 3);
  infer_is (s, "f32[2,2,2]");

  PsInstr *cc = proto (PS_OP_CONCATENATE, 2, a, a);
  ints (&cc->dimensions, 1, 1);
  infer_is (cc, "f32[2,6,4]");

  PsInstr *p = proto (PS_OP_PAD, 2, a, z);
  p->n_pad = 3;
  p->padding = g_new0 (PsPadDim, 3);
  p->padding[0] = (PsPadDim) { 1, 1, 0 };
  p->padding[2] = (PsPadDim) { 0, 2, 1 };
  infer_is (p, "f32[4,3,9]");

  /* broadcast and reshape check against the written shape. */
  PsInstr *b = proto (PS_OP_BROADCAST, 1, a);
  ints (&b->dimensions, 3, 0, 1, 3);
  infer_fails (b, PS_ERROR_UNSUPPORTED, "write it");
  b->shape = arr (PS_F32, 4, 2, 3, 7, 4);
  infer_is (b, "f32[2,3,7,4]");
  ps_shape_free (b->shape);
  b->shape = arr (PS_F32, 4, 2, 3, 4, 7);
  infer_fails (b, PS_ERROR_INVALID, "maps to result dim 3");
  PsInstr *rs = proto (PS_OP_RESHAPE, 1, a);
  rs->shape = arr (PS_F32, 2, 6, 5);
  infer_fails (rs, PS_ERROR_INVALID, "element counts differ");

  PsInstr *tu = proto (PS_OP_TUPLE, 2, a, z);
  infer_is (tu, "(f32[2,3,4], f32[])");
  PsInstr *g = proto (PS_OP_GET_TUPLE_ELEMENT, 1, tu);
  tu->shape = ps_infer_shape (tu, NULL);
  g->tuple_index = 1;
  infer_is (g, "f32[]");
  g->tuple_index = 2;
  infer_fails (g, PS_ERROR_INVALID, "out of range");

  PsInstr *ds = proto (PS_OP_DYNAMIC_SLICE, 4, a, z, z, z);
  ints (&ds->dynamic_slice_sizes, 3, 1, 3, 2);
  infer_is (ds, "f32[1,3,2]");
  infer_is (proto (PS_OP_PARTITION_ID, 0), "u32[]");
}
END_TEST

START_TEST (test_infer_conv_and_window)
{
  PsInstr *x = param (arr (PS_F32, 4, 128, 224, 224, 3));
  PsInstr *k = param (arr (PS_F32, 4, 7, 7, 3, 64));
  PsInstr *c = proto (PS_OP_CONVOLUTION, 2, x, k);
  /* b01f_01io->b01f */
  c->conv.present = TRUE;
  c->conv.n_spatial = 2;
  c->conv.in_batch = 0, c->conv.in_feature = 3;
  c->conv.in_spatial = g_new (int64_t, 2);
  c->conv.in_spatial[0] = 1, c->conv.in_spatial[1] = 2;
  c->conv.k_in_feature = 2, c->conv.k_out_feature = 3;
  c->conv.k_spatial = g_new (int64_t, 2);
  c->conv.k_spatial[0] = 0, c->conv.k_spatial[1] = 1;
  c->conv.out_batch = 0, c->conv.out_feature = 3;
  c->conv.out_spatial = g_new (int64_t, 2);
  c->conv.out_spatial[0] = 1, c->conv.out_spatial[1] = 2;
  c->window.n = 2;
  c->window.dims = g_new0 (PsWindowDim, 2);
  for (int i = 0; i < 2; i++)
    c->window.dims[i] = (PsWindowDim) { .size = 7, .stride = 2, .pad_lo = 3, .pad_hi = 3,
                                         .base_dilation = 1, .window_dilation = 1 };
  infer_is (c, "f32[128,112,112,64]");

  PsInstr *a = param (arr (PS_F32, 2, 8, 8));
  PsInstr *z = param (ps_shape_new_scalar (PS_F32));
  PsInstr *rw = proto (PS_OP_REDUCE_WINDOW, 2, a, z);
  rw->window.n = 2;
  rw->window.dims = g_new0 (PsWindowDim, 2);
  for (int i = 0; i < 2; i++)
    rw->window.dims[i] = (PsWindowDim) { .size = 3, .stride = 2, .pad_lo = 1, .pad_hi = 0,
                                          .base_dilation = 1, .window_dilation = 1 };
  infer_is (rw, "f32[4,4]");
}
END_TEST

START_TEST (test_infer_gather)
{
  /* The classic embedding lookup: operand [V, M], indices [B, S]. */
  PsInstr *tbl = param (arr (PS_F32, 2, 100, 32));
  PsInstr *idx = param (arr (PS_S32, 2, 8, 16));
  PsInstr *g = proto (PS_OP_GATHER, 2, tbl, idx);
  ints (&g->gather.offset_dims, 1, 2);
  ints (&g->gather.collapsed_slice_dims, 1, 0);
  ints (&g->gather.start_index_map, 1, 0);
  ints (&g->gather.slice_sizes, 2, 1, 32);
  g->gather.index_vector_dim = 2;
  infer_is (g, "f32[8,16,32]");

  /* Scatter of rows into the table: the result is the table's shape. */
  PsInstr *upd = param (arr (PS_F32, 3, 8, 16, 32));
  PsInstr *sc = proto (PS_OP_SCATTER, 3, tbl, idx, upd);
  ints (&sc->scatter.update_window_dims, 1, 2);
  ints (&sc->scatter.inserted_window_dims, 1, 0);
  ints (&sc->scatter.scatter_dims_to_operand_dims, 1, 0);
  sc->scatter.index_vector_dim = 2;
  infer_is (sc, "f32[100,32]");
  ps_ints_clear (&sc->scatter.inserted_window_dims);
  infer_fails (sc, PS_ERROR_INVALID, "do not add up to the operand rank 2");
}
END_TEST

/* XLA's ShapeInference for the batch-norm ops: tuple results of the
 * operand's shape and two per-feature vectors; every per-feature operand
 * rank 1 of the feature dim's size, the same element type, a float operand. */
START_TEST (test_infer_batch_norm)
{
  PsInstr *x = param (arr (PS_F32, 4, 2, 5, 6, 3));
  PsInstr *s3 = param (arr (PS_F32, 1, 3)), *o3 = param (arr (PS_F32, 1, 3));
  PsInstr *tr = proto (PS_OP_BATCH_NORM_TRAINING, 3, x, s3, o3);
  tr->feature_index = 3;
  infer_is (tr, "(f32[2,5,6,3], f32[3], f32[3])");
  tr->feature_index = 4;
  infer_fails (tr, PS_ERROR_INVALID, "feature_index 4 is out of range");
  tr->feature_index = 1;
  infer_fails (tr, PS_ERROR_INVALID, "the 5 features of dim 1");

  PsInstr *inf = proto (PS_OP_BATCH_NORM_INFERENCE, 5, x, s3, o3, s3, o3);
  inf->feature_index = 3;
  infer_is (inf, "f32[2,5,6,3]");
  PsInstr *h3 = param (arr (PS_BF16, 1, 3));
  PsInstr *bad = proto (PS_OP_BATCH_NORM_INFERENCE, 5, x, s3, o3, h3, o3);
  bad->feature_index = 3;
  infer_fails (bad, PS_ERROR_INVALID, "operand 3 is bf16");

  PsInstr *dy = param (arr (PS_F32, 4, 2, 5, 6, 3));
  PsInstr *gr = proto (PS_OP_BATCH_NORM_GRAD, 5, x, s3, s3, o3, dy);
  gr->feature_index = 3;
  infer_is (gr, "(f32[2,5,6,3], f32[3], f32[3])");
  PsInstr *gr2 = proto (PS_OP_BATCH_NORM_GRAD, 5, x, s3, s3, o3, s3);
  gr2->feature_index = 3;
  infer_fails (gr2, PS_ERROR_INVALID, "grad_output f32[3] does not have the operand's shape");
  PsInstr *too_few = proto (PS_OP_BATCH_NORM_GRAD, 3, x, s3, o3);
  infer_fails (too_few, PS_ERROR_INVALID, "takes 5 operands");
  PsInstr *ix = param (arr (PS_S32, 2, 4, 3));
  PsInstr *itr = proto (PS_OP_BATCH_NORM_TRAINING, 3, ix, s3, o3);
  itr->feature_index = 1;
  infer_fails (itr, PS_ERROR_INVALID, "floating-point operand");
}
END_TEST

START_TEST (test_validate)
{
  g_autoptr (PsModule) m = small_module (NULL, NULL);
  GError *error = NULL;
  ck_assert (ps_module_validate (m, "small", &error));
  /* A built instruction whose shape disagrees is named in the error. */
  PsInstr *root = m->entry->root;
  ps_shape_free (root->shape);
  root->shape = arr (PS_F32, 1, 9);
  ck_assert (!ps_module_validate (m, "small", &error));
  ck_assert_int_eq (error->code, PS_ERROR_INVALID);
  ck_assert_msg (strstr (error->message, "small: computation 'main', instruction 'root'"), "%s", error->message);
  g_clear_error (&error);
  ps_shape_free (root->shape);
  root->shape = arr (PS_F32, 1, 8);
  /* A sharding whose rank does not fit. */
  int64_t dims[2] = { 2, 2 }, devs[4] = { 0, 1, 2, 3 };
  g_autoptr (PsSharding) s = ps_sharding_tiled (2, dims, devs);
  ps_instr_set_sharding (root, s);
  ck_assert (!ps_module_validate (m, "small", &error));
  ck_assert_msg (strstr (error->message, "tiles 2 dims"), "%s", error->message);
  g_clear_error (&error);
}
END_TEST

static Suite *
ir_suite (void)
{
  Suite *s = suite_create ("ir");
  ps_check_case (s, "ir_structure_and_validation", 0,
                 PS_CHECK_TESTS (test_etypes, test_opcodes, test_shapes,
                                 test_instr_api,
                                 test_fresh_name_avoids_parsed_names,
                                 test_post_order, test_clone, test_validate));
  TCase *ti = ps_check_case (s, "infer", 0,
                             PS_CHECK_TESTS (test_infer_elementwise,
                                             test_infer_dot,
                                             test_infer_shape_ops,
                                             test_infer_conv_and_window,
                                             test_infer_gather,
                                             test_infer_batch_norm));
  tcase_add_checked_fixture (ti, setup, teardown);
  return s;
}

int
main (void)
{
  return ps_check_run (ir_suite (), CK_FORK_GETENV);
}
