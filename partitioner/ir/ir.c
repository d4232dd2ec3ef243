/* Graph IR: opcodes and the module / computation / instruction API declared
 * in ir.h (element types and shapes: shape.c). Shape inference and validation live in
 * shape_infer.c; text lives in hlo_parser.c and hlo_printer.c. */
#include "config.h"

#include <string.h>

#include "common/float16.h"
#include "common/ndindex.h"
#include "partitioner/ir/ir.h"
#include "partitioner/ir/sharding.h"

/* ---- opcodes ------------------------------------------------------------ */

static const char *const opcode_names[PS_OP_COUNT] = {
#define PS_OPCODE_NAME(id, name) [PS_OP_##id] = name,
  PS_OPCODE_LIST (PS_OPCODE_NAME)
#undef PS_OPCODE_NAME
};

const char *
ps_opcode_name (PsOpcode op)
{
  g_return_val_if_fail ((int) op >= 0 && op < PS_OP_COUNT, "?");
  return opcode_names[op];
}

gboolean
ps_opcode_from_name (const char *s, gsize len, PsOpcode *out)
{
  /* Small table; a linear scan keeps this free of global state. */
  for (int i = 0; i < PS_OP_COUNT; i++)
    {
      const char *n = opcode_names[i];
      if (strlen (n) == len && memcmp (n, s, len) == 0)
        {
          *out = (PsOpcode) i;
          return TRUE;
        }
    }
  return FALSE;
}

gboolean
ps_opcode_is_elementwise (PsOpcode op)
{
  switch (op)
    {
    case PS_OP_ABS: case PS_OP_ADD: case PS_OP_AND: case PS_OP_ATAN2:
    case PS_OP_CBRT: case PS_OP_CEIL: case PS_OP_CLAMP: case PS_OP_CLZ:
    case PS_OP_COMPARE: case PS_OP_COMPLEX: case PS_OP_CONVERT: case PS_OP_COPY:
    case PS_OP_COSINE: case PS_OP_DIVIDE: case PS_OP_ERF: case PS_OP_EXP:
    case PS_OP_EXPM1: case PS_OP_FLOOR: case PS_OP_IMAG: case PS_OP_IS_FINITE:
    case PS_OP_LOG: case PS_OP_LOG1P: case PS_OP_LOGISTIC: case PS_OP_MAP:
    case PS_OP_MAXIMUM: case PS_OP_MINIMUM: case PS_OP_MULTIPLY:
    case PS_OP_NEGATE: case PS_OP_NOT: case PS_OP_OR: case PS_OP_POPCNT:
    case PS_OP_POWER: case PS_OP_REAL: case PS_OP_REDUCE_PRECISION:
    case PS_OP_REMAINDER: case PS_OP_ROUND_NEAREST_AFZ:
    case PS_OP_ROUND_NEAREST_EVEN: case PS_OP_RSQRT: case PS_OP_SELECT:
    case PS_OP_SHIFT_LEFT: case PS_OP_SHIFT_RIGHT_ARITHMETIC:
    case PS_OP_SHIFT_RIGHT_LOGICAL: case PS_OP_SIGN: case PS_OP_SINE:
    case PS_OP_SQRT: case PS_OP_STOCHASTIC_CONVERT: case PS_OP_SUBTRACT:
    case PS_OP_TAN: case PS_OP_TANH: case PS_OP_XOR:
      return TRUE;
    default:
      return FALSE;
    }
}

gboolean
ps_opcode_is_collective (PsOpcode op)
{
  return op == PS_OP_ALL_GATHER || op == PS_OP_ALL_REDUCE || op == PS_OP_ALL_TO_ALL
         || op == PS_OP_COLLECTIVE_PERMUTE || op == PS_OP_REDUCE_SCATTER
         || op == PS_OP_COLLECTIVE_BROADCAST;
}

static const char *const fusion_kind_names[] = { "?", "kLoop", "kInput", "kOutput", "kCustom" };

const char *
ps_fusion_kind_name (PsFusionKind k)
{
  return (int) k >= 0 && k <= PS_FUSION_CUSTOM ? fusion_kind_names[k] : "?";
}

gboolean
ps_fusion_kind_from_name (const char *s, PsFusionKind *out)
{
  for (int k = PS_FUSION_LOOP; k <= PS_FUSION_CUSTOM; k++)
    if (strcmp (s, fusion_kind_names[k]) == 0)
      {
        *out = (PsFusionKind) k;
        return TRUE;
      }
  return FALSE;
}

/* ---- small helpers ------------------------------------------------------ */

void
ps_ints_set (PsInts *dst, int n, const int64_t *v)
{
  g_free (dst->v);
  dst->n = n;
  dst->v = n > 0 ? g_memdup2 (v, sizeof (int64_t) * (gsize) n) : NULL;
}

void
ps_ints_clear (PsInts *dst)
{
  g_free (dst->v);
  dst->v = NULL;
  dst->n = 0;
}

gboolean
ps_ints_contains (const PsInts *a, int64_t v)
{
  for (int i = 0; i < a->n; i++)
    if (a->v[i] == v)
      return TRUE;
  return FALSE;
}

gboolean
ps_ints_equal (const PsInts *a, const PsInts *b)
{
  return a->n == b->n && (a->n == 0 || memcmp (a->v, b->v, sizeof (int64_t) * (gsize) a->n) == 0);
}

char *
ps_ints_to_string (const PsInts *a)
{
  GString *s = g_string_new ("{");
  for (int i = 0; i < a->n; i++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, i ? "," : "", a->v[i]);
  g_string_append_c (s, '}');
  return g_string_free (s, FALSE);
}

