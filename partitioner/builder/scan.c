/* Scan loops and their derivative: see scan.h. */
#include "config.h"

#include "partitioner/builder/scan.h"

#include <string.h>

#include "partitioner/builder/autodiff.h"
#include "partitioner/builder/folder_private.h"
#include "partitioner/ir/sharding.h"

/* a reshaped to dims (a itself when it already has them). */
static PsInstr *
reshape_dims (PsComputation *c, PsInstr *a, int rank, const int64_t *dims)
{
  PsShape *s = ps_shape_new_array (a->shape->etype, rank, dims);
  PsInstr *r = ad_reshape (c, a, s);
  ps_shape_free (s);
  return r;
}

struct PsScan {
  PsModule *m;
  PsComputation *caller;
  char *name;
  int64_t length;
  gboolean reverse, differentiable, remat, vjp_done, consts_grad_f32;
  int n_carry, n_xs, n_consts;
  int n_captured;                     /* the last consts: read by the body from the caller */
  PsInstr **carry, **xs, **consts;    /* the caller's inputs */
  gboolean *carry_diff, *xs_diff, *consts_diff;
  /* The body, built once in a scratch computation (params below). */
  PsComputation *scratch;
  PsInstr *s_index, **s_carry, **s_xs, **s_consts, **s_dcarry;
  PsInstr **s_carry_out;
  PsInstr **s_dcarry_in, **s_dxs, **s_dconsts;  /* the body's vjp, NULL when none */
  /* Instructions of the scratch saved per iteration, and which scratch
   * instructions the backward body needs (copied or read from stacks). */
  GPtrArray *residuals;
  GHashTable *residual_pos;          /* PsInstr* -> position + 1 */
  GHashTable *bwd_needed;            /* PsInstr* set */
  /* The forward loop in the caller. */
  PsInstr *loop;
  PsInstr **carry_out;
  PsInstr **stacks;                  /* one per residual: [length, ...] */
};

/* ---- computations ------------------------------------------------------------ */

static char *
unique_comp_name (PsModule *m, const char *base)
{
  if (!ps_module_find_computation (m, base))
    return g_strdup (base);
  for (int k = 1;; k++)
    {
      char *n = g_strdup_printf ("%s.%d", base, k);
      if (!ps_module_find_computation (m, n))
        return n;
      g_free (n);
    }
}

/* A new computation placed just before `before`: callees precede callers. */
static PsComputation *
new_comp_before (PsModule *m, const char *base, PsComputation *before)
{
  g_autofree char *name = unique_comp_name (m, base);
  PsComputation *c = ps_computation_new (m, name);
  g_ptr_array_remove (m->computations, c);
  guint at = 0;
  if (!g_ptr_array_find (m->computations, before, &at))
    at = m->computations->len;
  g_ptr_array_insert (m->computations, (gint) at, c);
  return c;
}

static PsInstr *
add_param (PsComputation *c, const char *name, PsShape *shape)
{
  PsInstr *p = ps_computation_add_instr (c, PS_OP_PARAMETER, name, shape, 0, NULL);
  p->parameter_number = c->params->len;
  g_ptr_array_add (c->params, p);
  return p;
}

static PsComputation *clone_computation (PsModule *m, const PsComputation *src,
                                         PsComputation *before);

/* A copy of src in dst with operands looked up in map (src -> copy);
 * control flow gets its own copies of the computations it calls, so that
 * every while body keeps one caller (reducers are shared, as in HLO). */
static PsInstr *
clone_instr (PsComputation *dst, const PsInstr *src, GHashTable *map)
{
  int n = src->n_operands;
  g_autofree PsInstr **ops = g_new0 (PsInstr *, n + 1);
  for (int i = 0; i < n; i++)
    {
      ops[i] = g_hash_table_lookup (map, src->operands[i]);
      g_assert (ops[i] != NULL);
    }
  PsInstr *ni = ps_computation_add_instr (dst, src->opcode, NULL, ps_shape_copy (src->shape), n, ops);
  ps_instr_copy_attrs (ni, src);
  if (src->sharding)
    ni->sharding = ps_sharding_copy (src->sharding);
  if (src->n_called > 0)
    {
      gboolean own = src->opcode == PS_OP_WHILE || src->opcode == PS_OP_CONDITIONAL
                     || src->opcode == PS_OP_CALL;
      g_autofree PsComputation **called = g_new (PsComputation *, src->n_called);
      for (int k = 0; k < src->n_called; k++)
        called[k] = own ? clone_computation (dst->parent, src->called[k], dst) : src->called[k];
      ps_instr_set_called (ni, src->n_called, called);
    }
  return ni;
}

static PsComputation *
clone_computation (PsModule *m, const PsComputation *src, PsComputation *before)
{
  PsComputation *c = new_comp_before (m, src->name, before);
  g_autoptr (GHashTable) map = g_hash_table_new (NULL, NULL);
  g_autoptr (GPtrArray) order = ps_computation_post_order (src);
  /* parameters first, in number order */
  for (guint i = 0; i < src->params->len; i++)
    {
      const PsInstr *p = src->params->pdata[i];
      PsInstr *np = add_param (c, NULL, ps_shape_copy (p->shape));
      if (p->sharding)
        np->sharding = ps_sharding_copy (p->sharding);
      g_hash_table_insert (map, (gpointer) p, np);
    }
  for (guint i = 0; i < order->len; i++)
    {
      const PsInstr *in = order->pdata[i];
      if (in->opcode != PS_OP_PARAMETER)
        g_hash_table_insert (map, (gpointer) in, clone_instr (c, in, map));
    }
  c->root = src->root ? g_hash_table_lookup (map, src->root) : NULL;
  return c;
}

