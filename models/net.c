/* The network being built: see net.h. */
#include "config.h"

#include "models/net.h"

#include <string.h>

#include "partitioner/builder/autodiff.h"
#include "partitioner/builder/builder.h"
#include "partitioner/builder/scan.h"
#include "partitioner/ir/sharding.h"

struct PsNetPrivate {
  GPtrArray *weight_axes;    /* int8_t[rank] (g_free) or NULL, per weight */
  GHashTable *weight_index;  /* PsInstr* weight -> index + 1 */
  GHashTable *views;         /* PsInstr* view -> PsInstr* weight */
  gboolean has_state;
  PsOptimizerKind optimizer;
  GPtrArray *states;         /* PsInstr*, every weight's state in order */
  int *first_state;          /* per weight, + 1 at the end */
  PsInstr **grads;           /* per weight, NULL until the first gradient */
  int *grad_microbatch;      /* per weight: the microbatch its gradient so far ends with */
  int n_grads;               /* allocated entries of grads */
  int microbatch;            /* the microbatch being built (ps_net_microbatch) */
  int n_microbatches;        /* of how many (1 until ps_net_microbatch says) */
  PsInstr *loss;
  int n_losses;
  PsInstr *layer_aux;        /* ps_net_layer_aux_loss, until taken */
  /* ps_net_stack_weights: the leading dims new weights get */
  int n_stack;
  int64_t stack_dims[PS_NET_MAX_RANK];
  int8_t stack_axes[PS_NET_MAX_RANK];
  GArray *weight_stack;      /* int per weight: its number of stack dims */
  GArray *weight_stack_split;/* gboolean per weight: a stack dim is split */
  /* ps_net_scan_vjp_update: weights updated in a backward loop */
  PsInstr **new_w;           /* per weight, or NULL */
  PsInstr **new_st;          /* per state, or NULL */
  PsBuilder *builder;        /* ps_net_builder, made on first use */
};

/* ---- sharding plan ------------------------------------------------------------- */

void
ps_sharding_plan_init (PsShardingPlan *plan)
{
  memset (plan, 0, sizeof *plan);
  memset (plan->axis, PS_AXIS_NONE, sizeof plan->axis);
}

void
ps_sharding_plan_split (PsShardingPlan *plan, PsTensorClass cls, const char *letters, int axis)
{
  g_return_if_fail (cls < PS_N_TENSOR_CLASSES);
  plan->annotate[cls] = TRUE;
  for (const char *l = letters; *l; l++)
    {
      g_return_if_fail (*l >= 'a' && *l <= 'z');
      plan->axis[cls][*l - 'a'] = (int8_t) axis;
    }
}

/* ---- the net ------------------------------------------------------------------------ */

PsNet *
ps_net_new (const char *module_name, const char *computation_name, int mesh_rank,
            const int64_t *mesh_dims, const int64_t *mesh_devices, const PsShardingPlan *plan)
{
  g_return_val_if_fail (mesh_rank >= 1 && mesh_rank <= (int) G_N_ELEMENTS (((PsNet *) 0)->mesh_dims),
                        NULL);
  PsNet *net = g_new0 (PsNet, 1);
  net->m = ps_module_new (module_name);
  net->c = ps_computation_new (net->m, computation_name);
  net->c->is_entry = TRUE;
  net->m->entry = net->c;
  net->mesh_rank = mesh_rank;
  int64_t n = 1;
  for (int i = 0; i < mesh_rank; i++)
    {
      net->mesh_dims[i] = mesh_dims[i];
      n *= mesh_dims[i];
    }
  net->m->num_partitions = n;
  net->mesh_devices = g_memdup2 (mesh_devices, n * sizeof (int64_t));
  net->plan = *plan;
  net->act = PS_BF16;
  net->weights = g_ptr_array_new ();
  PsNetPrivate *p = net->priv = g_new0 (PsNetPrivate, 1);
  p->weight_axes = g_ptr_array_new_with_free_func (g_free);
  p->weight_index = g_hash_table_new (NULL, NULL);
  p->views = g_hash_table_new (NULL, NULL);
  p->states = g_ptr_array_new ();
  p->weight_stack = g_array_new (FALSE, TRUE, sizeof (int));
  p->weight_stack_split = g_array_new (FALSE, TRUE, sizeof (gboolean));
  return net;
}

static void
net_free_keep_module (PsNet *net)
{
  PsNetPrivate *p = net->priv;
  g_ptr_array_free (p->weight_axes, TRUE);
  g_hash_table_destroy (p->weight_index);
  g_hash_table_destroy (p->views);
  g_ptr_array_free (p->states, TRUE);
  g_array_free (p->weight_stack, TRUE);
  g_array_free (p->weight_stack_split, TRUE);
  g_free (p->first_state);
  g_free (p->grads);
  g_free (p->grad_microbatch);
  g_free (p->new_w);
  g_free (p->new_st);
  ps_builder_free (p->builder);
  g_free (p);
  g_ptr_array_free (net->weights, TRUE);
  g_free (net->mesh_devices);
  g_free (net);
}

void
ps_net_free (PsNet *net)
{
  if (net == NULL)
    return;
  ps_module_free (net->m);
  net_free_keep_module (net);
}

PsBuilder *
ps_net_builder (PsNet *net)
{
  PsNetPrivate *p = net->priv;
  if (p->builder && ps_builder_computation (p->builder) != net->c && ps_builder_ok (p->builder))
    {
      ps_builder_free (p->builder);
      p->builder = NULL;
    }
  if (p->builder == NULL)
    {
      p->builder = ps_builder_new_in (net->m, net->c);
      ps_builder_set_mesh (p->builder, net->mesh_rank, net->mesh_dims, net->mesh_devices);
      /* A loop body (a layer or microbatch loop, a pipeline stage) reads
       * the step's weights and tables as a closure; the scan that owns it
       * makes them loop invariants. */
      if (net->c != net->m->entry)
        ps_builder_allow_closure (p->builder);
    }
  return p->builder;
}