static void
ints_copy (PsInts *dst, const PsInts *src)
{
  dst->n = src->n;
  dst->v = src->n > 0 ? g_memdup2 (src->v, sizeof (int64_t) * (gsize) src->n) : NULL;
}

static int64_t *
i64_dup (const int64_t *v, int64_t n)
{
  return n > 0 && v ? g_memdup2 (v, sizeof (int64_t) * (gsize) n) : NULL;
}

PsLiteral *
ps_literal_new (PsElemType t, int64_t n)
{
  g_return_val_if_fail (n >= 0, NULL);
  PsLiteral *l = g_new0 (PsLiteral, 1);
  l->etype = t;
  l->n = n;
  gsize bytes = (gsize) n * (gsize) ps_etype_size_bytes (t);
  l->data = bytes > 0 ? g_malloc0 (bytes) : NULL;
  return l;
}

void
ps_literal_set_f64 (PsLiteral *l, int64_t i, double v)
{
  g_return_if_fail (l != NULL && i >= 0 && i < l->n);
  void *d = l->data;
  switch (l->etype)
    {
    case PS_PRED: ((uint8_t *) d)[i] = v != 0; break;
    case PS_S8: case PS_S4: case PS_S2: case PS_S1: ((int8_t *) d)[i] = (int8_t) v; break;
    case PS_U4: case PS_U2: case PS_U1: ((uint8_t *) d)[i] = (uint8_t) v; break;
    case PS_F8E4M3FN: case PS_F8E5M2: case PS_F8E4M3: case PS_F8E3M4: case PS_F8E4M3FNUZ:
    case PS_F8E5M2FNUZ: case PS_F8E4M3B11FNUZ: case PS_F4E2M1FN: case PS_F8E8M0FNU:
      ((uint8_t *) d)[i] = ps_etype_minifloat_encode (l->etype, v);
      break;
    case PS_S16: ((int16_t *) d)[i] = (int16_t) v; break;
    case PS_S32: ((int32_t *) d)[i] = (int32_t) v; break;
    case PS_S64: ((int64_t *) d)[i] = (int64_t) v; break;
    case PS_U8: ((uint8_t *) d)[i] = (uint8_t) v; break;
    case PS_U16: ((uint16_t *) d)[i] = (uint16_t) v; break;
    case PS_U32: ((uint32_t *) d)[i] = (uint32_t) v; break;
    case PS_U64: ((uint64_t *) d)[i] = (uint64_t) v; break;
    case PS_F16: ((uint16_t *) d)[i] = ps_f32_to_f16 ((float) v); break;
    case PS_BF16: ((uint16_t *) d)[i] = ps_f32_to_bf16 ((float) v); break;
    case PS_F32: ((float *) d)[i] = (float) v; break;
    case PS_F64: ((double *) d)[i] = v; break;
    case PS_C64: ((float *) d)[2 * i] = (float) v; ((float *) d)[2 * i + 1] = 0; break;
    case PS_C128: ((double *) d)[2 * i] = v; ((double *) d)[2 * i + 1] = 0; break;
    default: g_return_if_reached ();
    }
}

PsLiteral *
ps_literal_copy (const PsLiteral *l)
{
  if (!l)
    return NULL;
  PsLiteral *c = ps_literal_new (l->etype, l->n);
  gsize bytes = (gsize) l->n * (gsize) ps_etype_size_bytes (l->etype);
  if (bytes > 0)
    memcpy (c->data, l->data, bytes);
  c->splat = l->splat;
  return c;
}

void
ps_literal_free (PsLiteral *l)
{
  if (!l)
    return;
  g_free (l->data);
  g_free (l);
}

static void
raw_attr_free (gpointer p)
{
  PsRawAttr *a = p;
  g_free (a->key);
  g_free (a->value);
  g_free (a);
}

static GPtrArray *
raw_attrs_copy (const GPtrArray *src)
{
  if (!src)
    return NULL;
  GPtrArray *dst = g_ptr_array_new_with_free_func (raw_attr_free);
  for (guint i = 0; i < src->len; i++)
    {
      const PsRawAttr *a = g_ptr_array_index (src, i);
      PsRawAttr *c = g_new0 (PsRawAttr, 1);
      c->key = g_strdup (a->key);
      c->value = g_strdup (a->value);
      g_ptr_array_add (dst, c);
    }
  return dst;
}

static void
raw_attr_set (GPtrArray **arr, const char *key, const char *value)
{
  if (!*arr)
    *arr = g_ptr_array_new_with_free_func (raw_attr_free);
  PsRawAttr *a = g_new0 (PsRawAttr, 1);
  a->key = g_strdup (key);
  a->value = g_strdup (value);
  g_ptr_array_add (*arr, a);
}

void
ps_instr_add_raw_attr (PsInstr *instr, const char *key, const char *value)
{
  raw_attr_set (&instr->extra_attrs, key, value);
}

const char *
ps_instr_get_raw_attr (const PsInstr *instr, const char *key)
{
  if (!instr->extra_attrs)
    return NULL;
  for (guint i = 0; i < instr->extra_attrs->len; i++)
    {
      const PsRawAttr *a = g_ptr_array_index (instr->extra_attrs, i);
      if (strcmp (a->key, key) == 0)
        return a->value;
    }
  return NULL;
}

int
ps_instr_group_len (const PsInstr *in, int g)
{
  if (g < 0 || g >= in->n_groups)
    return 0;
  const int64_t *ids = in->replica_groups + (gsize) g * (gsize) in->group_size;
  int n = 0;
  while (n < in->group_size && ids[n] >= 0)
    n++;
  return n;
}

gboolean
ps_instr_groups_ragged (const PsInstr *in)
{
  for (int g = 0; g < in->n_groups; g++)
    if (ps_instr_group_len (in, g) != in->group_size)
      return TRUE;
  return FALSE;
}