/* ---- small emitters ------------------------------------------------------------- */

static PsInstr *
s32 (PsComputation *c, int64_t v)
{
  return ad_scalar (c, PS_S32, (double) v);
}

/* The loop condition: counter (element 0 of the state) < length. */
static PsComputation *
make_cond (PsScan *s, const char *suffix, const PsShape *state)
{
  g_autofree char *n = g_strdup_printf ("%s.%s", s->name, suffix);
  PsComputation *c = new_comp_before (s->m, n, s->caller);
  PsInstr *p = add_param (c, NULL, ps_shape_copy (state));
  PsInstr *ops[2] = { ad_get_tuple_element (c, p, 0), s32 (c, s->length) };
  PsInstr *lt = ps_computation_add_instr (c, PS_OP_COMPARE, NULL, ps_shape_new_scalar (PS_PRED), 2, ops);
  lt->comparison = PS_CMP_LT;
  c->root = lt;
  return c;
}

/* Start indices (t, 0, 0, ...) of element t of `stack`, and the dims of
 * one element with the leading 1. */
static void
element_index (PsComputation *c, const PsShape *stack, PsInstr *t, PsInstr *zero,
               PsInstr **starts, int64_t *dims)
{
  if (!zero && stack->rank > 1)
    zero = ad_scalar (c, PS_S32, 0);
  for (int d = 0; d < stack->rank; d++)
    {
      starts[d] = d == 0 ? t : zero;
      dims[d] = d == 0 ? 1 : stack->dims[d];
    }
}

PsInstr *
ps_scan_slice_at (PsComputation *c, PsInstr *stack, PsInstr *t, PsInstr *zero)
{
  g_return_val_if_fail (stack->shape->rank >= 1 && stack->shape->rank <= 64, NULL);
  const PsShape *s = stack->shape;
  PsInstr *starts[64];
  int64_t sizes[64];
  element_index (c, s, t, zero, starts, sizes);
  PsInstr *ds = ad_dynamic_slice (c, stack, starts, sizes);
  return reshape_dims (c, ds, s->rank - 1, s->dims + 1);
}

PsInstr *
ps_scan_update_at (PsComputation *c, PsInstr *stack, PsInstr *v, PsInstr *t, PsInstr *zero)
{
  g_return_val_if_fail (stack->shape->rank >= 1 && stack->shape->rank <= 64, NULL);
  const PsShape *s = stack->shape;
  PsInstr *starts[64];
  int64_t dims[64];
  element_index (c, s, t, zero, starts, dims);
  return ad_dynamic_update_slice (c, stack, reshape_dims (c, v, s->rank, dims), starts);
}

/* An array of `like`'s dims with a leading `n`, filled with zeros. */
static PsInstr *
zeros_stacked (PsComputation *c, int64_t n, const PsShape *like)
{
  int64_t dims[64];
  dims[0] = n;
  for (int d = 0; d < like->rank; d++)
    dims[d + 1] = like->dims[d];
  PsShape *sh = ps_shape_new_array (like->etype, like->rank + 1, dims);
  PsInstr *z = ad_full (c, sh, 0.0);
  ps_shape_free (sh);
  return z;
}

/* Maps scratch parameter p to v in a loop body; an annotation the body
 * function put on its argument (a layer's input) goes to v. */
static void
map_param (GHashTable *map, PsInstr *p, PsInstr *v)
{
  if (p->sharding && !v->sharding)
    v->sharding = ps_sharding_copy (p->sharding);
  g_hash_table_insert (map, p, v);
}

/* ---- the scratch body and what the backward needs -------------------------------- */

static gboolean
check_inputs (const PsScanSpec *spec, PsComputation *c, GError **error)
{
  const char *name = spec->name ? spec->name : "scan";
  if (spec->length < 1 || spec->body == NULL || spec->n_carry < 0 || spec->n_xs < 0
      || spec->n_consts < 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "scan %s: needs a body and a length >= 1",
                   name);
      return FALSE;
    }
  struct { int n; PsInstr *const *v; const char *what; } groups[3] = {
    { spec->n_carry, spec->carry, "carry" }, { spec->n_xs, spec->xs, "xs" },
    { spec->n_consts, spec->consts, "consts" },
  };
  for (int g = 0; g < 3; g++)
    for (int i = 0; i < groups[g].n; i++)
      {
        PsInstr *x = groups[g].v[i];
        /* A scan built inside another scan's body (c not the entry) may
         * take the enclosing caller's values: the enclosing scan captures
         * them when its body is done (capture_outside). */
        if (!x || (x->parent != c && c->is_entry) || !ps_shape_is_array (x->shape))
          {
            g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "scan %s: %s %d is not an array "
                         "of computation %s", name, groups[g].what, i, c->name);
            return FALSE;
          }
        if (g == 1 && (x->shape->rank < 1 || x->shape->dims[0] != spec->length))
          {
            g_autofree char *sh = ps_shape_to_string (x->shape, FALSE);
            g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "scan %s: xs %d (%s) does not have "
                         "the length %" G_GINT64_FORMAT " as its leading dim", name, i, sh,
                         spec->length);
            return FALSE;
          }
      }
  return TRUE;
}

