/* Cost analysis: per-instruction FLOPs and vector ops, the fusion rule of
 * cost.h, and the HBM traffic of each fusion. */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "partitioner/analysis/cost.h"
#include "partitioner/analysis/cost_private.h"
#include "common/checked.h"

void
ps_cost_options_init (PsCostOptions *opts)
{
  memset (opts, 0, sizeof *opts);
}

/* ---- classification ------------------------------------------------------------ */

/* A dynamic-slice whose every use (through reshapes) is by an op that can
 * read the slice itself: fused into each consumer like a broadcast (XLA
 * fuses slices into their consumers, and a loop reading layer t of a
 * stacked weight reads just that layer). One that is returned or put in a
 * tuple is a copy of its own. */
static gboolean
slice_read_in_place (const PsInstr *in, int depth)
{
  if (depth > 8 || in == in->parent->root || in->users->len == 0)
    return FALSE;
  for (guint i = 0; i < in->users->len; i++)
    {
      const PsInstr *u = g_ptr_array_index (in->users, i);
      if (u->opcode == PS_OP_TUPLE || u->opcode == PS_OP_WHILE || u->opcode == PS_OP_CALL
          || u->opcode == PS_OP_FUSION
          || u->opcode == PS_OP_CONDITIONAL || u->opcode == PS_OP_DYNAMIC_UPDATE_SLICE)
        return FALSE;
      if ((u->opcode == PS_OP_RESHAPE || u->opcode == PS_OP_BITCAST)
          && !slice_read_in_place (u, depth + 1))
        return FALSE;
    }
  return TRUE;
}

/* Integer and predicate scalars (loop counters and conditions, slice
 * offsets) are computed by the TensorCore's scalar unit, which runs the
 * program's control and address arithmetic alongside the vector and matrix
 * units (Jouppi et al., "A Domain-Specific Supercomputer for Training Deep
 * Neural Networks", CACM 2020: the core sequencer and its scalar unit), so
 * they launch no fused op and move no HBM data. */
static gboolean
scalar_unit_op (const PsInstr *in)
{
  const PsShape *s = in->shape;
  return ps_shape_is_array (s) && s->rank == 0
         && (ps_etype_is_integral (s->etype) || s->etype == PS_PRED)
         && (ps_opcode_is_elementwise (in->opcode) || in->opcode == PS_OP_COMPARE
             || in->opcode == PS_OP_CONVERT);
}

int64_t
ps_cost_ragged_groups (const PsInstr *in)
{
  if (in->opcode != PS_OP_RAGGED_DOT || in->n_operands < 3)
    return 1;
  const char *r = ps_instr_get_raw_attr (in, "lhs_ragged_dims");
  int64_t d = r ? g_ascii_strtoll (r + (r[0] == '{'), NULL, 10) : -1;
  const PsShape *gs = in->operands[2]->shape;
  if (!ps_ints_contains (&in->dot.lhs_contracting, d) || !ps_shape_is_array (gs) || gs->rank < 1)
    return 1;
  return MAX (gs->dims[gs->rank - 1], 1);
}

static PsCostClass classify (const PsInstr *in);

/* A fusion instruction read from a file (XLA's own fusion decision) is one
 * kernel: of the kind of its most telling member (dot > convolution >
 * reduce > data movement > other > elementwise, as the lowering ranks a
 * fusion's members). */
static PsCostClass
fusion_class (const PsInstr *in)
{
  static const int rank[] = {
    [PS_COST_MATMUL] = 6, [PS_COST_CONV] = 5, [PS_COST_REDUCE] = 4,
    [PS_COST_DATA_MOVEMENT] = 3, [PS_COST_OTHER] = 2, [PS_COST_ELEMENTWISE] = 1,
  };
  PsCostClass best = PS_COST_ELEMENTWISE;
  const PsComputation *c = in->n_called > 0 ? in->called[0] : NULL;
  for (guint i = 0; c && i < c->instrs->len; i++)
    {
      const PsInstr *x = g_ptr_array_index (c->instrs, i);
      if (x->opcode == PS_OP_FUSION)
        continue;
      PsCostClass k = classify (x);
      if (k < G_N_ELEMENTS (rank) && rank[k] > rank[best])
        best = k;
    }
  return best;
}

/* The dot or convolution of a fusion (the one with the most FLOPs: its
 * first when several), or the instruction itself when it is not a fusion;
 * NULL when a fusion has none. */
const PsInstr *
ps_cost_mxu_op (const PsInstr *in)
{
  if (in->opcode != PS_OP_FUSION)
    return in->opcode == PS_OP_DOT || in->opcode == PS_OP_RAGGED_DOT || in->opcode == PS_OP_CONVOLUTION ? in : NULL;
  const PsComputation *c = in->n_called > 0 ? in->called[0] : NULL;
  const PsInstr *best = NULL;
  int64_t best_e = -1;
  for (guint i = 0; c && i < c->instrs->len; i++)
    {
      const PsInstr *x = g_ptr_array_index (c->instrs, i);
      if (x->opcode != PS_OP_DOT && x->opcode != PS_OP_CONVOLUTION)
        continue;
      int64_t e = ps_shape_elements (x->shape) * MAX (ps_shape_elements (x->operands[0]->shape), 1);
      if (e > best_e)
        {
          best = x;
          best_e = e;
        }
    }
  return best;
}

