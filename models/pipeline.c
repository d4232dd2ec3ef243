/* GSPMD pipelining: see pipeline.h. */
#include "config.h"

#include "models/pipeline.h"

#include <string.h>

#include "partitioner/builder/autodiff.h"
#include "partitioner/builder/scan.h"
#include "partitioner/builder/vmap.h"

struct PsPipelineRun {
  PsNet *net;
  int n_weights;           /* of all the stage's layers */
  int64_t microbatches;
  PsInstr **weights;       /* they, in the loop's order */
  PsScan *scan;
  PsInstr *out;           /* the outputs: the last stage's row */
  PsInstr *aux;           /* the aux terms' sum (aux_loss), else NULL */
};

void
ps_pipeline_stack_weights (PsNet *net, const PsPipeline *p)
{
  int64_t dims[1] = { p->stages };
  int axes[1] = { p->stage_axis };
  ps_net_stack_weights_split (net, 1, dims, axes);
}

/* x[start:limit] along dim 0 (a static slice). */
static PsInstr *
slice0 (PsBuilder *bd, PsInstr *x, int64_t start, int64_t limit)
{
  const PsShape *s = x->shape;
  int64_t st[PS_NET_MAX_RANK] = { 0 }, li[PS_NET_MAX_RANK];
  memcpy (li, s->dims, sizeof (int64_t) * (gsize) s->rank);
  st[0] = start;
  li[0] = limit;
  return ps_build_slice (bd, x, st, li, NULL);
}

/* Row j of x along dim 0, without that dim. */
static PsInstr *
row (PsBuilder *bd, PsInstr *x, int64_t j)
{
  const PsShape *s = x->shape;
  g_autoptr (PsShape) r = ps_shape_new_array (s->etype, s->rank - 1, s->dims + 1);
  return ps_build_reshape_to (bd, slice0 (bd, x, j, j + 1), r);
}

/* x padded along dim 0 with lo zeros before and hi after. */
static PsInstr *
pad0 (PsBuilder *bd, PsInstr *x, int64_t lo, int64_t hi)
{
  PsPadDim pad[PS_NET_MAX_RANK] = { { lo, hi, 0 } };
  return ps_build_pad (bd, x, ps_build_scalar (bd, x->shape->etype, 0.0), pad);
}

/* The state buffer shifted by one stage along dim 0: stage k gets stage
 * k - 1's value, stage 0 zeros. Written as pad(slice) so that, with the
 * dim split, the partitioner exchanges one stage's worth with the
 * neighbour (a collective-permute). */
static PsInstr *
shift_one_stage (PsBuilder *bd, PsInstr *state)
{
  return pad0 (bd, slice0 (bd, state, 0, state->shape->dims[0] - 1), 1, 0);
}

typedef struct {
  PsNet *net;
  const PsPipeline *p;
  const PsLayer *layers;
} Body;

static PsSharding *
stage_sharding (const PsSharding *s, int rank, gpointer user)
{
  Body *b = user;
  return ps_net_prefix_axis (b->net, s, rank, b->p->stage_axis);
}

/* One stage's layers, written for one stage in a scratch computation and
 * vectorized over the stages into c: stage_in [K, microbatch...] and the
 * layers' weights [K, ...] (consts of the loop), in order. With aux_loss,
 * *aux gets each stage's sum of its layers' aux terms [K]. */
