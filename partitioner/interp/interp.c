/* The interpreter's engine: computation plans, lockstep evaluation over a set
 * of devices ("lanes"), control flow, collectives, and the public entry
 * points. Per-op arithmetic lives in interp_elementwise.c, interp_data.c and
 * interp_window.c. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "common/ndindex.h"
#include "partitioner/interp/interp_private.h"
#include "partitioner/ir/sharding.h"

#define DEFAULT_MAX_WORK ((int64_t) 2000000000)
#define DEFAULT_MAX_ELEMENTS ((int64_t) 64 * 1024 * 1024)

/* ---- plans ----------------------------------------------------------------- */

/* A computation in evaluation order with operands resolved to positions, so
 * that evaluating it (often once per element, for reducers) needs no hash
 * lookups. */
typedef struct {
  int n;
  PsInstr **instrs;
  int *op_start;     /* n + 1 */
  int *ops;          /* operand positions */
  int *uses;         /* how many operand slots read each position */
  int root;
  int n_params;
  int *param_pos;    /* by parameter number, -1 if absent */
} Plan;

static void
plan_free (gpointer p)
{
  Plan *plan = p;
  g_free (plan->instrs);
  g_free (plan->op_start);
  g_free (plan->ops);
  g_free (plan->uses);
  g_free (plan->param_pos);
  g_free (plan);
}

static Plan *
get_plan (IpCtx *ctx, const PsComputation *c, GError **error)
{
  Plan *plan = g_hash_table_lookup (ctx->plans, c);
  if (plan)
    return plan;
  GPtrArray *order = ps_computation_post_order (c);
  plan = g_new0 (Plan, 1);
  plan->n = (int) order->len;
  plan->instrs = g_new0 (PsInstr *, MAX (1, plan->n));
  plan->op_start = g_new0 (int, plan->n + 1);
  plan->uses = g_new0 (int, MAX (1, plan->n));
  plan->root = -1;
  GHashTable *pos = g_hash_table_new (NULL, NULL);
  int total_ops = 0;
  for (int i = 0; i < plan->n; i++)
    {
      plan->instrs[i] = order->pdata[i];
      g_hash_table_insert (pos, order->pdata[i], GINT_TO_POINTER (i + 1));
      total_ops += plan->instrs[i]->n_operands;
      if (plan->instrs[i] == c->root)
        plan->root = i;
    }
  plan->ops = g_new0 (int, MAX (1, total_ops));
  int64_t max_param = -1;
  int k = 0;
  gboolean ok = TRUE;
  for (int i = 0; i < plan->n; i++)
    {
      PsInstr *ins = plan->instrs[i];
      plan->op_start[i] = k;
      for (int j = 0; j < ins->n_operands; j++)
        {
          int p = GPOINTER_TO_INT (g_hash_table_lookup (pos, ins->operands[j])) - 1;
          if (p < 0)
            {
              ip_fail (error, PS_ERROR_INVALID, ins,
                       "operand %d is not in computation %s", j, c->name);
              ok = FALSE;
              p = 0;
            }
          plan->ops[k++] = p;
          plan->uses[p]++;
        }
      if (ins->opcode == PS_OP_PARAMETER)
        max_param = MAX (max_param, ins->parameter_number);
    }
  plan->op_start[plan->n] = k;
  plan->n_params = (int) (max_param + 1);
  plan->param_pos = g_new0 (int, MAX (1, plan->n_params));
  for (int p = 0; p < plan->n_params; p++)
    plan->param_pos[p] = -1;
  for (int i = 0; i < plan->n; i++)
    if (plan->instrs[i]->opcode == PS_OP_PARAMETER && plan->instrs[i]->parameter_number >= 0)
      plan->param_pos[plan->instrs[i]->parameter_number] = i;
  g_hash_table_destroy (pos);
  g_ptr_array_free (order, TRUE);
  if (plan->root < 0 && ok)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "interpreter: computation %s has no root", c->name);
      ok = FALSE;
    }
  if (!ok)
    {
      plan_free (plan);
      return NULL;
    }
  g_hash_table_insert (ctx->plans, (gpointer) c, plan);
  return plan;
}

/* ---- lockstep evaluation --------------------------------------------------- */

/* The devices a computation runs on: lane l is device devs[l]. */
typedef struct {
  int n;
  const int64_t *devs;
} Lanes;

static gboolean eval_comp (IpCtx *ctx, const PsComputation *c, Lanes lanes,
                           int n_args, PsValue *const *args, PsValue **out,
                           GError **error);

static PsValue *eval_local (IpCtx *ctx, const PsInstr *ins, PsValue **ops,
                            int64_t device, GError **error);

static gboolean eval_collective (IpCtx *ctx, const PsInstr *ins, Lanes lanes,
                                 PsValue ***ops, PsValue **out, GError **error);

static gboolean is_manual_conversion (const IpCtx *ctx, const PsInstr *ins);
static gboolean eval_manual_conversion (IpCtx *ctx, const PsInstr *ins, Lanes lanes,
                                        PsValue ***ops, PsValue **out, GError **error);

static gboolean
eval_while (IpCtx *ctx, const PsInstr *ins, Lanes lanes, PsValue ***ops,
            PsValue **out, GError **error)
{
  if (ins->n_called < 2 || ins->n_operands != 1)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "while needs a condition, a body and one operand");
      return FALSE;
    }
  const PsComputation *cond = ins->called[0], *body = ins->called[1];
  int nl = lanes.n;
  for (int l = 0; l < nl; l++)
    out[l] = ps_value_copy (ops[0][l]);
  gboolean *looping = g_new0 (gboolean, nl);
  int64_t *dev = g_new0 (int64_t, nl);
  int *lane = g_new0 (int, nl);
  PsValue **args = g_new0 (PsValue *, nl);
  PsValue **tmp = g_new0 (PsValue *, nl);
  for (int l = 0; l < nl; l++)
    looping[l] = TRUE;
  gboolean ok = TRUE;
  /* Devices whose condition turns false leave the loop; the others go on in
   * lockstep, so a collective in the body then lacks participants and fails
   * cleanly instead of deadlocking. */
  while (ok)
    {
      int na = 0;
      for (int l = 0; l < nl; l++)
        if (looping[l])
          {
            args[na] = out[l];
            dev[na] = lanes.devs[l];
            lane[na++] = l;
          }
      if (na == 0)
        break;
      Lanes sub = { na, dev };
      ok = eval_comp (ctx, cond, sub, 1, args, tmp, error);
      if (!ok)
        break;
      int nb = 0;
      for (int a = 0; a < na; a++)
        {
          const PsValue *p = tmp[a];
          if (ok && (!p->i || p->n != 1))
            {
              ip_fail (error, PS_ERROR_INVALID, ins, "condition does not return pred[]");
              ok = FALSE;
            }
          if (ok && p->i[0])
            {
              args[nb] = out[lane[a]];
              dev[nb] = dev[a];
              lane[nb++] = lane[a];
            }
          else
            looping[lane[a]] = FALSE;
          g_clear_pointer (&tmp[a], ps_value_free);
        }
      if (!ok || nb == 0)
        break;
      ok = ip_charge (ctx, ins, nb, error);
      Lanes body_lanes = { nb, dev };
      if (ok)
        ok = eval_comp (ctx, body, body_lanes, 1, args, tmp, error);
      if (ok)
        for (int a = 0; a < nb; a++)
          {
            ps_value_free (out[lane[a]]);
            out[lane[a]] = tmp[a];
            tmp[a] = NULL;
          }
    }
  g_free (looping);
  g_free (dev);
  g_free (lane);
  g_free (args);
  g_free (tmp);
  if (!ok)
    for (int l = 0; l < nl; l++)
      g_clear_pointer (&out[l], ps_value_free);
  return ok;
}

