/* The sharding propagation pass: preprocessing (Sharding custom-calls, shard
 * groups, metadata, computations that share shardings), the fixpoint loop of
 * forward and backward passes with rising aggressiveness, and the
 * post-processing XLA does (shard_as alignment, barrier removal, output and
 * parameter restrictions). The per-opcode rules are in propagate_rules.c and
 * propagate_gather.c, the sharding algebra in propagate_algebra.c. */
#include "config.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "partitioner/propagate/propagate_private.h"

void
ps_propagate_options_init (PsPropagateOptions *opts)
{
  static const gboolean yes = TRUE;
  memset (opts, 0, sizeof *opts);
  opts->is_spmd = TRUE;
  opts->n_to_output = 1;
  opts->to_output = &yes;
  opts->n_to_parameters = 1;
  opts->to_parameters = &yes;
}

static gboolean
any_true (int n, const gboolean *v)
{
  for (int k = 0; k < n; k++)
    if (v[k])
      return TRUE;
  return FALSE;
}

/* Every instruction of every computation, in module order. */
#define FOR_EACH_INSTR(comps, c, i)                                                 \
  for (guint c##_k = 0; c##_k < (comps)->len; c##_k++)                              \
    for (PsComputation *c = g_ptr_array_index ((comps), c##_k); c; c = NULL)         \
      for (guint i##_k = 0; i##_k < c->instrs->len; i##_k++)                          \
        for (PsInstr *i = g_ptr_array_index (c->instrs, i##_k); i; i = NULL)

static void
set_sharding (PsInstr *i, PsSharding *s) /* takes s */
{
  ps_sharding_free (i->sharding);
  i->sharding = s;
}

/* Reports a user error at instruction `at` ("FILE:LINE:COL: ..."). */
static void fail_at (GError **error, PsErrorCode code, const char *src, const PsInstr *at,
                     const char *fmt, ...) G_GNUC_PRINTF (5, 6);

static void
fail_at (GError **error, PsErrorCode code, const char *src, const PsInstr *at, const char *fmt,
         ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  ps_set_error_at (error, code, src, at ? at->src_line : 0, at ? at->src_col : 0, "%s", msg);
}

/* ---- metadata ----------------------------------------------------------- */

static gboolean
leaves_lack_metadata (const PsSharding *s)
{
  if (pp_is_tuple (s))
    {
      for (int k = 0; k < s->n_elems; k++)
        if (s->elems[k]->metadata)
          return FALSE;
      return TRUE;
    }
  return s->metadata == NULL;
}

static void
assign_metadata (GPtrArray *comps)
{
  FOR_EACH_INSTR (comps, c, i)
    {
      if (!i->sharding || !i->metadata || !*i->metadata)
        continue;
      char *text = g_strdup_printf ("{%s}", i->metadata);
      if (pp_is_tuple (i->sharding))
        {
          for (int k = 0; k < i->sharding->n_elems; k++)
            if (!i->sharding->elems[k]->metadata)
              i->sharding->elems[k]->metadata = g_strdup (text);
        }
      else if (leaves_lack_metadata (i->sharding))
        i->sharding->metadata = g_strdup (text);
      g_free (text);
    }
}

static void
remove_metadata (GPtrArray *comps)
{
  FOR_EACH_INSTR (comps, c, i)
    if (i->sharding)
      pp_set_metadata_text (i->sharding, NULL);
}

static gboolean
is_cse_prevention (const PsSharding *s)
{
  return s && !pp_is_tuple (s) && s->metadata
         && strstr (s->metadata, "_sharding_propagation_cse_prevention") != NULL;
}

/* ---- Sharding custom-calls and shard groups ----------------------------- */

typedef struct {
  GHashTable *instr_group;   /* PsInstr* -> group id + 1 (GINT_TO_POINTER) */
  GArray *ids;               /* group ids in first-seen order */
  GHashTable *as_groups;     /* id -> GPtrArray of PsInstr* */
  GHashTable *like_groups;   /* id -> GPtrArray of PsInstr* */
} Groups;

static gint64 *
key64 (int64_t v)
{
  gint64 *k = g_new (gint64, 1);
  *k = v;
  return k;
}

static GPtrArray *
group_of (Groups *g, PsInstr *i)
{
  gpointer v = g_hash_table_lookup (g->instr_group, i);
  if (!v)
    return NULL;
  gint64 id = GPOINTER_TO_INT (v) - 1;
  GPtrArray *a = g_hash_table_lookup (g->as_groups, &id);
  return a ? a : g_hash_table_lookup (g->like_groups, &id);
}

static gboolean
parse_unspecified_dims (const PsInstr *i, PsInts *out)
{
  memset (out, 0, sizeof *out);
  const char *cfg = i->backend_config;
  if (!cfg)
    return TRUE;
  const char *p = strstr (cfg, "unspecified_dims=[");
  if (!p)
    return TRUE;
  p += strlen ("unspecified_dims=[");
  GArray *a = g_array_new (FALSE, FALSE, sizeof (int64_t));
  while (*p && *p != ']')
    {
      char *end;
      int64_t v = g_ascii_strtoll (p, &end, 10);
      if (end == p)
        {
          g_array_free (a, TRUE);
          return FALSE;
        }
      g_array_append_val (a, v);
      p = end;
      while (*p == ',' || *p == ' ')
        p++;
    }
  int64_t *v = (int64_t *) a->data;
  for (guint x = 1; x < a->len; x++)
    for (guint y = x; y > 0 && v[y] < v[y - 1]; y--)
      {
        int64_t t = v[y];
        v[y] = v[y - 1];
        v[y - 1] = t;
      }
  ps_ints_set (out, (int) a->len, v);
  g_array_free (a, TRUE);
  return TRUE;
}

static void
ints_free (gpointer p)
{
  PsInts *x = p;
  ps_ints_clear (x);
  g_free (x);
}

static void
register_group (Groups *g, PsInstr *i)
{
  if (!i->sharding || i->sharding->group_kind == PS_SHARD_GROUP_NONE)
    return;
  int64_t id = i->sharding->group_id;
  gboolean as = i->sharding->group_kind == PS_SHARD_GROUP_AS;
  g_hash_table_insert (g->instr_group, i, GINT_TO_POINTER ((int) id + 1));
  GHashTable *t = as ? g->as_groups : g->like_groups;
  GPtrArray *a = g_hash_table_lookup (t, &id);
  if (!a)
    {
      a = g_ptr_array_new ();
      g_hash_table_insert (t, key64 (id), a);
      g_array_append_val (g->ids, id);
    }
  g_ptr_array_add (a, i);
  i->sharding->group_kind = PS_SHARD_GROUP_NONE;
  i->sharding->group_id = 0;
}

static gboolean
process_sharding_instructions (PsModule *m, const char *src, GPtrArray *comps,
                               gboolean replace_with_copy, GHashTable *unspec, Groups *g,
                               GError **error)
{
  for (guint ck = 0; ck < comps->len; ck++)
    {
      PsComputation *c = g_ptr_array_index (comps, ck);
      GPtrArray *po = ps_computation_post_order (c);
      for (int k = (int) po->len - 1; k >= 0; k--)
        {
          PsInstr *i = g_ptr_array_index (po, k);
          if (!pp_is_custom_call (i, "Sharding"))
            {
              if (replace_with_copy)
                register_group (g, i);
              continue;
            }
          if (!i->sharding || i->n_operands != 1)
            {
              fail_at (error, PS_ERROR_INVALID, src, i,
                       "Sharding custom-call %s needs one operand and a sharding", i->name);
              g_ptr_array_free (po, TRUE);
              return FALSE;
            }
          PsInts dims;
          if (!parse_unspecified_dims (i, &dims))
            {
              fail_at (error, PS_ERROR_PARSE, src, i, "bad unspecified_dims in backend_config of %s",
                       i->name);
              g_ptr_array_free (po, TRUE);
              return FALSE;
            }
          PsInstr *op = i->operands[0];
          gboolean unknown = i->sharding->kind == PS_SHARDING_UNKNOWN;
          gboolean replaced = replace_with_copy && (!unknown || op->opcode == PS_OP_PARAMETER);
          if (replaced)
            {
              char *name = g_strdup (i->name);
              PsInstr *copy = ps_computation_add_instr (c, PS_OP_COPY, NULL,
                                                        ps_shape_copy (i->shape), 1, &op);
              /* In i's place, so the printed module defines it before its
               * users (appended, it would follow the ROOT). */
              g_ptr_array_remove_index (c->instrs, c->instrs->len - 1);
              guint at = 0;
              while (at < c->instrs->len && g_ptr_array_index (c->instrs, at) != i)
                at++;
              g_ptr_array_insert (c->instrs, (gint) at, copy);
              copy->sharding = i->sharding;
              i->sharding = NULL;
              copy->src_line = i->src_line;
              copy->src_col = i->src_col;
              ps_instr_replace_all_uses (i, copy);
              ps_computation_remove_instr (c, i);
              /* Keep the annotation's name so that it stays findable. */
              if (m->name_index && g_hash_table_lookup (m->name_index, copy->name) == copy)
                g_hash_table_remove (m->name_index, copy->name);
              g_free (copy->name);
              copy->name = name;
              if (m->name_index)
                g_hash_table_replace (m->name_index, g_strdup (copy->name), copy);
              i = copy;
            }
          gboolean remove = FALSE;
          if (replace_with_copy && i->sharding->group_kind != PS_SHARD_GROUP_NONE)
            {
              if (!replaced)
                {
                  /* The annotation only names a shard group: hand it to the
                   * operand and drop the custom-call. */
                  PsSharding *os = op->sharding ? ps_sharding_share (op->sharding)
                                                : ps_sharding_unknown ();
                  os->group_kind = i->sharding->group_kind;
                  os->group_id = i->sharding->group_id;
                  set_sharding (op, os);
                  remove = TRUE;
                }
              else
                register_group (g, i);
            }
          if (dims.n > 0)
            {
              PsInts *d = g_new0 (PsInts, 1);
              *d = dims;
              g_hash_table_insert (unspec, i, d);
            }
          else if (!op->sharding)
            op->sharding = ps_sharding_share (i->sharding);
          if (remove)
            {
              ps_instr_replace_all_uses (i, op);
              g_hash_table_remove (unspec, i);
              ps_computation_remove_instr (c, i);
            }
        }
      g_ptr_array_free (po, TRUE);
    }
  return TRUE;
}

/* ---- while bodies pinned to a device ------------------------------------ */

static gboolean
check_while_devices (PsInstr *w, const char *src, GError **error)
{
  if (w->n_called < 2)
    return TRUE;
  PsComputation *body = w->called[1];
  GHashTable *dev_to_instr = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, NULL);
  GArray *devs = g_array_new (FALSE, FALSE, sizeof (int64_t));
  gboolean have_unique = FALSE;
  int64_t unique = 0;
  PsInstr *channel = NULL;
  gboolean ok = TRUE;
  for (guint k = 0; k < body->instrs->len && ok; k++)
    {
      PsInstr *i = g_ptr_array_index (body->instrs, k);
      int64_t d;
      if (!pp_has_unique_device (i->sharding, &d))
        continue;
      const char *host = ps_instr_get_raw_attr (i, "is_host_transfer");
      gboolean is_channel = ((i->opcode == PS_OP_SEND || i->opcode == PS_OP_RECV)
                             && !(host && strcmp (host, "true") == 0))
                            || ((i->opcode == PS_OP_ALL_REDUCE || i->opcode == PS_OP_REDUCE_SCATTER)
                                && i->channel_id != 0);
      if (have_unique)
        {
          if (unique != d)
            {
              fail_at (error, PS_ERROR_INVALID, src, i,
                           "Instruction: %s is on device: %" G_GINT64_FORMAT
                           ", which conflicts with device: %" G_GINT64_FORMAT
                           " of channel instruction: %s",
                           i->name, d, unique, channel->name);
              ok = FALSE;
            }
        }
      else if (is_channel)
        {
          channel = i;
          unique = d;
          have_unique = TRUE;
          for (guint j = 0; j < devs->len && ok; j++)
            {
              int64_t od = g_array_index (devs, int64_t, j);
              if (od != unique)
                {
                  PsInstr *oi = g_hash_table_lookup (dev_to_instr, &od);
                  fail_at (error, PS_ERROR_INVALID, src, oi,
                               "Instruction: %s is on device: %" G_GINT64_FORMAT
                               ", which conflicts with device: %" G_GINT64_FORMAT
                               " of channel instruction: %s",
                               oi->name, od, unique, channel->name);
                  ok = FALSE;
                }
            }
        }
      else
        {
          if (!g_hash_table_contains (dev_to_instr, &d))
            g_array_append_val (devs, d);
          g_hash_table_insert (dev_to_instr, key64 (d), i);
        }
    }
  if (ok && have_unique)
    {
      int64_t wd;
      if (pp_has_unique_device (w->sharding, &wd) && wd != unique)
        {
          fail_at (error, PS_ERROR_INVALID, src, w,
                       "Instruction: %s is on device: %" G_GINT64_FORMAT
                       ", which conflicts with device: %" G_GINT64_FORMAT
                       " of channel instruction: %s",
                       w->name, wd, unique, channel->name);
          ok = FALSE;
        }
      else if (body->root)
        {
          int64_t rd;
          if (!pp_has_unique_device (body->root->sharding, &rd))
            set_sharding (body->root,
                          pp_normalize_tuple_take (ps_sharding_maximal (unique), body->root->shape));
          else if (rd != unique)
            {
              fail_at (error, PS_ERROR_INVALID, src, body->root,
                           "Instruction: %s is on device: %" G_GINT64_FORMAT
                           ", which conflicts with device: %" G_GINT64_FORMAT
                           " of channel instruction: %s",
                           body->root->name, rd, unique, channel->name);
              ok = FALSE;
            }
        }
    }
  g_hash_table_destroy (dev_to_instr);
  g_array_free (devs, TRUE);
  return ok;
}

/* ---- computations that share shardings ---------------------------------- */

static GPtrArray *
related_instructions (PpCtx *c, PsInstr *i)
{
  GPtrArray *r = g_ptr_array_new ();
  if (i->opcode == PS_OP_WHILE && i->n_called >= 2)
    {
      PsComputation *cond = i->called[0], *body = i->called[1];
      g_ptr_array_add (r, i);
      if (body->root)
        g_ptr_array_add (r, body->root);
      if (body->params->len > 0)
        g_ptr_array_add (r, g_ptr_array_index (body->params, 0));
      if (cond->params->len > 0)
        g_ptr_array_add (r, g_ptr_array_index (cond->params, 0));
    }
  else if (i->opcode == PS_OP_CONDITIONAL)
    {
      g_ptr_array_add (r, i);
      for (int k = 0; k < i->n_called; k++)
        if (i->called[k]->root)
          g_ptr_array_add (r, i->called[k]->root);
    }
  else if ((i->opcode == PS_OP_CALL || i->opcode == PS_OP_FUSION) && i->n_called > 0)
    {
      g_ptr_array_add (r, i);
      if (i->called[0]->root)
        g_ptr_array_add (r, i->called[0]->root);
    }
  else if (i->opcode == PS_OP_PARAMETER)
    {
      PsInstr *caller = g_hash_table_lookup (c->comp_map, i->parent);
      if (caller && caller->opcode == PS_OP_CONDITIONAL)
        {
          for (int k = 1; k < caller->n_operands; k++)
            if (k - 1 < caller->n_called && caller->called[k - 1] == i->parent)
              {
                g_ptr_array_add (r, i);
                g_ptr_array_add (r, caller->operands[k]);
                break;
              }
        }
      else if (caller && (caller->opcode == PS_OP_CALL || caller->opcode == PS_OP_FUSION)
               && i->parameter_number < caller->n_operands)
        {
          g_ptr_array_add (r, i);
          g_ptr_array_add (r, caller->operands[i->parameter_number]);
        }
    }
  return r;
}

static void computation_propagation (PpCtx *c, PsInstr *i, GPtrArray *changed, int depth);

static void
propagate_to_related (PpCtx *c, PsInstr *search, PsInstr *i, GPtrArray *changed, int depth)
{
  GPtrArray *rel = related_instructions (c, search);
  gboolean member = FALSE;
  for (guint k = 0; k < rel->len; k++)
    member |= g_ptr_array_index (rel, k) == i;
  if (member && i->sharding)
    for (guint k = 0; k < rel->len; k++)
      {
        PsInstr *x = g_ptr_array_index (rel, k);
        if ((!x->sharding || !ps_sharding_equal (x->sharding, i->sharding))
            && !g_hash_table_contains (c->provided, x))
          {
            set_sharding (x, pp_normalize_tuple (i->sharding, x->shape));
            g_ptr_array_add (changed, x);
            computation_propagation (c, x, changed, depth + 1);
          }
      }
  g_ptr_array_free (rel, TRUE);
}

static void
computation_propagation (PpCtx *c, PsInstr *i, GPtrArray *changed, int depth)
{
  if (depth > 64)
    return;
  if (i->opcode == PS_OP_CONDITIONAL || i->opcode == PS_OP_WHILE || i->opcode == PS_OP_CALL
      || i->opcode == PS_OP_FUSION)
    propagate_to_related (c, i, i, changed, depth);
  if (i->opcode == PS_OP_PARAMETER || i->parent->root == i)
    {
      PsInstr *caller = g_hash_table_lookup (c->comp_map, i->parent);
      if (caller)
        {
          propagate_to_related (c, caller, i, changed, depth);
          if (i->opcode == PS_OP_PARAMETER
              && (caller->opcode == PS_OP_CONDITIONAL || caller->opcode == PS_OP_CALL
                  || caller->opcode == PS_OP_FUSION))
            propagate_to_related (c, i, i, changed, depth);
        }
    }
}

/* ---- unspecified dims and shard groups ---------------------------------- */

static gboolean
merge_unspec (PsInstr *annotate, const PsSharding *from, const PsInts *dims)
{
  if (!from || !pp_is_tiled (from) || !annotate->sharding || pp_is_tuple (annotate->sharding)
      || pp_is_manual (annotate->sharding))
    return FALSE;
  PsSharding *partial = pp_partially_replicate_all_except (from, dims->n, dims->v);
  PsSharding *m = pp_merge_if_compatible (partial, pp_num_tiles (annotate->sharding) + 1,
                                          annotate->sharding);
  ps_sharding_free (partial);
  if (!m)
    return FALSE;
  set_sharding (annotate, m);
  return TRUE;
}

/* XLA's RefineManualAutoShardingFromAuto: refines the pair of shardings
 * around a manual conversion from an auto (non-manual) sharding. */
static gboolean
refine_from_auto (const PsSharding *to_merge, const PsInts *dims, PsSharding **auto_s,
                  PsSharding **manual_s)
{
  const PsSharding *man = *manual_s;
  if (!pp_is_manual_subgroup (man) || pp_is_manual_subgroup (*auto_s)
      || !pp_has_partial_replication (man) || man->n_subgroups != 2 || pp_is_tuple (*auto_s)
      || pp_is_manual (*auto_s))
    return FALSE;
  PsSharding *partial = pp_partially_replicate_all_except (to_merge, dims->n, dims->v);
  if (!pp_is_tiled (partial))
    {
      ps_sharding_free (partial);
      return FALSE;
    }
  PsSharding *na = pp_merge_if_compatible (partial, pp_num_tiles (*auto_s) + 1, *auto_s);
  if (!na)
    {
      ps_sharding_free (partial);
      return FALSE;
    }
  /* Merge into the manual side too, treating the manual dim as a data dim
   * just before the replication dim. */
  int dr = pp_data_rank (partial);
  int64_t pd[PP_MAX_DIMS];
  int np = 0;
  for (int k = 0; k < partial->n_tile_dims; k++)
    {
      if (k == dr)
        pd[np++] = 1;
      pd[np++] = partial->tile_dims[k];
    }
  if (dr == partial->n_tile_dims)
    pd[np++] = 1;
  PsSubgroupKind rep = PS_SUBGROUP_REPLICATED;
  PsSharding *for_manual = ps_sharding_subgroup (np, pd, partial->devices, 1, &rep);
  PsSharding *tmp = ps_sharding_subgroup (man->n_tile_dims, man->tile_dims, man->devices, 1, &rep);
  PsSharding *merged = (for_manual && tmp)
                           ? pp_merge_if_compatible (for_manual, pp_num_tiles (tmp) + 1, tmp)
                           : NULL;
  gboolean ok = FALSE;
  if (merged && pp_is_tiled (merged))
    {
      PsSubgroupKind kinds[2] = { PS_SUBGROUP_MANUAL, PS_SUBGROUP_REPLICATED };
      int nk = pp_has_partial_replication (merged) ? 2 : 1;
      PsSharding *nm = ps_sharding_subgroup (merged->n_tile_dims, merged->tile_dims,
                                             merged->devices, nk, kinds);
      if (nm)
        {
          ps_sharding_free (*manual_s);
          *manual_s = nm;
          ps_sharding_free (*auto_s);
          *auto_s = na;
          na = NULL;
          ok = TRUE;
        }
    }
  if (na)
    ps_sharding_free (na);
  if (merged)
    ps_sharding_free (merged);
  if (for_manual)
    ps_sharding_free (for_manual);
  if (tmp)
    ps_sharding_free (tmp);
  ps_sharding_free (partial);
  return ok;
}

/* XLA's RefineManualAutoShardingFromManual: the same from a sharding with a
 * manual subgroup. */
static gboolean
refine_from_manual (const PsSharding *to_merge, const PsInts *dims, PsSharding **auto_s,
                    PsSharding **manual_s)
{
  const PsSharding *man = *manual_s;
  if (!pp_is_manual_subgroup (to_merge) || !pp_is_manual_subgroup (man)
      || !pp_has_partial_replication (man) || pp_is_manual_subgroup (*auto_s)
      || man->n_subgroups != 2 || pp_is_tuple (*auto_s) || pp_is_manual (*auto_s))
    return FALSE;
  PsSharding *partial = pp_partially_replicate_all_except (to_merge, dims->n, dims->v);
  if (!pp_is_tiled (partial))
    {
      ps_sharding_free (partial);
      return FALSE;
    }
  PsSharding *nm = pp_merge_if_compatible (partial, pp_num_tiles (man) + 1, man);
  if (!nm)
    {
      ps_sharding_free (partial);
      return FALSE;
    }
  PsSubgroupKind kinds[PP_MAX_DIMS];
  for (int k = 0; k < partial->n_subgroups; k++)
    kinds[k] = PS_SUBGROUP_REPLICATED;
  PsSharding *for_auto = ps_sharding_subgroup (partial->n_tile_dims, partial->tile_dims,
                                               partial->devices, partial->n_subgroups, kinds);
  PsSharding *na = for_auto ? pp_merge_if_compatible (for_auto, pp_num_tiles (*auto_s) + 1, *auto_s)
                            : NULL;
  ps_sharding_free (partial);
  if (for_auto)
    ps_sharding_free (for_auto);
  if (!na)
    {
      ps_sharding_free (nm);
      return FALSE;
    }
  ps_sharding_free (*manual_s);
  *manual_s = nm;
  ps_sharding_free (*auto_s);
  *auto_s = na;
  return TRUE;
}

/* The manual conversion right after an annotation with unspecified dims,
 * when it leaves the same dims unspecified. */
static PsInstr *
conversion_after (PsInstr *i, const PsInts *dims, gboolean *usable)
{
  *usable = TRUE;
  if (i->users->len != 1)
    return NULL;
  PsInstr *u = g_ptr_array_index (i->users, 0);
  if (!pp_is_custom_call (u, "SPMDFullToShardShape") && !pp_is_custom_call (u, "SPMDShardToFullShape"))
    return NULL;
  PsInts ud;
  if (!parse_unspecified_dims (u, &ud))
    {
      *usable = FALSE;
      return NULL;
    }
  gboolean same = ud.n == dims->n;
  for (int k = 0; same && k < ud.n; k++)
    same = ud.v[k] == dims->v[k];
  ps_ints_clear (&ud);
  if (!same)
    {
      *usable = FALSE;
      return NULL;
    }
  return u;
}

/* Refines the annotation `i` (and its conversion op) from `from`, a
 * sharding that comes from the operand (forward) or a user (backward). */
static gboolean
refine_annotation (PsInstr *i, PsInstr *conv, const PsSharding *from, const PsInts *dims,
                   gboolean forward)
{
  if (!conv)
    return merge_unspec (i, from, dims);
  if (!i->sharding || !conv->sharding)
    return FALSE;
  gboolean to_manual = pp_is_custom_call (conv, "SPMDFullToShardShape");
  PsSharding *a = ps_sharding_share (to_manual ? i->sharding : conv->sharding);
  PsSharding *mn = ps_sharding_share (to_manual ? conv->sharding : i->sharding);
  /* Forward into a to-manual conversion, or backward out of a to-auto one,
   * `from` is an auto sharding; otherwise it has a manual subgroup. */
  gboolean ok = (forward == to_manual) ? refine_from_auto (from, dims, &a, &mn)
                                       : refine_from_manual (from, dims, &a, &mn);
  if (ok)
    {
      set_sharding (i, to_manual ? a : mn);
      set_sharding (conv, to_manual ? mn : a);
    }
  else
    {
      ps_sharding_free (a);
      ps_sharding_free (mn);
    }
  return ok;
}

static gboolean
unspec_from_operand (PsInstr *i, const PsInts *dims, PsInstr **conv_out)
{
  *conv_out = NULL;
  const PsInstr *op = i->operands[0];
  if (!op->sharding || !pp_is_spatially_partitioned (op->sharding) || !pp_is_tiled (op->sharding))
    return FALSE;
  gboolean usable;
  PsInstr *conv = conversion_after (i, dims, &usable);
  if (!usable)
    return FALSE;
  *conv_out = conv;
  return refine_annotation (i, conv, op->sharding, dims, TRUE);
}

static gboolean
unspec_from_users (PpCtx *c, PsInstr *i, const PsInts *dims, int aggr, PsInstr **conv_out)
{
  *conv_out = NULL;
  gboolean usable;
  PsInstr *conv = conversion_after (i, dims, &usable);
  if (!usable)
    return FALSE;
  *conv_out = conv;
  PsInstr *for_users = conv ? conv : i;
  gboolean changed = FALSE;
  for (guint k = 0; k < for_users->users->len; k++)
    {
      const PsInstr *u = g_ptr_array_index (for_users->users, k);
      if (!u->sharding || !pp_is_tiled (u->sharding))
        continue;
      PsSharding *s = pp_sharding_from_user (c, for_users, u, aggr);
      if (s && pp_is_tiled (s))
        changed |= refine_annotation (i, conv, s, dims, FALSE);
      if (s)
        ps_sharding_free (s);
    }
  return changed;
}

static gboolean
infer_from_group (PpCtx *c, PsInstr *i, int aggr, GPtrArray *group)
{
  if (!pp_can_propagate_at (i, aggr))
    return FALSE;
  if (i->sharding && pp_is_manual (i->sharding))
    return FALSE;
  if (pp_is_custom_call (i, "ShardBarrierTo"))
    return FALSE;
  if (!i->sharding || pp_is_tile_maximal (i->sharding))
    for (guint k = 0; k < group->len; k++)
      {
        PsInstr *mbr = g_ptr_array_index (group, k);
        if (mbr == i || !mbr->sharding || !pp_is_manual (mbr->sharding))
          continue;
        set_sharding (i, ps_sharding_share (mbr->sharding));
        return TRUE;
      }
  gboolean mc = c->is_spmd && aggr > 0;
  gboolean changed = FALSE;
  for (guint k = 0; k < group->len; k++)
    {
      PsInstr *mbr = g_ptr_array_index (group, k);
      if (mbr == i || pp_is_custom_call (mbr, "ShardBarrierFrom") || !mbr->sharding)
        continue;
      changed |= pp_maybe_improve (ps_sharding_share (mbr->sharding), i, mc, FALSE);
    }
  return changed;
}

/* ---- the fixpoint loop -------------------------------------------------- */

typedef struct {
  PpCtx *c;
  Groups *g;
  GPtrArray *comps;
  GHashTable *done_ops, *done_users, *done_group;
  /* Post order of each computation of comps: the loop changes shardings,
   * never the graph, so it is computed once for all passes. */
  GPtrArray **post_orders;
  int64_t budget;       /* passes left before giving up */
  gboolean changed;
} Loop;

static void
clear_cache (Loop *l, PsInstr *i, PsInstr *for_users)
{
  for (int k = 0; k < i->n_operands; k++)
    g_hash_table_remove (l->done_users, i->operands[k]);
  if (!for_users)
    for_users = i;
  for (guint k = 0; k < for_users->users->len; k++)
    {
      PsInstr *u = g_ptr_array_index (for_users->users, k);
      g_hash_table_remove (l->done_ops, u);
      for (int ci = 0; ci < u->n_called; ci++)
        for (guint p = 0; p < u->called[ci]->params->len; p++)
          g_hash_table_remove (l->done_ops, g_ptr_array_index (u->called[ci]->params, p));
    }
  GPtrArray *grp = group_of (l->g, i);
  if (grp)
    for (guint k = 0; k < grp->len; k++)
      if (g_ptr_array_index (grp, k) != i)
        g_hash_table_remove (l->done_group, g_ptr_array_index (grp, k));
}

static void
after_change (Loop *l, PsInstr *i)
{
  GPtrArray *changed = g_ptr_array_new ();
  computation_propagation (l->c, i, changed, 0);
  clear_cache (l, i, NULL);
  for (guint k = 0; k < changed->len; k++)
    clear_cache (l, g_ptr_array_index (changed, k), NULL);
  g_ptr_array_free (changed, TRUE);
}

static gboolean
run_to_fixpoint (Loop *l, int aggr)
{
  PpCtx *c = l->c;
  GPtrArray *comps = l->comps;
  gboolean may_merge = c->is_spmd && aggr > 0;
  l->done_ops = g_hash_table_new (NULL, NULL);
  l->done_users = g_hash_table_new (NULL, NULL);
  l->done_group = g_hash_table_new (NULL, NULL);
  gboolean changed_last = TRUE;
  while (changed_last && l->budget-- > 0)
    {
      changed_last = FALSE;
      for (guint ck = 0; ck < comps->len; ck++)
        {
          GPtrArray *po = l->post_orders[ck];
          /* 1. shard groups */
          for (guint k = 0; k < po->len; k++)
            {
              PsInstr *i = g_ptr_array_index (po, k);
              GPtrArray *grp = group_of (l->g, i);
              if (!grp || g_hash_table_contains (l->done_group, i))
                continue;
              if (g_hash_table_contains (c->provided, i))
                {
                  PsInts *dims = g_hash_table_lookup (c->unspec, i);
                  if (!may_merge || !dims)
                    continue;
                  gboolean ch = FALSE;
                  if (!pp_is_custom_call (i, "ShardBarrierTo"))
                    for (guint x = 0; x < grp->len; x++)
                      {
                        PsInstr *mbr = g_ptr_array_index (grp, x);
                        if (mbr != i && !pp_is_custom_call (mbr, "ShardBarrierFrom"))
                          ch |= merge_unspec (i, mbr->sharding, dims);
                      }
                  if (ch)
                    {
                      clear_cache (l, i, NULL);
                      g_hash_table_add (l->done_group, i);
                      changed_last = TRUE;
                    }
                  continue;
                }
              g_hash_table_add (l->done_group, i);
              if (infer_from_group (c, i, aggr, grp))
                {
                  l->changed = TRUE;
                  after_change (l, i);
                  changed_last = TRUE;
                }
            }
          /* 2. forward */
          for (guint k = 0; k < po->len; k++)
            {
              PsInstr *i = g_ptr_array_index (po, k);
              if (g_hash_table_contains (l->done_ops, i))
                continue;
              if (g_hash_table_contains (c->provided, i))
                {
                  PsInts *dims = g_hash_table_lookup (c->unspec, i);
                  if (!may_merge || !dims)
                    continue;
                  PsInstr *conv = NULL;
                  if (unspec_from_operand (i, dims, &conv))
                    {
                      clear_cache (l, i, conv);
                      g_hash_table_add (l->done_ops, i);
                      changed_last = TRUE;
                    }
                  continue;
                }
              g_hash_table_add (l->done_ops, i);
              if (pp_infer_from_operands (c, i, aggr))
                {
                  l->changed = TRUE;
                  after_change (l, i);
                  changed_last = TRUE;
                }
            }
          /* 3. backward */
          for (int k = (int) po->len - 1; k >= 0; k--)
            {
              PsInstr *i = g_ptr_array_index (po, k);
              if ((pp_is_custom_call (i, "SPMDFullToShardShape")
                   || pp_is_custom_call (i, "SPMDShardToFullShape"))
                  && !g_hash_table_contains (l->done_users, i))
                g_hash_table_remove (l->done_users, i->operands[0]);
              if (g_hash_table_contains (l->done_users, i))
                continue;
              if (g_hash_table_contains (c->provided, i))
                {
                  PsInts *dims = g_hash_table_lookup (c->unspec, i);
                  if (!may_merge || !dims)
                    continue;
                  PsInstr *conv = NULL;
                  if (unspec_from_users (c, i, dims, aggr, &conv))
                    {
                      clear_cache (l, i, conv);
                      g_hash_table_add (l->done_users, i);
                      if (conv)
                        g_hash_table_add (l->done_users, conv);
                      changed_last = TRUE;
                    }
                  continue;
                }
              g_hash_table_add (l->done_users, i);
              if (pp_infer_from_users (c, i, aggr))
                {
                  l->changed = TRUE;
                  after_change (l, i);
                  changed_last = TRUE;
                }
            }
        }
    }
  g_hash_table_destroy (l->done_ops);
  g_hash_table_destroy (l->done_users);
  g_hash_table_destroy (l->done_group);
  return TRUE;
}

/* ---- output and parameter restrictions ---------------------------------- */

static gboolean
evenly_partitions (const PsShape *shape, const PsSharding *s)
{
  if (!s)
    return TRUE;
  if (pp_is_tuple (s))
    {
      GPtrArray *leaves = ps_shape_leaves (shape);
      gboolean ok = TRUE;
      for (guint k = 0; k < leaves->len && (int) k < s->n_elems; k++)
        ok &= evenly_partitions (g_ptr_array_index (leaves, k), s->elems[k]);
      g_ptr_array_free (leaves, TRUE);
      return ok;
    }
  if (s->kind == PS_SHARDING_MAXIMAL)
    return FALSE;
  if (!pp_is_tiled (s))
    return TRUE;
  for (int k = 0; k < shape->rank && k < pp_data_rank (s); k++)
    if (shape->dims[k] % s->tile_dims[k] != 0)
      return FALSE;
  return TRUE;
}

static void
restrict_outputs (PpCtx *c, const PsPropagateOptions *o, GPtrArray *saved_root,
                  GHashTable *saved_params)
{
  PsComputation *e = c->m->entry;
  PsInstr *root = e->root;
  if (root && root->sharding && saved_root && (int) saved_root->len == o->n_to_output
      && pp_is_tuple (root->sharding))
    {
      for (guint k = 0; k < saved_root->len; k++)
        {
          PsSharding *s = g_ptr_array_index (saved_root, k);
          if (!o->to_output[k] && s && s->kind != PS_SHARDING_UNKNOWN && (int) k < root->sharding->n_elems)
            {
              ps_sharding_free (root->sharding->elems[k]);
              root->sharding->elems[k] = ps_sharding_share (s);
            }
        }
    }
  int np = (int) e->params->len;
  if (c->to_params)
    {
      if (o->n_to_parameters == np)
        {
          for (int k = 0; k < np; k++)
            if (!o->to_parameters[k])
              {
                PsInstr *p = g_ptr_array_index (e->params, k);
                PsSharding *s = g_hash_table_lookup (saved_params, p);
                set_sharding (p, s && s->kind != PS_SHARDING_UNKNOWN ? ps_sharding_share (s) : NULL);
              }
        }
      else if (np == 1)
        {
          PsInstr *p = g_ptr_array_index (e->params, 0);
          PsSharding *s = g_hash_table_lookup (saved_params, p);
          if (s && p->sharding && pp_is_tuple (p->sharding) && ps_shape_is_tuple (p->shape)
              && p->shape->n_elems == o->n_to_parameters)
            for (int k = 0; k < o->n_to_parameters; k++)
              {
                if (o->to_parameters[k])
                  continue;
                PsSharding *sub = pp_sub_sharding (s, p->shape, k);
                if (sub && sub->kind != PS_SHARDING_UNKNOWN)
                  {
                    int first, count;
                    pp_tuple_leaf_range (p->shape, k, &first, &count);
                    PsSharding *subn = pp_normalize_tuple (sub, p->shape->elems[k]);
                    for (int j = 0; j < count && first + j < p->sharding->n_elems; j++)
                      {
                        ps_sharding_free (p->sharding->elems[first + j]);
                        p->sharding->elems[first + j] =
                            ps_sharding_share (pp_is_tuple (subn) ? subn->elems[j] : subn);
                      }
                    ps_sharding_free (subn);
                  }
                if (sub)
                  ps_sharding_free (sub);
              }
        }
    }
  /* Entry outputs and parameters must split evenly; otherwise replicate. */
  if (c->to_output && root && root->sharding)
    {
      if (ps_shape_is_tuple (root->shape) && o->n_to_output == root->shape->n_elems)
        {
          PsSharding *rs = pp_normalize_tuple (root->sharding, root->shape);
          for (int k = 0; k < root->shape->n_elems; k++)
            {
              PsSharding *sub = pp_sub_sharding (rs, root->shape, k);
              if (o->to_output[k] && !evenly_partitions (root->shape->elems[k], sub))
                {
                  int first, count;
                  pp_tuple_leaf_range (root->shape, k, &first, &count);
                  for (int j = 0; j < count && first + j < rs->n_elems; j++)
                    {
                      ps_sharding_free (rs->elems[first + j]);
                      rs->elems[first + j] = ps_sharding_replicated ();
                    }
                }
              if (sub)
                ps_sharding_free (sub);
            }
          set_sharding (root, rs);
        }
      else if (!ps_shape_is_tuple (root->shape) && !evenly_partitions (root->shape, root->sharding))
        set_sharding (root, ps_sharding_replicated ());
    }
  if (c->to_params)
    {
      if (o->n_to_parameters == np)
        {
          for (int k = 0; k < np; k++)
            {
              PsInstr *p = g_ptr_array_index (e->params, k);
              if (p->sharding && o->to_parameters[k] && !evenly_partitions (p->shape, p->sharding))
                set_sharding (p, pp_normalize_tuple_take (ps_sharding_replicated (), p->shape));
            }
        }
      else if (np == 1)
        {
          PsInstr *p = g_ptr_array_index (e->params, 0);
          if (p->sharding && pp_is_tuple (p->sharding) && ps_shape_is_tuple (p->shape)
              && p->shape->n_elems == o->n_to_parameters)
            for (int k = 0; k < o->n_to_parameters; k++)
              {
                PsSharding *sub = pp_sub_sharding (p->sharding, p->shape, k);
                if (o->to_parameters[k] && !evenly_partitions (p->shape->elems[k], sub))
                  {
                    int first, count;
                    pp_tuple_leaf_range (p->shape, k, &first, &count);
                    for (int j = 0; j < count && first + j < p->sharding->n_elems; j++)
                      {
                        ps_sharding_free (p->sharding->elems[first + j]);
                        p->sharding->elems[first + j] = ps_sharding_replicated ();
                      }
                  }
                if (sub)
                  ps_sharding_free (sub);
              }
        }
    }
}

/* ---- the pass ----------------------------------------------------------- */

static void
free_ptr_array (gpointer p)
{
  g_ptr_array_free (p, TRUE);
}

static void
remove_barriers (GPtrArray *comps, Groups *g)
{
  for (guint ck = 0; ck < comps->len; ck++)
    {
      PsComputation *c = g_ptr_array_index (comps, ck);
      GPtrArray *list = g_ptr_array_new ();
      for (guint k = 0; k < c->instrs->len; k++)
        {
          PsInstr *i = g_ptr_array_index (c->instrs, k);
          if (pp_is_custom_call (i, "ShardBarrierFrom") || pp_is_custom_call (i, "ShardBarrierTo"))
            g_ptr_array_add (list, i);
        }
      for (guint k = 0; k < list->len; k++)
        {
          PsInstr *i = g_ptr_array_index (list, k);
          if (i->n_operands != 1)
            continue;
          PsInstr *op = i->operands[0];
          GPtrArray *grp = group_of (g, i);
          gpointer v = g_hash_table_lookup (g->instr_group, i);
          gint64 id = v ? GPOINTER_TO_INT (v) - 1 : -1;
          if (pp_is_custom_call (i, "ShardBarrierFrom") && grp && i->sharding && op->sharding
              && g_hash_table_lookup (g->as_groups, &id) && !pp_is_tuple (i->sharding))
            {
              PsSharding *mrg = pp_merge_if_compatible (op->sharding, pp_num_tiles (i->sharding),
                                                        i->sharding);
              set_sharding (op, mrg ? mrg : ps_sharding_share (i->sharding));
            }
          g_hash_table_remove (g->instr_group, i);
          if (grp)
            g_ptr_array_remove (grp, i);
          ps_instr_replace_all_uses (i, op);
          ps_computation_remove_instr (c, i);
        }
      g_ptr_array_free (list, TRUE);
    }
}

gboolean
ps_propagate (PsModule *m, const PsPropagateOptions *opts, GError **error)
{
  return ps_propagate_full (m, opts, NULL, error);
}

/* ---- the driver, phase by phase ------------------------------------------ */

/* CSE-prevention shardings: with cse_prevention_only, remember every
 * sharding so that only those can be removed at the end; otherwise drop
 * them now. TRUE when something changed. */
static gboolean
prepare_cse_prevention (GPtrArray *comps, gboolean only, GHashTable **original)
{
  gboolean changed = FALSE;
  if (only)
    {
      *original = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) ps_sharding_free);
      FOR_EACH_INSTR (comps, c, i)
        if (i->sharding)
          g_hash_table_insert (*original, i, ps_sharding_share (i->sharding));
    }
  else
    FOR_EACH_INSTR (comps, c, i)
      if (is_cse_prevention (i->sharding))
        {
          set_sharding (i, NULL);
          changed = TRUE;
        }
  return changed;
}

/* The entry root's (per tuple element) and parameters' shardings as given,
 * for restrict_outputs when propagation may refine them. */
static void
save_entry_shardings (const PpCtx *ctx, PsComputation *entry, GPtrArray **saved_root,
                      GHashTable *saved_params)
{
  if (ctx->to_output && entry->root->sharding && ps_shape_is_tuple (entry->root->shape))
    {
      *saved_root = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_sharding_free);
      PsSharding *rs = pp_normalize_tuple (entry->root->sharding, entry->root->shape);
      for (int k = 0; k < entry->root->shape->n_elems; k++)
        g_ptr_array_add (*saved_root, pp_sub_sharding (rs, entry->root->shape, k));
      ps_sharding_free (rs);
    }
  if (ctx->to_params)
    for (guint k = 0; k < entry->params->len; k++)
      {
        PsInstr *p = g_ptr_array_index (entry->params, k);
        if (p->sharding)
          g_hash_table_insert (saved_params, p, ps_sharding_share (p->sharding));
      }
}

/* While, conditional and call: their related instructions (operands,
 * parameters and roots of the called computations) start from one of
 * them that has a sharding, and the called computations map back to the
 * caller. */
static void
link_called_computations (PpCtx *ctx, GPtrArray *comps)
{
  FOR_EACH_INSTR (comps, c, i)
    {
      if (i->opcode != PS_OP_WHILE && i->opcode != PS_OP_CONDITIONAL && i->opcode != PS_OP_CALL
          && i->opcode != PS_OP_FUSION)
        continue;
      GPtrArray *rel = related_instructions (ctx, i);
      PsInstr *sharded = NULL;
      for (guint k = 0; k < rel->len && !sharded; k++)
        if (((PsInstr *) g_ptr_array_index (rel, k))->sharding)
          sharded = g_ptr_array_index (rel, k);
      if (sharded)
        {
          PsSharding *s = ps_sharding_share (sharded->sharding);
          for (guint k = 0; k < rel->len; k++)
            {
              PsInstr *x = g_ptr_array_index (rel, k);
              if (x != sharded)
                set_sharding (x, pp_normalize_tuple (s, x->shape));
            }
          ps_sharding_free (s);
        }
      g_ptr_array_free (rel, TRUE);
      for (int k = 0; k < i->n_called; k++)
        g_hash_table_insert (ctx->comp_map, i->called[k], i);
    }
}

/* The shardings the pass may not change: those the user wrote (but
 * "unknown"), the entry root's and parameters' unless propagation may
 * refine them. A while at the root gets a copy after it, so that the loop
 * itself stays free. Then "unknown" shardings start replicated. TRUE when
 * the program changed. */
static gboolean
mark_provided (PpCtx *ctx, GPtrArray *comps, PsComputation *entry)
{
  gboolean changed = FALSE;
  FOR_EACH_INSTR (comps, c, i)
    if (i->sharding && i != entry->root && i->opcode != PS_OP_PARAMETER
        && i->sharding->kind != PS_SHARDING_UNKNOWN)
      g_hash_table_add (ctx->provided, i);
  if (!ctx->to_output
      && (!entry->root->sharding || entry->root->sharding->kind != PS_SHARDING_UNKNOWN))
    {
      PsInstr *root = entry->root;
      if (root->opcode == PS_OP_WHILE)
        {
          PsInstr *copy = ps_computation_add_instr (entry, PS_OP_COPY, NULL,
                                                    ps_shape_copy (root->shape), 1, &root);
          if (root->sharding)
            copy->sharding = ps_sharding_share (root->sharding);
          entry->root = copy;
          root = copy;
          changed = TRUE;
        }
      g_hash_table_add (ctx->provided, root);
    }
  if (!ctx->to_params)
    for (guint k = 0; k < entry->params->len; k++)
      {
        PsInstr *p = g_ptr_array_index (entry->params, k);
        if (p->sharding && p->sharding->kind != PS_SHARDING_UNKNOWN)
          g_hash_table_add (ctx->provided, p);
      }
  FOR_EACH_INSTR (comps, c, i)
    if (i->sharding && i->sharding->kind == PS_SHARDING_UNKNOWN)
      set_sharding (i, pp_replicated_like (i->sharding));
  return changed;
}

/* shard_as members end up with one sharding: their common one, defaulting
 * to the first non-replicated member that is not a ShardBarrierFrom. */
static void
unify_shard_as_groups (Groups *g)
{
  for (guint k = 0; k < g->ids->len; k++)
    {
      int64_t id = g_array_index (g->ids, int64_t, k);
      GPtrArray *grp = g_hash_table_lookup (g->as_groups, &id);
      if (!grp || grp->len == 0)
        continue;
      PsSharding *dflt = NULL;
      GPtrArray *sh = g_ptr_array_new ();
      for (guint x = 0; x < grp->len; x++)
        {
          PsInstr *mbr = g_ptr_array_index (grp, x);
          if (!mbr->sharding)
            continue;
          g_ptr_array_add (sh, mbr->sharding);
          if (!pp_is_custom_call (mbr, "ShardBarrierFrom") && !dflt && !pp_is_replicated (mbr->sharding))
            dflt = mbr->sharding;
        }
      PsSharding *common;
      PsSharding *rep = ps_sharding_replicated ();
      gboolean all_plain = TRUE;
      for (guint x = 0; x < sh->len; x++)
        all_plain &= !pp_is_tuple (g_ptr_array_index (sh, x)) && !pp_is_manual (g_ptr_array_index (sh, x));
      if (sh->len == 0)
        common = ps_sharding_share (dflt ? dflt : rep);
      else if (all_plain)
        common = pp_find_common ((int) sh->len, (PsSharding **) sh->pdata, dflt ? dflt : rep);
      else
        common = ps_sharding_share (dflt ? dflt : g_ptr_array_index (sh, 0));
      ps_sharding_free (rep);
      g_ptr_array_free (sh, TRUE);
      for (guint x = 0; x < grp->len; x++)
        {
          PsInstr *mbr = g_ptr_array_index (grp, x);
          if (pp_is_custom_call (mbr, "ShardBarrierTo"))
            continue;
          set_sharding (mbr, pp_normalize_tuple (common, mbr->shape));
        }
      ps_sharding_free (common);
    }
}

/* A ShardBarrierFrom of a shard_as group passes its sharding back to its
 * operand (merged with what the operand has when compatible). */
static void
push_back_through_barriers (GPtrArray *comps, Groups *g)
{
  FOR_EACH_INSTR (comps, c, i)
    {
      if (!pp_is_custom_call (i, "ShardBarrierFrom") || !i->sharding || !i->operands[0]->sharding)
        continue;
      gpointer v = g_hash_table_lookup (g->instr_group, i);
      gint64 id = v ? GPOINTER_TO_INT (v) - 1 : -1;
      if (!v || !g_hash_table_lookup (g->as_groups, &id) || pp_is_tuple (i->sharding))
        continue;
      PsSharding *mrg = pp_merge_if_compatible (i->operands[0]->sharding, pp_num_tiles (i->sharding),
                                                i->sharding);
      set_sharding (i->operands[0], mrg ? mrg : ps_sharding_share (i->sharding));
    }
}

/* The passes proper: to a fixpoint at each aggressiveness 0 .. 3, then
 * shard_as groups settle and barriers push back, and one more run at the
 * highest aggressiveness. TRUE when something changed; *iterations gets
 * the passes made. */
static gboolean
propagate_to_fixpoint (PpCtx *ctx, Groups *g, GPtrArray *comps, int max_iterations, int *iterations)
{
  Loop loop = { 0 };
  loop.c = ctx;
  loop.g = g;
  loop.comps = comps;
  loop.post_orders = g_new0 (GPtrArray *, comps->len + 1);
  for (guint k = 0; k < comps->len; k++)
    loop.post_orders[k] = ps_computation_post_order (g_ptr_array_index (comps, k));
  int per = max_iterations > 0 ? max_iterations : 100;
  loop.budget = per;
  for (int aggr = 0; aggr < 4; aggr++)
    run_to_fixpoint (&loop, aggr);
  unify_shard_as_groups (g);
  push_back_through_barriers (comps, g);
  loop.budget += per;
  run_to_fixpoint (&loop, 3);
  for (guint k = 0; k < comps->len; k++)
    g_ptr_array_free (loop.post_orders[k], TRUE);
  g_free (loop.post_orders);
  *iterations = per * 2 - (int) loop.budget;
  return loop.changed;
}

/* cse_prevention_only: every sharding goes back to what it was, but
 * broadcasts of scalars, which keep theirs marked as CSE prevention. */
static void
restore_cse_prevention (GPtrArray *comps, GHashTable *original)
{
  FOR_EACH_INSTR (comps, c, i)
    {
      if (!i->sharding)
        continue;
      gboolean target = i->opcode == PS_OP_BROADCAST && i->n_operands == 1
                        && ps_shape_is_array (i->operands[0]->shape) && i->operands[0]->shape->rank == 0;
      PsSharding *orig = g_hash_table_lookup (original, i);
      if (target)
        {
          if (!orig)
            pp_set_metadata_text (i->sharding, "{op_name=\"_sharding_propagation_cse_prevention\"}");
          continue;
        }
      set_sharding (i, orig ? ps_sharding_share (orig) : NULL);
    }
}

gboolean
ps_propagate_full (PsModule *m, const PsPropagateOptions *opts, PsPropagateStats *stats,
                   GError **error)
{
  g_return_val_if_fail (m != NULL, FALSE);
  PsPropagateOptions defaults;
  if (!opts)
    {
      ps_propagate_options_init (&defaults);
      opts = &defaults;
    }
  if (stats)
    memset (stats, 0, sizeof *stats);
  if (!m->entry || !m->entry->root)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID, "module %s has no entry computation",
                   m->name ? m->name : "");
      return FALSE;
    }
  PpCtx ctx = { 0 };
  ctx.m = m;
  ctx.is_spmd = opts->is_spmd;
  ctx.to_output = any_true (opts->n_to_output, opts->to_output);
  ctx.to_params = any_true (opts->n_to_parameters, opts->to_parameters);
  ctx.comp_map = g_hash_table_new (NULL, NULL);
  ctx.provided = g_hash_table_new (NULL, NULL);
  ctx.unspec = g_hash_table_new_full (NULL, NULL, NULL, ints_free);
  ctx.threads = opts->execution_threads;
  ctx.dot_memo = pp_dot_memo_new ();
  const char *src = opts->source_name ? opts->source_name
                    : m->source_name ? m->source_name : (m->name ? m->name : "<module>");
  GPtrArray *comps = g_ptr_array_new ();
  for (guint k = 0; k < m->computations->len; k++)
    {
      PsComputation *comp = g_ptr_array_index (m->computations, k);
      if (pp_thread_included (&ctx, comp->execution_thread))
        g_ptr_array_add (comps, comp);
    }
  Groups g;
  g.instr_group = g_hash_table_new (NULL, NULL);
  g.ids = g_array_new (FALSE, FALSE, sizeof (int64_t));
  g.as_groups = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, free_ptr_array);
  g.like_groups = g_hash_table_new_full (g_int64_hash, g_int64_equal, g_free, free_ptr_array);
  GHashTable *original = NULL;
  GPtrArray *saved_root = NULL;
  GHashTable *saved_params = g_hash_table_new_full (NULL, NULL, NULL, (GDestroyNotify) ps_sharding_free);
  gboolean ok = FALSE;
  PsComputation *entry = m->entry;

  gboolean changed = prepare_cse_prevention (comps, opts->cse_prevention_only, &original);
  if (opts->propagate_metadata)
    assign_metadata (comps);
  else
    remove_metadata (comps);
  if (!process_sharding_instructions (m, src, comps, !opts->cse_prevention_only, ctx.unspec, &g, error))
    goto out;
  save_entry_shardings (&ctx, entry, &saved_root, saved_params);
  FOR_EACH_INSTR (comps, c, i)
    if (i->opcode == PS_OP_WHILE && !check_while_devices (i, src, error))
      goto out;
  link_called_computations (&ctx, comps);
  changed |= mark_provided (&ctx, comps, entry);
  int iterations = 0;
  changed |= propagate_to_fixpoint (&ctx, &g, comps, opts->max_iterations, &iterations);
  remove_barriers (comps, &g);
  if (opts->cse_prevention_only)
    restore_cse_prevention (comps, original);
  restrict_outputs (&ctx, opts, saved_root, saved_params);
  if (stats)
    {
      stats->iterations = iterations;
      stats->changed = changed;
    }
  ok = TRUE;

out:
  if (original)
    g_hash_table_destroy (original);
  if (saved_root)
    g_ptr_array_free (saved_root, TRUE);
  g_hash_table_destroy (saved_params);
  g_hash_table_destroy (ctx.comp_map);
  g_hash_table_destroy (ctx.provided);
  g_hash_table_destroy (ctx.unspec);
  pp_dot_memo_free (ctx.dot_memo);
  g_hash_table_destroy (g.instr_group);
  g_array_free (g.ids, TRUE);
  g_hash_table_destroy (g.as_groups);
  g_hash_table_destroy (g.like_groups);
  g_ptr_array_free (comps, TRUE);
  return ok;
}