static PsInstr *
run_stages (Body *b, PsComputation *c, PsInstr *stage_in, PsInstr *const *w, PsInstr **aux,
            GError **error)
{
  PsNet *net = b->net;
  const PsPipeline *p = b->p;
  PsComputation *st = ps_computation_new (net->m, "pipeline.stage.scratch");
  g_autoptr (PsBuilder) sb = ps_builder_new_in (net->m, st);
  g_autoptr (PsShape) xs = ps_shape_new_array (stage_in->shape->etype, stage_in->shape->rank - 1,
                                               stage_in->shape->dims + 1);
  PsInstr *x = ps_build_parameter_shape (sb, NULL, xs);
  g_autoptr (GHashTable) inputs = g_hash_table_new (NULL, NULL);
  g_autoptr (GHashTable) batched = g_hash_table_new (NULL, NULL);
  g_hash_table_insert (inputs, x, stage_in);
  g_hash_table_add (batched, x);
  PsComputation *outer = net->c;
  net->c = st;
  PsInstr *y = x, *aux_sum = NULL;
  int wi = 0;
  for (int j = 0; j < p->layers_per_stage; j++)
    {
      const PsLayer *l = &b->layers[j];
      g_autoptr (GHashTable) map = g_hash_table_new (NULL, NULL);
      for (int i = 0; i < l->n_weights; i++, wi++)
        {
          /* one stage's row of the weight: a parameter of the scratch */
          const PsShape *ws = w[wi]->shape;
          PsInstr *wp = ps_build_parameter (sb, NULL, ws->etype, ws->rank - 1, ws->dims + 1);
          g_hash_table_insert (inputs, wp, w[wi]);
          g_hash_table_add (batched, wp);
          g_hash_table_insert (map, net->weights->pdata[l->first_weight + i], wp);
        }
      g_autofree gpointer lw = l->rebind (l->weights, map);
      y = l->forward (net, lw, y);
      PsInstr *a = ps_net_take_layer_aux (net);
      g_assert (a == NULL || p->aux_loss);
      if (a)
        aux_sum = aux_sum ? ps_build_add (sb, aux_sum, a) : a;
    }
  if (p->aux_loss && !aux_sum)
    aux_sum = ps_build_scalar (sb, PS_F32, 0.0);
  net->c = outer;
  /* The layers' shapes come from a checked config: an error here is a
   * bug, but it is reported, not dereferenced. */
  if (!ps_builder_check (sb, error) || !ps_builder_check (ps_net_builder (net), error))
    {
      ps_module_remove_computation (net->m, st);
      return NULL;
    }
  PsVmapOptions vo = { p->stages, stage_sharding, b };
  PsInstr *roots[2] = { y, aux_sum }, *out[2] = { NULL, NULL };
  gboolean ok = ps_vmap (c, st, p->aux_loss ? 2 : 1, roots, inputs, batched, &vo, out, error);
  ps_module_remove_computation (net->m, st);
  if (aux)
    *aux = out[1];
  return ok ? out[0] : NULL;
}

/* 1 where stage k holds a microbatch in iteration i (k <= i < k + M),
 * else 0: f32 [K]. */
static PsInstr *
stage_busy (PsBuilder *bd, PsInstr *i, int64_t K, int64_t M)
{
  PsInstr *k = ps_build_iota (bd, PS_S32, 1, &K, 0);
  PsInstr *ib = ps_build_broadcast_to (bd, i, k->shape, NULL);
  PsInstr *started = ps_build_cast (bd, ps_build_compare (bd, PS_CMP_LE, k, ib), PS_F32);
  PsInstr *last = ps_build_add (bd, k, ps_build_full_like (bd, k->shape, (double) M));
  PsInstr *left = ps_build_cast (bd, ps_build_compare (bd, PS_CMP_LT, ib, last), PS_F32);
  return ps_build_mul (bd, started, left);
}

/* One iteration: shift in the next microbatch, run every stage, keep the
 * last stage's output. carry: state [K, mb...], outputs [K, M, mb...];
 * xs: the inputs [M + K - 1, mb...] (zeros after the M microbatches);
 * consts: the stages' weights. */
