/* Check suite for partitioner/builder: small programs (a Transformer FFN
 * written with einsum, attention scores, convolution, gather/scatter,
 * loops), their shapes, the HLO text they print (which must read back and
 * print the same), and the sticky errors. */
#include "config.h"

#include <check.h>
#include <math.h>
#include <string.h>

#include "tests/suite_main.h"
#include "partitioner/builder/builder.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/hlo/hlo_printer.h"
#include "partitioner/interp/interp.h"

#define D(...) ((int64_t[]) { __VA_ARGS__ })

static void
ck_dims (const PsInstr *x, PsElemType t, int rank, const int64_t *dims)
{
  ck_assert_msg (x != NULL, "instruction is NULL");
  g_autofree char *s = ps_shape_to_string (x->shape, FALSE);
  ck_assert_msg (x->shape->etype == t && x->shape->rank == rank, "%s: got %s", x->name, s);
  for (int i = 0; i < rank; i++)
    ck_assert_msg (x->shape->dims[i] == dims[i], "%s: got %s, dim %d", x->name, s, i);
}

/* Every shape the builder computed agrees with the reader's inference. */
static void
cross_check_shapes (const PsModule *m)
{
  int checked = 0;
  for (guint c = 0; c < m->computations->len; c++)
    {
      PsComputation *comp = g_ptr_array_index (m->computations, c);
      for (guint i = 0; i < comp->instrs->len; i++)
        {
          PsInstr *in = g_ptr_array_index (comp->instrs, i);
          GError *err = NULL;
          PsShape *inf = ps_infer_shape (in, &err);
          if (inf == NULL)
            {
              g_clear_error (&err);
              continue;
            }
          g_autofree char *a = ps_shape_to_string (in->shape, FALSE);
          g_autofree char *b = ps_shape_to_string (inf, FALSE);
          ck_assert_msg (ps_shape_equal (inf, in->shape), "%s: builder %s, inference %s",
                         in->name, a, b);
          ps_shape_free (inf);
          checked++;
        }
    }
  ck_assert_int_gt (checked, 0);
}

/* Prints, reads back, prints again: same bytes. Returns the text. */
static char *
round_trip (const PsModule *m)
{
  GError *error = NULL;
  ck_assert_msg (ps_module_validate (m, "built", &error), "%s", error ? error->message : "?");
  char *text = ps_hlo_print (m, NULL);
  g_autoptr (PsModule) back = ps_hlo_parse (text, strlen (text), "built.hlo", &error);
  ck_assert_msg (back != NULL, "%s\n%s", error ? error->message : "?", text);
  g_autofree char *again = ps_hlo_print (back, NULL);
  ck_assert_str_eq (text, again);
  return text;
}

static PsComputation *
finish_ok (PsBuilder *b, PsInstr *root)
{
  GError *error = NULL;
  PsComputation *c = ps_builder_finish_entry (b, root, &error);
  ck_assert_msg (c != NULL, "%s", error ? error->message : "?");
  return c;
}

START_TEST (test_ffn)
{
  const int64_t B = 8, S = 16, M = 32, H = 64;
  g_autoptr (PsModule) m = ps_module_new ("ffn");
  PsBuilder *b = ps_builder_new (m, "main");
  ps_builder_set_mesh (b, 2, D (2, 4), NULL);
  PsInstr *x = ps_build_parameter (b, "x", PS_BF16, 3, D (B, S, M));
  PsInstr *w1 = ps_build_parameter (b, "w1", PS_BF16, 2, D (M, H));
  PsInstr *w2 = ps_build_parameter (b, "w2", PS_BF16, 2, D (H, M));
  /* The paper's 2D sharding: batch and M over mesh axis 0, H over axis 1. */
  ck_assert_ptr_eq (ps_builder_mesh_split (b, x, D (0, -1, 1)), x);
  ps_builder_mesh_split (b, w1, D (0, 1));
  ps_builder_mesh_split (b, w2, D (1, 0));
  PsInstr *h = ps_build_einsum (b, "bsm,mh->bsh", x, w1);
  ck_dims (h, PS_BF16, 3, D (B, S, H));
  ck_assert_int_eq (h->opcode, PS_OP_DOT);
  ck_assert_int_eq (h->dot.lhs_contracting.n, 1);
  ck_assert_int_eq (h->dot.lhs_contracting.v[0], 2);
  ck_assert_int_eq (h->dot.rhs_contracting.v[0], 0);
  ck_assert_int_eq (h->dot.lhs_batch.n, 0);
  h = ps_build_mesh_split (b, h, D (0, -1, 1));
  ck_assert_int_eq (h->opcode, PS_OP_CUSTOM_CALL);
  ck_assert_str_eq (h->custom_call_target, "Sharding");
  g_autoptr (PsSharding) batch_only
    = ps_sharding_from_string ("{devices=[2,1,1,4]<=[8] last_tile_dim_replicate}", NULL, NULL);
  h = ps_build_sharding_annotation_open (b, h, batch_only, 2, D (2, 1));
  ck_assert_str_eq (h->backend_config, "unspecified_dims=[1,2]");
  PsInstr *relu = ps_build_max (b, h, ps_build_scalar (b, PS_BF16, 0.0));
  ck_dims (relu, PS_BF16, 3, D (B, S, H));
  PsInstr *y = ps_build_einsum (b, "bsh,hm->bsm", relu, w2);
  ck_dims (y, PS_BF16, 3, D (B, S, M));
  PsInstr *out = ps_build_add (b, y, x);
  PsInstr *loss = ps_build_reduce_sum (b, ps_build_convert (b, out, PS_F32), 3, D (0, 1, 2));
  ck_dims (loss, PS_F32, 0, NULL);
  PsComputation *c = finish_ok (b, loss);
  ck_assert_ptr_eq (m->entry, c);
  ck_assert_ptr_eq (c->root, loss);

  g_autofree char *xs = ps_sharding_to_string (x->sharding);
  ck_assert_str_eq (xs, "{devices=[2,1,4]<=[8]}");
  g_autofree char *w2s = ps_sharding_to_string (w2->sharding);
  ck_assert_str_eq (w2s, "{devices=[4,2]<=[2,4]T(1,0)}");

  /* The reducer was built after main started but prints before it. */
  ck_assert_ptr_eq (g_ptr_array_index (m->computations, m->computations->len - 1), c);
  ck_assert_ptr_nonnull (ps_module_find_computation (m, "add_f32"));
  cross_check_shapes (m);
  g_autofree char *text = round_trip (m);
  ck_assert_ptr_nonnull (strstr (text, "custom_call_target=\"Sharding\""));
  ck_assert_ptr_nonnull (strstr (text, "sharding={devices=[2,1,4]<=[8]}"));
  ck_assert_ptr_nonnull (strstr (text, "lhs_contracting_dims={2}"));
  ck_assert_ptr_nonnull (strstr (text, "backend_config=\"unspecified_dims=[1,2]\""));
}
END_TEST