static gboolean
is_float_array (const PsInstr *x)
{
  return ps_shape_is_array (x->shape) && ps_etype_is_float (x->shape->etype);
}

/* The body may read instructions of the caller (a layer's shared position
 * one-hot, say): each becomes one more loop invariant, read through a new
 * parameter of the scratch, and gets no gradient. Instructions of any
 * other computation are an error, unless the caller is itself the body of
 * an enclosing scan being built (not the entry): then they are the
 * enclosing caller's, captured the same way one level up (a layer loop
 * inside a microbatch loop reads the weights of the entry). */
static gboolean
capture_outside (PsScan *s, GError **error)
{
  g_autoptr (GHashTable) param_of = g_hash_table_new (NULL, NULL);
  guint n = s->scratch->instrs->len;
  for (guint i = 0; i < n; i++)
    {
      PsInstr *in = s->scratch->instrs->pdata[i];
      for (int k = 0; k < in->n_operands; k++)
        {
          PsInstr *o = in->operands[k];
          if (!o || o->parent == s->scratch)
            continue;
          if ((o->parent != s->caller && s->caller->is_entry) || !ps_shape_is_array (o->shape))
            {
              g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "scan %s: the body's %s reads %s "
                           "of computation %s; pass it to the scan as a const", s->name, in->name,
                           o->name, o->parent->name);
              return FALSE;
            }
          PsInstr *p = g_hash_table_lookup (param_of, o);
          if (!p)
            {
              p = add_param (s->scratch, NULL, ps_shape_copy (o->shape));
              g_hash_table_insert (param_of, o, p);
              int i2 = s->n_consts++;
              s->consts = g_renew (PsInstr *, s->consts, s->n_consts + 1);
              s->s_consts = g_renew (PsInstr *, s->s_consts, s->n_consts + 1);
              s->s_dconsts = g_renew (PsInstr *, s->s_dconsts, s->n_consts + 1);
              s->consts_diff = g_renew (gboolean, s->consts_diff, s->n_consts + 1);
              s->consts[i2] = o;
              s->s_consts[i2] = p;
              s->s_dconsts[i2] = NULL;
              s->consts_diff[i2] = FALSE;
              s->n_captured++;
            }
          ps_instr_set_operand (in, k, p);
        }
    }
  return TRUE;
}

/* Builds the body in the scratch computation and, when differentiable, its
 * vector-Jacobian product; then decides what the backward reads from
 * stacks (residuals) and what it recomputes. */