static gboolean
pipeline_body (const PsScanArgs *a, PsInstr **carry_out, gpointer user, GError **error)
{
  Body *b = user;
  PsNet *net = b->net;
  const PsPipeline *p = b->p;
  g_autoptr (PsBuilder) bd = ps_builder_new_in (net->m, a->c);
  PsInstr *state = a->carry[0], *outputs = a->carry[1], *x_in = a->xs[0];
  int64_t K = p->stages;
  g_autofree char *letters = g_strdup_printf ("%c%s", p->stage_letter, p->act_letters);

  /* microbatch i enters stage 0 (zeros in the bubble) */
  PsInstr *shifted = shift_one_stage (bd, state);
  const PsShape *ss = state->shape;
  PsInstr *iota = ps_build_iota (bd, PS_S32, ss->rank, ss->dims, 0);
  PsInstr *first = ps_build_compare (bd, PS_CMP_EQ, iota, ps_build_full_like (bd, iota->shape, 0.0));
  int64_t bdims[PS_NET_MAX_RANK];
  for (int d = 0; d < x_in->shape->rank; d++)
    bdims[d] = d + 1;
  PsInstr *xb = ps_build_broadcast_to (bd, x_in, ss, bdims);
  PsInstr *stage_in = ps_build_select (bd, first, xb, shifted);
  if (!ps_builder_check (bd, error))
    return FALSE;
  ps_net_annotate (net, stage_in, letters);

  PsInstr *aux = NULL;
  PsInstr *stage_out = run_stages (b, a->c, stage_in, a->consts, &aux, error);
  if (!stage_out)
    return FALSE;
  if (p->aux_loss)
    {
      /* the bubble's stages computed on no microbatch: their terms drop */
      static const int64_t d0 = 0;
      PsInstr *busy = stage_busy (bd, a->index, K, p->microbatches);
      PsInstr *sum = ps_build_sum (bd, ps_build_mul (bd, aux, busy), 1, &d0);
      carry_out[2] = ps_build_add (bd, a->carry[2], sum);
    }
  ps_net_annotate (net, stage_out, letters);

  /* The last stage finished microbatch i - K + 1 (nothing yet before
   * K - 1: it writes at 0, and microbatch 0 overwrites that). Every stage
   * writes its output into its own row of outputs [K, M, mb...] at that
   * slot, so the write stays on the device; the last stage's row is taken
   * once, after the loop. */
  PsInstr *since = ps_build_sub (bd, a->index, ps_build_scalar (bd, PS_S32, (double) (K - 1)));
  PsInstr *o = ps_build_max (bd, since, ps_build_scalar (bd, PS_S32, 0.0));
  const PsShape *os = outputs->shape;
  int64_t ud[PS_NET_MAX_RANK];
  ud[0] = K;
  ud[1] = 1;
  memcpy (ud + 2, os->dims + 2, sizeof (int64_t) * (gsize) (os->rank - 2));
  g_autoptr (PsShape) us = ps_shape_new_array (stage_out->shape->etype, os->rank, ud);
  PsInstr *upd = ps_build_reshape_to (bd, stage_out, us);
  PsInstr *zero_i = ps_build_scalar (bd, PS_S32, 0.0);
  PsInstr *starts[PS_NET_MAX_RANK];
  for (int d = 0; d < os->rank; d++)
    starts[d] = d == 1 ? o : zero_i;
  carry_out[0] = stage_out;
  carry_out[1] = ps_build_dynamic_update_slice (bd, outputs, upd, starts);
  if (!ps_builder_check (bd, error))
    return FALSE;
  g_autofree char *out_letters = g_strdup_printf ("%cu%s", p->stage_letter, p->act_letters);
  ps_net_annotate (net, carry_out[1], out_letters);
  return TRUE;
}

PsInstr *
ps_pipeline_forward (PsNet *net, const PsPipeline *p, const PsLayer *layers, PsInstr *inputs,
                     PsPipelineRun **run, GError **error)
{
  g_return_val_if_fail (p->stages >= 1 && p->microbatches >= 1 && p->layers_per_stage >= 1, NULL);
  int nw = 0;
  for (int j = 0; j < p->layers_per_stage; j++)
    {
      g_return_val_if_fail (layers[j].rebind != NULL, NULL);
      nw += layers[j].n_weights;
    }
  g_return_val_if_fail (inputs->shape->rank >= 1 && inputs->shape->dims[0] == p->microbatches, NULL);
  const PsShape *is = inputs->shape;
  int64_t sd[PS_NET_MAX_RANK];
  sd[0] = p->stages;
  memcpy (sd + 1, is->dims + 1, sizeof (int64_t) * (gsize) (is->rank - 1));
  PsShape *ss = ps_shape_new_array (is->etype, is->rank, sd);
  int64_t od[PS_NET_MAX_RANK];
  od[0] = p->stages;
  memcpy (od + 1, is->dims, sizeof (int64_t) * (gsize) is->rank);
  PsShape *os = ps_shape_new_array (is->etype, is->rank + 1, od);
  PsBuilder *bd = ps_net_builder (net);
  PsInstr *carry[3] = { ps_build_full_like (bd, ss, 0.0), ps_build_full_like (bd, os, 0.0),
                        p->aux_loss ? ps_build_scalar (bd, PS_F32, 0.0) : NULL };
  ps_shape_free (ss);
  ps_shape_free (os);
  g_autofree char *letters = g_strdup_printf ("%c%s", p->stage_letter, p->act_letters);
  g_autofree char *out_letters = g_strdup_printf ("%cu%s", p->stage_letter, p->act_letters);
  ps_net_annotate (net, carry[0], letters);
  ps_net_annotate (net, carry[1], out_letters);
  /* the inputs padded to one per iteration */
  int64_t T = p->microbatches + p->stages - 1;
  PsInstr *xs = pad0 (bd, inputs, 0, p->stages - 1);
  g_autofree char *in_letters = g_strdup_printf ("u%s", p->act_letters);
  ps_net_annotate (net, xs, in_letters);
  int n = nw;
  g_autofree PsInstr **consts = g_new (PsInstr *, n + 1);
  g_autofree gboolean *grad = g_new (gboolean, n + 1);
  g_autofree PsInstr **weights = g_new (PsInstr *, nw + 1);
  for (int j = 0, k = 1; j < p->layers_per_stage; j++)
    for (int i = 0; i < layers[j].n_weights; i++, k++)
      {
        /* The layer casts its matrices to the activation type; cast once
         * here, where XLA's loop-invariant code motion would move the
         * body's casts (their gradients are still summed in f32). */
        PsInstr *w = net->weights->pdata[layers[j].first_weight + i];
        weights[k - 1] = w;
        consts[k - 1] = w->shape->rank >= 3 ? ps_build_cast (bd, w, net->act) : w;
        grad[k - 1] = TRUE;
      }
  Body b = { net, p, layers };
  PsScanSpec spec = { .name = "pipeline", .length = T, .n_carry = p->aux_loss ? 3 : 2, .carry = carry,
                      .n_xs = 1, .xs = &xs, .n_consts = n, .consts = consts,
                      .body = pipeline_body, .user = &b, .differentiable = TRUE,
                      .remat = p->remat, .consts_grad = grad, .consts_grad_f32 = TRUE };
  PsScan *s = ps_scan_build (net->c, &spec, error);
  if (!s)
    return NULL;
  *run = g_new0 (PsPipelineRun, 1);
  (*run)->net = net;
  (*run)->n_weights = nw;
  (*run)->microbatches = p->microbatches;
  (*run)->weights = g_steal_pointer (&weights);
  (*run)->scan = s;
  (*run)->aux = p->aux_loss ? ps_scan_carry_out (s, 2) : NULL;
  /* the last stage's row: its outputs for the microbatches in order */
  PsInstr *out = row (ps_net_builder (net), ps_scan_carry_out (s, 1), p->stages - 1);
  g_autofree char *ul = g_strdup_printf ("u%s", p->act_letters);
  ps_net_annotate (net, out, ul);
  (*run)->out = out;
  return out;
}