START_TEST (test_einsum_forms)
{
  g_autoptr (PsModule) m = ps_module_new ("einsum");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *q = ps_build_parameter (b, "q", PS_F32, 4, D (2, 4, 8, 16));  /* bnsd */
  PsInstr *k = ps_build_parameter (b, "k", PS_F32, 4, D (2, 4, 6, 16));  /* bntd */
  /* Attention scores: batch b,n; contract d. No transpose needed. */
  PsInstr *s = ps_build_einsum (b, "bnsd,bntd->bnst", q, k);
  ck_dims (s, PS_F32, 4, D (2, 4, 8, 6));
  ck_assert_int_eq (s->opcode, PS_OP_DOT);
  ck_assert_int_eq (s->dot.lhs_batch.n, 2);
  /* Output order other than batch, lhs free, rhs free: dot + transpose. */
  PsInstr *st = ps_build_einsum (b, "bnsd,bntd->btns", q, k);
  ck_dims (st, PS_F32, 4, D (2, 6, 4, 8));
  ck_assert_int_eq (st->opcode, PS_OP_TRANSPOSE);
  ck_assert_int_eq (st->operands[0]->opcode, PS_OP_DOT);
  /* Batch dims follow the output order. */
  PsInstr *nb = ps_build_einsum (b, "bnsd,bntd->nbst", q, k);
  ck_dims (nb, PS_F32, 4, D (4, 2, 8, 6));
  ck_assert_int_eq (nb->opcode, PS_OP_DOT);
  /* A letter in one input only and not in the output is summed first. */
  PsInstr *w = ps_build_parameter (b, "w", PS_F32, 2, D (16, 3));
  PsInstr *r = ps_build_einsum (b, "bnsd,dh->h", q, w);
  ck_dims (r, PS_F32, 1, D (3));
  ck_assert_int_eq (r->operands[0]->opcode, PS_OP_REDUCE);
  /* One operand: transpose and sum. */
  PsInstr *t = ps_build_einsum (b, "bnsd->dsnb", q, NULL);
  ck_dims (t, PS_F32, 4, D (16, 8, 4, 2));
  PsInstr *u = ps_build_einsum (b, " b n s d -> b d ", q, NULL);
  ck_dims (u, PS_F32, 2, D (2, 16));
  ck_assert_int_eq (u->opcode, PS_OP_REDUCE);
  /* Outer product: nothing contracted. */
  PsInstr *v1 = ps_build_parameter (b, "v1", PS_F32, 1, D (5));
  PsInstr *v2 = ps_build_parameter (b, "v2", PS_F32, 1, D (7));
  PsInstr *o = ps_build_einsum (b, "i,j->ij", v1, v2);
  ck_dims (o, PS_F32, 2, D (5, 7));
  PsInstr *mm = ps_build_matmul (b, w, ps_build_parameter (b, "w3", PS_F32, 2, D (3, 9)));
  ck_dims (mm, PS_F32, 2, D (16, 9));
  PsInstr *all[] = { s, st, nb, r, t, u, o, mm };
  finish_ok (b, ps_build_tuple (b, 8, all));
  cross_check_shapes (m);
  g_autofree char *text = round_trip (m);
}
END_TEST

/* ---- einsum numerics ---------------------------------------------------------- */

/* Dims of operand letters from a size table indexed by letter. */
static int
letter_dims (const char *letters, const int64_t *size, int64_t *dims)
{
  int n = 0;
  for (; letters[n]; n++)
    dims[n] = size[(unsigned char) letters[n]];
  return n;
}

static int64_t
flat_index (const char *letters, const int64_t *size, const int64_t *val)
{
  int64_t f = 0;
  for (int i = 0; letters[i]; i++)
    f = f * size[(unsigned char) letters[i]] + val[(unsigned char) letters[i]];
  return f;
}

typedef struct {
  const char *spec;
  const char *lhs, *rhs, *out;   /* the same, split */
} EinsumCase;

static const EinsumCase einsum_cases[] = {
  { "bsm,mh->bsh", "bsm", "mh", "bsh" },
  { "bsm,mh->hbs", "bsm", "mh", "hbs" },
  { "bnsd,bntd->bnst", "bnsd", "bntd", "bnst" },
  { "bnsd,bntd->btns", "bnsd", "bntd", "btns" },
  { "bnsd,bntd->nbst", "bnsd", "bntd", "nbst" },
  { "bij,bjk->bik", "bij", "bjk", "bik" },
  { "ij,ij->i", "ij", "ij", "i" },
  { "ab,bc->c", "ab", "bc", "c" },
  { "i,j->ji", "i", "j", "ji" },
  { "abc->ca", "abc", NULL, "ca" },
};

/* The einsum evaluated by brute force over every letter assignment, against
 * the dot/transpose/reduce program the builder made, run by the reference
 * interpreter. */