/* ---- annotations ------------------------------------------------------------------- */

/* mesh_split over the net's mesh; PS_AXIS_ALL splits over the flattened
 * mesh (then no dim may name a single axis). */
static PsSharding *
mesh_sharding (PsNet *net, int rank, const int8_t *axes)
{
  int64_t map[PS_NET_MAX_RANK];
  gboolean flat = FALSE, single = FALSE;
  for (int i = 0; i < rank; i++)
    {
      flat |= axes[i] == PS_AXIS_ALL;
      single |= axes[i] >= 0;
    }
  g_assert (!(flat && single));
  for (int i = 0; i < rank; i++)
    map[i] = flat ? (axes[i] == PS_AXIS_ALL ? 0 : -1) : axes[i];
  GError *err = NULL;
  PsSharding *s;
  if (flat)
    {
      int64_t all = net->m->num_partitions;
      s = ps_sharding_mesh_split (rank, 1, &all, net->mesh_devices, map, &err);
    }
  else
    s = ps_sharding_mesh_split (rank, net->mesh_rank, net->mesh_dims, net->mesh_devices, map, &err);
  g_assert_no_error (err);
  return s;
}

static void
set_sharding (PsNet *net, PsInstr *x, const int8_t *axes, gboolean by_user)
{
  if (x->sharding != NULL)
    return;
  g_autoptr (PsSharding) s = mesh_sharding (net, x->shape->rank, axes);
  ps_instr_set_sharding (x, s);
  if (by_user)
    net->n_annotations++;
}

/* The plan's axes for `letters` in class cls (transfer full), or NULL when
 * the class is not annotated. */
static int8_t *
plan_axes (const PsNet *net, PsTensorClass cls, const PsShape *shape, const char *letters)
{
  if (letters == NULL || !net->plan.annotate[cls])
    return NULL;
  g_assert ((int) strlen (letters) == shape->rank);
  int8_t *axes = g_new (int8_t, shape->rank > 0 ? shape->rank : 1);
  for (int i = 0; i < shape->rank; i++)
    {
      g_assert (letters[i] >= 'a' && letters[i] <= 'z');
      axes[i] = net->plan.axis[cls][letters[i] - 'a'];
    }
  return axes;
}

void
ps_net_annotate_as (PsNet *net, PsInstr *x, PsTensorClass cls, const char *letters)
{
  g_autofree int8_t *axes = plan_axes (net, cls, x->shape, letters);
  if (axes)
    set_sharding (net, x, axes, TRUE);
}

void
ps_net_annotate (PsNet *net, PsInstr *x, const char *letters)
{
  ps_net_annotate_as (net, x, PS_ACTIVATIONS, letters);
}

/* ---- parameters --------------------------------------------------------------------- */

static PsInstr *
add_parameter (PsNet *net, const char *name, PsShape *shape)
{
  PsInstr *p = ps_build_parameter_shape (ps_net_builder (net), name, shape);
  ps_shape_free (shape);
  return p;
}

PsInstr *
ps_net_weight (PsNet *net, const char *name, const char *letters, int rank, const int64_t *dims)
{
  PsNetPrivate *p = net->priv;
  g_return_val_if_fail (!p->has_state, NULL);
  int s = p->n_stack;
  g_return_val_if_fail (rank + s <= PS_NET_MAX_RANK, NULL);
  int64_t sd[PS_NET_MAX_RANK];
  memcpy (sd, p->stack_dims, sizeof (int64_t) * (gsize) s);
  memcpy (sd + s, dims, sizeof (int64_t) * (gsize) rank);
  PsInstr *w = add_parameter (net, name, ps_shape_new_array (PS_F32, rank + s, sd));
  /* a layer's axes after the stack dims' */
  PsShape *one = ps_shape_new_array (PS_F32, rank, dims);
  g_autofree int8_t *layer_axes = plan_axes (net, PS_WEIGHTS, one, letters);
  ps_shape_free (one);
  gboolean split_stack = FALSE;
  for (int d = 0; d < s; d++)
    split_stack |= p->stack_axes[d] != PS_AXIS_NONE;
  int8_t *axes = NULL;
  if (layer_axes || split_stack)
    {
      axes = g_new (int8_t, rank + s + 1);
      memcpy (axes, p->stack_axes, (gsize) s);
      for (int d = 0; d < rank; d++)
        axes[s + d] = layer_axes ? layer_axes[d] : PS_AXIS_NONE;
      set_sharding (net, w, axes, TRUE);
    }
  g_ptr_array_add (net->weights, w);
  g_ptr_array_add (p->weight_axes, axes);
  g_array_append_val (p->weight_stack, s);
  g_array_append_val (p->weight_stack_split, split_stack);
  g_hash_table_insert (p->weight_index, w, GINT_TO_POINTER (net->weights->len));
  return w;
}

int
ps_net_n_weights (const PsNet *net)
{
  return (int) net->weights->len;
}

void
ps_net_stack_weights_split (PsNet *net, int n_dims, const int64_t *dims, const int *axes)
{
  g_return_if_fail (n_dims >= 0 && n_dims < PS_NET_MAX_RANK);
  PsNetPrivate *p = net->priv;
  p->n_stack = n_dims;
  for (int d = 0; d < n_dims; d++)
    {
      g_return_if_fail (dims[d] >= 1);
      p->stack_dims[d] = dims[d];
      p->stack_axes[d] = (int8_t) (axes ? axes[d] : PS_AXIS_NONE);
    }
}

void
ps_net_stack_weights (PsNet *net, int64_t n)
{
  g_return_if_fail (n >= 0);
  ps_net_stack_weights_split (net, n > 0 ? 1 : 0, &n, NULL);
}

int
ps_net_weight_stack (const PsNet *net, const PsInstr *w, int64_t *dims)
{
  int i = GPOINTER_TO_INT (g_hash_table_lookup (net->priv->weight_index, w)) - 1;
  g_return_val_if_fail (i >= 0, 0);
  int n = g_array_index (net->priv->weight_stack, int, i);
  for (int d = 0; dims && d < n; d++)
    dims[d] = w->shape->dims[d];
  return n;
}