PsInstr *
ps_pipeline_aux_loss (const PsPipelineRun *run)
{
  g_return_val_if_fail (run != NULL, NULL);
  return run->aux;
}

gboolean
ps_pipeline_backward (PsNet *net, PsPipelineRun *run, PsInstr *d_outputs, PsInstr *d_aux,
                      PsInstr **d_inputs, GError **error)
{
  g_return_val_if_fail (run != NULL && run->net == net, FALSE);
  g_return_val_if_fail ((d_aux != NULL) == (run->aux != NULL), FALSE);
  /* the gradient reaching the outputs buffer through its last row */
  PsInstr *buf = ps_scan_carry_out (run->scan, 1);
  GPtrArray *gb = ps_autodiff_vjp (net->c, run->out, d_outputs, 1, &buf, error);
  if (!gb)
    {
      ps_pipeline_run_free (run);
      return FALSE;
    }
  PsInstr *dcarry[3] = { NULL, gb->pdata[0], d_aux };
  g_ptr_array_free (gb, TRUE);
  g_autofree PsInstr **dconsts = g_new0 (PsInstr *, run->n_weights + 1);
  PsInstr *dxs = NULL;
  gboolean ok = ps_scan_vjp (run->scan, dcarry, NULL, &dxs, dconsts, error);
  if (ok)
    {
      /* the microbatches' rows, without the padding's */
      *d_inputs = slice0 (ps_net_builder (net), dxs, 0, run->microbatches);
      for (int k = 0; k < run->n_weights; k++)
        ps_net_add_grad (net, run->weights[k], dconsts[k]);
    }
  ps_pipeline_run_free (run);
  return ok;
}

void
ps_pipeline_run_free (PsPipelineRun *run)
{
  if (!run)
    return;
  ps_scan_free (run->scan);
  g_free (run->weights);
  g_free (run);
}