static gboolean
eval_conditional (IpCtx *ctx, const PsInstr *ins, Lanes lanes, PsValue ***ops,
                  PsValue **out, GError **error)
{
  int nb = ins->n_called;
  if (nb < 1 || ins->n_operands != nb + 1)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "conditional needs one operand per branch plus the selector");
      return FALSE;
    }
  int *branch = g_new0 (int, lanes.n);
  for (int l = 0; l < lanes.n; l++)
    {
      const PsValue *sel = ops[0][l];
      if (!sel->i || sel->n != 1)
        {
          ip_fail (error, PS_ERROR_INVALID, ins, "selector must be a pred[] or s32[] scalar");
          g_free (branch);
          return FALSE;
        }
      if (sel->shape->etype == PS_PRED)
        branch[l] = sel->i[0] ? 0 : 1; /* [true, false] */
      else
        /* XLA: an index out of range runs the last branch. */
        branch[l] = (sel->i[0] < 0 || sel->i[0] >= nb) ? nb - 1 : (int) sel->i[0];
      if (sel->shape->etype == PS_PRED && nb != 2)
        branch[l] = MIN (branch[l], nb - 1);
    }
  gboolean ok = TRUE;
  int64_t *sub_dev = g_new0 (int64_t, lanes.n);
  int *sub_lane = g_new0 (int, lanes.n);
  PsValue **args = g_new0 (PsValue *, lanes.n);
  PsValue **res = g_new0 (PsValue *, lanes.n);
  for (int b = 0; b < nb && ok; b++)
    {
      int ns = 0;
      for (int l = 0; l < lanes.n; l++)
        if (branch[l] == b)
          {
            sub_dev[ns] = lanes.devs[l];
            sub_lane[ns] = l;
            args[ns++] = ops[1 + b][l];
          }
      if (ns == 0)
        continue;
      Lanes sub = { ns, sub_dev };
      ok = eval_comp (ctx, ins->called[b], sub, 1, args, res, error);
      if (ok)
        for (int s = 0; s < ns; s++)
          out[sub_lane[s]] = res[s];
    }
  g_free (sub_dev);
  g_free (sub_lane);
  g_free (args);
  g_free (res);
  g_free (branch);
  if (!ok)
    for (int l = 0; l < lanes.n; l++)
      g_clear_pointer (&out[l], ps_value_free);
  return ok;
}

static gboolean
eval_call (IpCtx *ctx, const PsInstr *ins, Lanes lanes, PsValue ***ops,
           PsValue **out, GError **error)
{
  if (ins->n_called < 1)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "no called computation");
      return FALSE;
    }
  int na = ins->n_operands;
  PsValue **args = g_new0 (PsValue *, MAX (1, lanes.n * na));
  for (int l = 0; l < lanes.n; l++)
    for (int k = 0; k < na; k++)
      args[l * na + k] = ops[k][l];
  gboolean ok = eval_comp (ctx, ins->called[0], lanes, na, args, out, error);
  g_free (args);
  if (!ok || ins->opcode != PS_OP_CALL_START)
    return ok;
  /* call-start's value is ((operands...), result, context...). */
  for (int l = 0; l < lanes.n; l++)
    {
      PsValue *res = out[l];
      if (ins->shape->etype != PS_TUPLE || ins->shape->n_elems < 2)
        {
          ps_value_free (res);
          out[l] = NULL;
          ok = FALSE;
          continue;
        }
      PsValue *v = ps_value_new (ins->shape);
      PsValue **elems = g_new0 (PsValue *, MAX (1, na));
      for (int k = 0; k < na; k++)
        elems[k] = ps_value_copy (ops[k][l]);
      ps_value_free (v->elems[0]);
      v->elems[0] = ps_value_new_tuple (na, elems);
      g_free (elems);
      ps_value_free (v->elems[1]);
      v->elems[1] = res;
      out[l] = v;
    }
  if (!ok)
    {
      for (int l = 0; l < lanes.n; l++)
        g_clear_pointer (&out[l], ps_value_free);
      ip_fail (error, PS_ERROR_INVALID, ins, "call-start must have a tuple shape");
    }
  return ok;
}

static gboolean
eval_comp (IpCtx *ctx, const PsComputation *c, Lanes lanes, int n_args,
           PsValue *const *args, PsValue **out, GError **error)
{
  Plan *plan = get_plan (ctx, c, error);
  if (!plan)
    return FALSE;
  if (n_args < plan->n_params)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "interpreter: computation %s has %d parameters but got %d arguments",
                   c->name, plan->n_params, n_args);
      return FALSE;
    }
  int nl = lanes.n;
  PsValue **vals = g_new0 (PsValue *, (gsize) plan->n * nl);
  gboolean *borrowed = g_new0 (gboolean, plan->n);
  int *uses = g_memdup2 (plan->uses, sizeof (int) * MAX (1, plan->n));
  PsValue ***ops = g_new0 (PsValue **, 1);
  int ops_cap = 0;
  PsValue **lane_ops = NULL;
  int lane_ops_cap = 0;
  gboolean ok = TRUE;

  for (int i = 0; i < plan->n && ok; i++)
    {
      const PsInstr *ins = plan->instrs[i];
      PsValue **res = vals + (gsize) i * nl;
      int no = ins->n_operands;
      if (no > ops_cap)
        {
          ops_cap = no;
          g_free (ops);
          ops = g_new0 (PsValue **, ops_cap);
        }
      for (int j = 0; j < no; j++)
        ops[j] = vals + (gsize) plan->ops[plan->op_start[i] + j] * nl;

      if (ins->opcode == PS_OP_PARAMETER)
        {
          int64_t k = ins->parameter_number;
          for (int l = 0; l < nl && ok; l++)
            {
              const PsValue *a = args[(gsize) l * n_args + k];
              if (!a || !ps_shape_equal (a->shape, ins->shape))
                {
                  char *want = ps_shape_to_string (ins->shape, FALSE);
                  char *got = a ? ps_shape_to_string (a->shape, FALSE) : g_strdup ("nothing");
                  ip_fail (error, PS_ERROR_INVALID, ins, "argument is %s, parameter wants %s",
                           got, want);
                  g_free (want);
                  g_free (got);
                  ok = FALSE;
                  break;
                }
              res[l] = (PsValue *) a;
            }
          borrowed[i] = TRUE;
          continue;
        }
      if (ps_shape_leaf_elements (ins->shape) > ctx->opts.max_elements)
        {
          ip_fail (error, PS_ERROR_LIMIT, ins,
                   "value of %" G_GINT64_FORMAT " elements is over the interpreter's "
                   "limit of %" G_GINT64_FORMAT,
                   ps_shape_leaf_elements (ins->shape), ctx->opts.max_elements);
          ok = FALSE;
          break;
        }
      if (!ip_charge (ctx, ins, ps_shape_leaf_elements (ins->shape) * nl, error))
        {
          ok = FALSE;
          break;
        }
      ctx->live_elements += ps_shape_leaf_elements (ins->shape) * nl;
      if (ctx->live_elements > ctx->opts.max_live_elements)
        {
          ip_fail (error, PS_ERROR_LIMIT, ins,
                   "memory limit: %d device%s would hold %" G_GINT64_FORMAT " elements at "
                   "once, over the interpreter's limit of %" G_GINT64_FORMAT,
                   nl, nl == 1 ? "" : "s", ctx->live_elements, ctx->opts.max_live_elements);
          ctx->live_elements -= ps_shape_leaf_elements (ins->shape) * nl;
          ok = FALSE;
          break;
        }
      switch (ins->opcode)
        {
        case PS_OP_WHILE:
          ok = eval_while (ctx, ins, lanes, ops, res, error);
          break;
        case PS_OP_CONDITIONAL:
          ok = eval_conditional (ctx, ins, lanes, ops, res, error);
          break;
        case PS_OP_CALL:
        case PS_OP_FUSION:
        case PS_OP_CALL_START:
          ok = eval_call (ctx, ins, lanes, ops, res, error);
          break;
        default:
          if (ps_opcode_is_collective (ins->opcode))
            {
              ok = eval_collective (ctx, ins, lanes, ops, res, error);
              break;
            }
          if (is_manual_conversion (ctx, ins))
            {
              ok = eval_manual_conversion (ctx, ins, lanes, ops, res, error);
              break;
            }
          if (no > lane_ops_cap)
            {
              lane_ops_cap = no;
              g_free (lane_ops);
              lane_ops = g_new0 (PsValue *, lane_ops_cap);
            }
          for (int l = 0; l < nl && ok; l++)
            {
              for (int j = 0; j < no; j++)
                lane_ops[j] = ops[j][l];
              res[l] = eval_local (ctx, ins, lane_ops, lanes.devs[l], error);
              if (!res[l])
                ok = FALSE;
            }
        }
      /* Every value must have its instruction's shape: later ops index by
       * it, so a partitioner bug must stop here, not read out of bounds. */
      for (int l = 0; l < nl && ok; l++)
        if (res[l] && !ps_shape_equal (res[l]->shape, ins->shape))
          {
            char *want = ps_shape_to_string (ins->shape, FALSE);
            char *got = ps_shape_to_string (res[l]->shape, FALSE);
            ip_fail (error, PS_ERROR_INVALID, ins, "computed %s, declared %s", got, want);
            g_free (want);
            g_free (got);
            ok = FALSE;
          }
      /* Free operands nobody else reads, so memory follows liveness. */
      for (int j = 0; j < no; j++)
        {
          int p = plan->ops[plan->op_start[i] + j];
          if (--uses[p] == 0 && p != plan->root && !borrowed[p])
            {
              for (int l = 0; l < nl; l++)
                g_clear_pointer (&vals[(gsize) p * nl + l], ps_value_free);
              ctx->live_elements -= ps_shape_leaf_elements (plan->instrs[p]->shape) * nl;
            }
        }
    }

  if (ok)
    for (int l = 0; l < nl; l++)
      {
        PsValue **slot = &vals[(gsize) plan->root * nl + l];
        out[l] = borrowed[plan->root] ? ps_value_copy (*slot) : *slot;
        *slot = NULL;
      }
  for (int i = 0; i < plan->n; i++)
    if (!borrowed[i])
      {
        gboolean held = FALSE;
        for (int l = 0; l < nl; l++)
          if (vals[(gsize) i * nl + l] || (i == plan->root && ok))
            held = TRUE;
        for (int l = 0; l < nl; l++)
          ps_value_free (vals[(gsize) i * nl + l]);
        /* The root's values now belong to the caller: uncount them too,
         * the caller's instruction counts its own result. */
        if (held)
          ctx->live_elements -= ps_shape_leaf_elements (plan->instrs[i]->shape) * nl;
      }
  g_free (vals);
  g_free (borrowed);
  g_free (uses);
  g_free (ops);
  g_free (lane_ops);
  return ok;
}