PsInstr *
ps_net_input (PsNet *net, const char *name, PsElemType t, int rank, const int64_t *dims)
{
  return add_parameter (net, name, rank == 0 ? ps_shape_new_scalar (t) : ps_shape_new_array (t, rank, dims));
}

static int64_t
axis_size (const PsNet *net, int axis)
{
  return axis == PS_AXIS_ALL ? net->m->num_partitions : net->mesh_dims[axis];
}

/* The state's axes: its weight's, through the dims the state keeps; then
 * weight-update sharding of dim 0 (of a layer's state, for a weight
 * stacked over `stack` layers: the stack dim stays unsplit). TRUE when
 * some dim is split. */
static gboolean
state_axes (const PsNet *net, PsOptimizerKind kind, const PsInstr *w, const int8_t *waxes, int k,
            int stack, const PsShape *state, int wus_axis, int8_t *axes)
{
  gboolean any = FALSE;
  for (int d = 0; d < state->rank; d++)
    {
      int src = d < stack ? d
                : stack + ps_optimizer_state_source_dim (kind, w->shape->rank - stack, k, d - stack);
      axes[d] = waxes ? waxes[src] : PS_AXIS_NONE;
      any |= axes[d] != PS_AXIS_NONE;
    }
  if (wus_axis == PS_AXIS_NONE || state->rank <= stack)
    return any;
  gboolean used = FALSE;
  for (int d = 0; d < state->rank; d++)
    used |= axes[d] == wus_axis || axes[d] == PS_AXIS_ALL
            || (wus_axis == PS_AXIS_ALL && axes[d] != PS_AXIS_NONE);
  if (!used && axes[stack] == PS_AXIS_NONE && state->dims[stack] % axis_size (net, wus_axis) == 0)
    {
      axes[stack] = (int8_t) wus_axis;
      any = TRUE;
    }
  return any;
}

void
ps_net_add_optimizer_state (PsNet *net, PsOptimizerKind kind, int wus_axis)
{
  PsNetPrivate *p = net->priv;
  g_return_if_fail (!p->has_state);
  p->has_state = TRUE;
  p->optimizer = kind;
  int nw = (int) net->weights->len;
  p->first_state = g_new0 (int, nw + 1);
  for (int i = 0; i < nw; i++)
    {
      PsInstr *w = net->weights->pdata[i];
      PsShape *shapes[2];
      int stack = g_array_index (p->weight_stack, int, i);
      int ns = ps_optimizer_state_shapes_stacked (kind, w->shape, stack, shapes);
      p->first_state[i] = (int) p->states->len;
      for (int k = 0; k < ns; k++)
        {
          g_autofree char *name = g_strdup_printf ("%s.opt%d", w->name, k);
          PsInstr *s = add_parameter (net, name, shapes[k]);
          int8_t axes[PS_NET_MAX_RANK] = { 0 };
          if (state_axes (net, kind, w, p->weight_axes->pdata[i], k, stack, s->shape, wus_axis, axes))
            set_sharding (net, s, axes, FALSE);
          g_ptr_array_add (p->states, s);
        }
    }
  p->first_state[nw] = (int) p->states->len;
}

PsInstr *
ps_net_weight_view (PsNet *net, PsInstr *weight, PsElemType t)
{
  g_return_val_if_fail (g_hash_table_contains (net->priv->weight_index, weight), NULL);
  /* Always a new instruction, even when t is the weight's type, so the
   * view is a separate cut point for the backward pass. */
  PsInstr *v = ps_build_convert (ps_net_builder (net), weight, t);
  g_hash_table_insert (net->priv->views, v, weight);
  return v;
}

/* ---- emission helpers ------------------------------------------------------------------- */

PsInstr *
ps_net_einsum (PsNet *net, const char *spec, PsInstr *lhs, PsInstr *rhs)
{
  g_auto (GStrv) io = g_strsplit (spec, "->", 2);
  g_auto (GStrv) ins = g_strsplit (io[0], ",", 2);
  g_assert (io[1] != NULL && ins[1] != NULL);
  const char *ls = ins[0], *rs = ins[1], *os = io[1];
  g_assert ((int) strlen (ls) == lhs->shape->rank && (int) strlen (rs) == rhs->shape->rank);
  int64_t lb[PS_NET_MAX_RANK], rb[PS_NET_MAX_RANK], lc[PS_NET_MAX_RANK], rc[PS_NET_MAX_RANK];
  int nb = 0, nc = 0;
  for (int i = 0; ls[i]; i++)
    {
      const char *in_r = strchr (rs, ls[i]);
      if (!in_r)
        continue;
      if (strchr (os, ls[i]))
        {
          lb[nb] = i;
          rb[nb++] = in_r - rs;
        }
      else
        {
          lc[nc] = i;
          rc[nc++] = in_r - rs;
        }
    }
  /* The dot's natural output order: batch, lhs free, rhs free. */
  char natural[2 * PS_NET_MAX_RANK + 1];
  int k = 0;
  for (int i = 0; i < nb; i++)
    natural[k++] = ls[lb[i]];
  for (int i = 0; ls[i]; i++)
    if (!strchr (rs, ls[i]))
      natural[k++] = ls[i];
  for (int i = 0; rs[i]; i++)
    if (!strchr (ls, rs[i]))
      natural[k++] = rs[i];
  natural[k] = '\0';
  g_assert ((int) strlen (os) == k);
  PsDotDims dd = { .lhs_batch = { nb, lb }, .rhs_batch = { nb, rb },
                    .lhs_contracting = { nc, lc }, .rhs_contracting = { nc, rc } };
  PsInstr *dot = ps_build_dot (ps_net_builder (net), lhs, rhs, &dd);
  if (strcmp (natural, os) == 0)
    return dot;
  int64_t perm[2 * PS_NET_MAX_RANK];
  for (int i = 0; os[i]; i++)
    {
      const char *at = strchr (natural, os[i]);
      g_assert (at != NULL);
      perm[i] = at - natural;
    }
  return ps_build_transpose (ps_net_builder (net), dot, perm);
}