START_TEST (test_einsum_numerics)
{
  const EinsumCase *e = &einsum_cases[_i];
  int64_t size[256] = { 0 };
  const char *all = "abcdhijkmnst";
  for (int i = 0; all[i]; i++)
    size[(unsigned char) all[i]] = 2 + i % 3;
  int64_t ld[8], rd[8], od[8];
  int lr = letter_dims (e->lhs, size, ld);
  int rr = e->rhs ? letter_dims (e->rhs, size, rd) : 0;
  int orank = letter_dims (e->out, size, od);

  g_autoptr (PsModule) m = ps_module_new ("einsum");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *x = ps_build_parameter (b, "x", PS_F64, lr, ld);
  PsInstr *y = e->rhs ? ps_build_parameter (b, "y", PS_F64, rr, rd) : NULL;
  PsInstr *r = ps_build_einsum (b, e->spec, x, y);
  finish_ok (b, r);
  ck_dims (r, PS_F64, orank, od);

  GRand *rng = g_rand_new_with_seed (5 + _i);
  int64_t nl = 1, nr = 1, no = 1;
  for (int i = 0; i < lr; i++)
    nl *= ld[i];
  for (int i = 0; i < rr; i++)
    nr *= rd[i];
  for (int i = 0; i < orank; i++)
    no *= od[i];
  double *xl = g_new (double, nl), *xr = g_new (double, MAX (nr, 1)), *want = g_new0 (double, no);
  for (int64_t i = 0; i < nl; i++)
    xl[i] = g_rand_int_range (rng, -4, 5);
  for (int64_t i = 0; i < nr; i++)
    xr[i] = g_rand_int_range (rng, -4, 5);
  /* Brute force: iterate every assignment of the letters in use. */
  char used[32] = "";
  int nu = 0;
  const char *parts[] = { e->lhs, e->rhs ? e->rhs : "", e->out };
  for (int k = 0; k < 3; k++)
    for (const char *c = parts[k]; *c; c++)
      if (!strchr (used, *c))
        used[nu++] = *c;
  int64_t val[256] = { 0 };
  for (;;)
    {
      double p = xl[flat_index (e->lhs, size, val)];
      if (e->rhs)
        p *= xr[flat_index (e->rhs, size, val)];
      want[flat_index (e->out, size, val)] += p;
      int k = nu - 1;
      for (; k >= 0; k--)
        {
          unsigned char c = (unsigned char) used[k];
          if (++val[c] < size[c])
            break;
          val[c] = 0;
        }
      if (k < 0)
        break;
    }
  PsValue *args[2] = { ps_value_new_from_doubles (PS_F64, lr, ld, xl),
                       e->rhs ? ps_value_new_from_doubles (PS_F64, rr, rd, xr) : NULL };
  GError *error = NULL;
  g_autoptr (PsValue) got = ps_interp_run (m, e->rhs ? 2 : 1, args, NULL, &error);
  ck_assert_msg (got != NULL, "%s: %s", e->spec, error ? error->message : "?");
  ck_assert_int_eq (got->n, no);
  /* Small integers: every sum is exact, whatever the order. */
  for (int64_t i = 0; i < no; i++)
    ck_assert_msg (ps_value_get (got, i) == want[i], "%s: element %" G_GINT64_FORMAT " is %g,"
                   " want %g", e->spec, i, ps_value_get (got, i), want[i]);
  ps_value_free (args[0]);
  ps_value_free (args[1]);
  g_free (xl);
  g_free (xr);
  g_free (want);
  g_rand_free (rng);
}
END_TEST

typedef struct {
  const char *spec;
  const char *message;
} EinsumBad;

static const EinsumBad einsum_bad[] = {
  { "ab,bc->ad", "output letter 'd' is in no input" },
  { "aa,ab->b", "letter 'a' repeats in lhs" },
  { "ab,bc->acc", "repeats in the output" },
  { "ab,cc->ac", "letter 'c' repeats in rhs" },
  { "abc,bc->ac", "lhs has 3 letters" },
  { "ab,bd->ad", NULL },                     /* fine: checks the table works */
  { "ab,bc", "has no '->'" },
  { "ab->ab", "names 1 operands but 2" },
  { "a1,1c->ac", "'1' is not a letter" },
};

START_TEST (test_einsum_errors)
{
  const EinsumBad *e = &einsum_bad[_i];
  g_autoptr (PsModule) m = ps_module_new ("bad");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *x = ps_build_parameter (b, "x", PS_F32, 2, D (3, 4));
  PsInstr *y = ps_build_parameter (b, "y", PS_F32, 2, D (4, 5));
  PsInstr *r = ps_build_einsum (b, e->spec, x, y);
  GError *error = NULL;
  PsComputation *c = ps_builder_finish_entry (b, r, &error);
  if (e->message == NULL)
    {
      ck_assert_msg (c != NULL, "%s", error ? error->message : "");
      return;
    }
  ck_assert (r == NULL && c == NULL);
  ck_assert (g_error_matches (error, PS_ERROR, PS_ERROR_INVALID));
  ck_assert_msg (strstr (error->message, e->message) != NULL, "'%s' -> '%s'", e->spec,
                 error->message);
  ck_assert (g_str_has_prefix (error->message, "builder 'main': einsum: "));
  g_error_free (error);
}
END_TEST

START_TEST (test_einsum_size_mismatch)
{
  g_autoptr (PsModule) m = ps_module_new ("bad");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *x = ps_build_parameter (b, "x", PS_F32, 2, D (3, 4));
  PsInstr *y = ps_build_parameter (b, "y", PS_F32, 2, D (5, 6));
  ck_assert_ptr_null (ps_build_einsum (b, "ab,bc->ac", x, y));
  ck_assert_ptr_nonnull (strstr (ps_builder_error (b)->message, "letter 'b' is 4 in lhs but 5"));
  ps_builder_free (b);
}
END_TEST