static PsCostClass
classify (const PsInstr *in)
{
  if (in->opcode == PS_OP_DYNAMIC_SLICE && slice_read_in_place (in, 0))
    return PS_COST_INLINED;
  if (scalar_unit_op (in))
    return PS_COST_FREE;
  switch (in->opcode)
    {
    case PS_OP_PARAMETER: case PS_OP_CONSTANT: case PS_OP_GET_TUPLE_ELEMENT:
    case PS_OP_TUPLE: case PS_OP_BITCAST: case PS_OP_RESHAPE: case PS_OP_AFTER_ALL:
    case PS_OP_PARTITION_ID: case PS_OP_REPLICA_ID: case PS_OP_OPTIMIZATION_BARRIER:
    case PS_OP_DOMAIN:
      return PS_COST_FREE;
    /* XLA's HloCostAnalysis gives these no flops and no bytes
     * (HandleGetDimensionSize, HandleSetDimensionSize,
     * HandleRngGetAndUpdateState in xla/service/hlo_cost_analysis.cc), and
     * its DynamicPadder replaces the two dimension-size ops by a constant
     * or the dynamic size and by their operand (xla/service/dynamic_padder.cc) */
    case PS_OP_GET_DIMENSION_SIZE: case PS_OP_SET_DIMENSION_SIZE: case PS_OP_RNG_GET_AND_UPDATE_STATE:
      return PS_COST_FREE;
    case PS_OP_RAGGED_DOT:
      return PS_COST_MATMUL;
    case PS_OP_BROADCAST: case PS_OP_IOTA:
      return PS_COST_INLINED;
    case PS_OP_DOT:
      return PS_COST_MATMUL;
    case PS_OP_CONVOLUTION:
      return PS_COST_CONV;
    case PS_OP_REDUCE: case PS_OP_REDUCE_WINDOW: case PS_OP_SELECT_AND_SCATTER:
      return PS_COST_REDUCE;
    case PS_OP_COPY: case PS_OP_TRANSPOSE: case PS_OP_SLICE: case PS_OP_DYNAMIC_SLICE:
    case PS_OP_DYNAMIC_UPDATE_SLICE: case PS_OP_PAD: case PS_OP_CONCATENATE:
    case PS_OP_GATHER: case PS_OP_SCATTER: case PS_OP_REVERSE: case PS_OP_DYNAMIC_RESHAPE:
    case PS_OP_BITCAST_CONVERT:
      return PS_COST_DATA_MOVEMENT;
    case PS_OP_FUSION:
      return fusion_class (in);
    case PS_OP_WHILE: case PS_OP_CALL: case PS_OP_CONDITIONAL:
      return PS_COST_CONTROL;
    default:
      if (ps_opcode_is_collective (in->opcode))
        return PS_COST_COLLECTIVE;
      if (ps_opcode_is_elementwise (in->opcode))
        return PS_COST_ELEMENTWISE;
      return PS_COST_OTHER;
    }
}

/* A producer whose result an elementwise consumer can take over. */
static gboolean
fusible_producer (const PsInstr *p, PsCostClass k)
{
  switch (k)
    {
    case PS_COST_MATMUL: case PS_COST_CONV: case PS_COST_ELEMENTWISE: case PS_COST_REDUCE:
      return TRUE;
    case PS_COST_DATA_MOVEMENT:
      /* in-place updates keep their buffer */
      return p->opcode != PS_OP_DYNAMIC_UPDATE_SLICE && p->opcode != PS_OP_SCATTER;
    default:
      return FALSE;
    }
}


/* HBM bytes a kernel moves for a value of shape `s`: the array as the
 * TPU lays it out in tiles (tiling.h; the DMA moves whole tiles, padding
 * included), dense bytes under PS_TILING_NONE. */
static uint64_t
bytes_of (PsTilingMode tiling, const PsShape *s)
{
  int64_t b = ps_tiling_bytes (s, tiling);
  return b > 0 ? (uint64_t) b : 0;
}

static uint64_t
elems_of (const PsShape *s)
{
  if (!ps_shape_is_array (s))
    {
      uint64_t n = 0;
      for (int i = 0; i < s->n_elems; i++)
        n += elems_of (s->elems[i]);
      return n;
    }
  int64_t e = ps_shape_elements (s);
  return e > 0 ? (uint64_t) e : 0;
}

/* Operations of a reducer computation per combined element. */
static uint64_t
reducer_ops (const PsInstr *in)
{
  if (in->n_called < 1 || !in->called[0])
    return 1;
  uint64_t n = 0;
  const PsComputation *c = in->called[0];
  for (guint i = 0; i < c->instrs->len; i++)
    {
      const PsInstr *x = g_ptr_array_index (c->instrs, i);
      if (x->opcode != PS_OP_PARAMETER && x->opcode != PS_OP_TUPLE
          && x->opcode != PS_OP_CONSTANT && x->opcode != PS_OP_GET_TUPLE_ELEMENT)
        n++;
    }
  return n ? n : 1;
}

/* #{i in [0, n) : 0 <= i * step + c < extent and (i * step + c) % mod == 0}
 * for step, mod >= 1, in O(log mod): the i in range form an interval, and
 * the congruence i * step = -c (mod mod) picks every (mod / g)-th of them
 * (g = gcd (step, mod)) when g divides c, none otherwise. */
static int64_t
count_hits (int64_t n, int64_t step, __int128 c, int64_t extent, int64_t mod)
{
  /* c comes from attributes a file wrote: 128 bits, no overflow. */
  __int128 top = (__int128) extent - 1 - c;
  if (n <= 0 || top < 0)
    return 0;
  __int128 lo128 = c >= 0 ? 0 : (-c + step - 1) / step;
  __int128 hi128 = MIN ((__int128) n - 1, top / step);
  if (hi128 < lo128)
    return 0;
  int64_t lo = (int64_t) lo128, hi = (int64_t) hi128;
  if (mod == 1)
    return hi - lo + 1;
  int64_t g = ps_gcd64 (step, mod);
  if (c % g != 0)
    return 0;
  int64_t cg = (int64_t) (c / g % mod); /* |c / g| mod m is all that matters */
  int64_t m = mod / g;
  /* inverse of (step / g) modulo m, by extended Euclid */
  int64_t a = (step / g) % m, r0 = m, r1 = a, t0 = 0, t1 = 1;
  while (r1 != 0)
    {
      int64_t q = r0 / r1, t;
      t = r0 - q * r1, r0 = r1, r1 = t;
      t = t0 - q * t1, t0 = t1, t1 = t;
    }
  int64_t inv = ((t0 % m) + m) % m;
  int64_t rhs = ((-cg) % m + m) % m;
  int64_t i0 = (int64_t) ((unsigned __int128) rhs * (unsigned __int128) inv % (unsigned __int128) m);
  int64_t first = lo + ((i0 - lo % m) % m + m) % m;
  return first > hi ? 0 : (hi - first) / m + 1;
}