PsInstr *
ps_net_one_hot (PsNet *net, PsInstr *ids, int64_t depth, PsElemType t)
{
  int r = ids->shape->rank;
  g_assert (r < PS_NET_MAX_RANK);
  int64_t dims[PS_NET_MAX_RANK], keep[PS_NET_MAX_RANK];
  for (int i = 0; i < r; i++)
    {
      dims[i] = ids->shape->dims[i];
      keep[i] = i;
    }
  dims[r] = depth;
  PsBuilder *b = ps_net_builder (net);
  PsInstr *io = ps_build_iota (b, PS_S32, r + 1, dims, r);
  PsInstr *at = ps_build_broadcast (b, ids, r + 1, dims, keep);
  return ps_build_cast (b, ps_build_compare (b, PS_CMP_EQ, at, io), t);
}

PsInstr *
ps_net_slice_batch (PsNet *net, PsInstr *x, int64_t start, int64_t size)
{
  if (start == 0 && size == x->shape->dims[0])
    return x;
  int r = x->shape->rank;
  int64_t st[PS_NET_MAX_RANK], li[PS_NET_MAX_RANK];
  for (int i = 0; i < r; i++)
    {
      st[i] = i == 0 ? start : 0;
      li[i] = i == 0 ? start + size : x->shape->dims[i];
    }
  return ps_build_slice (ps_net_builder (net), x, st, li, NULL);
}

PsInstr *
ps_net_microbatch (PsNet *net, PsInstr *x, int u, int n)
{
  g_assert (n >= 1 && u >= 0 && u < n && x->shape->dims[0] % n == 0);
  int64_t size = x->shape->dims[0] / n;
  net->priv->microbatch = u;
  net->priv->n_microbatches = n;
  return ps_net_slice_batch (net, x, u * size, size);
}

/* ---- backward pass, gradients, loss -------------------------------------------------------- */

static void
grow_grads (PsNet *net)
{
  PsNetPrivate *p = net->priv;
  if (p->n_grads < (int) net->weights->len)
    {
      p->grads = g_renew (PsInstr *, p->grads, net->weights->len);
      memset (p->grads + p->n_grads, 0, (net->weights->len - p->n_grads) * sizeof (PsInstr *));
      p->grad_microbatch = g_renew (int, p->grad_microbatch, net->weights->len);
      memset (p->grad_microbatch + p->n_grads, 0, (net->weights->len - p->n_grads) * sizeof (int));
      p->n_grads = (int) net->weights->len;
    }
}

void
ps_net_add_grad (PsNet *net, PsInstr *weight, PsInstr *g)
{
  PsNetPrivate *p = net->priv;
  int i = GPOINTER_TO_INT (g_hash_table_lookup (p->weight_index, weight)) - 1;
  g_return_if_fail (i >= 0);
  g_return_if_fail (p->new_w == NULL || p->new_w[i] == NULL);
  grow_grads (net);
  PsBuilder *b = ps_net_builder (net);
  g = ps_build_cast (b, g, weight->shape->etype);
  PsInstr *prev = p->grads[i];
  if (prev && p->grad_microbatch[i] != p->microbatch)
    {
      /* The sum so far crosses into a new microbatch as a loop's carried
       * accumulator would (Lingvo and JAX accumulate in a loop): kept as
       * a buffer of its own, so the additions of successive microbatches
       * are not fused into one kernel at the end that would keep every
       * microbatch's gradient alive until then. */
      prev = ps_build_optimization_barrier (b, prev);
    }
  else if (!prev && p->n_microbatches > 1)
    {
      /* The first microbatch adds into the zeroed accumulator, as a loop's
       * first iteration does: the sum is a buffer of its own, not an
       * element of the op that made the gradient (a batch-norm gradient's
       * tuple would otherwise stay live, whole, until the next
       * microbatch's gradient arrives). */
      prev = ps_build_full_like (b, g->shape, 0.0);
    }
  p->grads[i] = prev ? ps_build_add (b, prev, g) : g;
  p->grad_microbatch[i] = p->microbatch;
}

gboolean
ps_net_vjp (PsNet *net, PsInstr *y, PsInstr *dy, PsInstr *x, PsInstr **dx, int n_weights,
            PsInstr *const *weights, GError **error)
{
  PsInstr *dys[1] = { dy ? dy : ps_build_full_like (ps_net_builder (net), y->shape, 1.0) };
  return ps_net_vjp_multi (net, 1, &y, dys, x, dx, n_weights, weights, error);
}

gboolean
ps_net_vjp_multi (PsNet *net, int n_y, PsInstr *const *ys, PsInstr *const *dys, PsInstr *x,
                  PsInstr **dx, int n_weights, PsInstr *const *weights, GError **error)
{
  int off = x ? 1 : 0;
  g_autofree PsInstr **wrt = g_new (PsInstr *, n_weights + 1);
  if (x)
    wrt[0] = x;
  for (int i = 0; i < n_weights; i++)
    wrt[off + i] = weights[i];
  GPtrArray *g = ps_autodiff_vjp_multi (net->c, n_y, ys, dys, off + n_weights, wrt, error);
  if (g == NULL)
    return FALSE;
  if (dx)
    *dx = x ? g->pdata[0] : NULL;
  /* Views first: their gradients become the weight's type before any is
   * accumulated. */
  g_autofree PsInstr **owner = g_new (PsInstr *, n_weights + 1);
  for (int i = 0; i < n_weights; i++)
    {
      owner[i] = g_hash_table_lookup (net->priv->views, weights[i]);
      if (owner[i] == NULL)
        owner[i] = weights[i];
      g->pdata[off + i] = ps_build_cast (ps_net_builder (net), g->pdata[off + i], owner[i]->shape->etype);
    }
  for (int i = 0; i < n_weights; i++)
    ps_net_add_grad (net, owner[i], g->pdata[off + i]);
  g_ptr_array_free (g, TRUE);
  return TRUE;
}