int64_t *
ps_pipeline_mesh_devices (int stages, int chips_x, int chips_y, int cores)
{
  g_return_val_if_fail (stages >= 1 && chips_x >= 1 && chips_y >= 1 && cores >= 1, NULL);
  int64_t n = (int64_t) chips_x * chips_y * cores;
  g_return_val_if_fail (n % stages == 0, NULL);
  gboolean along_x = chips_x % stages == 0, along_y = !along_x && chips_y % stages == 0;
  int64_t *ids = g_new (int64_t, n);
  int64_t rest = n / stages;
  for (int k = 0; k < stages; k++)
    for (int64_t j = 0; j < rest; j++)
      {
        /* position j within the stage: core, then the other chip dim, then
         * the stage's share of this dim */
        int c = (int) (j % cores);
        int64_t q = j / cores;
        int x, y;
        if (along_x)
          {
            y = (int) (q % chips_y);
            x = (int) (q / chips_y) * stages + k;
          }
        else if (along_y)
          {
            x = (int) (q % chips_x);
            y = (int) (q / chips_x) * stages + k;
          }
        else
          {
            /* the snake: chips in rows of x, y reversed on odd rows, each
             * chip's cores in turn; stage k takes the k-th run of rest */
            int64_t pos = k * rest + j, chip = pos / cores;
            c = (int) (pos % cores);
            x = (int) (chip / chips_y);
            y = (int) (chip % chips_y);
            if (x % 2)
              y = chips_y - 1 - y;
          }
        ids[k * rest + j] = ((int64_t) x * chips_y + y) * cores + c;
      }
  return ids;
}

int64_t *
ps_pipeline_program_devices (int stages, int64_t n, const int64_t *physical)
{
  int64_t *ids = NULL;
  if (physical && physical[0] * physical[1] * physical[2] == n)
    ids = ps_pipeline_mesh_devices (stages, (int) physical[0], (int) physical[1], (int) physical[2]);
  if (!ids)
    {
      ids = g_new (int64_t, n);
      for (int64_t i = 0; i < n; i++)
        ids[i] = i;
    }
  return ids;
}

void
ps_pipeline_trace_mesh (PsTraceMesh *mesh, int rank, const int64_t *dims, const int64_t *ids)
{
  int64_t n = 1;
  mesh->rank = (guint) rank;
  for (int i = 0; i < rank; i++)
    {
      mesh->dims[i] = dims[i];
      n *= dims[i];
    }
  mesh->order = PS_TRACE_ORDER_LIST;
  mesh->devices = g_new (guint32, n);
  for (int64_t i = 0; i < n; i++)
    mesh->devices[i] = (guint32) ids[i];
}

/* The outer layout's letters for x [M, microbatch...] (see pipeline.h):
 * the stage letter on the microbatch dim when K divides M, else on the
 * sequence dim ('s' of act_letters) when K divides it, else none (the
 * microbatch dim 'u' replicated). transfer full. */
static char *
outer_letters (const PsPipeline *p, const PsInstr *x)
{
  char *l = g_strdup_printf ("u%s", p->act_letters);
  const char *s = strchr (p->act_letters, 's');
  if (x->shape->dims[0] % p->stages == 0)
    l[0] = p->stage_letter;
  else if (s && x->shape->dims[1 + (s - p->act_letters)] % p->stages == 0)
    l[1 + (s - p->act_letters)] = p->stage_letter;
  return l;
}

/* x's copy annotated `letters`: the same value in another layout. */
static PsInstr *
relayout (PsNet *net, PsInstr *x, const char *letters)
{
  PsInstr *y = ps_build_unary (ps_net_builder (net), PS_OP_COPY, x);
  ps_net_annotate (net, y, letters);
  return y;
}

PsInstr *
ps_pipeline_enter (PsNet *net, const PsPipeline *p, PsInstr *x)
{
  g_autofree char *outer = outer_letters (p, x);
  g_autofree char *loop = g_strdup_printf ("u%s", p->act_letters);
  ps_net_annotate (net, x, outer);
  return strcmp (outer, loop) == 0 ? x : relayout (net, x, loop);
}

PsInstr *
ps_pipeline_leave (PsNet *net, const PsPipeline *p, PsInstr *outputs)
{
  g_autofree char *outer = outer_letters (p, outputs);
  g_autofree char *loop = g_strdup_printf ("u%s", p->act_letters);
  return strcmp (outer, loop) == 0 ? outputs : relayout (net, outputs, outer);
}

PsInstr *
ps_pipeline_split_batch (PsNet *net, PsInstr *x, int64_t m)
{
  const PsShape *s = x->shape;
  int64_t dims[PS_NET_MAX_RANK];
  dims[0] = m;
  dims[1] = s->dims[0] / m;
  memcpy (dims + 2, s->dims + 1, sizeof (int64_t) * (gsize) (s->rank - 1));
  PsShape *r = ps_shape_new_array (s->etype, s->rank + 1, dims);
  PsInstr *y = ps_build_reshape_to (ps_net_builder (net), x, r);
  ps_shape_free (r);
  return y;
}