/* Window positions over one spatial dim that hit a real input element
 * (not padding, not a base-dilation hole): for each step along the shorter
 * of the output and the window, the hits along the other one in closed
 * form. Sizes are read from the program, so the work is capped (2^24 steps,
 * about 0.1 s; more than any real window): a dim longer than that on both
 * sides is costed from its first 2^24 steps, scaled. */
static uint64_t
valid_window_pairs (int64_t in_size, int64_t out_size, const PsWindowDim *w)
{
  int64_t stride = w->stride > 0 ? w->stride : 1;
  int64_t bdil = w->base_dilation > 0 ? w->base_dilation : 1;
  int64_t wdil = w->window_dilation > 0 ? w->window_dilation : 1;
  int64_t extent = in_size > 0 ? (in_size - 1) * bdil + 1 : 0;
  gboolean over_window = w->size <= out_size;
  int64_t steps = over_window ? w->size : out_size, cap = INT64_C (1) << 24;
  uint64_t n = 0;
  for (int64_t i = 0; i < MIN (steps, cap); i++)
    n += (uint64_t) (over_window
                     ? count_hits (out_size, stride, (__int128) i * wdil - w->pad_lo, extent, bdil)
                     : count_hits (w->size, wdil, (__int128) i * stride - w->pad_lo, extent, bdil));
  if (steps > cap)
    n = (uint64_t) ((double) n * ((double) steps / (double) cap));
  return n;
}

static uint64_t
conv_macs (const PsInstr *in)
{
  const PsShape *out = in->shape, *lhs = in->operands[0]->shape, *rhs = in->operands[1]->shape;
  const PsConvDims *d = &in->conv;
  if (!d->present || in->window.n != d->n_spatial)
    {
      /* no dimension numbers: every output element uses the whole kernel
       * except its output-feature dimension (the last one by default) */
      uint64_t k = elems_of (rhs);
      uint64_t of = rhs->rank > 0 ? (uint64_t) rhs->dims[rhs->rank - 1] : 1;
      return elems_of (out) * (of ? k / of : k);
    }
  uint64_t macs = (uint64_t) out->dims[d->out_batch] * (uint64_t) out->dims[d->out_feature]
                  * (uint64_t) rhs->dims[d->k_in_feature];
  for (int i = 0; i < d->n_spatial; i++)
    macs *= valid_window_pairs (lhs->dims[d->in_spatial[i]], out->dims[d->out_spatial[i]],
                                &in->window.dims[i]);
  return macs;
}

static void
own_work (const PsInstr *in, PsCostClass k, PsTilingMode tiling, PsCostCounts *c)
{
  switch (k)
    {
    case PS_COST_ELEMENTWISE:
      c->flops = c->vector_ops = elems_of (in->shape);
      break;
    case PS_COST_MATMUL:
      {
        uint64_t contract = 1;
        const PsShape *lhs = in->operands[0]->shape;
        for (int i = 0; i < in->dot.lhs_contracting.n; i++)
          contract *= (uint64_t) lhs->dims[in->dot.lhs_contracting.v[i]];
        c->flops = 2 * elems_of (in->shape) * contract;
        /* XLA's HandleRaggedDot: the dot's flops over the result without
         * its group dim, which a result has when the ragged dim is
         * contracting (each group contracts its own slice); the group sizes
         * are data, so their bound, a full ragged dim, is what is costed */
        int64_t g = ps_cost_ragged_groups (in);
        if (g > 1)
          c->flops /= (uint64_t) g;
        break;
      }
    case PS_COST_CONV:
      c->flops = 2 * conv_macs (in);
      break;
    case PS_COST_REDUCE:
      if (in->opcode == PS_OP_REDUCE)
        c->flops = elems_of (in->operands[0]->shape) * reducer_ops (in);
      else if (in->opcode == PS_OP_REDUCE_WINDOW)
        {
          uint64_t w = 1;
          for (int i = 0; i < in->window.n; i++)
            w *= (uint64_t) MAX (in->window.dims[i].size, 1);
          c->flops = elems_of (in->shape) * w * reducer_ops (in);
        }
      else
        c->flops = 2 * elems_of (in->operands[0]->shape);
      c->vector_ops = c->flops;
      break;
    case PS_COST_COLLECTIVE:
      if (in->opcode == PS_OP_ALL_REDUCE || in->opcode == PS_OP_REDUCE_SCATTER)
        for (int i = 0; i < in->n_operands; i++)
          c->vector_ops += elems_of (in->operands[i]->shape);
      for (int i = 0; i < in->n_operands; i++)
        c->read_bytes += bytes_of (tiling, in->operands[i]->shape);
      c->write_bytes = bytes_of (tiling, in->shape);
      break;
    case PS_COST_OTHER:
      if (in->n_operands > 0 && (in->opcode == PS_OP_BATCH_NORM_TRAINING
                                 || in->opcode == PS_OP_BATCH_NORM_INFERENCE
                                 || in->opcode == PS_OP_BATCH_NORM_GRAD))
        {
          /* Vector ops per operand element, as the ops of the expansion
           * spmd_norm.c writes: training sums x and x^2 (a square and two
           * adds) and applies (x - mean) * m + offset (3); inference only
           * the latter; grad two sums (x - mean, dy (x - mean), two adds)
           * and dx (4). The per-feature terms are negligible. */
          uint64_t per = in->opcode == PS_OP_BATCH_NORM_TRAINING ? 6
                         : in->opcode == PS_OP_BATCH_NORM_INFERENCE ? 3 : 8;
          c->flops = c->vector_ops = per * elems_of (in->operands[0]->shape);
        }
      else if (in->opcode == PS_OP_SORT && in->n_operands > 0)
        {
          const PsShape *s = in->operands[0]->shape;
          int64_t dim = in->dimensions.n ? in->dimensions.v[0] : s->rank - 1;
          double len = s->rank > 0 && dim >= 0 && dim < s->rank ? (double) s->dims[dim] : 1;
          c->vector_ops = (uint64_t) ((double) elems_of (s) * ceil (log2 (MAX (len, 2.0))));
        }
      break;
    default:
      break;
    }
}