void
ps_net_layer_aux_loss (PsNet *net, PsInstr *aux)
{
  g_return_if_fail (net->priv->layer_aux == NULL && ps_shape_is_array (aux->shape) && aux->shape->rank == 0);
  net->priv->layer_aux = aux;
}

PsInstr *
ps_net_take_layer_aux (PsNet *net)
{
  PsInstr *a = net->priv->layer_aux;
  net->priv->layer_aux = NULL;
  return a;
}

void
ps_net_add_loss (PsNet *net, PsInstr *loss)
{
  PsNetPrivate *p = net->priv;
  p->loss = p->loss ? ps_build_add (ps_net_builder (net), p->loss, loss) : loss;
  p->n_losses++;
}

/* ---- the update inside a layer loop's backward loop ---------------------------------- */

typedef struct {
  PsOptimizerKind kind;
  int n;                     /* weights */
  int n_states;              /* their states: the first extra values */
  gboolean accumulated;      /* then one gradient stack per weight */
} LoopUpdate;

/* Iteration t: each weight's layer-t gradient (plus what earlier
 * microbatches accumulated) updates layer t of the weight and its state in
 * place. */
static gboolean
loop_update (const PsScanUpdateArgs *a, PsInstr **xs_out, PsInstr **extra_out, gpointer user,
             GError **error)
{
  const LoopUpdate *u = user;
  PsComputation *c = a->c;
  g_autoptr (PsBuilder) b = ps_builder_new_in (c->parent, c);
  PsOptimizerHyper h;
  ps_optimizer_hyper_defaults (u->kind, &h);
  h.lr = a->consts[0];
  h.decay = a->consts[1];
  g_autofree PsInstr **g = g_new (PsInstr *, u->n);
  for (int i = 0; i < u->n; i++)
    {
      g_return_val_if_fail (a->dxs[i] != NULL, FALSE);
      g[i] = ps_build_cast (b, a->dxs[i], PS_F32);
      if (u->accumulated)
        g[i] = ps_build_add (b, g[i], ps_scan_slice_at (c, a->extra[u->n_states + i], a->index, NULL));
    }
  if (!ps_builder_check (b, error))
    return FALSE;
  ps_optimizer_apply_layer_at (c, u->kind, &h, u->n, a->xs, g, a->extra, a->index, xs_out,
                               extra_out);
  return TRUE;
}

gboolean
ps_net_scan_vjp_update (PsNet *net, PsScan *s, int first_weight, int n_weights, PsInstr *dy,
                        PsInstr **dx, PsInstr *lr, PsInstr *decay, GError **error)
{
  PsNetPrivate *p = net->priv;
  g_return_val_if_fail (p->has_state && first_weight >= 0 && n_weights >= 1
                        && first_weight + n_weights <= (int) net->weights->len, FALSE);
  grow_grads (net);
  if (!p->new_w)
    {
      p->new_w = g_new0 (PsInstr *, net->weights->len + 1);
      p->new_st = g_new0 (PsInstr *, p->states->len + 1);
    }
  int s0 = p->first_state[first_weight], ns = p->first_state[first_weight + n_weights] - s0;
  gboolean acc = p->grads[first_weight] != NULL;
  g_autoptr (GPtrArray) extra = g_ptr_array_new ();
  for (int k = 0; k < ns; k++)
    g_ptr_array_add (extra, p->states->pdata[s0 + k]);
  for (int i = 0; i < n_weights; i++)
    {
      g_return_val_if_fail ((p->grads[first_weight + i] != NULL) == acc
                            && p->new_w[first_weight + i] == NULL, FALSE);
      if (acc)
        {
          /* the earlier microbatches' sum, laid out as its weight (as the
           * separate update's loop reads it) */
          PsInstr *w = net->weights->pdata[first_weight + i], *g = p->grads[first_weight + i];
          if (w->sharding && !g->sharding)
            ps_instr_set_sharding (g, w->sharding);
          g_ptr_array_add (extra, g);
        }
    }
  PsInstr *consts[2] = { lr, decay };
  LoopUpdate lu = { p->optimizer, n_weights, ns, acc };
  PsScanUpdate u = { (int) extra->len, (PsInstr **) extra->pdata, 2, consts, loop_update, &lu };
  g_autofree PsInstr **extra_out = g_new0 (PsInstr *, extra->len + 1);
  if (!ps_scan_vjp_update (s, &dy, dx, NULL, &u, p->new_w + first_weight, extra_out, error))
    return FALSE;
  for (int k = 0; k < ns; k++)
    p->new_st[s0 + k] = extra_out[k];
  return TRUE;
}

/* Iteration t: accumulator i gets the gradient of layer t added in place. */
static gboolean
loop_accumulate (const PsScanUpdateArgs *a, PsInstr **xs_out, PsInstr **extra_out,
                 gpointer user, GError **error)
{
  (void) xs_out;
  int n = GPOINTER_TO_INT (user);
  PsComputation *c = a->c;
  g_autoptr (PsBuilder) b = ps_builder_new_in (c->parent, c);
  for (int i = 0; i < n; i++)
    {
      if (!a->dxs[i])
        continue;
      PsInstr *acc = a->extra[i];
      PsInstr *g = ps_build_cast (b, a->dxs[i], acc->shape->etype);
      PsInstr *sum = ps_build_add (b, ps_scan_slice_at (c, acc, a->index, NULL), g);
      if (!ps_builder_check (b, error))
        return FALSE;
      extra_out[i] = ps_scan_update_at (c, acc, sum, a->index, NULL);
    }
  return TRUE;
}