START_TEST (test_constants)
{
  g_autoptr (PsModule) m = ps_module_new ("consts");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *bf = ps_build_scalar (b, PS_BF16, 1.5);
  ck_assert_int_eq (((uint16_t *) bf->literal->data)[0], 0x3FC0);
  PsInstr *hf = ps_build_scalar (b, PS_F16, 1.0);
  ck_assert_int_eq (((uint16_t *) hf->literal->data)[0], 0x3C00);
  PsInstr *f = ps_build_constant (b, PS_F32, 2, D (2, 2), (double[]) { 1, 2.5, -3, 4 });
  ck_dims (f, PS_F32, 2, D (2, 2));
  ck_assert (((float *) f->literal->data)[1] == 2.5f);
  PsInstr *d = ps_build_scalar (b, PS_F64, 0.1);
  ck_assert (((double *) d->literal->data)[0] == 0.1);
  PsInstr *i8 = ps_build_constant_int (b, PS_S8, 1, D (3), D (-128, 0, 127));
  ck_assert_int_eq (((int8_t *) i8->literal->data)[0], -128);
  PsInstr *u64 = ps_build_scalar_int (b, PS_U64, G_MAXINT64);
  ck_assert (((uint64_t *) u64->literal->data)[0] == (uint64_t) G_MAXINT64);
  PsInstr *s32 = ps_build_scalar (b, PS_S32, -7);
  ck_assert_int_eq (((int32_t *) s32->literal->data)[0], -7);
  PsInstr *p = ps_build_constant_int (b, PS_PRED, 1, D (2), D (0, 5));
  ck_assert_int_eq (((uint8_t *) p->literal->data)[1], 1);
  PsInstr *c = ps_build_scalar (b, PS_C64, 2.0);
  ck_assert (((float *) c->literal->data)[0] == 2.0f && ((float *) c->literal->data)[1] == 0.0f);
  PsInstr *u16 = ps_build_scalar_int (b, PS_U16, 65535);
  PsInstr *s16 = ps_build_scalar_int (b, PS_S16, -3);
  PsInstr *u8 = ps_build_scalar_int (b, PS_U8, 200);
  PsInstr *u32 = ps_build_scalar_int (b, PS_U32, 7);
  PsInstr *s64 = ps_build_scalar_int (b, PS_S64, G_MININT64);
  PsInstr *full = ps_build_full (b, PS_BF16, 2, D (3, 4), -1.0);
  ck_dims (full, PS_BF16, 2, D (3, 4));
  ck_assert_int_eq (full->opcode, PS_OP_BROADCAST);
  PsInstr *io = ps_build_iota (b, PS_S32, 2, D (3, 4), 1);
  ck_assert_int_eq (io->iota_dimension, 1);
  PsInstr *all[] = { bf, hf, f, d, i8, u64, s32, p, c, u16, s16, u8, u32, s64, full, io };
  finish_ok (b, ps_build_tuple (b, G_N_ELEMENTS (all), all));
  g_autofree char *text = round_trip (m);
  ck_assert_ptr_nonnull (strstr (text, "2.5"));

  /* Out-of-range values are errors, not silent wraps. */
  const struct { PsElemType t; double v; } bad[] = {
    { PS_S8, 128 }, { PS_U8, -1 }, { PS_S32, 0.5 }, { PS_U16, 65536 }, { PS_S32, NAN },
  };
  for (guint i = 0; i < G_N_ELEMENTS (bad); i++)
    {
      g_autoptr (PsModule) m2 = ps_module_new ("bad");
      g_autoptr (PsBuilder) b2 = ps_builder_new (m2, "main");
      ck_assert_ptr_null (ps_build_scalar (b2, bad[i].t, bad[i].v));
      ck_assert_ptr_nonnull (strstr (ps_builder_error (b2)->message, "is not a"));
    }
  g_autoptr (PsModule) m3 = ps_module_new ("bad");
  g_autoptr (PsBuilder) b3 = ps_builder_new (m3, "main");
  ck_assert_ptr_null (ps_build_scalar_int (b3, PS_U32, -1));
}
END_TEST