/* ---- scalar programs ------------------------------------------------------- */

/* Reducers and comparators run once per element (or comparison), so a
 * computation made only of scalar elementwise ops runs on preallocated
 * slots without allocating: orders of magnitude faster than eval_comp. */
typedef struct {
  Plan *plan;
  PsValue **slots;   /* per position; NULL for parameters */
  PsValue **cur;     /* per position: the value to read */
  PsValue *ops[3];
} ScalarProg;

static void
scalar_prog_free (gpointer p)
{
  ScalarProg *sp = p;
  if (!sp)
    return;
  for (int i = 0; i < sp->plan->n; i++)
    ps_value_free (sp->slots[i]);
  g_free (sp->slots);
  g_free (sp->cur);
  g_free (sp);
}

static gboolean
is_scalar_array (const PsShape *s)
{
  return s->etype != PS_TUPLE && s->etype != PS_TOKEN && s->rank == 0;
}

static ScalarProg *
get_scalar_prog (IpCtx *ctx, const PsComputation *c)
{
  gpointer found;
  if (g_hash_table_lookup_extended (ctx->scalar_progs, c, NULL, &found))
    return found;
  Plan *plan = get_plan (ctx, c, NULL);
  gboolean usable = plan != NULL;
  for (int i = 0; usable && i < plan->n; i++)
    {
      const PsInstr *ins = plan->instrs[i];
      if (ins->opcode == PS_OP_TUPLE && i == plan->root)
        {
          for (int k = 0; k < ins->n_operands; k++)
            usable = usable && is_scalar_array (ins->operands[k]->shape);
          continue;
        }
      if (!is_scalar_array (ins->shape))
        usable = FALSE;
      else if (ins->opcode == PS_OP_BITCAST_CONVERT)
        usable = ins->n_operands == 1 && is_scalar_array (ins->operands[0]->shape)
                 && ps_etype_size_bytes (ins->operands[0]->shape->etype)
                    == ps_etype_size_bytes (ins->shape->etype);
      else if (ins->opcode != PS_OP_PARAMETER && ins->opcode != PS_OP_CONSTANT
               && ins->opcode != PS_OP_COPY && !(ip_is_elementwise (ins->opcode)
                                                 && ins->n_operands <= 3))
        usable = FALSE;
    }
  ScalarProg *sp = NULL;
  if (usable)
    {
      sp = g_new0 (ScalarProg, 1);
      sp->plan = plan;
      sp->slots = g_new0 (PsValue *, plan->n);
      sp->cur = g_new0 (PsValue *, plan->n);
      for (int i = 0; i < plan->n && usable; i++)
        {
          const PsInstr *ins = plan->instrs[i];
          if (ins->opcode == PS_OP_PARAMETER)
            continue;
          if (ins->opcode == PS_OP_CONSTANT)
            sp->slots[i] = ps_value_from_literal (ins->shape, ins->literal, NULL);
          else
            sp->slots[i] = ps_value_new (ins->shape);
          if (!sp->slots[i])
            usable = FALSE;
          sp->cur[i] = sp->slots[i];
        }
      if (!usable)
        g_clear_pointer (&sp, scalar_prog_free);
    }
  g_hash_table_insert (ctx->scalar_progs, (gpointer) c, sp);
  return sp;
}

/* Runs a scalar program; the result is borrowed (valid until the next run). */
static const PsValue *
run_scalar_prog (ScalarProg *sp, int n_args, PsValue *const *args, GError **error)
{
  Plan *plan = sp->plan;
  for (int i = 0; i < plan->n; i++)
    {
      const PsInstr *ins = plan->instrs[i];
      const int *opi = plan->ops + plan->op_start[i];
      switch (ins->opcode)
        {
        case PS_OP_PARAMETER:
          {
            int64_t k = ins->parameter_number;
            if (k < 0 || k >= n_args || !args[k] || args[k]->shape->etype != ins->shape->etype
                || args[k]->n != 1)
              {
                ip_fail (error, PS_ERROR_INVALID, ins, "argument does not fit the parameter");
                return NULL;
              }
            sp->cur[i] = args[k];
            break;
          }
        case PS_OP_CONSTANT:
          break;
        case PS_OP_COPY:
          ps_value_copy_elem (sp->slots[i], 0, sp->cur[opi[0]], 0);
          break;
        case PS_OP_BITCAST_CONVERT:
          ip_bitcast_elem (sp->slots[i], 0, sp->cur[opi[0]], 0);
          break;
        case PS_OP_TUPLE:
          for (int k = 0; k < ins->n_operands; k++)
            ps_value_copy_elem (sp->slots[i]->elems[k], 0, sp->cur[opi[k]], 0);
          break;
        default:
          for (int k = 0; k < ins->n_operands; k++)
            sp->ops[k] = sp->cur[opi[k]];
          if (!ip_elementwise_into (ins, sp->ops, sp->slots[i], error))
            return NULL;
        }
    }
  return sp->cur[plan->root];
}

/* ctx->call: runs a called computation (ip_call_fast, interp_ctx.c). */
static const PsValue *
call_computation (IpCtx *ctx, const PsComputation *c, int64_t device, int n_args,
                  PsValue *const *args, PsValue **owned, GError **error)
{
  *owned = NULL;
  ScalarProg *sp = get_scalar_prog (ctx, c);
  if (sp)
    return run_scalar_prog (sp, n_args, args, error);
  Lanes lanes = { 1, &device };
  if (!eval_comp (ctx, c, lanes, n_args, args, owned, error))
    return NULL;
  return *owned;
}


/* ---- local (one device) dispatch ------------------------------------------ */

static guint64
mix64 (guint64 x)
{
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

static PsValue *
eval_rng (IpCtx *ctx, const PsInstr *ins, PsValue **ops, GError **error)
{
  const char *dist = ps_instr_get_raw_attr (ins, "distribution");
  gboolean normal = dist && strstr (dist, "normal") != NULL;
  if (ins->n_operands != 2 || ins->shape->etype == PS_TUPLE || ops[0]->n != 1 || ops[1]->n != 1)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "rng needs two scalar operands");
      return NULL;
    }
  double a = ps_value_get (ops[0], 0), b = ps_value_get (ops[1], 0);
  PsValue *v = ps_value_new (ins->shape);
  guint64 h = ctx->opts.rng_seed ^ 0x9e3779b97f4a7c15ULL;
  for (const char *p = ins->name; *p; p++)
    h = mix64 (h ^ (guchar) *p);
  gboolean integral = v->i != NULL;
  for (int64_t i = 0; i < v->n; i++)
    {
      guint64 r = mix64 (h + (guint64) i * 0x9e3779b97f4a7c15ULL);
      double u = (double) (r >> 11) / 9007199254740992.0; /* [0, 1) */
      double x;
      if (ctx->opts.rng_constant)
        x = a;
      else if (normal)
        {
          guint64 r2 = mix64 (r ^ 0x5851f42d4c957f2dULL);
          double u2 = ((double) (r2 >> 11) + 1.0) / 9007199254740993.0;
          x = a + b * sqrt (-2.0 * log (u2)) * cos (2 * G_PI * u);
        }
      else if (integral)
        x = a + floor (u * (b - a));
      else
        x = a + u * (b - a);
      ps_value_set (v, i, x);
      /* Rounding may push a uniform float up to b; keep [a, b). */
      if (!normal && !integral && !ctx->opts.rng_constant && v->f[i] >= b && b > a)
        v->f[i] = a;
    }
  return v;
}

/* The value a shape-changing identity custom call (SPMDFullToShardShape,
 * ...) gives when the shapes differ: the operand's leading corner, zero
 * padded; used only when a program is run outside its manual region. */