static gboolean
build_scratch (PsScan *s, const PsScanSpec *spec, GError **error)
{
  g_autofree char *sn = g_strdup_printf ("%s.scratch", s->name);
  s->scratch = new_comp_before (s->m, sn, s->caller);
  PsComputation *S = s->scratch;
  s->s_index = add_param (S, NULL, ps_shape_new_scalar (PS_S32));
  for (int k = 0; k < s->n_carry; k++)
    s->s_carry[k] = add_param (S, NULL, ps_shape_copy (s->carry[k]->shape));
  for (int j = 0; j < s->n_xs; j++)
    {
      const PsShape *xs = s->xs[j]->shape;
      s->s_xs[j] = add_param (S, NULL, ps_shape_new_array (xs->etype, xs->rank - 1, xs->dims + 1));
    }
  for (int i = 0; i < s->n_consts; i++)
    s->s_consts[i] = add_param (S, NULL, ps_shape_copy (s->consts[i]->shape));
  PsScanArgs args = { S, s->s_index, s->s_carry, s->s_xs, s->s_consts };
  if (!spec->body (&args, s->s_carry_out, spec->user, error))
    return FALSE;
  for (int k = 0; k < s->n_carry; k++)
    {
      PsInstr *o = s->s_carry_out[k];
      if (!o || o->parent != S || !ps_shape_equal (o->shape, s->carry[k]->shape))
        {
          g_autofree char *want = ps_shape_to_string (s->carry[k]->shape, FALSE);
          g_autofree char *got = o ? ps_shape_to_string (o->shape, FALSE) : g_strdup ("nothing");
          g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "scan %s: the body returns %s for "
                       "carry %d (%s)%s", s->name, got, k, want,
                       o && o->parent != S ? " from another computation" : "");
          return FALSE;
        }
    }
  if (!capture_outside (s, error))
    return FALSE;
  if (!s->differentiable)
    return TRUE;

  /* The body's vjp: seeds for the float carries, gradients for the float
   * carries and the requested xs and consts. */
  int first_bwd_id = s->m->next_id;
  g_autoptr (GPtrArray) ys = g_ptr_array_new ();
  g_autoptr (GPtrArray) dys = g_ptr_array_new ();
  g_autoptr (GPtrArray) wrt = g_ptr_array_new ();
  for (int k = 0; k < s->n_carry; k++)
    if (s->carry_diff[k])
      {
        s->s_dcarry[k] = add_param (S, NULL, ps_shape_copy (s->carry[k]->shape));
        g_ptr_array_add (ys, s->s_carry_out[k]);
        g_ptr_array_add (dys, s->s_dcarry[k]);
        g_ptr_array_add (wrt, s->s_carry[k]);
      }
  for (int j = 0; j < s->n_xs; j++)
    if (s->xs_diff[j])
      g_ptr_array_add (wrt, s->s_xs[j]);
  for (int i = 0; i < s->n_consts; i++)
    if (s->consts_diff[i])
      g_ptr_array_add (wrt, s->s_consts[i]);
  g_autoptr (GPtrArray) grads = NULL;
  if (ys->len > 0 || wrt->len > 0)
    {
      grads = ps_autodiff_vjp_multi (S, (int) ys->len, (PsInstr **) ys->pdata,
                                     (PsInstr **) dys->pdata, (int) wrt->len,
                                     (PsInstr **) wrt->pdata, error);
      if (!grads)
        {
          g_prefix_error (error, "scan %s: ", s->name);
          return FALSE;
        }
    }
  guint gi = 0;
  for (int k = 0; k < s->n_carry; k++)
    if (s->carry_diff[k])
      s->s_dcarry_in[k] = grads->pdata[gi++];
  for (int j = 0; j < s->n_xs; j++)
    if (s->xs_diff[j])
      s->s_dxs[j] = grads->pdata[gi++];
  for (int i = 0; i < s->n_consts; i++)
    if (s->consts_diff[i])
      s->s_dconsts[i] = grads->pdata[gi++];

  /* What the backward needs, walking back from the gradients: the vjp's own
   * instructions are copied; a forward value is read from a stack when it
   * must be saved (the carry; with remat off, anything depending on the
   * carry), else recomputed (copied, with its operands). */
  g_autoptr (GPtrArray) order = ps_computation_post_order (S);
  g_autoptr (GHashTable) on_carry = g_hash_table_new (NULL, NULL);
  for (int k = 0; k < s->n_carry; k++)
    g_hash_table_add (on_carry, s->s_carry[k]);
  for (guint i = 0; i < order->len; i++)
    {
      PsInstr *in = order->pdata[i];
      for (int k = 0; k < in->n_operands; k++)
        if (g_hash_table_contains (on_carry, in->operands[k]))
          {
            g_hash_table_add (on_carry, in);
            break;
          }
    }
  g_autoptr (GHashTable) want = g_hash_table_new (NULL, NULL);
  for (guint k = 0; grads && k < grads->len; k++)
    g_hash_table_add (want, grads->pdata[k]);
  for (guint i = order->len; i-- > 0;)
    {
      PsInstr *in = order->pdata[i];
      if (!g_hash_table_contains (want, in))
        continue;
      g_hash_table_add (s->bwd_needed, in);
      gboolean fwd = in->id < first_bwd_id;
      gboolean carry_param = FALSE;
      for (int k = 0; k < s->n_carry; k++)
        carry_param |= in == s->s_carry[k];
      if (in->opcode == PS_OP_PARAMETER)
        {
          if (carry_param)
            {
              g_ptr_array_add (s->residuals, in);
            }
          continue;
        }
      if (fwd && !s->remat && g_hash_table_contains (on_carry, in))
        {
          if (!ps_shape_is_array (in->shape))
            {
              g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED, "scan %s: the backward "
                           "reads the tuple %s of the body; save it with remat", s->name,
                           in->name);
              return FALSE;
            }
          g_ptr_array_add (s->residuals, in);
          continue;
        }
      for (int k = 0; k < in->n_operands; k++)
        g_hash_table_add (want, in->operands[k]);
    }
  /* Stacks in the scratch's post order (the walk went backwards). */
  for (guint i = 0, j = s->residuals->len; i + 1 < j; i++, j--)
    {
      gpointer t = s->residuals->pdata[i];
      s->residuals->pdata[i] = s->residuals->pdata[j - 1];
      s->residuals->pdata[j - 1] = t;
    }
  for (guint i = 0; i < s->residuals->len; i++)
    g_hash_table_insert (s->residual_pos, s->residuals->pdata[i], GUINT_TO_POINTER (i + 1));
  return TRUE;
}

/* ---- the loops ---------------------------------------------------------------------- */

static const char *known_trip_count_fmt = "{\\\"known_trip_count\\\":{\\\"n\\\":\\\"%" G_GINT64_FORMAT "\\\"}}";

/* The while in the caller over the init tuple's elements. */
static PsInstr *
make_while (PsScan *s, PsComputation *cond, PsComputation *body, GPtrArray *init)
{
  PsComputation *c = s->caller;
  PsInstr *t = ad_tuple (c, (int) init->len, (PsInstr **) init->pdata);
  PsInstr *w = ps_computation_add_instr (c, PS_OP_WHILE, NULL, ps_shape_copy (t->shape), 1, &t);
  PsComputation *called[2] = { cond, body };
  ps_instr_set_called (w, 2, called);
  w->backend_config = g_strdup_printf (known_trip_count_fmt, s->length);
  return w;
}

/* Copies into `dst` the scratch instructions of `order` that `keep`
 * holds, operands through `map` (which already maps the scratch's
 * parameters and whatever is read from stacks). */
static void
copy_marked (PsComputation *dst, GPtrArray *order, GHashTable *keep, GHashTable *map)
{
  for (guint i = 0; i < order->len; i++)
    {
      PsInstr *in = order->pdata[i];
      if (in->opcode == PS_OP_PARAMETER || !g_hash_table_contains (keep, in)
          || g_hash_table_contains (map, in))
        continue;
      g_hash_table_insert (map, in, clone_instr (dst, in, map));
    }
}

/* Marks in `keep` the scratch instructions the roots need, stopping at
 * what `map` already provides. */
static void
mark_needed (GPtrArray *order, GHashTable *keep, GHashTable *map)
{
  for (guint i = order->len; i-- > 0;)
    {
      PsInstr *in = order->pdata[i];
      if (!g_hash_table_contains (keep, in) || g_hash_table_contains (map, in))
        continue;
      for (int k = 0; k < in->n_operands; k++)
        g_hash_table_add (keep, in->operands[k]);
    }
}