/* ---- trip counts -------------------------------------------------------------------- */

static gboolean
literal_int (const PsInstr *in, int64_t *out)
{
  if (!in || in->opcode != PS_OP_CONSTANT || !in->literal || in->literal->n != 1)
    return FALSE;
  const void *p = in->literal->data;
  switch (in->literal->etype)
    {
    case PS_S8: *out = *(const int8_t *) p; return TRUE;
    case PS_S16: *out = *(const int16_t *) p; return TRUE;
    case PS_S32: *out = *(const int32_t *) p; return TRUE;
    case PS_S64: *out = *(const int64_t *) p; return TRUE;
    case PS_U8: *out = *(const uint8_t *) p; return TRUE;
    case PS_U16: *out = *(const uint16_t *) p; return TRUE;
    case PS_U32: *out = *(const uint32_t *) p; return TRUE;
    case PS_U64: *out = (int64_t) *(const uint64_t *) p; return TRUE;
    default: return FALSE;
    }
}

/* gte(parameter 0, index) of a loop computation: the tuple index, or -1. */
static int64_t
counter_index (const PsInstr *x)
{
  if (x && x->opcode == PS_OP_GET_TUPLE_ELEMENT && x->n_operands == 1
      && x->operands[0]->opcode == PS_OP_PARAMETER)
    return x->tuple_index;
  return -1;
}

gboolean
ps_while_trip_count (const PsInstr *w, int64_t *out)
{
  g_return_val_if_fail (w && w->opcode == PS_OP_WHILE, FALSE);
  /* backend_config="..." keeps its escapes; backend_config={...} is kept
   * verbatim as a raw attribute: accept "n":"7", \"n\":\"7\" and "n":7 */
  const char *cfg = w->backend_config ? w->backend_config
                    : ps_instr_get_raw_attr (w, "backend_config");
  const char *k = cfg ? strstr (cfg, "known_trip_count") : NULL;
  const char *np = k ? strstr (k, "n\\\"") : NULL;
  if (k && !np)
    np = strstr (k, "n\"");
  if (np)
    {
      np++;
      while (*np == ':' || *np == ' ' || *np == '"' || *np == '\\')
        np++;
      if (g_ascii_isdigit (*np))
        {
          /* Out of range saturates, so the caller's bound refuses it. */
          errno = 0;
          *out = g_ascii_strtoll (np, NULL, 10);
          if (errno == ERANGE)
            *out = G_MAXINT64;
          return TRUE;
        }
    }
  if (w->n_called < 2 || w->n_operands < 1)
    return FALSE;
  const PsInstr *cmp = w->called[0]->root, *body_root = w->called[1]->root;
  const PsInstr *init = w->operands[0];
  if (!cmp || cmp->opcode != PS_OP_COMPARE || cmp->n_operands != 2 || !body_root
      || body_root->opcode != PS_OP_TUPLE || init->opcode != PS_OP_TUPLE)
    return FALSE;
  PsCompareDir dir = cmp->comparison;
  int64_t idx = counter_index (cmp->operands[0]), limit;
  if (idx >= 0 && literal_int (cmp->operands[1], &limit))
    ;
  else if ((idx = counter_index (cmp->operands[1])) >= 0
           && literal_int (cmp->operands[0], &limit))
    {
      /* limit OP counter: mirror it to counter OP' limit */
      dir = dir == PS_CMP_GT ? PS_CMP_LT : dir == PS_CMP_GE ? PS_CMP_LE
            : dir == PS_CMP_LT ? PS_CMP_GT : dir == PS_CMP_LE ? PS_CMP_GE : dir;
    }
  else
    return FALSE;
  if (idx >= init->n_operands || idx >= body_root->n_operands)
    return FALSE;
  int64_t start, step;
  if (!literal_int (init->operands[idx], &start))
    return FALSE;
  const PsInstr *upd = body_root->operands[idx];
  if (!upd || (upd->opcode != PS_OP_ADD && upd->opcode != PS_OP_SUBTRACT) || upd->n_operands != 2)
    return FALSE;
  if (counter_index (upd->operands[0]) == idx && literal_int (upd->operands[1], &step))
    ;
  else if (upd->opcode == PS_OP_ADD && counter_index (upd->operands[1]) == idx
           && literal_int (upd->operands[0], &step))
    ;
  else
    return FALSE;
  if (upd->opcode == PS_OP_SUBTRACT)
    step = -step;
  int64_t n;
  switch (dir)
    {
    case PS_CMP_LT: n = step > 0 ? (limit - start + step - 1) / step : -1; break;
    case PS_CMP_LE: n = step > 0 ? (limit - start) / step + 1 : -1; break;
    case PS_CMP_GT: n = step < 0 ? (start - limit - step - 1) / -step : -1; break;
    case PS_CMP_GE: n = step < 0 ? (start - limit) / -step + 1 : -1; break;
    case PS_CMP_NE: n = step != 0 && (limit - start) % step == 0 ? (limit - start) / step : -1; break;
    default: return FALSE;
    }
  if (n < 0)
    {
      if ((dir == PS_CMP_LT && step > 0) || (dir == PS_CMP_GT && step < 0))
        n = 0;
      else
        return FALSE;
    }
  *out = MAX (n, 0);
  return TRUE;
}

/* ---- fusion and traffic ---------------------------------------------------------------- */

static PsCost *
cost_of (PsCostAnalysis *a, const PsInstr *in)
{
  return ps_cost_lookup (a, in);
}

static void
join (PsCostAnalysis *a, PsInstr *consumer, PsInstr *producer)
{
  PsCost *pc = cost_of (a, producer), *cc = cost_of (a, consumer);
  GPtrArray *group = NULL;
  g_hash_table_steal_extended (a->members, producer, NULL, (gpointer *) &group);
  GPtrArray *mine = g_hash_table_lookup (a->members, consumer);
  /* producer's members first: program order */
  for (guint i = 0; i < mine->len; i++)
    g_ptr_array_add (group, g_ptr_array_index (mine, i));
  g_hash_table_insert (a->members, consumer, group);
  /* members learn their root once the computation is done (set_roots):
   * updating them here would make long chains quadratic */
  pc->fused = TRUE;
  cc->head = pc->head;
}