static PsValue *
reshape_corner (const PsValue *src, const PsShape *shape)
{
  PsValue *v = ps_value_new (shape);
  if (src->shape->etype == PS_TUPLE || shape->etype == PS_TUPLE)
    return v;
  if (src->shape->rank != shape->rank)
    {
      for (int64_t i = 0; i < MIN (v->n, src->n); i++)
        ps_value_copy_elem (v, i, src, i);
      return v;
    }
  int rank = shape->rank;
  int64_t *idx = g_new0 (int64_t, MAX (1, rank));
  int64_t *sst = ps_shape_strides (src->shape);
  for (int64_t i = 0; i < v->n; i++)
    {
      gboolean in = TRUE;
      int64_t si = 0;
      for (int d = 0; d < rank; d++)
        {
          if (idx[d] >= src->shape->dims[d])
            in = FALSE;
          si += idx[d] * sst[d];
        }
      if (in)
        ps_value_copy_elem (v, i, src, si);
      ps_index_next (rank, shape->dims, idx);
    }
  g_free (idx);
  g_free (sst);
  return v;
}

static PsValue *
eval_custom_call (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device,
                  GError **error)
{
  const char *t = ins->custom_call_target ? ins->custom_call_target : "";
  static const char *identity[] = { "Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape",
                                    "ShardBarrierFrom", "ShardBarrierTo", "MoveToHost",
                                    "MoveToDevice", "X64Combine", NULL };
  (void) device;
  for (int k = 0; identity[k]; k++)
    if (strcmp (t, identity[k]) == 0 && ins->n_operands >= 1)
      {
        if (ps_shape_equal (ops[0]->shape, ins->shape))
          return ps_value_copy (ops[0]);
        return reshape_corner (ops[0], ins->shape);
      }
  if (strcmp (t, "TopK") == 0 && ins->n_operands == 1)
    {
      (void) ctx;
      const PsValue *x = ops[0];
      if (ins->shape->etype != PS_TUPLE || ins->shape->n_elems != 2 || x->shape->rank < 1
          || !x->f)
        {
          ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "TopK on this shape");
          return NULL;
        }
      PsValue *out = ps_value_new (ins->shape);
      PsValue *vals = out->elems[0], *idxs = out->elems[1];
      int64_t n = x->shape->dims[x->shape->rank - 1];
      int64_t k = vals->shape->rank ? vals->shape->dims[vals->shape->rank - 1] : 0;
      int64_t rows = n ? x->n / n : 0;
      if (k > n || vals->n != rows * k || (vals->n > 0 && (!idxs->i || !vals->f))
          || idxs->n != vals->n)
        {
          ps_value_free (out);
          ip_fail (error, PS_ERROR_INVALID, ins, "TopK shapes do not fit");
          return NULL;
        }
      gboolean *taken = g_new0 (gboolean, MAX (1, n));
      for (int64_t r = 0; r < rows; r++)
        {
          memset (taken, 0, sizeof (gboolean) * MAX (1, n));
          for (int64_t j = 0; j < k; j++)
            {
              int64_t best = -1;
              for (int64_t e = 0; e < n; e++)
                if (!taken[e] && (best < 0 || x->f[r * n + e] > x->f[r * n + best]))
                  best = e;
              taken[best] = TRUE;
              vals->f[r * k + j] = x->f[r * n + best];
              idxs->i[r * k + j] = best;
            }
        }
      g_free (taken);
      return out;
    }
  ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "custom-call target \"%s\" is not supported", t);
  return NULL;
}

/* The dynamic-size ops as XLA's HloEvaluator computes them
 * (xla/hlo/evaluator/hlo_evaluator.cc): set-dimension-size keeps its
 * operand's elements (the interpreter holds arrays at their bound, as
 * XLA's DynamicPadder lays them out) and here zeroes those past the size,
 * so the padding is the same on every device; get-dimension-size gives the
 * size a set-dimension-size on that dim gave its operand when the size is
 * a constant, else the dim's static size (the evaluator's fallback when
 * its dynamic-dimension inference knows no size). */
static PsValue *
eval_dimension_size (const PsInstr *ins, PsValue **ops, GError **error)
{
  int64_t d = ins->dimensions.n == 1 ? ins->dimensions.v[0] : -1;
  const PsShape *s = ops[0]->shape;
  if (s->etype == PS_TUPLE || d < 0 || d >= s->rank)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "dimensions={d} must name a dim of the operand");
      return NULL;
    }
  if (ins->opcode == PS_OP_SET_DIMENSION_SIZE)
    {
      if (ins->n_operands != 2 || !ops[1]->i || ops[1]->n != 1)
        {
          ip_fail (error, PS_ERROR_INVALID, ins, "the size must be an integer scalar");
          return NULL;
        }
      PsValue *v = ps_value_copy (ops[0]);
      int64_t n = CLAMP (ops[1]->i[0], 0, s->dims[d]);
      g_autofree int64_t *st = ps_shape_strides (s);
      for (int64_t e = 0; e < v->n && n < s->dims[d]; e++)
        if ((e / st[d]) % s->dims[d] >= n)
          ps_value_set (v, e, 0);
      return v;
    }
  PsValue *v = ps_value_new (ins->shape);
  if (!v->i || v->n != 1)
    {
      ps_value_free (v);
      ip_fail (error, PS_ERROR_INVALID, ins, "must be an integer scalar");
      return NULL;
    }
  int64_t size = s->dims[d];
  const PsInstr *src = ins->operands[0];
  if (src->opcode == PS_OP_SET_DIMENSION_SIZE && src->dimensions.n == 1 && src->dimensions.v[0] == d
      && src->n_operands == 2 && src->operands[1]->opcode == PS_OP_CONSTANT && src->operands[1]->literal)
    {
      GError *e = NULL;
      PsValue *c = ps_value_from_literal (src->operands[1]->shape, src->operands[1]->literal, &e);
      g_clear_error (&e);
      if (c && c->i && c->n == 1)
        size = CLAMP (c->i[0], 0, s->dims[d]);
      ps_value_free (c);
    }
  v->i[0] = size;
  return v;
}

/* rng-get-and-update-state: each device holds a 128-bit state (XLA's CPU
 * backend keeps one global per module, llvm_ir::RngGetAndUpdateState in
 * xla/service/cpu/ir_emitter.cc), returns it and adds `delta`; the state
 * starts at the interpreter's seed on every device, so a replicated
 * program sees the same values everywhere, as XLA's does. */
static PsValue *
eval_rng_state (IpCtx *ctx, const PsInstr *ins, int64_t device, GError **error)
{
  const char *ds = ps_instr_get_raw_attr (ins, "delta");
  PsValue *v = ps_value_new (ins->shape);
  if (!v->i || v->n != 2)
    {
      ps_value_free (v);
      ip_fail (error, PS_ERROR_INVALID, ins, "must be u64[2]");
      return NULL;
    }
  guint64 delta = ds ? g_ascii_strtoull (ds, NULL, 10) : 0;
  guint64 *st = g_hash_table_lookup (ctx->rng_states, GINT_TO_POINTER ((int) device + 1));
  if (!st)
    {
      st = g_new0 (guint64, 2);
      st[0] = ctx->opts.rng_seed;
      g_hash_table_insert (ctx->rng_states, GINT_TO_POINTER ((int) device + 1), st);
    }
  v->i[0] = (int64_t) st[0];
  v->i[1] = (int64_t) st[1];
  guint64 lo = st[0] + delta;
  st[1] += lo < st[0];
  st[0] = lo;
  return v;
}