static int64_t
single_dim (const char *v)
{
  if (!v)
    return -1;
  while (*v == '{' || *v == ' ')
    v++;
  char *end = NULL;
  gint64 d = g_ascii_strtoll (v, &end, 10);
  if (end == v)
    return -1;
  while (*end == ' ')
    end++;
  return *end == '}' || *end == 0 ? d : -1;
}

PsRaggedMode
ps_instr_ragged_dims (const PsInstr *in, int64_t *lhs_ragged, int64_t *rhs_group)
{
  *lhs_ragged = *rhs_group = -1;
  if (in->opcode != PS_OP_RAGGED_DOT || in->n_operands != 3)
    return PS_RAGGED_NONE;
  *lhs_ragged = single_dim (ps_instr_get_raw_attr (in, "lhs_ragged_dims"));
  const char *g = ps_instr_get_raw_attr (in, "rhs_group_dims");
  *rhs_group = single_dim (g);
  if (*lhs_ragged < 0 || (g && *rhs_group < 0 && strcmp (g, "{}") != 0))
    return PS_RAGGED_NONE;
  if (ps_ints_contains (&in->dot.lhs_contracting, *lhs_ragged))
    return *rhs_group < 0 ? PS_RAGGED_CONTRACTING : PS_RAGGED_NONE;
  if (ps_ints_contains (&in->dot.lhs_batch, *lhs_ragged))
    return *rhs_group < 0 ? PS_RAGGED_BATCH : PS_RAGGED_NONE;
  return *rhs_group >= 0 ? PS_RAGGED_NON_CONTRACTING : PS_RAGGED_NONE;
}

/* ---- instructions ------------------------------------------------------- */

static void
instr_free (PsInstr *in)
{
  if (!in)
    return;
  g_free (in->name);
  ps_shape_free (in->shape);
  g_free (in->operands);
  if (in->users)
    g_ptr_array_free (in->users, TRUE);
  if (in->sharding)
    ps_sharding_free (in->sharding);
  g_free (in->called);
  ps_literal_free (in->literal);
  ps_ints_clear (&in->dimensions);
  ps_ints_clear (&in->dot.lhs_batch);
  ps_ints_clear (&in->dot.rhs_batch);
  ps_ints_clear (&in->dot.lhs_contracting);
  ps_ints_clear (&in->dot.rhs_contracting);
  g_free (in->window.dims);
  g_free (in->conv.in_spatial);
  g_free (in->conv.k_spatial);
  g_free (in->conv.out_spatial);
  ps_ints_clear (&in->slice_starts);
  ps_ints_clear (&in->slice_limits);
  ps_ints_clear (&in->slice_strides);
  ps_ints_clear (&in->dynamic_slice_sizes);
  g_free (in->padding);
  ps_ints_clear (&in->gather.offset_dims);
  ps_ints_clear (&in->gather.collapsed_slice_dims);
  ps_ints_clear (&in->gather.start_index_map);
  ps_ints_clear (&in->gather.operand_batching_dims);
  ps_ints_clear (&in->gather.start_indices_batching_dims);
  ps_ints_clear (&in->gather.slice_sizes);
  ps_ints_clear (&in->scatter.update_window_dims);
  ps_ints_clear (&in->scatter.inserted_window_dims);
  ps_ints_clear (&in->scatter.scatter_dims_to_operand_dims);
  ps_ints_clear (&in->scatter.input_batching_dims);
  ps_ints_clear (&in->scatter.scatter_indices_batching_dims);
  g_free (in->compare_type);
  g_free (in->replica_groups);
  g_free (in->source_target_pairs);
  g_free (in->custom_call_target);
  g_free (in->backend_config);
  g_free (in->metadata);
  if (in->extra_attrs)
    g_ptr_array_free (in->extra_attrs, TRUE);
  g_free (in);
}

static void
users_add (PsInstr *operand, PsInstr *user)
{
  /* XLA lists a user once even when it uses an operand in several slots. */
  for (guint i = 0; i < operand->users->len; i++)
    if (g_ptr_array_index (operand->users, i) == user)
      return;
  g_ptr_array_add (operand->users, user);
}

static void
users_remove_if_unused (PsInstr *operand, PsInstr *user)
{
  for (int i = 0; i < user->n_operands; i++)
    if (user->operands[i] == operand)
      return;
  g_ptr_array_remove (operand->users, user);
}

static void
name_index_add (PsModule *m, PsInstr *in)
{
  g_hash_table_replace (m->name_index, g_strdup (in->name), in);
}

/* Only the index: a scan per fresh name would make building large
 * programs quadratic. Names changed by hand bypass the index; callers that
 * rename should pick unique names themselves. */
static gboolean
name_taken (const PsModule *m, const char *name)
{
  PsInstr *in = g_hash_table_lookup (m->name_index, name);
  return in && strcmp (in->name, name) == 0;
}

PsInstr *
ps_computation_add_instr (PsComputation *c, PsOpcode op, const char *name,
                          PsShape *shape, int n_operands, PsInstr *const *operands)
{
  g_return_val_if_fail (c != NULL && c->parent != NULL, NULL);
  g_return_val_if_fail (n_operands >= 0, NULL);
  PsModule *m = c->parent;
  PsInstr *in = g_new0 (PsInstr, 1);
  in->id = m->next_id++;
  in->opcode = op;
  in->shape = shape;
  in->parent = c;
  in->users = g_ptr_array_new ();
  if (name)
    in->name = g_strdup (name);
  else
    {
      /* The id makes the name unique unless a parsed name already took it. */
      int64_t k = in->id;
      for (;;)
        {
          char *cand = g_strdup_printf ("%s.%" G_GINT64_FORMAT, ps_opcode_name (op), k);
          if (!name_taken (m, cand))
            {
              in->name = cand;
              break;
            }
          g_free (cand);
          k = m->next_id++;
        }
    }
  in->n_operands = n_operands;
  if (n_operands > 0)
    {
      in->operands = g_new0 (PsInstr *, n_operands);
      for (int i = 0; i < n_operands; i++)
        {
          in->operands[i] = operands[i];
          if (operands[i])
            users_add (operands[i], in);
        }
    }
  g_ptr_array_add (c->instrs, in);
  name_index_add (m, in);
  return in;
}