START_TEST (test_shape_ops)
{
  g_autoptr (PsModule) m = ps_module_new ("ops");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *x = ps_build_parameter (b, "x", PS_F32, 3, D (2, 3, 4));
  PsInstr *bc = ps_build_broadcast (b, x, 4, D (2, 5, 3, 4), D (0, 2, 3));
  ck_dims (bc, PS_F32, 4, D (2, 5, 3, 4));
  PsInstr *rs = ps_build_reshape (b, x, 2, D (6, 4));
  ck_dims (rs, PS_F32, 2, D (6, 4));
  PsInstr *tr = ps_build_transpose (b, x, D (2, 0, 1));
  ck_dims (tr, PS_F32, 3, D (4, 2, 3));
  PsInstr *sl = ps_build_slice (b, x, D (0, 1, 0), D (2, 3, 4), D (1, 1, 3));
  ck_dims (sl, PS_F32, 3, D (2, 2, 2));
  PsInstr *zero = ps_build_scalar (b, PS_F32, 0);
  PsPadDim pads[] = { { 1, 0, 0 }, { 0, 2, 1 }, { -1, 0, 0 } };
  PsInstr *pd = ps_build_pad (b, x, zero, pads);
  ck_dims (pd, PS_F32, 3, D (3, 7, 3));
  PsInstr *cat[] = { x, x, sl };
  ck_assert_ptr_null (ps_build_concatenate (b, 3, cat, 1));
  ck_assert_ptr_nonnull (strstr (ps_builder_error (b)->message, "concatenate: operand 2"));
  ps_builder_free (b);

  b = ps_builder_new (m, "main2");
  x = ps_build_parameter (b, "x", PS_F32, 3, D (2, 3, 4));
  PsInstr *y = ps_build_parameter (b, "y", PS_F32, 3, D (2, 5, 4));
  PsInstr *cat2[] = { x, y, x };
  PsInstr *cc = ps_build_concatenate (b, 3, cat2, 1);
  ck_dims (cc, PS_F32, 3, D (2, 11, 4));
  PsInstr *cmp = ps_build_compare (b, PS_CMP_GT, x, ps_build_scalar (b, PS_F32, 0.5));
  ck_dims (cmp, PS_PRED, 3, D (2, 3, 4));
  ck_assert_int_eq (cmp->comparison, PS_CMP_GT);
  PsInstr *sel = ps_build_select (b, cmp, x, ps_build_scalar (b, PS_F32, 0));
  ck_dims (sel, PS_F32, 3, D (2, 3, 4));
  PsInstr *sel2 = ps_build_select (b, cmp, ps_build_scalar (b, PS_F32, 1),
                                   ps_build_scalar (b, PS_F32, 0));
  ck_dims (sel2, PS_F32, 3, D (2, 3, 4));
  PsInstr *cv = ps_build_convert (b, sel, PS_BF16);
  ck_dims (cv, PS_BF16, 3, D (2, 3, 4));
  PsInstr *ex = ps_build_unary (b, PS_OP_EXP, cv);
  ck_dims (ex, PS_BF16, 3, D (2, 3, 4));
  PsInstr *fin = ps_build_unary (b, PS_OP_IS_FINITE, ex);
  ck_dims (fin, PS_PRED, 3, D (2, 3, 4));
  PsInstr *cl
    = ps_build_clamp (b, ps_build_scalar (b, PS_F32, -1), x, ps_build_scalar (b, PS_F32, 1));
  ck_dims (cl, PS_F32, 3, D (2, 3, 4));
  PsInstr *mx = ps_build_reduce_max (b, x, 2, D (2, 0));
  ck_dims (mx, PS_F32, 1, D (3));
  ck_assert_int_eq (mx->dimensions.v[0], 0);
  ck_assert_int_eq (mx->dimensions.v[1], 2);
  PsInstr *imax = ps_build_reduce_max (b, ps_build_iota (b, PS_S32, 1, D (5), 0), 1, D (0));
  ck_dims (imax, PS_S32, 0, NULL);
  ck_assert_int_eq (((int32_t *) imax->operands[1]->literal->data)[0], G_MININT32);
  /* Pipeline-style state shift: read stage i, write it back at i+1. */
  PsInstr *stage = ps_build_parameter (b, "stage", PS_S32, 0, NULL);
  PsInstr *zero32 = ps_build_scalar_int (b, PS_S32, 0);
  PsInstr *st[] = { stage, zero32, zero32 };
  PsInstr *ds = ps_build_dynamic_slice (b, x, st, D (1, 3, 4));
  ck_dims (ds, PS_F32, 3, D (1, 3, 4));
  PsInstr *st2[] = { ps_build_add (b, stage, ps_build_scalar_int (b, PS_S32, 1)), zero32, zero32 };
  PsInstr *dus = ps_build_dynamic_update_slice (b, x, ds, st2);
  ck_dims (dus, PS_F32, 3, D (2, 3, 4));
  ck_assert_int_eq (dus->n_operands, 5);
  PsInstr *tup_elems[] = { cc, sel2, fin, cl, mx, imax, dus };
  PsInstr *tup = ps_build_tuple (b, 7, tup_elems);
  PsInstr *g = ps_build_get_tuple_element (b, tup, 4);
  ck_dims (g, PS_F32, 1, D (3));
  ck_assert_ptr_null (ps_build_get_tuple_element (b, tup, 7));
  ps_builder_free (b);

  b = ps_builder_new (m, "main3");
  x = ps_build_parameter (b, "x", PS_F32, 3, D (2, 3, 4));
  PsInstr *outs[] = { x, ps_build_reshape (b, x, 1, D (24)) };
  ps_builder_name_next (b, "result");
  PsInstr *root = ps_build_tuple (b, 2, outs);
  ck_assert_str_eq (root->name, "result");
  ps_builder_name_next (b, "result");
  PsInstr *dup = ps_build_tuple (b, 2, outs);
  ck_assert_str_ne (dup->name, "result");
  finish_ok (b, root);
  /* Computation names are unique too. */
  ck_assert_ptr_nonnull (ps_module_find_computation (m, "main"));
  ck_assert_ptr_nonnull (ps_module_find_computation (m, "main3"));
  cross_check_shapes (m);
}
END_TEST