static PsValue *
eval_local (IpCtx *ctx, const PsInstr *ins, PsValue **ops, int64_t device, GError **error)
{
  int64_t np = ctx->opts.num_partitions;
  switch (ins->opcode)
    {
    case PS_OP_CONSTANT:
      {
        GError *e = NULL;
        PsValue *v = ps_value_from_literal (ins->shape, ins->literal, &e);
        if (!v)
          {
            ip_fail (error, PS_ERROR_INVALID, ins, "%s", e->message);
            g_error_free (e);
          }
        return v;
      }
    case PS_OP_PARTITION_ID:
    case PS_OP_REPLICA_ID:
      {
        PsValue *v = ps_value_new (ins->shape);
        if (!v->i || v->n != 1)
          {
            ps_value_free (v);
            ip_fail (error, PS_ERROR_INVALID, ins, "must be an integer scalar");
            return NULL;
          }
        v->i[0] = ins->opcode == PS_OP_PARTITION_ID ? device % np : device / np;
        return v;
      }
    case PS_OP_TUPLE:
      {
        PsValue **elems = g_new0 (PsValue *, MAX (1, ins->n_operands));
        for (int k = 0; k < ins->n_operands; k++)
          elems[k] = ps_value_copy (ops[k]);
        PsValue *v = ps_value_new_tuple (ins->n_operands, elems);
        g_free (elems);
        return v;
      }
    case PS_OP_GET_TUPLE_ELEMENT:
    case PS_OP_CALL_DONE:
      {
        int64_t k = ins->opcode == PS_OP_CALL_DONE ? 1 : ins->tuple_index;
        if (ins->n_operands != 1 || ops[0]->shape->etype != PS_TUPLE || k < 0
            || k >= ops[0]->n_elems)
          {
            ip_fail (error, PS_ERROR_INVALID, ins, "tuple index %" G_GINT64_FORMAT
                     " is out of range", k);
            return NULL;
          }
        return ps_value_copy (ops[0]->elems[k]);
      }
    case PS_OP_COPY:
    case PS_OP_OPTIMIZATION_BARRIER:
    case PS_OP_DOMAIN:
      if (ins->n_operands != 1)
        break;
      return ps_value_copy (ops[0]);
    case PS_OP_AFTER_ALL:
    case PS_OP_OUTFEED:
    case PS_OP_INFEED:
      /* Tokens carry no data; infeed reads zeros (the host's data is not
       * part of the program, and zeros are the same on every device). */
      return ps_value_new (ins->shape);
    case PS_OP_CUSTOM_CALL:
      return eval_custom_call (ctx, ins, ops, device, error);
    case PS_OP_RNG:
      return eval_rng (ctx, ins, ops, error);
    case PS_OP_GET_DIMENSION_SIZE:
    case PS_OP_SET_DIMENSION_SIZE:
      if (ins->n_operands < 1)
        break;
      return eval_dimension_size (ins, ops, error);
    case PS_OP_RNG_GET_AND_UPDATE_STATE:
      return eval_rng_state (ctx, ins, device, error);
    case PS_OP_RNG_BIT_GENERATOR:
      {
        /* (new state, bits): the state passes through unchanged and the
         * bits hash the seed, the state and the element index (zeros with
         * rng_constant), so the result is deterministic but not XLA's. */
        if (ins->n_operands != 1 || ins->shape->etype != PS_TUPLE || ins->shape->n_elems != 2
            || !ps_shape_equal (ops[0]->shape, ins->shape->elems[0]) || !ops[0]->i)
          {
            ip_fail (error, PS_ERROR_INVALID, ins, "rng-bit-generator needs an integer state and a (state, bits) result");
            return NULL;
          }
        PsValue *v = ps_value_new (ins->shape);
        ps_value_free (v->elems[0]);
        v->elems[0] = ps_value_copy (ops[0]);
        PsValue *bits = v->elems[1];
        if (!bits->i && bits->n > 0)
          {
            ps_value_free (v);
            ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "rng-bit-generator of floats is not supported");
            return NULL;
          }
        guint64 h = ctx->opts.rng_seed ^ 0x243f6a8885a308d3ULL;
        for (int64_t i = 0; i < ops[0]->n; i++)
          h = mix64 (h ^ (guint64) ops[0]->i[i]);
        for (int64_t i = 0; i < bits->n && !ctx->opts.rng_constant; i++)
          {
            guint64 r = mix64 (h + (guint64) i * 0x9e3779b97f4a7c15ULL);
            int w = ps_etype_size_bytes (bits->shape->etype) * 8;
            if (w < 64)
              r &= (1ULL << w) - 1;
            bits->i[i] = ps_etype_is_signed (bits->shape->etype) && w < 64 && (r >> (w - 1))
                         ? (int64_t) (r | ~((1ULL << w) - 1)) : (int64_t) r;
          }
        return v;
      }
    default:
      if (ip_is_elementwise (ins->opcode))
        return ip_elementwise (ctx, ins, ops, error);
      if (ip_is_data_op (ins->opcode))
        return ip_data_op (ctx, ins, ops, device, error);
      if (ip_is_window_op (ins->opcode))
        return ip_window_op (ctx, ins, ops, device, error);
      if (ip_is_linalg_op (ins->opcode))
        return ip_linalg_op (ctx, ins, ops, error);
      if (ip_is_norm_op (ins->opcode))
        return ip_norm_op (ctx, ins, ops, error);
      break;
    }
  ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "opcode %s is not supported by the interpreter",
           ps_opcode_name (ins->opcode));
  return NULL;
}

/* ---- collectives ------------------------------------------------------------ */

typedef enum {
  MODE_CROSS_REPLICA,
  MODE_CROSS_PARTITION,
  MODE_CROSS_REPLICA_AND_PARTITION,
  MODE_FLATTENED_ID,
} GroupMode;

static gboolean
group_mode (const PsInstr *ins, GroupMode *mode, GError **error)
{
  gboolean has_channel = ins->channel_id != 0;
  if (ins->opcode == PS_OP_ALL_TO_ALL || ins->opcode == PS_OP_COLLECTIVE_PERMUTE
      || ins->opcode == PS_OP_COLLECTIVE_BROADCAST) /* XLA's GetCollectiveOpGroupMode */
    {
      *mode = has_channel ? MODE_CROSS_PARTITION : MODE_CROSS_REPLICA;
      return TRUE;
    }
  if (!has_channel)
    {
      if (ins->use_global_device_ids)
        {
          ip_fail (error, PS_ERROR_INVALID, ins,
                   "use_global_device_ids=true needs a channel_id");
          return FALSE;
        }
      *mode = MODE_CROSS_REPLICA;
      return TRUE;
    }
  *mode = ins->use_global_device_ids ? MODE_FLATTENED_ID : MODE_CROSS_REPLICA_AND_PARTITION;
  return TRUE;
}

/* The participants (global device ids, in the order that defines gather and
 * scatter positions) of `ins` as seen from `device`. */
static gboolean
participants (IpCtx *ctx, const PsInstr *ins, int64_t device, GArray *members,
              int *my_pos, GError **error)
{
  GroupMode mode;
  if (!group_mode (ins, &mode, error))
    return FALSE;
  int64_t np = ctx->opts.num_partitions, nr = ctx->opts.num_replicas;
  int64_t r = device / np, p = device % np;
  int64_t id_space = mode == MODE_CROSS_PARTITION ? np : mode == MODE_FLATTENED_ID ? np * nr : nr;
  int64_t my_id = mode == MODE_CROSS_PARTITION ? p : mode == MODE_FLATTENED_ID ? device : r;
  g_array_set_size (members, 0);
  /* The group holding my_id; no groups means one group of every id. */
  const int64_t *group = NULL;
  int glen = 0;
  int64_t *all = NULL;
  if (ins->n_groups == 0 || ins->group_size == 0)
    {
      all = g_new0 (int64_t, id_space);
      for (int64_t k = 0; k < id_space; k++)
        all[k] = k;
      group = all;
      glen = (int) id_space;
    }
  else
    for (int g = 0; g < ins->n_groups && !group; g++)
      for (int k = 0; k < ins->group_size; k++)
        if (ins->replica_groups[(gsize) g * ins->group_size + k] == my_id)
          {
            group = ins->replica_groups + (gsize) g * ins->group_size;
            glen = ps_instr_group_len (ins, g);
            break;
          }
  if (!group)
    {
      ip_fail (error, PS_ERROR_INVALID, ins,
               "device %" G_GINT64_FORMAT " is in no replica group", device);
      return FALSE;
    }
  for (int k = 0; k < glen; k++)
    if (group[k] < 0 || group[k] >= id_space)
      {
        ip_fail (error, PS_ERROR_INVALID, ins,
                 "replica group id %" G_GINT64_FORMAT " is out of range (%" G_GINT64_FORMAT
                 " %s)", group[k], id_space,
                 mode == MODE_CROSS_PARTITION ? "partitions"
                 : mode == MODE_FLATTENED_ID ? "devices" : "replicas");
        g_free (all);
        return FALSE;
      }
  switch (mode)
    {
    case MODE_CROSS_REPLICA:
      for (int k = 0; k < glen; k++)
        {
          int64_t d = group[k] * np + p;
          g_array_append_val (members, d);
        }
      break;
    case MODE_CROSS_PARTITION:
      for (int k = 0; k < glen; k++)
        {
          int64_t d = r * np + group[k];
          g_array_append_val (members, d);
        }
      break;
    case MODE_CROSS_REPLICA_AND_PARTITION:
      for (int64_t q = 0; q < np; q++)
        for (int k = 0; k < glen; k++)
          {
            int64_t d = group[k] * np + q;
            g_array_append_val (members, d);
          }
      break;
    case MODE_FLATTENED_ID:
      for (int k = 0; k < glen; k++)
        g_array_append_val (members, group[k]);
      break;
    }
  g_free (all);
  *my_pos = -1;
  for (guint k = 0; k < members->len; k++)
    if (g_array_index (members, int64_t, k) == device)
      *my_pos = (int) k;
  if (*my_pos < 0)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "device %" G_GINT64_FORMAT
               " is not among its own participants", device);
      return FALSE;
    }
  return TRUE;
}