static void
set_roots (PsCostAnalysis *a, GPtrArray *order)
{
  for (guint i = 0; i < order->len; i++)
    {
      PsInstr *root = g_ptr_array_index (order, i);
      GPtrArray *g = g_hash_table_lookup (a->members, root);
      for (guint j = 0; g && j < g->len; j++)
        {
          PsCost *m = cost_of (a, g_ptr_array_index (g, j));
          m->root = root;
          m->fused = g_ptr_array_index (g, j) != root;
        }
    }
}

static gboolean
group_all_elementwise (PsCostAnalysis *a, const PsInstr *root)
{
  GPtrArray *g = g_hash_table_lookup (a->members, root);
  for (guint i = 0; g && i < g->len; i++)
    if (cost_of (a, g_ptr_array_index (g, i))->klass != PS_COST_ELEMENTWISE)
      return FALSE;
  return g != NULL;
}

/* The producer behind operand `p` of a consumer, looking through
 * reshapes and bitcasts that only this consumer reads (XLA treats them as
 * bitcasts inside a fusion); chain[0..*n) receives those, consumer side
 * first. */
static PsInstr *
through_bitcasts (PsCostAnalysis *a, PsInstr *p, PsInstr **chain, int *n)
{
  *n = 0;
  while (*n < 8 && (p->opcode == PS_OP_RESHAPE || p->opcode == PS_OP_BITCAST)
         && p->n_operands == 1 && ps_fusion_single_user (p) && p != p->parent->root)
    {
      PsCost *rc = cost_of (a, p);
      if (!rc || rc->fused)
        break;
      chain[(*n)++] = p;
      p = p->operands[0];
    }
  return p;
}

/* XLA mode: the element behind get-tuple-element(tuple(...)) when this
 * consumer is its only reader: XLA's TupleSimplifier
 * (xla/service/tuple_simplifier.cc) replaces such a get-tuple-element by
 * the element itself (a sharded batch norm's output, packed with its
 * statistics), so the element's producer fuses into the consumer; the
 * get-tuple-element and the tuple join the fusion (appended to chain),
 * and the tuple's other elements stay outside it. */
static PsInstr *
through_tuple (PsCostAnalysis *a, PsInstr *p, PsInstr **chain, int *n)
{
  if (*n > 6 || p->opcode != PS_OP_GET_TUPLE_ELEMENT || p->n_operands != 1
      || !ps_fusion_single_user (p) || p == p->parent->root)
    return p;
  PsInstr *t = p->operands[0];
  PsCost *pc = cost_of (a, p), *tc = cost_of (a, t);
  if (t->opcode != PS_OP_TUPLE || t == t->parent->root || !pc || pc->fused || !tc || tc->fused
      || p->tuple_index < 0 || p->tuple_index >= t->n_operands)
    return p;
  for (guint k = 0; k < t->users->len; k++)
    {
      const PsInstr *u = g_ptr_array_index (t->users, k);
      if (u->opcode != PS_OP_GET_TUPLE_ELEMENT || (u != p && u->tuple_index == p->tuple_index))
        return p;
    }
  PsInstr *q = t->operands[p->tuple_index];
  for (int k = 0; k < t->n_operands; k++)
    if (k != p->tuple_index && t->operands[k] == q)
      return p;
  chain[(*n)++] = p;
  chain[(*n)++] = t;
  return q;
}

/* consumer joins producer's fusion, with the bitcasts between them. */
static void
join_chain (PsCostAnalysis *a, PsInstr *consumer, PsInstr *producer, PsInstr **chain, int n)
{
  PsInstr *prev = producer;
  for (int k = n - 1; k >= 0; k--)
    {
      join (a, chain[k], prev);
      prev = chain[k];
    }
  join (a, consumer, prev);
}

/* XLA mode: a batch-norm-inference is elementwise for fusion. XLA's
 * BatchNormExpander (xla/service/batchnorm_expander.cc,
 * HandleBatchNormInference) rewrites it into (x - mean) * rsqrt(var + eps)
 * * scale + offset with the per-feature operands broadcast, all elementwise,
 * so producer-consumer fusion takes its producer of x and puts it into its
 * elementwise consumer (rule 9 of cost.h for the training and grad forms). */
static gboolean
bn_inference_elementwise (const PsCostAnalysis *a, const PsInstr *in)
{
  return a->opts.fusion == PS_FUSION_MODE_XLA && in->opcode == PS_OP_BATCH_NORM_INFERENCE
         && in->n_operands == 5 && ps_shape_is_array (in->shape);
}

static void
fuse (PsCostAnalysis *a, PsInstr *in, PsCost *c)
{
  const PsComputation *comp = in->parent;
  /* none keeps rule 4: an in-place update is how the buffer is written,
   * not a fusion choice */
  if ((c->klass == PS_COST_ELEMENTWISE || bn_inference_elementwise (a, in))
      && a->opts.fusion != PS_FUSION_MODE_NONE)
    {
      for (int i = 0; i < in->n_operands; i++)
        {
          PsInstr *chain[8];
          int nc;
          PsInstr *p = through_bitcasts (a, in->operands[i], chain, &nc);
          if (a->opts.fusion == PS_FUSION_MODE_XLA)
            p = through_tuple (a, p, chain, &nc);
          PsCost *pc = cost_of (a, p);
          if (!pc || pc->fused || !(fusible_producer (p, pc->klass) || bn_inference_elementwise (a, p))
              || p == comp->root
              || !ps_fusion_single_user (p) || elems_of (p->shape) != elems_of (in->shape)
              || !ps_shape_is_array (p->shape))
            continue;
          join_chain (a, in, p, chain, nc);
          return;
        }
    }
  else if (in->opcode == PS_OP_DYNAMIC_UPDATE_SLICE && in->n_operands >= 2)
    {
      /* XLA's in-place dynamic-update-slice fusion: the update is computed
       * straight into the buffer (a loop writing one layer's slice of a
       * stacked value). */
      PsInstr *chain[8];
      int nc;
      PsInstr *p = through_bitcasts (a, in->operands[1], chain, &nc);
      PsCost *pc = cost_of (a, p);
      if (pc && !pc->fused && fusible_producer (p, pc->klass) && p != comp->root
          && ps_fusion_single_user (p) && ps_shape_is_array (p->shape) && p->opcode != PS_OP_PARAMETER)
        join_chain (a, in, p, chain, nc);
    }
  else if (in->opcode == PS_OP_REDUCE && in->n_operands >= 1 && a->opts.fusion != PS_FUSION_MODE_NONE)
    {
      PsInstr *p = in->operands[0];
      PsCost *pc = cost_of (a, p);
      if (pc && !pc->fused && p != comp->root && ps_fusion_single_user (p)
          && group_all_elementwise (a, p))
        join (a, in, p);
    }
}