START_TEST (test_conv_gather_scatter)
{
  g_autoptr (PsModule) m = ps_module_new ("cgs");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *img = ps_build_parameter (b, "img", PS_F32, 4, D (2, 8, 8, 3));
  PsInstr *ker = ps_build_parameter (b, "ker", PS_F32, 4, D (3, 3, 3, 16));
  PsInstr *same = ps_build_convolution (b, img, ker, "b01f_01io->b01f", NULL, D (1, 1), D (1, 1),
                                        NULL, 1);
  ck_dims (same, PS_F32, 4, D (2, 8, 8, 16));
  PsInstr *strided = ps_build_convolution (b, img, ker, "b01f_01io->b01f", D (2, 2), NULL, NULL,
                                           NULL, 1);
  ck_dims (strided, PS_F32, 4, D (2, 3, 3, 16));
  ck_assert_int_eq (strided->window.n, 2);
  ck_assert_int_eq (strided->window.dims[0].size, 3);
  ck_assert_int_eq (strided->window.dims[0].stride, 2);
  PsInstr *dil = ps_build_convolution (b, img, ker, "b01f_01io->b01f", NULL, NULL, NULL,
                                       D (2, 2), 1);
  ck_dims (dil, PS_F32, 4, D (2, 4, 4, 16));
  /* 3D, features first in the output. */
  PsInstr *vol = ps_build_parameter (b, "vol", PS_BF16, 5, D (1, 4, 16, 16, 16));
  PsInstr *k3 = ps_build_parameter (b, "k3", PS_BF16, 5, D (3, 3, 3, 4, 8));
  PsInstr *c3 = ps_build_convolution (b, vol, k3, "bf012_012io->bf012", NULL, D (1, 1, 1),
                                      D (1, 1, 1), NULL, 1);
  ck_dims (c3, PS_BF16, 5, D (1, 8, 16, 16, 16));
  /* Depthwise: 3 groups. */
  PsInstr *dk = ps_build_parameter (b, "dk", PS_F32, 4, D (3, 3, 1, 3));
  PsInstr *dw = ps_build_convolution (b, img, dk, "b01f_01io->b01f", NULL, D (1, 1), D (1, 1),
                                      NULL, 3);
  ck_dims (dw, PS_F32, 4, D (2, 8, 8, 3));
  ck_assert_int_eq (dw->feature_group_count, 3);
  /* Transposed up-sampling: base dilation 2, window 2, padding 1 doubles. */
  PsInstr *up = ps_build_convolution_dilated (b, img, ps_build_parameter (b, "uk", PS_F32, 4, D (2, 2, 3, 5)),
                                              "b01f_01io->b01f", NULL, D (1, 1), D (1, 1), D (2, 2),
                                              NULL, 1);
  ck_dims (up, PS_F32, 4, D (2, 16, 16, 5));
  ck_assert_int_eq (up->window.dims[1].base_dilation, 2);
  /* Batch norm over the features of the image. */
  PsInstr *sc = ps_build_parameter (b, "sc", PS_F32, 1, D (3));
  PsInstr *bn = ps_build_batch_norm_training (b, img, sc, sc, 1e-3f, 3);
  ck_assert (ps_shape_is_tuple (bn->shape) && bn->shape->n_elems == 3);
  ck_assert_int_eq (bn->feature_index, 3);
  ck_assert (bn->epsilon == 1e-3f);
  PsInstr *mu = ps_build_get_tuple_element (b, bn, 1);
  PsInstr *bi = ps_build_batch_norm_inference (b, img, sc, sc, mu, mu, 0.5f, 3);
  ck_dims (bi, PS_F32, 4, D (2, 8, 8, 3));
  PsInstr *bg = ps_build_batch_norm_grad (b, img, sc, mu, mu, bi, 0.5f, 3);
  ck_dims (ps_build_get_tuple_element (b, bg, 2), PS_F32, 1, D (3));

  /* Embedding lookup as a gather, and its gradient as a scatter-add. */
  PsInstr *table = ps_build_parameter (b, "table", PS_F32, 2, D (10, 4));
  PsInstr *ids = ps_build_parameter (b, "ids", PS_S32, 2, D (3, 5));
  PsGatherDims gd = { 0 };
  gd.offset_dims = (PsInts) { 1, D (2) };
  gd.collapsed_slice_dims = (PsInts) { 1, D (0) };
  gd.start_index_map = (PsInts) { 1, D (0) };
  gd.slice_sizes = (PsInts) { 2, D (1, 4) };
  gd.index_vector_dim = 2;
  PsInstr *emb = ps_build_gather (b, table, ids, &gd);
  ck_dims (emb, PS_F32, 3, D (3, 5, 4));
  PsScatterDims sd = { 0 };
  sd.update_window_dims = (PsInts) { 1, D (2) };
  sd.inserted_window_dims = (PsInts) { 1, D (0) };
  sd.scatter_dims_to_operand_dims = (PsInts) { 1, D (0) };
  sd.index_vector_dim = 2;
  PsComputation *add = ps_builder_reducer (b, PS_OP_ADD, PS_F32);
  ck_assert_ptr_eq (add, ps_builder_reducer (b, PS_OP_ADD, PS_F32));
  PsInstr *grad = ps_build_scatter (b, ps_build_full (b, PS_F32, 2, D (10, 4), 0), ids, emb, &sd,
                                    add);
  ck_dims (grad, PS_F32, 2, D (10, 4));
  PsInstr *outs[] = { same, strided, dil, c3, dw, emb, grad, up, bi, bg };
  finish_ok (b, ps_build_tuple (b, 10, outs));
  cross_check_shapes (m);
  g_autofree char *text = round_trip (m);
  ck_assert_ptr_nonnull (strstr (text, "dim_labels=bf012_012io->bf012"));
  ck_assert_ptr_nonnull (strstr (text, "feature_group_count=3"));
}
END_TEST