gboolean
ps_net_scan_vjp_accumulate (PsNet *net, PsScan *s, int first_weight, int n_weights, PsInstr *dy,
                            PsInstr **dx, GError **error)
{
  PsNetPrivate *p = net->priv;
  g_return_val_if_fail (first_weight >= 0 && n_weights >= 1
                        && first_weight + n_weights <= (int) net->weights->len, FALSE);
  grow_grads (net);
  g_autofree PsInstr **acc = g_new0 (PsInstr *, n_weights + 1);
  for (int i = 0; i < n_weights; i++)
    {
      PsInstr *w = net->weights->pdata[first_weight + i];
      g_return_val_if_fail (p->new_w == NULL || p->new_w[first_weight + i] == NULL, FALSE);
      acc[i] = p->grads[first_weight + i] ? p->grads[first_weight + i]
                                           : ps_build_full_like (ps_net_builder (net), w->shape, 0.0);
      /* laid out as its weight, as the update reads it */
      if (w->sharding && !acc[i]->sharding)
        ps_instr_set_sharding (acc[i], w->sharding);
    }
  PsScanUpdate u = { n_weights, acc, 0, NULL, loop_accumulate, GINT_TO_POINTER (n_weights) };
  g_autofree PsInstr **xs_out = g_new0 (PsInstr *, n_weights + 1);
  g_autofree PsInstr **acc_out = g_new0 (PsInstr *, n_weights + 1);
  if (!ps_scan_vjp_update (s, &dy, dx, NULL, &u, xs_out, acc_out, error))
    return FALSE;
  for (int i = 0; i < n_weights; i++)
    p->grads[first_weight + i] = acc_out[i];
  return TRUE;
}

/* ---- microbatches as a loop ------------------------------------------------------------------ */

/* The layout of an input [B, ...] (a tiled sharding, or NULL) for its
 * stack [M, B/M, ...]: each microbatch split as the input's rows were, the
 * leading dim whole. NULL when there is none. transfer full. */
static PsSharding *
stack_sharding (const PsSharding *s)
{
  if (!s || !ps_sharding_is_tiled (s) || ps_sharding_has_manual_subgroup (s) || s->n_subgroups > 1)
    return NULL;
  int nd = ps_sharding_data_rank (s);
  int64_t dims[PS_NET_MAX_RANK + 2];
  dims[0] = 1;
  for (int d = 0; d < nd; d++)
    dims[d + 1] = s->tile_dims[d];
  int64_t R = ps_sharding_replication (s);
  if (R == 1)
    return ps_sharding_tiled (nd + 1, dims, s->devices);
  dims[nd + 1] = R;
  return ps_sharding_partial (nd + 2, dims, s->devices);
}

typedef struct {
  PsNet *net;
  int n_inputs;
  PsNetMicrobatchFn fn;
  gpointer user;
  int n_losses;              /* ps_net_add_loss calls of one microbatch */
} MicrobatchLoop;

/* One microbatch, the carry (every weight's accumulator, then the loss)
 * standing in for the gradients and loss so far. */
static gboolean
microbatch_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  MicrobatchLoop *ml = user;
  PsNet *net = ml->net;
  PsNetPrivate *p = net->priv;
  int nw = (int) net->weights->len;
  PsComputation *outer = net->c;
  net->c = a->c;
  for (int i = 0; i < nw; i++)
    {
      p->grads[i] = a->carry[i];
      /* the carry is the accumulator: no barrier between microbatches */
      p->grad_microbatch[i] = p->microbatch;
    }
  p->loss = a->carry[nw];
  p->n_losses = 0;
  gboolean ok = ml->fn (net, a->xs, ml->user, error);
  net->c = outer;
  if (!ok)
    return FALSE;
  for (int i = 0; i < nw; i++)
    carry_out[i] = p->grads[i];
  carry_out[nw] = p->loss;
  ml->n_losses = p->n_losses;
  return TRUE;
}

gboolean
ps_net_microbatch_loop (PsNet *net, int n_inputs, PsInstr *const *inputs, int n,
                        PsNetMicrobatchFn fn, gpointer user, GError **error)
{
  PsNetPrivate *p = net->priv;
  g_return_val_if_fail (n >= 1 && n_inputs >= 1 && fn != NULL && p->new_w == NULL, FALSE);
  grow_grads (net);
  int nw = (int) net->weights->len;
  g_autofree PsInstr **carry = g_new0 (PsInstr *, nw + 2);
  for (int i = 0; i < nw; i++)
    {
      PsInstr *w = net->weights->pdata[i];
      carry[i] = p->grads[i] ? p->grads[i] : ps_build_full_like (ps_net_builder (net), w->shape, 0.0);
      /* laid out as its weight, as the update reads it */
      if (w->sharding && !carry[i]->sharding)
        ps_instr_set_sharding (carry[i], w->sharding);
    }
  carry[nw] = p->loss ? p->loss : ps_build_scalar (ps_net_builder (net), PS_F32, 0.0);
  g_autofree PsInstr **xs = g_new0 (PsInstr *, n_inputs + 1);
  for (int k = 0; k < n_inputs; k++)
    {
      const PsShape *s = inputs[k]->shape;
      g_return_val_if_fail (s->rank >= 1 && s->rank < PS_NET_MAX_RANK && s->dims[0] % n == 0, FALSE);
      int64_t dims[PS_NET_MAX_RANK];
      dims[0] = n;
      dims[1] = s->dims[0] / n;
      memcpy (dims + 2, s->dims + 1, sizeof (int64_t) * (gsize) (s->rank - 1));
      PsShape *r = ps_shape_new_array (s->etype, s->rank + 1, dims);
      xs[k] = ps_build_reshape_to (ps_net_builder (net), inputs[k], r);
      ps_shape_free (r);
      /* The batch split as the plan splits activations, over the rows of
       * the input and over each microbatch's rows in the stack (whose
       * leading dim the loop slices, unsplit): else propagation, which
       * cannot carry a split batch through the reshape, leaves the input
       * whole on every device. Not a user's annotation (not counted). */
      int8_t b = net->plan.annotate[PS_ACTIVATIONS] ? net->plan.axis[PS_ACTIVATIONS]['b' - 'a']
                                                    : PS_AXIS_NONE;
      if (b != PS_AXIS_NONE)
        {
          int8_t axes[PS_NET_MAX_RANK + 1];
          memset (axes, PS_AXIS_NONE, sizeof axes);
          axes[0] = b;
          set_sharding (net, inputs[k], axes, FALSE);
        }
      g_autoptr (PsSharding) st = stack_sharding (inputs[k]->sharding);
      if (st && !xs[k]->sharding)
        ps_instr_set_sharding (xs[k], st);
    }
  int n_losses_before = p->n_losses;
  p->microbatch = 0;
  p->n_microbatches = n;
  MicrobatchLoop ml = { net, n_inputs, fn, user, 0 };
  PsScanSpec spec = { .name = "microbatches", .length = n, .n_carry = nw + 1, .carry = carry,
                      .n_xs = n_inputs, .xs = xs, .body = microbatch_body, .user = &ml };
  g_autoptr (PsScan) s = ps_scan_build (net->c, &spec, error);
  if (!s)
    return FALSE;
  for (int i = 0; i < nw; i++)
    {
      /* The accumulators keep the weight's layout through the loop, as the
       * unrolled form's do: without it propagation takes the layout the
       * update reads (split over the data axis with weight-update
       * sharding) for the loop state, and every iteration gathers it back
       * for the layer loop. */
      PsInstr *w = net->weights->pdata[i];
      p->grads[i] = ps_scan_carry_out (s, i);
      if (w->sharding && !p->grads[i]->sharding)
        ps_instr_set_sharding (p->grads[i], w->sharding);
      p->grad_microbatch[i] = n - 1;
    }
  p->microbatch = n - 1;
  p->loss = ps_scan_carry_out (s, nw);
  p->n_losses = n_losses_before + n * ml.n_losses;
  return TRUE;
}