/* Bytes a fusion reads when it takes value `v` from outside. */
static uint64_t
value_read_bytes (PsCostAnalysis *a, const PsInstr *v)
{
  const PsCost *c = cost_of (a, v);
  if (c && c->duplicated)
    {
      uint64_t n = 0;
      for (int i = 0; i < v->n_operands; i++)
        {
          gboolean again = FALSE;
          for (int j = 0; j < i; j++)
            again = again || v->operands[j] == v->operands[i];
          if (!again)
            n += value_read_bytes (a, v->operands[i]);
        }
      return n;
    }
  if (c && c->klass == PS_COST_INLINED)
    {
      if (v->opcode == PS_OP_DYNAMIC_SLICE && v->n_operands >= 1)
        return MIN (bytes_of (a->opts.tiling, v->shape), value_read_bytes (a, v->operands[0]));
      return v->opcode == PS_OP_BROADCAST && v->n_operands == 1
             ? value_read_bytes (a, v->operands[0]) : 0;
    }
  return bytes_of (a->opts.tiling, v->shape);
}

/* Bytes a fusion reads for outside value `o` that it has not read yet
 * (`seen`); a duplicated producer is computed inside the fusion, from its
 * own operands, and its work is charged to the fusion's root `rc`. */
static uint64_t
outside_read (PsCostAnalysis *a, const PsInstr *o, GHashTable *inside, GHashTable *seen, PsCost *rc,
              int depth)
{
  if (g_hash_table_contains (seen, o) || g_hash_table_contains (inside, o))
    return 0;
  g_hash_table_add (seen, (gpointer) o);
  const PsCost *oc = cost_of (a, o);
  /* a broadcast of a value the fusion computes (a multi-output fusion's
   * reduce read back by its normalization) reads nothing from HBM */
  if (oc && oc->klass == PS_COST_INLINED && o->opcode == PS_OP_BROADCAST && o->n_operands == 1
      && g_hash_table_contains (inside, o->operands[0]))
    return 0;
  const PsInstr *bn = depth <= 64 ? ps_fusion_bn_element0 (o) : NULL;
  const PsCost *bc = bn ? cost_of (a, bn) : NULL;
  if (bc && bc->bn_fused)
    {
      /* element 0 computed here from the op's operands and statistics */
      rc->own.flops += bc->bn_rest.flops;
      rc->own.vector_ops += bc->bn_rest.vector_ops;
      uint64_t n = 0;
      for (int i = 0; i < bn->n_operands; i++)
        n += outside_read (a, bn->operands[i], inside, seen, rc, depth + 1);
      if (g_hash_table_add (seen, (gpointer) bn))
        for (int e = 1; e < bn->shape->n_elems; e++)
          n += bytes_of (a->opts.tiling, bn->shape->elems[e]);
      return n;
    }
  if (!oc || !oc->duplicated || depth > 64)
    return value_read_bytes (a, o);
  rc->own.flops += oc->dup.flops;
  rc->own.vector_ops += oc->dup.vector_ops;
  uint64_t n = 0;
  for (int i = 0; i < o->n_operands; i++)
    n += outside_read (a, o->operands[i], inside, seen, rc, depth + 1);
  return n;
}

static void
fusion_traffic (PsCostAnalysis *a, const PsInstr *root)
{
  GPtrArray *g = g_hash_table_lookup (a->members, root);
  PsCost *rc = cost_of (a, root);
  g_autoptr (GHashTable) inside = g_hash_table_new (NULL, NULL);
  g_autoptr (GHashTable) seen = g_hash_table_new (NULL, NULL);
  for (guint i = 0; i < g->len; i++)
    {
      const PsCost *mc = cost_of (a, g_ptr_array_index (g, i));
      g_hash_table_add (inside, g_ptr_array_index (g, i));
      /* a duplicated producer a multi-output fusion holds: its copy */
      if (mc->duplicated && mc->fused)
        {
          rc->own.flops += mc->dup.flops;
          rc->own.vector_ops += mc->dup.vector_ops;
        }
    }
  uint64_t read = 0;
  for (guint i = 0; i < g->len; i++)
    {
      const PsInstr *m = g_ptr_array_index (g, i);
      /* a tuple in a fusion (through_tuple) only passes one element on */
      for (int j = 0; j < m->n_operands && m->opcode != PS_OP_TUPLE; j++)
        {
          const PsInstr *o = m->operands[j];
          if (g_hash_table_contains (inside, o))
            continue;
          gboolean partial = j == 0 && (m->opcode == PS_OP_SLICE
                                        || m->opcode == PS_OP_DYNAMIC_SLICE
                                        || m->opcode == PS_OP_GATHER);
          gboolean in_place = j == 0 && (m->opcode == PS_OP_DYNAMIC_UPDATE_SLICE
                                         || m->opcode == PS_OP_SCATTER);
          if (in_place)
            continue;
          if (partial)
            {
              read += MIN (bytes_of (a->opts.tiling, m->shape), value_read_bytes (a, o));
              continue;
            }
          read += outside_read (a, o, inside, seen, rc, 0);
        }
    }
  /* a multi-output fusion also writes its members read outside it */
  uint64_t write = 0;
  for (guint i = 0; i + 1 < g->len; i++)
    if (cost_of (a, g_ptr_array_index (g, i))->output)
      write += bytes_of (a->opts.tiling, ((const PsInstr *) g_ptr_array_index (g, i))->shape);
  if (root->opcode == PS_OP_DYNAMIC_UPDATE_SLICE && root->n_operands >= 2)
    write += bytes_of (a->opts.tiling, root->operands[1]->shape);
  else if (root->opcode == PS_OP_SCATTER && root->n_operands >= 3)
    {
      for (int j = (root->n_operands + 1) / 2; j < root->n_operands; j++)
        write += bytes_of (a->opts.tiling, root->operands[j]->shape);
    }
  else if (rc->bn_fused)
    {
      for (int e = 1; e < root->shape->n_elems; e++)
        write += bytes_of (a->opts.tiling, root->shape->elems[e]);
    }
  else
    write += bytes_of (a->opts.tiling, root->shape);
  rc->own.read_bytes = read;
  rc->own.write_bytes = write;
}