START_TEST (test_while_call)
{
  g_autoptr (PsModule) m = ps_module_new ("loop");
  int64_t n = 4;
  PsShape *elems[] = { ps_shape_new_scalar (PS_S32), ps_shape_new_array (PS_F32, 1, &n) };
  PsShape *state = ps_shape_new_tuple (2, elems);

  PsBuilder *cb = ps_builder_new (m, "cond");
  PsInstr *cs = ps_build_parameter_shape (cb, "s", state);
  PsInstr *i = ps_build_get_tuple_element (cb, cs, 0);
  PsInstr *lt = ps_build_compare (cb, PS_CMP_LT, i, ps_build_scalar_int (cb, PS_S32, 10));
  PsComputation *cond = ps_builder_finish (cb, lt, NULL);
  ck_assert_ptr_nonnull (cond);

  PsBuilder *bb = ps_builder_new (m, "body");
  PsInstr *bs = ps_build_parameter_shape (bb, "s", state);
  PsInstr *bi = ps_build_get_tuple_element (bb, bs, 0);
  PsInstr *bv = ps_build_get_tuple_element (bb, bs, 1);
  PsInstr *next[] = { ps_build_add (bb, bi, ps_build_scalar_int (bb, PS_S32, 1)),
                      ps_build_mul (bb, bv, ps_build_scalar (bb, PS_F32, 2)) };
  PsComputation *body = ps_builder_finish (bb, ps_build_tuple (bb, 2, next), NULL);
  ck_assert_ptr_nonnull (body);

  PsBuilder *main_b = ps_builder_new (m, "main");
  PsInstr *v = ps_build_parameter (main_b, "v", PS_F32, 1, D (4));
  /* A callee built while main is open: finishing main moves it first. */
  PsBuilder *fb = ps_builder_new (m, "double");
  PsInstr *fx = ps_build_parameter (fb, "x", PS_F32, 1, D (4));
  PsComputation *dbl = ps_builder_finish (fb, ps_build_add (fb, fx, fx), NULL);

  PsInstr *ie[] = { ps_build_scalar_int (main_b, PS_S32, 0), v };
  PsInstr *w = ps_build_while (main_b, cond, body, ps_build_tuple (main_b, 2, ie));
  ck_assert (ps_shape_equal (w->shape, state));
  PsInstr *res = ps_build_get_tuple_element (main_b, w, 1);
  PsComputation *entry = finish_ok (main_b, ps_build_call (main_b, dbl, 1, &res));
  /* Module order: callees before callers, the entry after its callees. */
  guint pos_entry = 0, pos_body = 0, pos_dbl = 0;
  for (guint k = 0; k < m->computations->len; k++)
    {
      PsComputation *c = g_ptr_array_index (m->computations, k);
      if (c == entry) pos_entry = k;
      if (c == body) pos_body = k;
      if (c == dbl) pos_dbl = k;
    }
  ck_assert_uint_lt (pos_body, pos_entry);
  ck_assert_uint_lt (pos_dbl, pos_entry);
  cross_check_shapes (m);
  g_autofree char *text = round_trip (m);
  ck_assert_ptr_nonnull (strstr (text, "condition=%cond, body=%body"));
  ck_assert_ptr_nonnull (strstr (text, "to_apply=%double"));

  /* A loop state that does not fit the condition's parameter. */
  PsBuilder *bad = ps_builder_new (m, "bad");
  PsInstr *bv2 = ps_build_parameter (bad, "v", PS_F32, 1, D (4));
  ck_assert_ptr_null (ps_build_while (bad, cond, body, bv2));
  ck_assert_str_eq (ps_builder_error (bad)->message, "builder 'bad': while: computation 'cond'"
                    " parameter 0 is (s32[], f32[4]), argument is f32[4]");
  ps_builder_free (bad);
  ps_shape_free (state);
  ps_shape_free (elems[0]);
  ps_shape_free (elems[1]);
}
END_TEST

START_TEST (test_sticky_errors)
{
  g_autoptr (PsModule) m = ps_module_new ("bad");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *x = ps_build_parameter (b, "x", PS_F32, 2, D (8, 512));
  PsInstr *w = ps_build_parameter (b, "w", PS_F32, 2, D (256, 64));
  PsDotDims d = { { 0, NULL }, { 0, NULL }, { 1, D (1) }, { 1, D (0) } };
  PsInstr *y = ps_build_dot (b, x, w, &d);
  ck_assert_ptr_null (y);
  guint n_instrs = ps_builder_computation (b)->instrs->len;
  /* Everything after the first error is a no-op returning NULL. */
  PsInstr *z = ps_build_add (b, y, x);
  ck_assert_ptr_null (z);
  ck_assert_ptr_null (ps_build_scalar (b, PS_F32, 1));
  ck_assert_ptr_null (ps_build_reshape (b, x, 1, D (4096)));
  ck_assert_uint_eq (ps_builder_computation (b)->instrs->len, n_instrs);
  ck_assert (!ps_builder_ok (b));
  GError *error = NULL;
  ck_assert_ptr_null (ps_builder_finish_entry (b, z, &error));
  ck_assert_str_eq (error->message, "builder 'main': dot: lhs contracting dim 1 (512) != rhs"
                    " contracting dim 0 (256)");
  g_error_free (error);

  /* A few more first errors and their messages. */
  static const char *const expect[] = {
    "builder 'e': reshape: f32[8,512] has 4096 elements, the new dims 4000",
    "builder 'e': add: operand shapes f32[8,512] and f32[256,64] differ",
    "builder 'e': add: operand types f32 and s32 differ (convert one first)",
    "builder 'e': transpose: not a permutation of 2 dims (entry 1 is 0)",
    "builder 'e': broadcast: operand dim 0 (8) lands on output dim 1 of size 9",
    "builder 'e': slice: dim 1: [0:513:1] does not fit size 512",
    "builder 'e': mesh_split: no mesh set (call ps_builder_set_mesh first)",
    "builder 'e': mesh_split: 'x': mesh_split: mesh dim 0 is used by two tensor dims",
    "builder 'e': custom-call: sharding {devices=[2]<=[2]} does not fit f32[8,512] ('x')",
    "builder 'e': convolution: dim_labels 'b01f_01io' has no '->'",
    "builder 'e': convolution: input features / feature_group_count != kernel input features",
    "builder 'e': finish: no root instruction",
    "builder 'e': iota: iota_dimension 2 is not a dim of a rank-2 array",
  };
  for (guint k = 0; k < G_N_ELEMENTS (expect); k++)
    {
      g_autoptr (PsModule) m2 = ps_module_new ("bad");
      PsBuilder *e = ps_builder_new (m2, "e");
      PsInstr *ex = ps_build_parameter (e, "x", PS_F32, 2, D (8, 512));
      PsInstr *ew = ps_build_parameter (e, "w", PS_F32, 2, D (256, 64));
      PsInstr *r = NULL;
      switch (k)
        {
        case 0: r = ps_build_reshape (e, ex, 2, D (40, 100)); break;
        case 1: r = ps_build_add (e, ex, ew); break;
        case 2: r = ps_build_add (e, ex, ps_build_iota (e, PS_S32, 2, D (8, 512), 0)); break;
        case 3: r = ps_build_transpose (e, ex, D (0, 0)); break;
        case 4: r = ps_build_broadcast (e, ex, 3, D (2, 9, 512), D (1, 2)); break;
        case 5: r = ps_build_slice (e, ex, D (0, 0), D (8, 513), NULL); break;
        case 6: r = ps_build_mesh_split (e, ex, D (0, -1)); break;
        case 7:
          ps_builder_set_mesh (e, 2, D (2, 2), NULL);
          r = ps_build_mesh_split (e, ex, D (0, 0));
          break;
        case 8:
          {
            g_autoptr (PsSharding) s = ps_sharding_from_string ("{devices=[2]0,1}", NULL, NULL);
            r = ps_build_sharding_annotation (e, ex, s);
            break;
          }
        case 9:
          r = ps_build_convolution (e, ex, ew, "b01f_01io", NULL, NULL, NULL, NULL, 1);
          break;
        case 10:
          {
            PsInstr *i4 = ps_build_parameter (e, "i4", PS_F32, 4, D (1, 8, 8, 4));
            PsInstr *k4 = ps_build_parameter (e, "k4", PS_F32, 4, D (3, 3, 3, 8));
            r = ps_build_convolution (e, i4, k4, "b01f_01io->b01f", NULL, NULL, NULL, NULL, 1);
            break;
          }
        case 11: r = NULL; break;
        case 12: r = ps_build_iota (e, PS_S32, 2, D (2, 2), 2); break;
        }
      ck_assert_ptr_null (r);
      GError *err = NULL;
      ck_assert_ptr_null (ps_builder_finish_entry (e, r, &err));
      ck_assert_str_eq (err->message, expect[k]);
      g_error_free (err);
    }
}
END_TEST