/* Reduces the k-th operand over the members into a new value. */
static PsValue *
reduce_over (IpCtx *ctx, const PsInstr *ins, PsValue ***ops, int k, const int *mlanes,
             int n, int64_t device, GError **error)
{
  const PsValue *first = ops[k][mlanes[0]];
  if (first->shape->etype == PS_TUPLE)
    {
      ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "tuple operands are not supported");
      return NULL;
    }
  PsValue *acc = ps_value_copy (first);
  IpReducer red;
  ip_reducer_init (&red, ctx, ins->n_called ? ins->called[0] : NULL, device, acc->shape->etype);
  gboolean ok = TRUE;
  for (int j = 1; j < n && ok; j++)
    {
      const PsValue *v = ops[k][mlanes[j]];
      if (!ps_shape_equal (v->shape, acc->shape))
        {
          ip_fail (error, PS_ERROR_INVALID, ins, "participants' operand shapes differ");
          ok = FALSE;
          break;
        }
      ok = ip_charge (ctx, ins, acc->n, error);
      for (int64_t e = 0; e < acc->n && ok; e++)
        ok = ip_reducer_apply (&red, acc, e, v, e, acc, e, error);
    }
  ip_reducer_clear (&red);
  if (!ok)
    {
      ps_value_free (acc);
      return NULL;
    }
  return acc;
}

/* Copies `src` into `dst` at offset `off` along dim `dim` (or, with
 * extract, copies the block of dst's size at `off` out of src). */
static void
place_block (PsValue *dst, const PsValue *src, int dim, int64_t off, gboolean extract)
{
  const PsValue *small = extract ? dst : src;
  const PsValue *big = extract ? src : dst;
  int rank = small->shape->rank;
  int64_t *idx = g_new0 (int64_t, MAX (1, rank));
  int64_t *bst = ps_shape_strides (big->shape);
  for (int64_t i = 0; i < small->n; i++)
    {
      int64_t bi = 0;
      for (int d = 0; d < rank; d++)
        bi += (idx[d] + (d == dim ? off : 0)) * bst[d];
      if (extract)
        ps_value_copy_elem (dst, i, src, bi);
      else
        ps_value_copy_elem (dst, bi, src, i);
      ps_index_next (rank, small->shape->dims, idx);
    }
  g_free (idx);
  g_free (bst);
}

static gboolean
check_dim (const PsInstr *ins, const PsShape *s, int64_t dim, GError **error)
{
  if (s->etype == PS_TUPLE || dim < 0 || dim >= s->rank)
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "dimension %" G_GINT64_FORMAT
               " is out of range", dim);
      return FALSE;
    }
  return TRUE;
}

/* Result of collective `ins` for one lane; members are lanes. */
static PsValue *
collective_one (IpCtx *ctx, const PsInstr *ins, PsValue ***ops, const int *mlanes,
                int n, int my_pos, int64_t device, GError **error)
{
  int no = ins->n_operands;
  const PsShape *oshape = ins->shape;
  PsValue **res = g_new0 (PsValue *, MAX (1, no));
  gboolean ok = TRUE;
  gboolean tuple_out = oshape->etype == PS_TUPLE;
  if (no < 1 || (!tuple_out && no != 1) || (tuple_out && oshape->n_elems != no
                                            && ins->opcode != PS_OP_ALL_TO_ALL))
    {
      ip_fail (error, PS_ERROR_INVALID, ins, "operand count does not match the shape");
      g_free (res);
      return NULL;
    }
  switch (ins->opcode)
    {
    case PS_OP_ALL_REDUCE:
      for (int k = 0; k < no && ok; k++)
        ok = (res[k] = reduce_over (ctx, ins, ops, k, mlanes, n, device, error)) != NULL;
      break;
    case PS_OP_REDUCE_SCATTER:
    case PS_OP_ALL_GATHER:
      {
        int64_t dim = ins->dimensions.n ? ins->dimensions.v[0] : 0;
        for (int k = 0; k < no && ok; k++)
          {
            const PsShape *rs = tuple_out ? oshape->elems[k] : oshape;
            const PsValue *mine = ops[k][mlanes[my_pos]];
            if (!check_dim (ins, rs, dim, error) || !check_dim (ins, mine->shape, dim, error))
              {
                ok = FALSE;
                break;
              }
            if (ins->opcode == PS_OP_ALL_GATHER)
              {
                int64_t od = mine->shape->dims[dim];
                if (rs->dims[dim] != od * n || rs->rank != mine->shape->rank)
                  {
                    ip_fail (error, PS_ERROR_INVALID, ins, "gathered dim %" G_GINT64_FORMAT
                             " is not %d x the operand's", dim, n);
                    ok = FALSE;
                    break;
                  }
                res[k] = ps_value_new (rs);
                for (int j = 0; j < n && ok; j++)
                  {
                    const PsValue *v = ops[k][mlanes[j]];
                    if (!ps_shape_equal (v->shape, mine->shape))
                      {
                        ip_fail (error, PS_ERROR_INVALID, ins, "participants' operand shapes differ");
                        ok = FALSE;
                        break;
                      }
                    place_block (res[k], v, (int) dim, j * od, FALSE);
                  }
              }
            else
              {
                PsValue *sum = reduce_over (ctx, ins, ops, k, mlanes, n, device, error);
                if (!sum)
                  {
                    ok = FALSE;
                    break;
                  }
                int64_t cd = rs->dims[dim];
                if (cd * n != sum->shape->dims[dim] || rs->rank != sum->shape->rank)
                  {
                    ip_fail (error, PS_ERROR_INVALID, ins, "scattered dim %" G_GINT64_FORMAT
                             " is not the operand's / %d", dim, n);
                    ps_value_free (sum);
                    ok = FALSE;
                    break;
                  }
                res[k] = ps_value_new (rs);
                place_block (res[k], sum, (int) dim, my_pos * cd, TRUE);
                ps_value_free (sum);
              }
          }
        break;
      }
    case PS_OP_ALL_TO_ALL:
      if (ins->dimensions.n > 0)
        {
          int64_t dim = ins->dimensions.v[0];
          const PsValue *mine = ops[0][mlanes[my_pos]];
          if (no != 1 || !check_dim (ins, mine->shape, dim, error)
              || !ps_shape_equal (mine->shape, oshape) || mine->shape->dims[dim] % n)
            {
              if (error && !*error)
                ip_fail (error, PS_ERROR_INVALID, ins,
                         "all-to-all dim must split evenly over %d participants", n);
              ok = FALSE;
              break;
            }
          int64_t cd = mine->shape->dims[dim] / n;
          PsShape *cs = ps_shape_copy (oshape);
          cs->dims[dim] = cd;
          PsValue *chunk = ps_value_new (cs);
          ps_shape_free (cs);
          res[0] = ps_value_new (oshape);
          for (int j = 0; j < n; j++)
            {
              /* Participant j sends me its chunk number my_pos. */
              place_block (chunk, ops[0][mlanes[j]], (int) dim, my_pos * cd, TRUE);
              place_block (res[0], chunk, (int) dim, j * cd, FALSE);
            }
          ps_value_free (chunk);
          no = 1;
        }
      else
        {
          if (no != n)
            {
              ip_fail (error, PS_ERROR_INVALID, ins,
                       "tuple all-to-all needs one operand per participant");
              ok = FALSE;
              break;
            }
          for (int j = 0; j < n; j++)
            res[j] = ps_value_copy (ops[my_pos][mlanes[j]]);
        }
      break;
    default:
      ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "collective is not supported");
      ok = FALSE;
    }
  PsValue *out = NULL;
  if (ok)
    out = tuple_out ? ps_value_new_tuple (no, res) : res[0];
  else
    for (int k = 0; k < no; k++)
      ps_value_free (res[k]);
  g_free (res);
  return out;
}

static gboolean
eval_permute (IpCtx *ctx, const PsInstr *ins, Lanes lanes, PsValue ***ops, PsValue **out,
              const int *lane_of, GError **error)
{
  GroupMode mode;
  if (!group_mode (ins, &mode, error))
    return FALSE;
  if (ins->n_operands < 1 || ops[0][0]->shape->etype == PS_TUPLE)
    {
      ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "only single-array collective-permute is supported");
      return FALSE;
    }
  int64_t np = ctx->opts.num_partitions;
  int64_t id_space = mode == MODE_CROSS_PARTITION ? np : ctx->opts.num_replicas;
  for (int k = 0; k < 2 * ins->n_pairs; k++)
    if (ins->source_target_pairs[k] < 0 || ins->source_target_pairs[k] >= id_space)
      {
        ip_fail (error, PS_ERROR_INVALID, ins, "pair id %" G_GINT64_FORMAT
                 " is out of range", ins->source_target_pairs[k]);
        return FALSE;
      }
  for (int l = 0; l < lanes.n; l++)
    {
      int64_t dev = lanes.devs[l];
      int64_t r = dev / np, p = dev % np;
      int64_t my_id = mode == MODE_CROSS_PARTITION ? p : r;
      int64_t src = -1;
      for (int k = 0; k < ins->n_pairs && src < 0; k++)
        if (ins->source_target_pairs[2 * k + 1] == my_id)
          src = ins->source_target_pairs[2 * k];
      if (src < 0)
        {
          /* Devices no pair targets get zeros, as XLA defines. */
          out[l] = ps_value_new (ins->shape);
          continue;
        }
      int64_t sdev = mode == MODE_CROSS_PARTITION ? r * np + src : src * np + p;
      int sl = lane_of[sdev];
      if (sl < 0)
        {
          ip_fail (error, PS_ERROR_UNSUPPORTED, ins,
                   "device %" G_GINT64_FORMAT " waits for device %" G_GINT64_FORMAT
                   ", which is not running this instruction (control flow diverged)",
                   dev, sdev);
          return FALSE;
        }
      if (!ps_shape_equal (ops[0][sl]->shape, ins->shape))
        {
          ip_fail (error, PS_ERROR_INVALID, ins, "operand shape differs from the result");
          return FALSE;
        }
      out[l] = ps_value_copy (ops[0][sl]);
    }
  return TRUE;
}