/* ---- driver --------------------------------------------------------------------------------- */

static void
add_counts (PsCostCounts *dst, const PsCostCounts *src, uint64_t times)
{
  dst->flops += src->flops * times;
  dst->read_bytes += src->read_bytes * times;
  dst->write_bytes += src->write_bytes * times;
  dst->vector_ops += src->vector_ops * times;
}

static const PsCostCounts *
totals_of (PsCostAnalysis *a, const PsComputation *c)
{
  return g_hash_table_lookup (a->totals, c);
}

/* XLA mode: the producers copied into their consumers (fusion.h), users
 * first, so that a producer whose single user is copied goes with it. */
static GHashTable *
duplicated_set (const PsCostAnalysis *a, GPtrArray *order)
{
  GHashTable *dup = g_hash_table_new (NULL, NULL);
  if (a->opts.fusion != PS_FUSION_MODE_XLA)
    return dup;
  for (guint i = order->len; i-- > 0;)
    {
      const PsInstr *in = g_ptr_array_index (order, i);
      if (ps_fusion_duplicates (in)
          || (ps_fusion_duplicable (in) && ps_fusion_single_user (in)
              && g_hash_table_contains (dup, g_ptr_array_index (in->users, 0))))
        g_hash_table_add (dup, (gpointer) in);
    }
  return dup;
}

static gboolean
analyze_computation (PsCostAnalysis *a, const PsComputation *comp, GError **error)
{
  g_autoptr (GPtrArray) order = ps_computation_post_order (comp);
  g_autoptr (GHashTable) dup = duplicated_set (a, order);
  for (guint i = 0; i < order->len; i++)
    {
      PsInstr *in = g_ptr_array_index (order, i);
      PsCost *c = g_new0 (PsCost, 1);
      c->klass = classify (in);
      c->root = c->head = in;
      own_work (in, c->klass, a->opts.tiling, &c->own);
      if (c->klass == PS_COST_ELEMENTWISE && g_hash_table_contains (dup, in))
        {
          c->klass = PS_COST_INLINED;
          c->duplicated = TRUE;
          c->dup = c->own;
          memset (&c->own, 0, sizeof c->own);
        }
      if (a->opts.fusion == PS_FUSION_MODE_XLA && ps_fusion_bn_normalize_fused (in))
        {
          /* training: 3 of its 6 ops per element normalize; grad: 4 of 8
           * compute dx (own_work) */
          uint64_t rest = (in->opcode == PS_OP_BATCH_NORM_TRAINING ? 3 : 4)
                          * elems_of (in->operands[0]->shape);
          c->bn_fused = TRUE;
          c->bn_rest.flops = c->bn_rest.vector_ops = rest;
          c->own.flops -= rest;
          c->own.vector_ops -= rest;
        }
      g_hash_table_insert (a->costs, in, c);
      GPtrArray *g = g_ptr_array_new ();
      g_ptr_array_add (g, in);
      g_hash_table_insert (a->members, in, g);
      if (c->klass == PS_COST_CONTROL)
        {
          if (in->opcode == PS_OP_WHILE)
            {
              int64_t n;
              if (!ps_while_trip_count (in, &n))
                {
                  if (a->opts.default_trip_count <= 0)
                    {
                      ps_instr_error (error, PS_ERROR_UNSUPPORTED, in,
                                      "while loop: trip count unknown (no known_trip_count "
                                      "and no counter pattern); give one with --trip-count N");
                      return FALSE;
                    }
                  n = a->opts.default_trip_count;
                }
              if ((guint64) n > PS_MAX_LOOP_TRIPS)
                {
                  g_set_error (error, PS_ERROR, PS_ERROR_LIMIT, "while loop %s (line %d:%d): %" G_GINT64_FORMAT
                               " trips, more than the %" G_GUINT64_FORMAT " podsim simulates (doc/robustness.md)",
                               in->name, in->src_line, in->src_col, n, PS_MAX_LOOP_TRIPS);
                  return FALSE;
                }
              c->trip_count = n;
              for (int k = 0; k < in->n_called; k++)
                if (totals_of (a, in->called[k]))
                  add_counts (&c->own, totals_of (a, in->called[k]), (uint64_t) n);
            }
          else if (in->opcode == PS_OP_CALL)
            {
              if (in->n_called > 0 && totals_of (a, in->called[0]))
                add_counts (&c->own, totals_of (a, in->called[0]), 1);
            }
          else
            {
              const PsCostCounts *best = NULL;
              for (int k = 0; k < in->n_called; k++)
                {
                  const PsCostCounts *t = totals_of (a, in->called[k]);
                  if (t && (!best || t->flops > best->flops
                            || (t->flops == best->flops
                                && t->read_bytes + t->write_bytes
                                   > best->read_bytes + best->write_bytes)))
                    best = t;
                }
              if (best)
                add_counts (&c->own, best, 1);
            }
        }
      else if (in->opcode == PS_OP_FUSION)
        {
          /* one kernel: the work of its body; the HBM traffic of its
           * operands and result (fusion_traffic, as any root) */
          const PsCostCounts *t = in->n_called > 0 ? totals_of (a, in->called[0]) : NULL;
          if (t)
            {
              c->own.flops = t->flops;
              c->own.vector_ops = t->vector_ops;
            }
        }
      else
        fuse (a, in, c);
    }
  set_roots (a, order);
  if (a->opts.fusion == PS_FUSION_MODE_XLA)
    {
      ps_cost_multi_output_fusion (a, comp, order);
      set_roots (a, order);
      ps_cost_mark_outputs (a, comp, order);
    }
  /* traffic of every fusion root, then the computation's totals */
  PsCostCounts *tot = g_new0 (PsCostCounts, 1);
  for (guint i = 0; i < order->len; i++)
    {
      PsInstr *in = g_ptr_array_index (order, i);
      PsCost *c = cost_of (a, in);
      if (!c->fused && c->klass != PS_COST_FREE && c->klass != PS_COST_INLINED
          && c->klass != PS_COST_CONTROL && c->klass != PS_COST_COLLECTIVE)
        fusion_traffic (a, in);
    }
  for (guint i = 0; i < order->len; i++)
    add_counts (tot, &cost_of (a, g_ptr_array_index (order, i))->own, 1);
  g_hash_table_insert (a->totals, (gpointer) comp, tot);
  return TRUE;
}