void
ps_instr_set_operand (PsInstr *instr, int i, PsInstr *new_operand)
{
  g_return_if_fail (i >= 0 && i < instr->n_operands);
  PsInstr *old = instr->operands[i];
  instr->operands[i] = new_operand;
  if (old && old != new_operand)
    users_remove_if_unused (old, instr);
  if (new_operand)
    users_add (new_operand, instr);
}

void
ps_instr_replace_all_uses (PsInstr *old, PsInstr *repl)
{
  g_return_if_fail (old != NULL && repl != NULL);
  if (old == repl)
    return;
  /* Copy: set_operand edits old->users while we walk it. */
  GPtrArray *users = g_ptr_array_copy (old->users, NULL, NULL);
  for (guint u = 0; u < users->len; u++)
    {
      PsInstr *user = g_ptr_array_index (users, u);
      /* repl itself keeps using old: that is how a new instruction is
       * inserted after old (repl = f(old), then redirect old's users). */
      if (user == repl)
        continue;
      for (int i = 0; i < user->n_operands; i++)
        if (user->operands[i] == old)
          ps_instr_set_operand (user, i, repl);
    }
  g_ptr_array_free (users, TRUE);
  if (old->parent && old->parent->root == old)
    old->parent->root = repl;
}

void
ps_computation_remove_instr (PsComputation *c, PsInstr *instr)
{
  g_return_if_fail (instr->parent == c);
  g_return_if_fail (instr->users->len == 0);
  for (int i = 0; i < instr->n_operands; i++)
    if (instr->operands[i])
      g_ptr_array_remove (instr->operands[i]->users, instr);
  g_ptr_array_remove (c->params, instr);
  if (c->root == instr)
    c->root = NULL;
  PsModule *m = c->parent;
  if (m && g_hash_table_lookup (m->name_index, instr->name) == instr)
    g_hash_table_remove (m->name_index, instr->name);
  g_ptr_array_remove (c->instrs, instr);
  instr_free (instr);
}

GPtrArray *
ps_computation_post_order (const PsComputation *c)
{
  guint n = c->instrs->len;
  GPtrArray *out = g_ptr_array_sized_new (n);
  /* 0 = unvisited, 1 = on the stack, 2 = emitted. An explicit stack keeps
   * long chains (thousands of layers) off the C stack. */
  GHashTable *state = g_hash_table_new (g_direct_hash, g_direct_equal);
  GPtrArray *stack = g_ptr_array_new ();
  GArray *next = g_array_new (FALSE, FALSE, sizeof (int));
  for (guint k = 0; k < n; k++)
    {
      PsInstr *start = g_ptr_array_index (c->instrs, k);
      if (g_hash_table_contains (state, start))
        continue;
      g_hash_table_insert (state, start, GINT_TO_POINTER (1));
      g_ptr_array_add (stack, start);
      int zero = 0;
      g_array_append_val (next, zero);
      while (stack->len > 0)
        {
          PsInstr *top = g_ptr_array_index (stack, stack->len - 1);
          int *ni = &g_array_index (next, int, next->len - 1);
          if (*ni < top->n_operands)
            {
              PsInstr *op = top->operands[(*ni)++];
              /* Operands from another computation are not ordered here. */
              if (!op || op->parent != c || g_hash_table_contains (state, op))
                continue;
              g_hash_table_insert (state, op, GINT_TO_POINTER (1));
              g_ptr_array_add (stack, op);
              g_array_append_val (next, zero);
              continue;
            }
          g_hash_table_insert (state, top, GINT_TO_POINTER (2));
          g_ptr_array_add (out, top);
          g_ptr_array_set_size (stack, stack->len - 1);
          g_array_set_size (next, next->len - 1);
        }
    }
  g_array_free (next, TRUE);
  g_ptr_array_free (stack, TRUE);
  g_hash_table_destroy (state);
  return out;
}

void
ps_instr_set_sharding (PsInstr *instr, const PsSharding *s)
{
  PsSharding *copy = s ? ps_sharding_copy (s) : NULL;
  if (instr->sharding)
    ps_sharding_free (instr->sharding);
  instr->sharding = copy;
}

void
ps_instr_error (GError **error, PsErrorCode code, const PsInstr *in, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  const char *file = in->parent && in->parent->parent ? in->parent->parent->source_name : NULL;
  if (file)
    ps_set_error_at (error, code, file, in->src_line, in->src_col, "%s: %s", in->name, msg);
  else if (in->src_line > 0)
    g_set_error (error, PS_ERROR, code, "%d:%d: %s: %s", in->src_line, in->src_col, in->name, msg);
  else
    g_set_error (error, PS_ERROR, code, "%s: %s", in->name, msg);
}

void
ps_instr_set_called (PsInstr *instr, int n, PsComputation *const *called)
{
  g_free (instr->called);
  instr->n_called = n;
  instr->called = n > 0 ? g_memdup2 (called, sizeof (PsComputation *) * (gsize) n) : NULL;
}

/* ---- computations and modules ------------------------------------------ */