/* The forward body: state (counter, carry, xs, consts, stacks). */
static gboolean
build_forward (PsScan *s)
{
  int nr = (int) s->residuals->len;
  int pos_xs = 1 + s->n_carry, pos_consts = pos_xs + s->n_xs, pos_stacks = pos_consts + s->n_consts;
  g_autoptr (GPtrArray) init = g_ptr_array_new ();
  g_ptr_array_add (init, NULL);
  for (int k = 0; k < s->n_carry; k++)
    g_ptr_array_add (init, s->carry[k]);
  for (int j = 0; j < s->n_xs; j++)
    g_ptr_array_add (init, s->xs[j]);
  for (int i = 0; i < s->n_consts; i++)
    g_ptr_array_add (init, s->consts[i]);
  for (int r = 0; r < nr; r++)
    g_ptr_array_add (init, zeros_stacked (s->caller, s->length,
                                          ((PsInstr *) s->residuals->pdata[r])->shape));
  init->pdata[0] = s32 (s->caller, 0);
  g_autofree PsShape **shapes = g_new (PsShape *, init->len);
  for (guint i = 0; i < init->len; i++)
    shapes[i] = ((PsInstr *) init->pdata[i])->shape;
  PsShape *state = ps_shape_new_tuple ((int) init->len, shapes);

  g_autofree char *bn = g_strdup_printf ("%s.body", s->name);
  PsComputation *B = new_comp_before (s->m, bn, s->caller);
  PsInstr *p = add_param (B, NULL, ps_shape_copy (state));
  PsInstr *cnt = ad_get_tuple_element (B, p, 0);
  PsInstr *zero = s32 (B, 0);
  PsInstr *t = s->reverse ? ad_binary (B, PS_OP_SUBTRACT, s32 (B, s->length - 1), cnt) : cnt;
  g_autoptr (GHashTable) map = g_hash_table_new (NULL, NULL);
  g_hash_table_insert (map, s->s_index, t);
  PsInstr **carry = g_newa (PsInstr *, s->n_carry + 1);
  for (int k = 0; k < s->n_carry; k++)
    {
      carry[k] = ad_get_tuple_element (B, p, 1 + k);
      map_param (map, s->s_carry[k], carry[k]);
    }
  PsInstr **xs_full = g_newa (PsInstr *, s->n_xs + 1);
  for (int j = 0; j < s->n_xs; j++)
    {
      xs_full[j] = ad_get_tuple_element (B, p, pos_xs + j);
      map_param (map, s->s_xs[j], ps_scan_slice_at (B, xs_full[j], t, zero));
    }
  PsInstr **consts = g_newa (PsInstr *, s->n_consts + 1);
  for (int i = 0; i < s->n_consts; i++)
    {
      consts[i] = ad_get_tuple_element (B, p, pos_consts + i);
      map_param (map, s->s_consts[i], consts[i]);
    }
  g_autoptr (GPtrArray) order = ps_computation_post_order (s->scratch);
  g_autoptr (GHashTable) keep = g_hash_table_new (NULL, NULL);
  for (int k = 0; k < s->n_carry; k++)
    g_hash_table_add (keep, s->s_carry_out[k]);
  for (int r = 0; r < nr; r++)
    g_hash_table_add (keep, s->residuals->pdata[r]);
  mark_needed (order, keep, map);
  copy_marked (B, order, keep, map);

  g_autoptr (GPtrArray) out = g_ptr_array_new ();
  g_ptr_array_add (out, ad_binary (B, PS_OP_ADD, cnt, s32 (B, 1)));
  for (int k = 0; k < s->n_carry; k++)
    g_ptr_array_add (out, g_hash_table_lookup (map, s->s_carry_out[k]));
  for (int j = 0; j < s->n_xs; j++)
    g_ptr_array_add (out, xs_full[j]);
  for (int i = 0; i < s->n_consts; i++)
    g_ptr_array_add (out, consts[i]);
  for (int r = 0; r < nr; r++)
    {
      PsInstr *stack = ad_get_tuple_element (B, p, pos_stacks + r);
      PsInstr *v = g_hash_table_lookup (map, s->residuals->pdata[r]);
      g_ptr_array_add (out, ps_scan_update_at (B, stack, v, t, zero));
    }
  B->root = ad_tuple (B, (int) out->len, (PsInstr **) out->pdata);

  PsComputation *cond = make_cond (s, "cond", state);
  s->loop = make_while (s, cond, B, init);
  for (int k = 0; k < s->n_carry; k++)
    s->carry_out[k] = ad_get_tuple_element (s->caller, s->loop, 1 + k);
  for (int r = 0; r < nr; r++)
    s->stacks[r] = ad_get_tuple_element (s->caller, s->loop, pos_stacks + r);
  ps_shape_free (state);
  return TRUE;
}

static PsInstr **
copy_instrs (int n, PsInstr *const *v)
{
  PsInstr **c = g_new0 (PsInstr *, n + 1);
  for (int i = 0; i < n; i++)
    c[i] = v[i];
  return c;
}

static gboolean *
diff_flags (int n, PsInstr *const *v, const gboolean *requested)
{
  gboolean *f = g_new0 (gboolean, n + 1);
  for (int i = 0; i < n; i++)
    f[i] = is_float_array (v[i]) && (!requested || requested[i]);
  return f;
}