/* ---- optimizer step and outputs ------------------------------------------------------------------- */

/* Is weight i updated by the layer loop (one unsplit stack dim)? */
static gboolean
layer_loop (const PsNetPrivate *p, int i)
{
  return g_array_index (p->weight_stack, int, i) == 1
         && !g_array_index (p->weight_stack_split, gboolean, i);
}

PsModule *
ps_net_finish (PsNet *net, PsInstr *lr, PsInstr *decay)
{
  PsNetPrivate *p = net->priv;
  g_return_val_if_fail (p->has_state && p->loss != NULL && p->n_grads == (int) net->weights->len, NULL);
  PsComputation *c = net->c;
  PsBuilder *b = ps_net_builder (net);
  GPtrArray *outs = g_ptr_array_new ();
  GPtrArray *new_states = g_ptr_array_new ();
  /* parameter numbers of the old weights and states, in output order */
  GArray *donors = g_array_new (FALSE, FALSE, sizeof (int64_t)), *state_donors = g_array_new (FALSE, FALSE, sizeof (int64_t));
  PsInstr *loss = p->loss;
  if (p->n_losses > 1)
    loss = ps_build_mul (b, loss, ps_build_scalar (b, PS_F32, 1.0 / p->n_losses));
  g_ptr_array_add (outs, loss);
  PsOptimizerHyper hyper;
  ps_optimizer_hyper_defaults (p->optimizer, &hyper);
  hyper.lr = lr;
  hyper.decay = decay;
  int nw = (int) net->weights->len;
  g_autofree PsInstr **new_w = g_new0 (PsInstr *, nw + 1);
  g_autofree PsInstr **new_st = g_new0 (PsInstr *, p->states->len + 1);
  /* Weights stacked by layer (one unsplit stack dim): one loop over the
   * layers updates them all (they were created in one run, so their
   * states follow each other). Weights with a split stack dim or more
   * stack dims (a pipeline's stages) get the per-layer update vectorized
   * over them. */
  GPtrArray *sw = g_ptr_array_new (), *sg = g_ptr_array_new ();
  int first_stacked = -1;
  if (p->new_w)
    {
      memcpy (new_w, p->new_w, sizeof (PsInstr *) * (gsize) nw);
      memcpy (new_st, p->new_st, sizeof (PsInstr *) * p->states->len);
    }
  for (int i = 0; i < nw; i++)
    if (layer_loop (p, i) && !new_w[i])
      {
        if (first_stacked < 0)
          first_stacked = i;
        g_assert (i == first_stacked + (int) sw->len);
        g_ptr_array_add (sw, net->weights->pdata[i]);
        g_ptr_array_add (sg, p->grads[i]);
      }
  if (sw->len > 0)
    {
      GError *error = NULL;
      gboolean ok = ps_optimizer_apply_layers (c, p->optimizer, &hyper, (int) sw->len,
                                               (PsInstr **) sw->pdata, (PsInstr **) sg->pdata,
                                               (PsInstr **) p->states->pdata + p->first_state[first_stacked],
                                               new_w + first_stacked,
                                               new_st + p->first_state[first_stacked], &error);
      /* the optimizer's own body: an error is a programmer error */
      g_assert_no_error (error);
      g_assert (ok);
    }
  g_ptr_array_free (sw, TRUE);
  g_ptr_array_free (sg, TRUE);
  for (int i = 0; i < nw; i++)
    {
      int n_stack = g_array_index (p->weight_stack, int, i);
      if (n_stack >= 1 && !layer_loop (p, i) && !new_w[i])
        ps_optimizer_apply_stacked (c, p->optimizer, &hyper, net->weights->pdata[i], p->grads[i],
                                    (PsInstr **) p->states->pdata + p->first_state[i], n_stack,
                                    &new_w[i], new_st + p->first_state[i]);
    }
  for (int i = 0; i < nw; i++)
    {
      PsInstr *w = net->weights->pdata[i];
      g_return_val_if_fail (p->grads[i] != NULL || new_w[i] != NULL, NULL);
      PsInstr **st = (PsInstr **) p->states->pdata + p->first_state[i];
      if (!new_w[i])
        ps_optimizer_apply (c, p->optimizer, &hyper, w, p->grads[i], st, &new_w[i],
                            new_st + p->first_state[i]);
      /* The new weight replaces the old one (a donated buffer in XLA), so it
       * keeps the weight's sharding; the same for the state. */
      if (w->sharding)
        ps_instr_set_sharding (new_w[i], w->sharding);
      g_ptr_array_add (outs, new_w[i]);
      g_array_append_val (donors, w->parameter_number);
      for (int k = p->first_state[i]; k < p->first_state[i + 1]; k++)
        {
          PsInstr *s0 = p->states->pdata[k];
          if (s0->sharding)
            ps_instr_set_sharding (new_st[k], s0->sharding);
          g_ptr_array_add (new_states, new_st[k]);
          g_array_append_val (state_donors, s0->parameter_number);
        }
    }
  for (guint i = 0; i < new_states->len; i++)
    g_ptr_array_add (outs, new_states->pdata[i]);
  g_ptr_array_free (new_states, TRUE);
  /* A training loop donates the weights and optimizer state (jax.jit's
   * donate_argnums; TF's resource variables): each updated value is
   * written over its old one, input_output_alias in the module. */
  g_array_append_vals (donors, state_donors->data, state_donors->len);
  for (guint i = 0; i < donors->len; i++)
    {
      int64_t out = 1 + (int64_t) i;
      ps_module_add_alias (net->m, 1, &out, g_array_index (donors, int64_t, i), 0, NULL, FALSE);
    }
  g_array_free (donors, TRUE);
  g_array_free (state_donors, TRUE);
  ps_builder_name_next (b, "outputs");
  c->root = ps_build_tuple (b, (int) outs->len, (PsInstr **) outs->pdata);
  g_ptr_array_free (outs, TRUE);
  PsModule *m = net->m;
  net_free_keep_module (net);
  return m;
}

