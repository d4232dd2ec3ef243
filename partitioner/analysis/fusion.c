/* Fusion rules (see fusion.h). */
#include "config.h"

#include "common/error.h"
#include "partitioner/analysis/fusion.h"

/* In PsFusionMode order. */
static const char *const mode_names[] = { "xla", "producer", "none", NULL };
static const char *const mode_docs[] = {
  "XLA's rules: single-user producers, cheap producers duplicated into all their consumers, multi-output fusions (a reduce with its shared producer, softmax and norm diamonds, siblings)",
  "an elementwise op joins its single-use producer only",
  "every op its own kernel",
};

const PsParamSpec ps_fusion_param_mode = {
  .section = "options", .key = "fusion", .type = PS_PARAM_CHOICE, .def = "xla",
  .doc = "Fusion of the partitioned step before its cost (doc/compute-model.md)",
  .choice_names = mode_names, .choice_docs = mode_docs
};

const char *
ps_fusion_mode_name (PsFusionMode m)
{
  switch (m)
    {
    case PS_FUSION_MODE_PRODUCER: return "producer";
    case PS_FUSION_MODE_NONE: return "none";
    default: return "xla";
    }
}

gboolean
ps_fusion_mode_parse (const char *name, const char *what, PsFusionMode *out, GError **error)
{
  static const PsFusionMode modes[] = { PS_FUSION_MODE_XLA, PS_FUSION_MODE_PRODUCER, PS_FUSION_MODE_NONE };
  for (guint i = 0; name && i < G_N_ELEMENTS (modes); i++)
    if (g_ascii_strcasecmp (name, ps_fusion_mode_name (modes[i])) == 0)
      {
        *out = modes[i];
        return TRUE;
      }
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s '%s' is not xla, producer or none", what,
               name ? name : "");
  return FALSE;
}

gboolean
ps_fusion_is_expensive (const PsInstr *in)
{
  gboolean fp = ps_shape_is_array (in->shape) && !ps_etype_is_integral (in->shape->etype)
                && in->shape->etype != PS_PRED;
  switch (in->opcode)
    {
    /* cheap in instruction_fusion.cc */
    case PS_OP_ABS: case PS_OP_ADD: case PS_OP_AND: case PS_OP_BITCAST:
    case PS_OP_BITCAST_CONVERT: case PS_OP_BROADCAST: case PS_OP_CEIL: case PS_OP_CLAMP:
    case PS_OP_CLZ: case PS_OP_COMPARE: case PS_OP_COMPLEX: case PS_OP_CONCATENATE:
    case PS_OP_CONSTANT: case PS_OP_CONVERT: case PS_OP_COPY: case PS_OP_DYNAMIC_SLICE:
    case PS_OP_DYNAMIC_UPDATE_SLICE: case PS_OP_FLOOR: case PS_OP_GET_TUPLE_ELEMENT:
    case PS_OP_IMAG: case PS_OP_IOTA: case PS_OP_IS_FINITE: case PS_OP_MAXIMUM:
    case PS_OP_MINIMUM: case PS_OP_MULTIPLY: case PS_OP_NEGATE: case PS_OP_NOT:
    case PS_OP_OR: case PS_OP_PAD: case PS_OP_POPCNT: case PS_OP_REAL:
    case PS_OP_REDUCE_PRECISION: case PS_OP_RESHAPE: case PS_OP_REVERSE:
    case PS_OP_ROUND_NEAREST_AFZ: case PS_OP_ROUND_NEAREST_EVEN: case PS_OP_SELECT:
    case PS_OP_SHIFT_LEFT: case PS_OP_SHIFT_RIGHT_ARITHMETIC: case PS_OP_SHIFT_RIGHT_LOGICAL:
    case PS_OP_SIGN: case PS_OP_SLICE: case PS_OP_SUBTRACT: case PS_OP_TRANSPOSE:
    case PS_OP_TUPLE: case PS_OP_XOR:
      return FALSE;
    /* cheap unless complex */
    case PS_OP_COSINE: case PS_OP_SINE: case PS_OP_TAN:
      return in->shape->etype == PS_C64 || in->shape->etype == PS_C128;
    /* integer division compiles to multiplies and shifts (XLA asks for a
     * constant divisor; podsim takes every integer one as cheap) */
    case PS_OP_DIVIDE: case PS_OP_REMAINDER:
      return fp;
    default:
      return TRUE;
    }
}

gboolean
ps_fusion_consumer_takes_producer (const PsInstr *c)
{
  switch (c->opcode)
    {
    case PS_OP_REDUCE: case PS_OP_REDUCE_WINDOW: case PS_OP_TRANSPOSE: case PS_OP_SLICE:
    case PS_OP_PAD: case PS_OP_CONCATENATE: case PS_OP_COPY: case PS_OP_REVERSE:
    case PS_OP_BROADCAST:
      return TRUE;
    /* XLA's BatchNormExpander (xla/service/batchnorm_expander.cc) rewrites
     * these into reduces and elementwise ops, which fuse their inputs */
    case PS_OP_BATCH_NORM_TRAINING: case PS_OP_BATCH_NORM_INFERENCE: case PS_OP_BATCH_NORM_GRAD:
      return TRUE;
    default:
      return ps_opcode_is_elementwise (c->opcode);
    }
}

/* `p` is the only user of a dot or convolution (through reshapes and
 * bitcasts that only it reads): it becomes that op's output fusion. */