PsScan *
ps_scan_build (PsComputation *c, const PsScanSpec *spec, GError **error)
{
  g_return_val_if_fail (c != NULL && spec != NULL, NULL);
  if (!check_inputs (spec, c, error))
    return NULL;
  PsScan *s = g_new0 (PsScan, 1);
  s->m = c->parent;
  s->caller = c;
  s->name = g_strdup (spec->name ? spec->name : "scan");
  s->length = spec->length;
  s->reverse = spec->reverse;
  s->differentiable = spec->differentiable;
  s->remat = spec->remat;
  s->consts_grad_f32 = spec->consts_grad_f32;
  s->n_carry = spec->n_carry;
  s->n_xs = spec->n_xs;
  s->n_consts = spec->n_consts;
  s->carry = copy_instrs (spec->n_carry, spec->carry);
  s->xs = copy_instrs (spec->n_xs, spec->xs);
  s->consts = copy_instrs (spec->n_consts, spec->consts);
  s->carry_diff = diff_flags (s->n_carry, s->carry, NULL);
  s->xs_diff = diff_flags (s->n_xs, s->xs, spec->xs_grad);
  s->consts_diff = diff_flags (s->n_consts, s->consts, spec->consts_grad);
  s->s_carry = g_new0 (PsInstr *, s->n_carry + 1);
  s->s_dcarry = g_new0 (PsInstr *, s->n_carry + 1);
  s->s_carry_out = g_new0 (PsInstr *, s->n_carry + 1);
  s->s_dcarry_in = g_new0 (PsInstr *, s->n_carry + 1);
  s->s_xs = g_new0 (PsInstr *, s->n_xs + 1);
  s->s_dxs = g_new0 (PsInstr *, s->n_xs + 1);
  s->s_consts = g_new0 (PsInstr *, s->n_consts + 1);
  s->s_dconsts = g_new0 (PsInstr *, s->n_consts + 1);
  s->carry_out = g_new0 (PsInstr *, s->n_carry + 1);
  s->residuals = g_ptr_array_new ();
  s->residual_pos = g_hash_table_new (NULL, NULL);
  s->bwd_needed = g_hash_table_new (NULL, NULL);
  if (!build_scratch (s, spec, error))
    {
      ps_scan_free (s);
      return NULL;
    }
  s->stacks = g_new0 (PsInstr *, s->residuals->len + 1);
  build_forward (s);
  return s;
}

PsInstr *
ps_scan_carry_out (const PsScan *s, int k)
{
  g_return_val_if_fail (s != NULL && k >= 0 && k < s->n_carry, NULL);
  return s->carry_out[k];
}

PsInstr *
ps_scan_while (const PsScan *s)
{
  g_return_val_if_fail (s != NULL, NULL);
  return s->loop;
}

/* The backward loop; with `u`, the xs gradients of iteration t go to
 * u->fn instead of stacked accumulators (see ps_scan_vjp_update). */