/* collective-broadcast (the StableHLO specification's collective_broadcast,
 * XLA's CollectiveBroadcast): every member of a group gets the operand of
 * the group's first member; a device that is in no group gets zeros. */
static gboolean
eval_coll_broadcast (IpCtx *ctx, const PsInstr *ins, Lanes lanes, PsValue ***ops, PsValue **out,
                     const int *lane_of, GError **error)
{
  GroupMode mode;
  if (!group_mode (ins, &mode, error))
    return FALSE;
  int64_t np = ctx->opts.num_partitions;
  GArray *members = g_array_new (FALSE, FALSE, sizeof (int64_t));
  gboolean ok = TRUE;
  for (int l = 0; l < lanes.n && ok; l++)
    {
      int64_t dev = lanes.devs[l];
      int64_t my_id = mode == MODE_CROSS_PARTITION ? dev % np : dev / np;
      gboolean grouped = ins->n_groups == 0 || ins->group_size == 0;
      for (int g = 0; g < ins->n_groups && !grouped; g++)
        for (int k = 0; k < ps_instr_group_len (ins, g) && !grouped; k++)
          grouped = ins->replica_groups[(gsize) g * ins->group_size + k] == my_id;
      if (!grouped)
        {
          out[l] = ps_value_new (ins->shape);
          continue;
        }
      int pos;
      if (!participants (ctx, ins, dev, members, &pos, error))
        {
          ok = FALSE;
          break;
        }
      int64_t src = g_array_index (members, int64_t, 0);
      int sl = lane_of[src];
      if (sl < 0)
        {
          ip_fail (error, PS_ERROR_UNSUPPORTED, ins,
                   "device %" G_GINT64_FORMAT " waits for device %" G_GINT64_FORMAT
                   ", which is not running this instruction (control flow diverged)", dev, src);
          ok = FALSE;
        }
      else if (!ps_shape_equal (ops[0][sl]->shape, ins->shape))
        {
          ip_fail (error, PS_ERROR_INVALID, ins, "operand shape differs from the result");
          ok = FALSE;
        }
      else
        out[l] = ps_value_copy (ops[0][sl]);
    }
  g_array_free (members, TRUE);
  return ok;
}

static gboolean
eval_collective (IpCtx *ctx, const PsInstr *ins, Lanes lanes, PsValue ***ops,
                 PsValue **out, GError **error)
{
  int *lane_of = g_new (int, ctx->num_devices);
  for (int64_t d = 0; d < ctx->num_devices; d++)
    lane_of[d] = -1;
  for (int l = 0; l < lanes.n; l++)
    lane_of[lanes.devs[l]] = l;
  gboolean ok = TRUE;
  if (ins->opcode == PS_OP_COLLECTIVE_PERMUTE)
    {
      ok = eval_permute (ctx, ins, lanes, ops, out, lane_of, error);
      goto done;
    }
  if (ins->opcode == PS_OP_COLLECTIVE_BROADCAST)
    {
      ok = eval_coll_broadcast (ctx, ins, lanes, ops, out, lane_of, error);
      goto done;
    }
  if (ins->opcode != PS_OP_ALL_REDUCE && ins->opcode != PS_OP_ALL_GATHER
      && ins->opcode != PS_OP_REDUCE_SCATTER && ins->opcode != PS_OP_ALL_TO_ALL)
    {
      ip_fail (error, PS_ERROR_UNSUPPORTED, ins, "collective is not supported");
      ok = FALSE;
      goto done;
    }
  GArray *members = g_array_new (FALSE, FALSE, sizeof (int64_t));
  int *mlanes = NULL;
  /* All-reduce results are shared by the whole group: compute once per group
   * (keyed by its first member) so that large groups stay linear. */
  PsValue **by_leader = g_new0 (PsValue *, lanes.n);
  for (int l = 0; l < lanes.n && ok; l++)
    {
      int my_pos;
      if (!participants (ctx, ins, lanes.devs[l], members, &my_pos, error))
        {
          ok = FALSE;
          break;
        }
      int n = (int) members->len;
      g_free (mlanes);
      mlanes = g_new0 (int, MAX (1, n));
      for (int j = 0; j < n; j++)
        {
          int64_t d = g_array_index (members, int64_t, j);
          mlanes[j] = lane_of[d];
          if (mlanes[j] < 0)
            {
              ip_fail (error, PS_ERROR_UNSUPPORTED, ins,
                       "device %" G_GINT64_FORMAT " waits for device %" G_GINT64_FORMAT
                       ", which is not running this instruction (control flow diverged)",
                       lanes.devs[l], d);
              ok = FALSE;
              break;
            }
        }
      if (!ok)
        break;
      if (ins->opcode == PS_OP_ALL_REDUCE && by_leader[mlanes[0]])
        {
          out[l] = ps_value_copy (by_leader[mlanes[0]]);
          continue;
        }
      out[l] = collective_one (ctx, ins, ops, mlanes, n, my_pos, lanes.devs[l], error);
      if (!out[l])
        ok = FALSE;
      else if (ins->opcode == PS_OP_ALL_REDUCE)
        by_leader[mlanes[0]] = ps_value_copy (out[l]);
    }
  for (int l = 0; l < lanes.n; l++)
    ps_value_free (by_leader[l]);
  g_free (by_leader);
  g_free (mlanes);
  g_array_free (members, TRUE);
done:
  g_free (lane_of);
  if (!ok)
    for (int l = 0; l < lanes.n; l++)
      g_clear_pointer (&out[l], ps_value_free);
  return ok;
}

/* ---- manual regions in the global view ------------------------------------- */

static gboolean
is_manual_conversion (const IpCtx *ctx, const PsInstr *ins)
{
  const char *t = ins->custom_call_target;
  return ctx->opts.global_view && ins->opcode == PS_OP_CUSTOM_CALL && t && ins->n_operands == 1
         && (strcmp (t, "SPMDFullToShardShape") == 0 || strcmp (t, "SPMDShardToFullShape") == 0);
}

/* An array's sharding: NULL (replicated) or a non-tuple sharding. */
static const PsSharding *
array_sharding (const PsSharding *s)
{
  if (s && s->kind == PS_SHARDING_TUPLE)
    return s->n_elems == 1 ? s->elems[0] : NULL;
  return s;
}

static gboolean
sharding_fits_array (const PsSharding *s, const PsShape *shape)
{
  return !s || s->kind != PS_SHARDING_TILED || ps_sharding_data_rank (s) == shape->rank;
}

/* Copies between a whole value and one window of it: for every index idx of
 * the window value (DST when WINDOW_IS_DST, else SRC), the element at
 * off + idx of the whole value when that lies below lim in every dim (past
 * lim the window is padding: left as it is in DST, or not written back). */
static void
window_copy (PsValue *dst, const PsValue *src, gboolean window_is_dst, const int64_t *off,
             const int64_t *lim)
{
  const PsValue *window = window_is_dst ? dst : src, *whole = window_is_dst ? src : dst;
  int rank = whole->shape->rank;
  int64_t *idx = g_new0 (int64_t, rank + 1);
  int64_t *st = ps_shape_strides (whole->shape);
  for (int64_t i = 0; i < window->n; i++)
    {
      gboolean in = TRUE;
      int64_t wi = 0;
      for (int d = 0; d < rank; d++)
        {
          int64_t g = off[d] + idx[d];
          if (g >= lim[d])
            in = FALSE;
          wi += g * st[d];
        }
      if (in)
        {
          if (window_is_dst)
            ps_value_copy_elem (dst, i, src, wi);
          else
            ps_value_copy_elem (dst, wi, src, i);
        }
      ps_index_next (rank, window->shape->dims, idx);
    }
  g_free (idx);
  g_free (st);
}

/* Device `device`'s piece of `v` under `s`: its tile (zero padded past the
 * end of uneven dims), the whole value when s is not tiled, zeros when s is
 * maximal on another device or the device is not in the tile assignment. */