/* ---- one more leading dim split over a mesh axis ---------------------------------------- */

PsSharding *
ps_net_prefix_axis (const PsNet *net, const PsSharding *s, int rank, int axis)
{
  g_return_val_if_fail (axis >= 0 && axis < net->mesh_rank && rank >= 1, NULL);
  int64_t k = net->mesh_dims[axis];
  int64_t n = net->m->num_partitions;
  /* the coordinate along `axis` of every device */
  int64_t stride = 1;
  for (int a = axis + 1; a < net->mesh_rank; a++)
    stride *= net->mesh_dims[a];
  g_autofree int64_t *coord = g_new0 (int64_t, n);
  for (int64_t pos = 0; pos < n; pos++)
    coord[net->mesh_devices[pos]] = (pos / stride) % k;
  /* the value's tiles: data dims of s (none when replicated), then a
   * replicated group of R devices per tile */
  int nd = 0;
  int64_t dims[PS_NET_MAX_RANK + 2];
  const int64_t *dev;
  g_autofree int64_t *all = NULL;
  int64_t tiles = 1, R;
  if (!s || ps_sharding_is_replicated (s))
    {
      nd = rank - 1;
      for (int d = 0; d < nd; d++)
        dims[d] = 1;
      all = g_new (int64_t, n);
      for (int64_t i = 0; i < n; i++)
        all[i] = i;
      dev = all;
      R = n;
    }
  else if (ps_sharding_is_tiled (s) && !ps_sharding_has_manual_subgroup (s)
           && s->n_subgroups <= 1 && ps_sharding_data_rank (s) == rank - 1)
    {
      nd = ps_sharding_data_rank (s);
      for (int d = 0; d < nd; d++)
        {
          dims[d] = s->tile_dims[d];
          tiles *= dims[d];
        }
      R = ps_sharding_replication (s);
      dev = s->devices;
    }
  else
    return NULL;
  if (R % k != 0)
    return NULL;
  /* devices of tile t with coordinate c go to new tile (c, t) */
  int64_t r2 = R / k;
  g_autofree int64_t *out = g_new (int64_t, n);
  g_autofree int64_t *fill = g_new0 (int64_t, k * tiles);
  for (int64_t t = 0; t < tiles; t++)
    for (int64_t j = 0; j < R; j++)
      {
        int64_t d = dev[t * R + j], c = coord[d];
        if (fill[c * tiles + t] >= r2)
          return NULL;
        out[(c * tiles + t) * r2 + fill[c * tiles + t]++] = d;
      }
  int64_t nt[PS_NET_MAX_RANK + 2];
  nt[0] = k;
  memcpy (nt + 1, dims, sizeof (int64_t) * (gsize) nd);
  if (r2 == 1)
    return ps_sharding_tiled (nd + 1, nt, out);
  nt[nd + 1] = r2;
  return ps_sharding_partial (nd + 2, nt, out);
}

PsModule *
ps_net_finish_gradients (PsNet *net)
{
  PsNetPrivate *p = net->priv;
  g_return_val_if_fail (p->loss != NULL && p->n_grads == (int) net->weights->len, NULL);
  PsComputation *c = net->c;
  PsBuilder *b = ps_net_builder (net);
  GPtrArray *outs = g_ptr_array_new ();
  PsInstr *loss = p->loss;
  if (p->n_losses > 1)
    loss = ps_build_mul (b, loss, ps_build_scalar (b, PS_F32, 1.0 / p->n_losses));
  g_ptr_array_add (outs, loss);
  for (guint i = 0; i < net->weights->len; i++)
    {
      PsInstr *w = net->weights->pdata[i];
      g_ptr_array_add (outs, p->grads[i]);
      if (w->sharding && !p->grads[i]->sharding)
        ps_instr_set_sharding (p->grads[i], w->sharding);
    }
  c->root = ps_build_tuple (b, (int) outs->len, (PsInstr **) outs->pdata);
  g_ptr_array_free (outs, TRUE);
  PsModule *m = net->m;
  net_free_keep_module (net);
  return m;
}