static void
computation_free (PsComputation *c)
{
  if (!c)
    return;
  /* Users point at siblings; freeing in any order is fine since nothing
   * is dereferenced. */
  for (guint i = 0; i < c->instrs->len; i++)
    instr_free (g_ptr_array_index (c->instrs, i));
  g_ptr_array_free (c->instrs, TRUE);
  g_ptr_array_free (c->params, TRUE);
  g_free (c->name);
  g_free (c->execution_thread);
  g_free (c);
}

PsModule *
ps_module_new (const char *name)
{
  PsModule *m = g_new0 (PsModule, 1);
  m->name = g_strdup (name ? name : "module");
  m->computations = g_ptr_array_new ();
  m->name_index = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  return m;
}

void
ps_module_free (PsModule *m)
{
  if (!m)
    return;
  for (guint i = 0; i < m->computations->len; i++)
    computation_free (g_ptr_array_index (m->computations, i));
  g_ptr_array_free (m->computations, TRUE);
  g_free (m->name);
  g_free (m->source_name);
  g_free (m->prop_to_output);
  g_free (m->prop_to_params);
  g_free (m->entry_layout);
  ps_module_clear_aliases (m);
  if (m->extra_attrs)
    g_ptr_array_free (m->extra_attrs, TRUE);
  g_hash_table_destroy (m->name_index);
  g_free (m);
}

void
ps_computation_remove_instrs (PsComputation *c, GHashTable *dead)
{
  if (g_hash_table_size (dead) == 0)
    return;
  PsModule *m = c->parent;
  /* Users of surviving operands lose the dead instructions. */
  GHashTableIter it;
  gpointer key;
  g_hash_table_iter_init (&it, dead);
  while (g_hash_table_iter_next (&it, &key, NULL))
    {
      PsInstr *in = key;
      g_return_if_fail (in->parent == c);
      for (int i = 0; i < in->n_operands; i++)
        {
          PsInstr *op = in->operands[i];
          if (op && !g_hash_table_contains (dead, op))
            g_ptr_array_remove (op->users, in);
        }
      if (c->root == in)
        c->root = NULL;
      if (m && g_hash_table_lookup (m->name_index, in->name) == in)
        g_hash_table_remove (m->name_index, in->name);
      g_ptr_array_remove (c->params, in);
    }
  guint keep = 0;
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *in = c->instrs->pdata[i];
      if (g_hash_table_contains (dead, in))
        instr_free (in);
      else
        c->instrs->pdata[keep++] = in;
    }
  g_ptr_array_set_size (c->instrs, keep);
}

PsComputation *
ps_computation_new (PsModule *m, const char *name)
{
  PsComputation *c = g_new0 (PsComputation, 1);
  c->name = g_strdup (name);
  c->parent = m;
  c->instrs = g_ptr_array_new ();
  c->params = g_ptr_array_new ();
  g_ptr_array_add (m->computations, c);
  return c;
}

void
ps_module_remove_computation (PsModule *m, PsComputation *c)
{
  g_return_if_fail (m != NULL && c != NULL && c->parent == m && c != m->entry);
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *in = c->instrs->pdata[i];
      if (g_hash_table_lookup (m->name_index, in->name) == in)
        g_hash_table_remove (m->name_index, in->name);
      /* Operands in other computations forget these users. */
      for (int k = 0; k < in->n_operands; k++)
        if (in->operands[k] && in->operands[k]->parent != c)
          g_ptr_array_remove (in->operands[k]->users, in);
    }
  g_ptr_array_remove (m->computations, c);
  computation_free (c);
}

PsComputation *
ps_module_find_computation (const PsModule *m, const char *name)
{
  for (guint i = 0; i < m->computations->len; i++)
    {
      PsComputation *c = g_ptr_array_index (m->computations, i);
      if (strcmp (c->name, name) == 0)
        return c;
    }
  return NULL;
}

PsInstr *
ps_computation_find_instr (const PsComputation *c, const char *name)
{
  if (c->parent)
    {
      PsInstr *in = g_hash_table_lookup (c->parent->name_index, name);
      if (in && in->parent == c && strcmp (in->name, name) == 0)
        return in;
    }
  /* The index misses names that callers changed by hand. */
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *in = g_ptr_array_index (c->instrs, i);
      if (strcmp (in->name, name) == 0)
        return in;
    }
  return NULL;
}

PsInstr *
ps_module_find_instr (const PsModule *m, const char *name)
{
  PsInstr *in = g_hash_table_lookup (m->name_index, name);
  if (in && strcmp (in->name, name) == 0)
    return in;
  for (guint k = 0; k < m->computations->len; k++)
    {
      PsComputation *c = g_ptr_array_index (m->computations, k);
      for (guint i = 0; i < c->instrs->len; i++)
        {
          PsInstr *x = g_ptr_array_index (c->instrs, i);
          if (strcmp (x->name, name) == 0)
            return x;
        }
    }
  return NULL;
}