PsCostAnalysis *
ps_cost_analyze (const PsModule *m, const PsCostOptions *opts, GError **error)
{
  g_return_val_if_fail (m != NULL, NULL);
  PsCostAnalysis *a = g_new0 (PsCostAnalysis, 1);
  a->module = m;
  if (opts)
    a->opts = *opts;
  a->costs = g_hash_table_new_full (NULL, NULL, NULL, g_free);
  a->members = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) g_ptr_array_unref);
  a->totals = g_hash_table_new_full (NULL, NULL, NULL, g_free);
  /* A module that holds fusion instructions (a dump taken after XLA's
   * optimizations) is costed with XLA's own fusion decisions: podsim
   * makes none of its own (in-place updates aside). */
  for (guint i = 0; i < m->computations->len && a->opts.fusion != PS_FUSION_MODE_NONE; i++)
    {
      const PsComputation *c = g_ptr_array_index (m->computations, i);
      for (guint j = 0; j < c->instrs->len; j++)
        if (((const PsInstr *) g_ptr_array_index (c->instrs, j))->opcode == PS_OP_FUSION)
          {
            a->opts.fusion = PS_FUSION_MODE_NONE;
            a->prefused = TRUE;
            break;
          }
    }
  /* callees come before callers in the module */
  for (guint i = 0; i < m->computations->len; i++)
    if (!analyze_computation (a, g_ptr_array_index (m->computations, i), error))
      {
        ps_cost_analysis_free (a);
        return NULL;
      }
  return a;
}

void
ps_cost_analysis_free (PsCostAnalysis *a)
{
  if (!a)
    return;
  g_hash_table_unref (a->costs);
  g_hash_table_unref (a->members);
  g_hash_table_unref (a->totals);
  g_free (a);
}

gboolean
ps_cost_prefused (const PsCostAnalysis *a)
{
  return a->prefused;
}

PsTilingMode
ps_cost_tiling (const PsCostAnalysis *a)
{
  return a->opts.tiling;
}

const PsCost *
ps_cost_get (const PsCostAnalysis *a, const PsInstr *instr)
{
  return g_hash_table_lookup (a->costs, instr);
}

PsCostCounts
ps_cost_fusion (const PsCostAnalysis *a, const PsInstr *root)
{
  PsCostCounts t = { 0 };
  GPtrArray *g = g_hash_table_lookup (a->members, root);
  for (guint i = 0; g && i < g->len; i++)
    add_counts (&t, &((const PsCost *) g_hash_table_lookup (a->costs,
                                                             g_ptr_array_index (g, i)))->own, 1);
  return t;
}

GPtrArray *
ps_cost_fusion_members (const PsCostAnalysis *a, const PsInstr *root)
{
  GPtrArray *out = g_ptr_array_new ();
  GPtrArray *g = g_hash_table_lookup (a->members, root);
  for (guint i = 0; g && i < g->len; i++)
    g_ptr_array_add (out, g_ptr_array_index (g, i));
  return out;
}

PsCostCounts
ps_cost_computation (const PsCostAnalysis *a, const PsComputation *c)
{
  const PsCostCounts *t = g_hash_table_lookup (a->totals, c);
  PsCostCounts z = { 0 };
  return t ? *t : z;
}

static const char *
class_name (PsCostClass k)
{
  static const char *const names[] = { "free", "inlined", "matmul", "conv", "elementwise",
                                       "reduce", "data-movement", "collective", "control",
                                       "other" };
  return names[k];
}

const PsParamSpec ps_cost_param_trip_count = PS_COST_PARAM_TRIP_COUNT;

char *
ps_cost_report (const PsCostAnalysis *a)
{
  GString *s = g_string_new (NULL);
  const PsComputation *entry = a->module->entry;
  g_string_append_printf (s, "%-32s %-14s %16s %14s %14s\n", "fusion root", "kind", "FLOPs",
                          "read bytes", "write bytes");
  for (guint i = 0; i < entry->instrs->len; i++)
    {
      const PsInstr *in = g_ptr_array_index (entry->instrs, i);
      const PsCost *c = ps_cost_get (a, in);
      if (!c || c->fused || c->klass == PS_COST_FREE || c->klass == PS_COST_INLINED)
        continue;
      PsCostCounts f = ps_cost_fusion (a, in);
      const PsCost *h = ps_cost_get (a, c->head);
      g_string_append_printf (s, "%-32s %-14s %16" G_GUINT64_FORMAT " %14" G_GUINT64_FORMAT
                              " %14" G_GUINT64_FORMAT "\n", in->name, class_name (h->klass),
                              (guint64) f.flops, (guint64) f.read_bytes,
                              (guint64) f.write_bytes);
    }
  PsCostCounts t = ps_cost_computation (a, entry);
  g_string_append_printf (s, "%-32s %-14s %16" G_GUINT64_FORMAT " %14" G_GUINT64_FORMAT
                          " %14" G_GUINT64_FORMAT "\n", "total", "", (guint64) t.flops,
                          (guint64) t.read_bytes, (guint64) t.write_bytes);
  return g_string_free (s, FALSE);
}