static gboolean
output_of_mxu_op (const PsInstr *p)
{
  for (int i = 0; i < p->n_operands; i++)
    {
      const PsInstr *o = p->operands[i], *via = p;
      for (int d = 0; d < 8 && (o->opcode == PS_OP_RESHAPE || o->opcode == PS_OP_BITCAST)
                      && o->n_operands == 1; d++)
        {
          via = o;
          o = o->operands[0];
        }
      if (o->opcode != PS_OP_DOT && o->opcode != PS_OP_CONVOLUTION)
        continue;
      gboolean only = o->users->len > 0;
      for (guint u = 0; u < o->users->len; u++)
        only = only && g_ptr_array_index (o->users, u) == via;
      if (only)
        return TRUE;
    }
  return FALSE;
}

gboolean
ps_fusion_duplicable (const PsInstr *p)
{
  if (!ps_opcode_is_elementwise (p->opcode) || p->opcode == PS_OP_COPY
      || !ps_shape_is_array (p->shape) || p == p->parent->root || p->users->len < 1)
    return FALSE;
  if (!ps_fusion_widening_convert (p) && (ps_fusion_is_expensive (p) || output_of_mxu_op (p)))
    return FALSE;
  for (guint i = 0; i < p->users->len; i++)
    if (!ps_fusion_consumer_takes_producer (g_ptr_array_index (p->users, i)))
      return FALSE;
  return TRUE;
}

gboolean
ps_fusion_widening_convert (const PsInstr *p)
{
  return p->opcode == PS_OP_CONVERT && p->n_operands == 1
         && ps_shape_bytes (p->operands[0]->shape) < ps_shape_bytes (p->shape);
}

gboolean
ps_fusion_duplicates (const PsInstr *p)
{
  if (!ps_fusion_duplicable (p))
    return FALSE;
  /* XLA's IsAlwaysDuplicable: a widening convert goes into its consumers
   * even when there is one (they read the narrow type); anything else
   * only when it has several (one user: the producer-consumer rule) */
  if (ps_fusion_widening_convert (p))
    return TRUE;
  return !ps_fusion_single_user (p);
}

gboolean
ps_fusion_single_user (const PsInstr *p)
{
  if (p->users->len == 0)
    return FALSE;
  gpointer first = g_ptr_array_index (p->users, 0);
  for (guint i = 1; i < p->users->len; i++)
    if (g_ptr_array_index (p->users, i) != first)
      return FALSE;
  return TRUE;
}

gboolean
ps_fusion_reduce_row_wise (const PsInstr *r)
{
  if (r->opcode != PS_OP_REDUCE || r->n_operands != 2 || !ps_shape_is_array (r->shape)
      || !ps_shape_is_array (r->operands[0]->shape))
    return FALSE;
  int rank = r->operands[0]->shape->rank, k = r->dimensions.n;
  if (k < 1 || k >= rank)
    return FALSE;
  for (int d = rank - k; d < rank; d++)
    if (!ps_ints_contains (&r->dimensions, d))
      return FALSE;
  return TRUE;
}

static gboolean
is_bn_with_stats (const PsInstr *in)
{
  return (in->opcode == PS_OP_BATCH_NORM_TRAINING || in->opcode == PS_OP_BATCH_NORM_GRAD)
         && in->n_operands > 0 && !ps_shape_is_array (in->shape) && in->shape->n_elems == 3
         && ps_shape_is_array (in->shape->elems[0]);
}

/* Are all readers of element `idx` of tuple-valued `v` (idx < 0: of the
 * array `v`) consumers that fuse their producers? */
static gboolean
readers_fuse (const PsInstr *v, int64_t idx, int depth)
{
  if (depth > 16 || v == v->parent->root || v->users->len == 0)
    return FALSE;
  for (guint i = 0; i < v->users->len; i++)
    {
      const PsInstr *u = g_ptr_array_index (v->users, i);
      if (u->opcode == PS_OP_GET_TUPLE_ELEMENT)
        {
          if (idx >= 0 && u->tuple_index == idx && !readers_fuse (u, -1, depth + 1))
            return FALSE;
          if (idx < 0)
            return FALSE;
          continue;
        }
      if (idx >= 0)
        return FALSE;     /* the whole tuple read as such */
      if (u->opcode == PS_OP_TUPLE)
        {
          for (int k = 0; k < u->n_operands; k++)
            if (u->operands[k] == v && !readers_fuse (u, k, depth + 1))
              return FALSE;
          continue;
        }
      if (!ps_opcode_is_elementwise (u->opcode) && !ps_fusion_consumer_takes_producer (u))
        return FALSE;
      if (u->opcode == PS_OP_BATCH_NORM_TRAINING || u->opcode == PS_OP_BATCH_NORM_GRAD
          || u->opcode == PS_OP_BATCH_NORM_INFERENCE)
        return FALSE;
    }
  return TRUE;
}

gboolean
ps_fusion_bn_normalize_fused (const PsInstr *bn)
{
  return is_bn_with_stats (bn) && readers_fuse (bn, 0, 0);
}

const PsInstr *
ps_fusion_bn_element0 (const PsInstr *v)
{
  int64_t idx = -1;
  for (int d = 0; d < 16 && v; d++)
    {
      if (idx < 0)
        {
          if (v->opcode != PS_OP_GET_TUPLE_ELEMENT || v->n_operands != 1)
            return NULL;
          idx = v->tuple_index;
          v = v->operands[0];
          continue;
        }
      if (v->opcode == PS_OP_TUPLE)
        {
          if (idx >= v->n_operands)
            return NULL;
          v = v->operands[idx];
          idx = -1;
          continue;
        }
      return idx == 0 && is_bn_with_stats (v) ? v : NULL;
    }
  return NULL;
}