void
ps_instr_copy_attrs (PsInstr *dst, const PsInstr *src)
{
  dst->branches_as_list = src->branches_as_list;
  dst->parameter_number = src->parameter_number;
  dst->literal = ps_literal_copy (src->literal);
  ints_copy (&dst->dimensions, &src->dimensions);
  ints_copy (&dst->dot.lhs_batch, &src->dot.lhs_batch);
  ints_copy (&dst->dot.rhs_batch, &src->dot.rhs_batch);
  ints_copy (&dst->dot.lhs_contracting, &src->dot.lhs_contracting);
  ints_copy (&dst->dot.rhs_contracting, &src->dot.rhs_contracting);
  dst->precision[0] = src->precision[0];
  dst->precision[1] = src->precision[1];
  dst->has_precision = src->has_precision;
  dst->window.n = src->window.n;
  if (src->window.n > 0)
    dst->window.dims = g_memdup2 (src->window.dims, sizeof (PsWindowDim) * (gsize) src->window.n);
  dst->conv = src->conv;
  dst->conv.in_spatial = i64_dup (src->conv.in_spatial, src->conv.n_spatial);
  dst->conv.k_spatial = i64_dup (src->conv.k_spatial, src->conv.n_spatial);
  dst->conv.out_spatial = i64_dup (src->conv.out_spatial, src->conv.n_spatial);
  dst->feature_group_count = src->feature_group_count;
  dst->batch_group_count = src->batch_group_count;
  ints_copy (&dst->slice_starts, &src->slice_starts);
  ints_copy (&dst->slice_limits, &src->slice_limits);
  ints_copy (&dst->slice_strides, &src->slice_strides);
  ints_copy (&dst->dynamic_slice_sizes, &src->dynamic_slice_sizes);
  dst->n_pad = src->n_pad;
  if (src->n_pad > 0)
    dst->padding = g_memdup2 (src->padding, sizeof (PsPadDim) * (gsize) src->n_pad);
  dst->gather = src->gather;
  ints_copy (&dst->gather.offset_dims, &src->gather.offset_dims);
  ints_copy (&dst->gather.collapsed_slice_dims, &src->gather.collapsed_slice_dims);
  ints_copy (&dst->gather.start_index_map, &src->gather.start_index_map);
  ints_copy (&dst->gather.operand_batching_dims, &src->gather.operand_batching_dims);
  ints_copy (&dst->gather.start_indices_batching_dims, &src->gather.start_indices_batching_dims);
  ints_copy (&dst->gather.slice_sizes, &src->gather.slice_sizes);
  dst->scatter = src->scatter;
  ints_copy (&dst->scatter.update_window_dims, &src->scatter.update_window_dims);
  ints_copy (&dst->scatter.inserted_window_dims, &src->scatter.inserted_window_dims);
  ints_copy (&dst->scatter.scatter_dims_to_operand_dims, &src->scatter.scatter_dims_to_operand_dims);
  ints_copy (&dst->scatter.input_batching_dims, &src->scatter.input_batching_dims);
  ints_copy (&dst->scatter.scatter_indices_batching_dims, &src->scatter.scatter_indices_batching_dims);
  dst->tuple_index = src->tuple_index;
  dst->iota_dimension = src->iota_dimension;
  dst->feature_index = src->feature_index;
  dst->epsilon = src->epsilon;
  dst->comparison = src->comparison;
  dst->compare_type = g_strdup (src->compare_type);
  dst->is_stable = src->is_stable;
  dst->fusion_kind = src->fusion_kind;
  dst->n_groups = src->n_groups;
  dst->group_size = src->group_size;
  dst->replica_groups = i64_dup (src->replica_groups, (int64_t) src->n_groups * src->group_size);
  dst->has_replica_groups = src->has_replica_groups;
  dst->channel_id = src->channel_id;
  dst->use_global_device_ids = src->use_global_device_ids;
  dst->n_pairs = src->n_pairs;
  dst->source_target_pairs = i64_dup (src->source_target_pairs, (int64_t) src->n_pairs * 2);
  dst->custom_call_target = g_strdup (src->custom_call_target);
  dst->backend_config = g_strdup (src->backend_config);
  dst->custom_call_has_side_effect = src->custom_call_has_side_effect;
  dst->metadata = g_strdup (src->metadata);
  dst->extra_attrs = raw_attrs_copy (src->extra_attrs);
  dst->src_line = src->src_line;
  dst->src_col = src->src_col;
}

void
ps_module_add_alias (PsModule *m, int n_output_index, const int64_t *output_index,
                     int64_t parameter, int n_param_index, const int64_t *param_index,
                     gboolean must_alias)
{
  m->aliases = g_renew (PsAlias, m->aliases, m->n_aliases + 1);
  PsAlias *a = &m->aliases[m->n_aliases++];
  memset (a, 0, sizeof *a);
  ps_ints_set (&a->output_index, n_output_index, output_index);
  a->parameter = parameter;
  ps_ints_set (&a->param_index, n_param_index, param_index);
  a->must_alias = must_alias;
}

void
ps_module_clear_aliases (PsModule *m)
{
  for (int i = 0; i < m->n_aliases; i++)
    {
      ps_ints_clear (&m->aliases[i].output_index);
      ps_ints_clear (&m->aliases[i].param_index);
    }
  g_clear_pointer (&m->aliases, g_free);
  m->n_aliases = 0;
}

void
ps_module_copy_aliases (PsModule *dst, const PsModule *src)
{
  if (dst == src)
    return;
  ps_module_clear_aliases (dst);
  for (int i = 0; i < src->n_aliases; i++)
    {
      const PsAlias *a = &src->aliases[i];
      ps_module_add_alias (dst, a->output_index.n, a->output_index.v, a->parameter,
                           a->param_index.n, a->param_index.v, a->must_alias);
    }
}

static gboolean
ints_equal (const PsInts *a, const PsInts *b)
{
  return a->n == b->n && (a->n == 0 || memcmp (a->v, b->v, sizeof (int64_t) * (gsize) a->n) == 0);
}

static gboolean
i64_equal (const int64_t *a, const int64_t *b, int64_t n)
{
  return n <= 0 || memcmp (a, b, sizeof (int64_t) * (gsize) n) == 0;
}

static gboolean
literal_equal (const PsLiteral *a, const PsLiteral *b)
{
  if (a == NULL || b == NULL)
    return a == b;
  return a->etype == b->etype && a->n == b->n
         && (a->n == 0 || memcmp (a->data, b->data, (gsize) a->n * (gsize) ps_etype_size_bytes (a->etype)) == 0);
}