static PsValue *
sharded_piece (const PsSharding *s, const PsValue *v, int64_t device)
{
  if (!s || (s->kind != PS_SHARDING_TILED && s->kind != PS_SHARDING_MAXIMAL))
    return ps_value_copy (v);
  if (s->kind == PS_SHARDING_MAXIMAL)
    return s->device == device ? ps_value_copy (v) : ps_value_new (v->shape);
  PsShape *ls = ps_sharding_tile_shape (s, v->shape);
  PsValue *out = ps_value_new (ls);
  ps_shape_free (ls);
  int rank = v->shape->rank;
  int64_t *off = g_new0 (int64_t, rank + 1), *lim = g_new0 (int64_t, rank + 1);
  if (ps_sharding_tile_bounds (s, v->shape, device, off, lim))
    window_copy (out, v, TRUE, off, lim);
  g_free (off);
  g_free (lim);
  return out;
}

/* Whether device e provides a tile of the value device d sees under the
 * (non-manual or partially manual) result sharding s: e is in d's manual
 * group and, among the devices holding the same tile, the representative
 * (replicated subgroup coordinates 0). */
static gboolean
provides_tile (const PsSharding *s, int64_t d, int64_t e)
{
  if (!s || s->kind == PS_SHARDING_REPLICATED || s->kind == PS_SHARDING_UNKNOWN)
    return e == 0;
  if (s->kind == PS_SHARDING_MAXIMAL)
    return e == s->device;
  if (s->kind != PS_SHARDING_TILED)
    return e == d;
  int64_t *di = g_new0 (int64_t, s->n_tile_dims + 1), *ei = g_new0 (int64_t, s->n_tile_dims + 1);
  gboolean ok = ps_sharding_device_index (s, d, di) && ps_sharding_device_index (s, e, ei);
  int first = s->n_tile_dims - s->n_subgroups;
  for (int k = 0; k < s->n_subgroups && ok; k++)
    {
      int t = first + k;
      if (s->subgroup_kinds[k] == PS_SUBGROUP_MANUAL && ei[t] != di[t])
        ok = FALSE;
      if (s->subgroup_kinds[k] == PS_SUBGROUP_REPLICATED && ei[t] != 0)
        ok = FALSE;
    }
  g_free (di);
  g_free (ei);
  return ok;
}

/* SPMDFullToShardShape / SPMDShardToFullShape in the global view (see
 * PsInterpOptions.global_view): a collective that re-reads every device's
 * piece of the operand as its piece of the result. */
static gboolean
eval_manual_conversion (IpCtx *ctx, const PsInstr *ins, Lanes lanes, PsValue ***ops,
                        PsValue **out, GError **error)
{
  const PsSharding *sin = array_sharding (ins->operands[0]->sharding);
  const PsSharding *sout = array_sharding (ins->sharding);
  const PsShape *ishape = ins->operands[0]->shape, *oshape = ins->shape;
  if (ishape->etype == PS_TUPLE || oshape->etype == PS_TUPLE)
    {
      ip_fail (error, PS_ERROR_UNSUPPORTED, ins,
               "tuple-shaped %s in a manual region", ins->custom_call_target);
      return FALSE;
    }
  if (!sharding_fits_array (sin, ishape) || !sharding_fits_array (sout, oshape)
      || ishape->rank != oshape->rank)
    {
      ip_fail (error, PS_ERROR_INVALID, ins,
               "the shardings of %s and its operand do not fit their shapes",
               ins->custom_call_target);
      return FALSE;
    }
  gboolean manual_out = sout && sout->kind == PS_SHARDING_MANUAL;
  int *lane_of = g_new (int, ctx->num_devices);
  for (int64_t d = 0; d < ctx->num_devices; d++)
    lane_of[d] = -1;
  for (int l = 0; l < lanes.n; l++)
    lane_of[lanes.devs[l]] = l;
  PsValue **piece = g_new0 (PsValue *, MAX (1, lanes.n));
  for (int l = 0; l < lanes.n; l++)
    piece[l] = sharded_piece (sin, ops[0][l], lanes.devs[l]);
  gboolean ok = TRUE;
  int64_t *off = g_new0 (int64_t, oshape->rank + 1), *lim = g_new0 (int64_t, oshape->rank + 1);
  for (int l = 0; l < lanes.n && ok; l++)
    {
      int64_t d = lanes.devs[l];
      out[l] = ps_value_new (oshape);
      for (int64_t e = 0; e < ctx->num_devices && ok; e++)
        {
          if (manual_out ? e != d : !provides_tile (sout, d, e))
            continue;
          if (lane_of[e] < 0)
            {
              ip_fail (error, PS_ERROR_UNSUPPORTED, ins,
                       "device %" G_GINT64_FORMAT " waits for device %" G_GINT64_FORMAT
                       ", which is not running this instruction (control flow diverged)",
                       d, e);
              ok = FALSE;
              break;
            }
          if (!manual_out && sout && !ps_sharding_tile_bounds (sout, oshape, e, off, lim))
            continue;
          if (manual_out || !sout || sout->kind != PS_SHARDING_TILED)
            for (int k = 0; k < oshape->rank; k++)
              {
                off[k] = 0;
                lim[k] = oshape->dims[k];
              }
          ok = ip_charge (ctx, ins, piece[lane_of[e]]->n, error);
          if (ok)
            window_copy (out[l], piece[lane_of[e]], FALSE, off, lim);
        }
    }
  g_free (off);
  g_free (lim);
  for (int l = 0; l < lanes.n; l++)
    ps_value_free (piece[l]);
  g_free (piece);
  g_free (lane_of);
  if (!ok)
    for (int l = 0; l < lanes.n; l++)
      g_clear_pointer (&out[l], ps_value_free);
  return ok;
}

/* ---- public entry points ---------------------------------------------------- */

static gboolean
ctx_init (IpCtx *ctx, const PsModule *m, int64_t num_devices, const PsInterpOptions *opts,
          GError **error)
{
  memset (ctx, 0, sizeof *ctx);
  ctx->module = m;
  ctx->call = call_computation;
  if (opts)
    ctx->opts = *opts;
  if (ctx->opts.num_replicas <= 0 && ctx->opts.num_partitions <= 0)
    {
      ctx->opts.num_replicas = 1;
      ctx->opts.num_partitions = num_devices;
    }
  else if (ctx->opts.num_replicas <= 0)
    ctx->opts.num_replicas = num_devices / MAX (1, ctx->opts.num_partitions);
  else if (ctx->opts.num_partitions <= 0)
    ctx->opts.num_partitions = num_devices / MAX (1, ctx->opts.num_replicas);
  if (ctx->opts.num_replicas * ctx->opts.num_partitions != num_devices || num_devices <= 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "interpreter: %" G_GINT64_FORMAT " replicas x %" G_GINT64_FORMAT
                   " partitions is not %" G_GINT64_FORMAT " devices",
                   ctx->opts.num_replicas, ctx->opts.num_partitions, num_devices);
      return FALSE;
    }
  if (ctx->opts.max_work <= 0)
    ctx->opts.max_work = DEFAULT_MAX_WORK;
  if (ctx->opts.max_elements <= 0)
    ctx->opts.max_elements = DEFAULT_MAX_ELEMENTS;
  if (ctx->opts.max_live_elements <= 0)
    ctx->opts.max_live_elements = 4 * ctx->opts.max_elements;
  ctx->num_devices = num_devices;
  ctx->plans = g_hash_table_new_full (NULL, NULL, NULL, plan_free);
  ctx->scalar_progs = g_hash_table_new_full (NULL, NULL, NULL, scalar_prog_free);
  ctx->rng_states = g_hash_table_new_full (NULL, NULL, NULL, g_free);
  return TRUE;
}

gboolean
ps_interp_run_spmd (const PsModule *m, int64_t num_devices, int n_args, PsValue *const *args,
                    PsValue **results, const PsInterpOptions *opts, GError **error)
{
  g_return_val_if_fail (m != NULL && results != NULL, FALSE);
  if (!m->entry)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "interpreter: module %s has no entry",
                   m->name ? m->name : "");
      return FALSE;
    }
  if ((int) m->entry->params->len != n_args)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "interpreter: entry computation has %u parameters, got %d arguments",
                   m->entry->params->len, n_args);
      return FALSE;
    }
  IpCtx ctx;
  if (!ctx_init (&ctx, m, num_devices, opts, error))
    return FALSE;
  int64_t *devs = g_new0 (int64_t, num_devices);
  for (int64_t d = 0; d < num_devices; d++)
    devs[d] = d;
  Lanes lanes = { (int) num_devices, devs };
  gboolean ok = eval_comp (&ctx, m->entry, lanes, n_args, args, results, error);
  g_free (devs);
  /* Scalar programs point into plans: destroy them first. */
  g_hash_table_destroy (ctx.scalar_progs);
  g_hash_table_destroy (ctx.plans);
  g_hash_table_destroy (ctx.rng_states);
  return ok;
}

PsValue *
ps_interp_run (const PsModule *m, int n_args, PsValue *const *args, const PsInterpOptions *opts,
               GError **error)
{
  PsValue *out = NULL;
  if (!ps_interp_run_spmd (m, 1, n_args, args, &out, opts, error))
    return NULL;
  return out;
}