static gboolean
scan_vjp (PsScan *s, PsInstr *const *dcarry, PsInstr **dcarry_init, PsInstr **dxs,
          PsInstr **dconsts, const PsScanUpdate *u, PsInstr **xs_out, PsInstr **extra_out,
          GError **error)
{
  g_return_val_if_fail (s != NULL, FALSE);
  if (!s->differentiable || s->vjp_done)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "scan %s: %s", s->name,
                   s->vjp_done ? "its backward loop is already built"
                               : "built without differentiable");
      return FALSE;
    }
  s->vjp_done = TRUE;
  PsComputation *c = s->caller;
  int nr = (int) s->residuals->len;
  /* State: counter, dcarry (float carries), xs, consts, stacks, dxs
   * accumulators (requested xs), dconsts accumulators (requested consts). */
  g_autoptr (GPtrArray) init = g_ptr_array_new ();
  g_ptr_array_add (init, NULL);
  int pos_dcarry = 1;
  for (int k = 0; k < s->n_carry; k++)
    if (s->carry_diff[k])
      {
        PsInstr *d = dcarry ? dcarry[k] : NULL;
        if (d && !ps_shape_equal (d->shape, s->carry[k]->shape))
          {
            g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "scan %s: the gradient of carry %d "
                         "has another shape than the carry", s->name, k);
            return FALSE;
          }
        g_ptr_array_add (init, d ? d : ad_full (c, s->carry[k]->shape, 0.0));
      }
  int pos_xs = (int) init->len;
  for (int j = 0; j < s->n_xs; j++)
    g_ptr_array_add (init, s->xs[j]);
  int pos_consts = (int) init->len;
  for (int i = 0; i < s->n_consts; i++)
    g_ptr_array_add (init, s->consts[i]);
  int pos_stacks = (int) init->len;
  for (int r = 0; r < nr; r++)
    g_ptr_array_add (init, s->stacks[r]);
  int pos_dxs = (int) init->len;
  for (int j = 0; j < s->n_xs; j++)
    if (s->xs_diff[j] && !u)
      g_ptr_array_add (init, ad_full (c, s->xs[j]->shape, 0.0));
  int pos_dconsts = (int) init->len;
  for (int i = 0; i < s->n_consts; i++)
    if (s->consts_diff[i])
      {
        const PsShape *cs = s->consts[i]->shape;
        PsShape *f32 = ps_shape_new_array (PS_F32, cs->rank, cs->dims);
        g_ptr_array_add (init, ad_full (c, s->consts_grad_f32 ? f32 : cs, 0.0));
        ps_shape_free (f32);
      }
  int pos_extra = (int) init->len, n_extra = u ? u->n_extra : 0;
  for (int k = 0; k < n_extra; k++)
    g_ptr_array_add (init, u->extra[k]);
  int pos_uconsts = (int) init->len, n_uconsts = u ? u->n_consts : 0;
  for (int k = 0; k < n_uconsts; k++)
    g_ptr_array_add (init, u->consts[k]);
  init->pdata[0] = s32 (c, 0);
  g_autofree PsShape **shapes = g_new (PsShape *, init->len);
  for (guint i = 0; i < init->len; i++)
    shapes[i] = ((PsInstr *) init->pdata[i])->shape;
  PsShape *state = ps_shape_new_tuple ((int) init->len, shapes);

  g_autofree char *bn = g_strdup_printf ("%s.grad_body", s->name);
  PsComputation *B = new_comp_before (s->m, bn, c);
  PsInstr *p = add_param (B, NULL, ps_shape_copy (state));
  PsInstr *cnt = ad_get_tuple_element (B, p, 0);
  PsInstr *zero = s32 (B, 0);
  /* Backward iteration cnt undoes forward iteration length-1-cnt. */
  PsInstr *t = s->reverse ? cnt : ad_binary (B, PS_OP_SUBTRACT, s32 (B, s->length - 1), cnt);
  g_autoptr (GHashTable) map = g_hash_table_new (NULL, NULL);
  g_hash_table_insert (map, s->s_index, t);
  int kd = 0;
  PsInstr **dc = g_newa (PsInstr *, s->n_carry + 1);
  for (int k = 0; k < s->n_carry; k++)
    if (s->carry_diff[k])
      {
        dc[k] = ad_get_tuple_element (B, p, pos_dcarry + kd++);
        g_hash_table_insert (map, s->s_dcarry[k], dc[k]);
      }
  PsInstr **xs_full = g_newa (PsInstr *, s->n_xs + 1);
  for (int j = 0; j < s->n_xs; j++)
    {
      xs_full[j] = ad_get_tuple_element (B, p, pos_xs + j);
      if (g_hash_table_contains (s->bwd_needed, s->s_xs[j]))
        map_param (map, s->s_xs[j], ps_scan_slice_at (B, xs_full[j], t, zero));
    }
  PsInstr **consts = g_newa (PsInstr *, s->n_consts + 1);
  for (int i = 0; i < s->n_consts; i++)
    {
      consts[i] = ad_get_tuple_element (B, p, pos_consts + i);
      map_param (map, s->s_consts[i], consts[i]);
    }
  PsInstr **stacks = g_newa (PsInstr *, nr + 1);
  for (int r = 0; r < nr; r++)
    {
      stacks[r] = ad_get_tuple_element (B, p, pos_stacks + r);
      PsInstr *res = s->residuals->pdata[r], *v = ps_scan_slice_at (B, stacks[r], t, zero);
      if (res->sharding && !v->sharding)
        v->sharding = ps_sharding_copy (res->sharding);
      g_hash_table_insert (map, res, v);
    }
  g_autoptr (GPtrArray) order = ps_computation_post_order (s->scratch);
  copy_marked (B, order, s->bwd_needed, map);

  /* With u: iteration t's xs gradients go to u->fn, which may write the xs
   * and the extra values. */
  PsInstr **xs_next = g_newa (PsInstr *, s->n_xs + 1);
  memcpy (xs_next, xs_full, sizeof (PsInstr *) * (gsize) s->n_xs);
  PsInstr **extra_next = g_newa (PsInstr *, n_extra + 1);
  if (u)
    {
      PsInstr **g = g_newa (PsInstr *, s->n_xs + 1), **extra = g_newa (PsInstr *, n_extra + 1);
      PsInstr **uc = g_newa (PsInstr *, n_uconsts + 1);
      for (int j = 0; j < s->n_xs; j++)
        g[j] = s->xs_diff[j] ? g_hash_table_lookup (map, s->s_dxs[j]) : NULL;
      for (int k = 0; k < n_extra; k++)
        extra[k] = extra_next[k] = ad_get_tuple_element (B, p, pos_extra + k);
      for (int k = 0; k < n_uconsts; k++)
        uc[k] = ad_get_tuple_element (B, p, pos_uconsts + k);
      PsScanUpdateArgs ua = { B, t, xs_full, g, extra, uc };
      if (!u->fn (&ua, xs_next, extra_next, u->user, error))
        return FALSE;
      for (int j = 0; j < s->n_xs; j++)
        g_return_val_if_fail (ps_shape_equal (xs_next[j]->shape, xs_full[j]->shape), FALSE);
      for (int k = 0; k < n_extra; k++)
        g_return_val_if_fail (ps_shape_equal (extra_next[k]->shape, extra[k]->shape), FALSE);
    }

  g_autoptr (GPtrArray) out = g_ptr_array_new ();
  g_ptr_array_add (out, ad_binary (B, PS_OP_ADD, cnt, s32 (B, 1)));
  for (int k = 0; k < s->n_carry; k++)
    if (s->carry_diff[k])
      g_ptr_array_add (out, g_hash_table_lookup (map, s->s_dcarry_in[k]));
  for (int j = 0; j < s->n_xs; j++)
    g_ptr_array_add (out, xs_next[j]);
  for (int i = 0; i < s->n_consts; i++)
    g_ptr_array_add (out, consts[i]);
  for (int r = 0; r < nr; r++)
    g_ptr_array_add (out, stacks[r]);
  int kx = 0;
  for (int j = 0; j < s->n_xs; j++)
    if (s->xs_diff[j] && !u)
      {
        PsInstr *acc = ad_get_tuple_element (B, p, pos_dxs + kx++);
        PsInstr *g = g_hash_table_lookup (map, s->s_dxs[j]);
        g_ptr_array_add (out, ps_scan_update_at (B, acc, ad_convert (B, g, acc->shape->etype), t, zero));
      }
  int ki = 0;
  for (int i = 0; i < s->n_consts; i++)
    if (s->consts_diff[i])
      {
        PsInstr *acc = ad_get_tuple_element (B, p, pos_dconsts + ki++);
        PsInstr *g = g_hash_table_lookup (map, s->s_dconsts[i]);
        g_ptr_array_add (out, ad_binary (B, PS_OP_ADD, acc,
                                            ad_convert (B, g, acc->shape->etype)));
      }
  for (int k = 0; k < n_extra; k++)
    g_ptr_array_add (out, extra_next[k]);
  for (int k = 0; k < n_uconsts; k++)
    g_ptr_array_add (out, ad_get_tuple_element (B, p, pos_uconsts + k));
  B->root = ad_tuple (B, (int) out->len, (PsInstr **) out->pdata);

  PsComputation *cond = make_cond (s, "grad_cond", state);
  ps_shape_free (state);
  PsInstr *w = make_while (s, cond, B, init);
  kd = kx = ki = 0;
  for (int k = 0; k < s->n_carry; k++)
    if (dcarry_init)
      dcarry_init[k] = s->carry_diff[k] ? ad_get_tuple_element (c, w, pos_dcarry + kd++) : NULL;
  for (int j = 0; j < s->n_xs; j++)
    {
      PsInstr *g = s->xs_diff[j] && !u ? ad_get_tuple_element (c, w, pos_dxs + kx++) : NULL;
      if (dxs)
        dxs[j] = g;
      if (xs_out)
        xs_out[j] = ad_get_tuple_element (c, w, pos_xs + j);
    }
  for (int k = 0; extra_out && k < n_extra; k++)
    extra_out[k] = ad_get_tuple_element (c, w, pos_extra + k);
  /* the spec's consts only: captured ones have no gradient and no slot */
  for (int i = 0; i < s->n_consts - s->n_captured; i++)
    {
      PsInstr *g = s->consts_diff[i] ? ad_get_tuple_element (c, w, pos_dconsts + ki++) : NULL;
      if (dconsts)
        dconsts[i] = g;
    }
  return TRUE;
}