static gboolean
window_equal (const PsWindow *a, const PsWindow *b)
{
  if (a->n != b->n)
    return FALSE;
  for (int i = 0; i < a->n; i++)
    {
      const PsWindowDim *x = &a->dims[i], *y = &b->dims[i];
      if (x->size != y->size || x->stride != y->stride || x->pad_lo != y->pad_lo || x->pad_hi != y->pad_hi
          || x->base_dilation != y->base_dilation || x->window_dilation != y->window_dilation
          || !x->reversal != !y->reversal)
        return FALSE;
    }
  return TRUE;
}

static gboolean
conv_equal (const PsConvDims *a, const PsConvDims *b)
{
  return !a->present == !b->present && a->n_spatial == b->n_spatial && a->in_batch == b->in_batch
         && a->in_feature == b->in_feature && a->k_in_feature == b->k_in_feature
         && a->k_out_feature == b->k_out_feature && a->out_batch == b->out_batch
         && a->out_feature == b->out_feature && i64_equal (a->in_spatial, b->in_spatial, a->n_spatial)
         && i64_equal (a->k_spatial, b->k_spatial, a->n_spatial)
         && i64_equal (a->out_spatial, b->out_spatial, a->n_spatial);
}

static gboolean
pad_equal (const PsInstr *a, const PsInstr *b)
{
  if (a->n_pad != b->n_pad)
    return FALSE;
  for (int i = 0; i < a->n_pad; i++)
    if (a->padding[i].lo != b->padding[i].lo || a->padding[i].hi != b->padding[i].hi
        || a->padding[i].interior != b->padding[i].interior)
      return FALSE;
  return TRUE;
}

static gboolean
raw_attrs_equal (const GPtrArray *a, const GPtrArray *b)
{
  guint na = a ? a->len : 0, nb = b ? b->len : 0;
  if (na != nb)
    return FALSE;
  for (guint i = 0; i < na; i++)
    {
      const PsRawAttr *x = g_ptr_array_index (a, i), *y = g_ptr_array_index (b, i);
      if (g_strcmp0 (x->key, y->key) != 0 || g_strcmp0 (x->value, y->value) != 0)
        return FALSE;
    }
  return TRUE;
}

static gboolean
sharding_same_text (const PsSharding *a, const PsSharding *b)
{
  if (a == NULL || b == NULL)
    return a == b;
  if (!ps_sharding_equal (a, b))
    return FALSE;
  g_autofree char *ta = ps_sharding_to_string (a);
  g_autofree char *tb = ps_sharding_to_string (b);
  return strcmp (ta, tb) == 0;
}

/* Every attribute ps_instr_copy_attrs copies, but the source position;
 * keep the two lists in step. */
static gboolean
attrs_equal (const PsInstr *a, const PsInstr *b)
{
  return !a->branches_as_list == !b->branches_as_list && a->parameter_number == b->parameter_number
         && literal_equal (a->literal, b->literal) && ints_equal (&a->dimensions, &b->dimensions)
         && ints_equal (&a->dot.lhs_batch, &b->dot.lhs_batch)
         && ints_equal (&a->dot.rhs_batch, &b->dot.rhs_batch)
         && ints_equal (&a->dot.lhs_contracting, &b->dot.lhs_contracting)
         && ints_equal (&a->dot.rhs_contracting, &b->dot.rhs_contracting)
         && !a->has_precision == !b->has_precision
         && (!a->has_precision || (a->precision[0] == b->precision[0] && a->precision[1] == b->precision[1]))
         && window_equal (&a->window, &b->window) && conv_equal (&a->conv, &b->conv)
         && a->feature_group_count == b->feature_group_count && a->batch_group_count == b->batch_group_count
         && ints_equal (&a->slice_starts, &b->slice_starts) && ints_equal (&a->slice_limits, &b->slice_limits)
         && ints_equal (&a->slice_strides, &b->slice_strides)
         && ints_equal (&a->dynamic_slice_sizes, &b->dynamic_slice_sizes) && pad_equal (a, b)
         && ints_equal (&a->gather.offset_dims, &b->gather.offset_dims)
         && ints_equal (&a->gather.collapsed_slice_dims, &b->gather.collapsed_slice_dims)
         && ints_equal (&a->gather.start_index_map, &b->gather.start_index_map)
         && ints_equal (&a->gather.operand_batching_dims, &b->gather.operand_batching_dims)
         && ints_equal (&a->gather.start_indices_batching_dims, &b->gather.start_indices_batching_dims)
         && ints_equal (&a->gather.slice_sizes, &b->gather.slice_sizes)
         && a->gather.index_vector_dim == b->gather.index_vector_dim
         && !a->gather.indices_are_sorted == !b->gather.indices_are_sorted
         && ints_equal (&a->scatter.update_window_dims, &b->scatter.update_window_dims)
         && ints_equal (&a->scatter.inserted_window_dims, &b->scatter.inserted_window_dims)
         && ints_equal (&a->scatter.scatter_dims_to_operand_dims, &b->scatter.scatter_dims_to_operand_dims)
         && ints_equal (&a->scatter.input_batching_dims, &b->scatter.input_batching_dims)
         && ints_equal (&a->scatter.scatter_indices_batching_dims, &b->scatter.scatter_indices_batching_dims)
         && a->scatter.index_vector_dim == b->scatter.index_vector_dim
         && !a->scatter.indices_are_sorted == !b->scatter.indices_are_sorted
         && !a->scatter.unique_indices == !b->scatter.unique_indices && a->tuple_index == b->tuple_index
         && a->iota_dimension == b->iota_dimension && a->feature_index == b->feature_index
         && memcmp (&a->epsilon, &b->epsilon, sizeof a->epsilon) == 0 && a->comparison == b->comparison
         && g_strcmp0 (a->compare_type, b->compare_type) == 0 && !a->is_stable == !b->is_stable
         && a->fusion_kind == b->fusion_kind
         && !a->has_replica_groups == !b->has_replica_groups && a->n_groups == b->n_groups
         && a->group_size == b->group_size
         && i64_equal (a->replica_groups, b->replica_groups, (int64_t) a->n_groups * a->group_size)
         && !a->use_global_device_ids == !b->use_global_device_ids && a->n_pairs == b->n_pairs
         && i64_equal (a->source_target_pairs, b->source_target_pairs, (int64_t) a->n_pairs * 2)
         && g_strcmp0 (a->custom_call_target, b->custom_call_target) == 0
         && g_strcmp0 (a->backend_config, b->backend_config) == 0
         && !a->custom_call_has_side_effect == !b->custom_call_has_side_effect
         && g_strcmp0 (a->metadata, b->metadata) == 0 && raw_attrs_equal (a->extra_attrs, b->extra_attrs);
}