/* The forms the layer library writes (builder_forms.c): the value itself
 * where a cast or reshape changes nothing, constants shaped like a value,
 * sums over autodiff's shared "ad_<op>_<type>" reducers. */
START_TEST (test_layer_library_forms)
{
  g_autoptr (PsModule) m = ps_module_new ("forms");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *x = ps_build_parameter (b, "x", PS_F32, 2, D (2, 3));
  ck_assert_ptr_eq (ps_build_cast (b, x, PS_F32), x);
  PsInstr *h = ps_build_cast (b, x, PS_BF16);
  ck_assert_int_eq (h->opcode, PS_OP_CONVERT);
  ck_dims (h, PS_BF16, 2, D (2, 3));
  ck_assert_ptr_eq (ps_build_reshape_to (b, x, x->shape), x);
  g_autoptr (PsShape) flat = ps_shape_new_array (PS_F32, 1, D (6));
  ck_dims (ps_build_reshape_to (b, x, flat), PS_F32, 1, D (6));
  PsInstr *two = ps_build_full_like (b, x->shape, 2.0);
  ck_assert_int_eq (two->opcode, PS_OP_BROADCAST);
  ck_dims (two, PS_F32, 2, D (2, 3));
  ck_assert_ptr_eq (ps_build_sum (b, x, 0, NULL), x);
  PsInstr *rows = ps_build_sum (b, ps_build_mul (b, x, two), 1, D (1));
  ck_dims (rows, PS_F32, 1, D (2));
  ck_assert_str_eq (rows->called[0]->name, "ad_add_f32");
  PsInstr *cols = ps_build_reduce_op (b, x, PS_OP_MAXIMUM, -1e30, 1, D (0));
  ck_dims (cols, PS_F32, 1, D (3));
  ck_assert_str_eq (cols->called[0]->name, "ad_maximum_f32");
  /* one reducer per (op, type), shared with autodiff's gradients */
  ck_assert_ptr_eq (ps_build_sum (b, x, 1, D (0))->called[0], rows->called[0]);
  PsInstr *kept = ps_build_optimization_barrier (b, rows);
  ck_dims (kept, PS_F32, 1, D (2));
  PsInstr *outs[] = { kept, cols, h };
  finish_ok (b, ps_build_tuple (b, 3, outs));
  cross_check_shapes (m);
  g_free (round_trip (m));

  /* a dim listed twice is an error the builder keeps */
  PsBuilder *bad = ps_builder_new (m, "bad");
  PsInstr *y = ps_build_parameter (bad, "y", PS_F32, 2, D (2, 3));
  ck_assert_ptr_null (ps_build_sum (bad, y, 2, D (1, 1)));
  GError *error = NULL;
  ck_assert (!ps_builder_check (bad, &error));
  ck_assert_msg (strstr (error->message, "reduce") != NULL, "%s", error->message);
  g_clear_error (&error);
  ps_builder_free (bad);
}
END_TEST

/* A loop body reads its caller's values only when its builder allows a
 * closure (the scan makes them invariants); else that is an error. */
START_TEST (test_closure)
{
  g_autoptr (PsModule) m = ps_module_new ("closure");
  PsBuilder *b = ps_builder_new (m, "main");
  PsInstr *w = ps_build_parameter (b, "w", PS_F32, 1, D (4));
  PsBuilder *body = ps_builder_new (m, "body");
  ck_assert_ptr_null (ps_build_add (body, w, w));
  GError *error = NULL;
  ck_assert (!ps_builder_check (body, &error));
  ck_assert_msg (strstr (error->message, "belongs to computation 'main'") != NULL, "%s", error->message);
  g_clear_error (&error);
  PsBuilder *closure = ps_builder_new (m, "closure_body");
  ps_builder_allow_closure (closure);
  ck_dims (ps_build_add (closure, w, w), PS_F32, 1, D (4));
  ck_assert (ps_builder_check (closure, &error));
  ck_assert_ptr_null (error);
  ps_builder_free (body);
  ps_builder_free (closure);
  ps_builder_free (b);
}
END_TEST

static Suite *
builder_suite (void)
{
  Suite *s = suite_create ("builder");
  TCase *tc = ps_check_case (s, "builds_and_checks_programs", 0,
                             PS_CHECK_TESTS (test_ffn, test_einsum_forms,
                                             test_einsum_size_mismatch,
                                             test_constants, test_shape_ops,
                                             test_conv_gather_scatter,
                                             test_while_call,
                                             test_sticky_errors,
                                             test_layer_library_forms,
                                             test_closure));
  tcase_add_loop_test (tc, test_einsum_errors, 0, G_N_ELEMENTS (einsum_bad));
  tcase_add_loop_test (tc, test_einsum_numerics, 0, G_N_ELEMENTS (einsum_cases));
  return s;
}

int
main (void)
{
  return ps_check_run (builder_suite (), CK_FORK_GETENV);
}