gboolean
ps_scan_vjp (PsScan *s, PsInstr *const *dcarry, PsInstr **dcarry_init, PsInstr **dxs,
             PsInstr **dconsts, GError **error)
{
  return scan_vjp (s, dcarry, dcarry_init, dxs, dconsts, NULL, NULL, NULL, error);
}

gboolean
ps_scan_vjp_update (PsScan *s, PsInstr *const *dcarry, PsInstr **dcarry_init,
                    PsInstr **dconsts, const PsScanUpdate *u, PsInstr **xs_out,
                    PsInstr **extra_out, GError **error)
{
  g_return_val_if_fail (u != NULL && u->fn != NULL, FALSE);
  return scan_vjp (s, dcarry, dcarry_init, NULL, dconsts, u, xs_out, extra_out, error);
}

/* Adds to `out` the computations that control flow in c calls, and
 * theirs: each while, conditional and call has its own copies
 * (clone_instr), so nothing else calls them; reducers are shared and
 * stay. */
static void
owned_callees (const PsComputation *c, GPtrArray *out)
{
  for (guint i = 0; i < c->instrs->len; i++)
    {
      const PsInstr *in = c->instrs->pdata[i];
      if (in->opcode != PS_OP_WHILE && in->opcode != PS_OP_CONDITIONAL && in->opcode != PS_OP_CALL)
        continue;
      for (int k = 0; k < in->n_called; k++)
        if (!g_ptr_array_find (out, in->called[k], NULL))
          {
            g_ptr_array_add (out, in->called[k]);
            owned_callees (in->called[k], out);
          }
    }
}

void
ps_scan_free (PsScan *s)
{
  if (!s)
    return;
  if (s->scratch)
    {
      /* A loop built in the body (a layer loop in a microbatch loop) was
       * copied into the loops with its computations: the scratch's own
       * go with it. */
      g_autoptr (GPtrArray) callees = g_ptr_array_new ();
      owned_callees (s->scratch, callees);
      ps_module_remove_computation (s->m, s->scratch);
      for (guint i = 0; i < callees->len; i++)
        ps_module_remove_computation (s->m, callees->pdata[i]);
    }
  g_free (s->name);
  g_free (s->carry);
  g_free (s->xs);
  g_free (s->consts);
  g_free (s->carry_diff);
  g_free (s->xs_diff);
  g_free (s->consts_diff);
  g_free (s->s_carry);
  g_free (s->s_xs);
  g_free (s->s_consts);
  g_free (s->s_dcarry);
  g_free (s->s_carry_out);
  g_free (s->s_dcarry_in);
  g_free (s->s_dxs);
  g_free (s->s_dconsts);
  g_ptr_array_free (s->residuals, TRUE);
  g_hash_table_destroy (s->residual_pos);
  g_hash_table_destroy (s->bwd_needed);
  g_free (s->carry_out);
  g_free (s->stacks);
  g_free (s);
}