gboolean
ps_instr_same_value (const PsInstr *a, const PsInstr *b)
{
  if (a->opcode != b->opcode || a->n_operands != b->n_operands || a->n_called != b->n_called
      || !ps_shape_identical (a->shape, b->shape))
    return FALSE;
  for (int i = 0; i < a->n_operands; i++)
    if (a->operands[i] != b->operands[i])
      return FALSE;
  for (int i = 0; i < a->n_called; i++)
    if (a->called[i] != b->called[i])
      return FALSE;
  return attrs_equal (a, b) && sharding_same_text (a->sharding, b->sharding);
}

PsModule *
ps_module_clone (const PsModule *m)
{
  PsModule *c = ps_module_new (m->name);
  c->source_name = g_strdup (m->source_name);
  c->num_partitions = m->num_partitions;
  c->n_prop_to_output = m->n_prop_to_output;
  c->n_prop_to_params = m->n_prop_to_params;
  if (m->n_prop_to_output > 0)
    c->prop_to_output = g_memdup2 (m->prop_to_output, sizeof (gboolean) * (gsize) m->n_prop_to_output);
  if (m->n_prop_to_params > 0)
    c->prop_to_params = g_memdup2 (m->prop_to_params, sizeof (gboolean) * (gsize) m->n_prop_to_params);
  c->entry_layout = g_strdup (m->entry_layout);
  ps_module_copy_aliases (c, m);
  if (m->extra_attrs)
    c->extra_attrs = raw_attrs_copy (m->extra_attrs);

  GHashTable *cmap = g_hash_table_new (g_direct_hash, g_direct_equal);
  GHashTable *imap = g_hash_table_new (g_direct_hash, g_direct_equal);
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *oc = g_ptr_array_index (m->computations, k);
      PsComputation *nc = ps_computation_new (c, oc->name);
      nc->is_entry = oc->is_entry;
      nc->execution_thread = g_strdup (oc->execution_thread);
      g_hash_table_insert (cmap, (gpointer) oc, nc);
      if (m->entry == oc)
        c->entry = nc;
      for (guint i = 0; i < oc->instrs->len; i++)
        {
          const PsInstr *oi = g_ptr_array_index (oc->instrs, i);
          PsInstr *ni = g_new0 (PsInstr, 1);
          ni->id = oi->id;
          ni->name = g_strdup (oi->name);
          ni->opcode = oi->opcode;
          ni->shape = ps_shape_copy (oi->shape);
          ni->parent = nc;
          ni->users = g_ptr_array_new ();
          ps_instr_copy_attrs (ni, oi);
          ni->sharding = oi->sharding ? ps_sharding_copy (oi->sharding) : NULL;
          g_ptr_array_add (nc->instrs, ni);
          name_index_add (c, ni);
          g_hash_table_insert (imap, (gpointer) oi, ni);
        }
    }
  /* Second pass: operands may appear later in program order than users
   * in hand-built modules, so link only once every copy exists. */
  for (guint k = 0; k < m->computations->len; k++)
    {
      const PsComputation *oc = g_ptr_array_index (m->computations, k);
      PsComputation *nc = g_hash_table_lookup (cmap, oc);
      for (guint i = 0; i < oc->instrs->len; i++)
        {
          const PsInstr *oi = g_ptr_array_index (oc->instrs, i);
          PsInstr *ni = g_hash_table_lookup (imap, oi);
          ni->n_operands = oi->n_operands;
          if (oi->n_operands > 0)
            ni->operands = g_new0 (PsInstr *, oi->n_operands);
          for (int j = 0; j < oi->n_operands; j++)
            {
              PsInstr *op = oi->operands[j] ? g_hash_table_lookup (imap, oi->operands[j]) : NULL;
              ni->operands[j] = op;
            }
          /* Users in the original order, so passes that walk users behave
           * the same on a clone. */
          for (guint u = 0; u < oi->users->len; u++)
            {
              PsInstr *nu = g_hash_table_lookup (imap, g_ptr_array_index (oi->users, u));
              if (nu)
                g_ptr_array_add (ni->users, nu);
            }
          ni->n_called = oi->n_called;
          if (oi->n_called > 0)
            ni->called = g_new0 (PsComputation *, oi->n_called);
          for (int j = 0; j < oi->n_called; j++)
            ni->called[j] = oi->called[j] ? g_hash_table_lookup (cmap, oi->called[j]) : NULL;
        }
      for (guint i = 0; i < oc->params->len; i++)
        g_ptr_array_add (nc->params, g_hash_table_lookup (imap, g_ptr_array_index (oc->params, i)));
      nc->root = oc->root ? g_hash_table_lookup (imap, oc->root) : NULL;
    }
  c->next_id = m->next_id;
  g_hash_table_destroy (imap);
  g_hash_table_destroy (cmap);
  return c;
}
