/* podsim autoshard's search: driver/autoshard.h says what and why. */
#include "driver/autoshard.h"

#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "driver/driver.h"
#include "driver/pool.h"
#include "driver/study.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/ir/ir.h"

static void
candidate_free (gpointer data)
{
  PsAutoshardCandidate *c = data;
  g_free (c->shard);
  g_free (c->why);
  g_free (c);
}

void
ps_autoshard_result_free (PsAutoshardResult *r)
{
  if (!r)
    return;
  if (r->ranked)
    g_ptr_array_unref (r->ranked);
  g_free (r);
}

static char *
map_text (int rank, const int64_t *map)
{
  GString *s = g_string_new ("[");
  for (int d = 0; d < rank; d++)
    g_string_append_printf (s, "%s%" G_GINT64_FORMAT, d ? "," : "", map[d]);
  g_string_append_c (s, ']');
  return g_string_free (s, FALSE);
}

char **
ps_autoshard_candidates (int rank, const int64_t *dims, int mesh_rank, const int64_t *mesh)
{
  GPtrArray *out = g_ptr_array_new ();
  int64_t map[PS_MAX_RANK];
  if (rank > PS_MAX_RANK)
    rank = PS_MAX_RANK;
  for (int d = 0; d < PS_MAX_RANK; d++)
    map[d] = -1;
  g_ptr_array_add (out, map_text (rank, map));
  /* One dimension over one axis (an axis of size 1 splits nothing). */
  for (int d = 0; d < rank; d++)
    for (int a = 0; a < mesh_rank; a++)
      if (mesh[a] > 1 && dims[d] % mesh[a] == 0)
        {
          map[d] = a;
          g_ptr_array_add (out, map_text (rank, map));
          map[d] = -1;
        }
  /* Two dimensions over two axes, each pair of axes in both orders. */
  for (int d0 = 0; d0 < rank; d0++)
    for (int d1 = 0; d1 < rank; d1++)
      for (int a0 = 0; a0 < mesh_rank; a0++)
        for (int a1 = 0; a1 < mesh_rank; a1++)
          if (d0 != d1 && a0 < a1 && mesh[a0] > 1 && mesh[a1] > 1 && dims[d0] % mesh[a0] == 0
              && dims[d1] % mesh[a1] == 0)
            {
              map[d0] = a0;
              map[d1] = a1;
              g_ptr_array_add (out, map_text (rank, map));
              map[d0] = map[d1] = -1;
            }
  g_ptr_array_add (out, NULL);
  return (char **) g_ptr_array_free (out, FALSE);
}

typedef struct {
  const PsParams *p;
  const PsAutoshardOptions *o;
  GHashTable *seen;        /* shard text -> PsAutoshardCandidate (owned by all) */
  GPtrArray *all;
  int n_params;
  char **names;
  char ***cands;
  int *n_cands;
  char **base_argv;        /* the run's options after "run" */
  int64_t space;
} Search;

static char *
shard_text (const Search *s, const int *choice)
{
  GString *t = g_string_new ("");
  for (int i = 0; i < s->n_params; i++)
    if (choice[i] != 0)   /* 0 is replicated: left to propagation */
      g_string_append_printf (t, "%s%s=%s", t->len ? ";" : "", s->names[i], s->cands[i][choice[i]]);
  return g_string_free (t, FALSE);
}

static gboolean
better (const PsAutoshardCandidate *a, const PsAutoshardCandidate *b)
{
  if (a->ok != b->ok)
    return a->ok;
  if (!a->ok)
    return FALSE;
  if (a->step_time_s != b->step_time_s)
    return a->step_time_s < b->step_time_s;
  /* Equal steps: the lower peak, then the shorter text (fewer annotations). */
  if (a->peak_hbm_bytes != b->peak_hbm_bytes)
    return a->peak_hbm_bytes < b->peak_hbm_bytes;
  return strcmp (a->shard, b->shard) < 0;
}

/* The full pipeline for a batch of combinations, each a child `podsim run
 * FILE ... --shard ... --json` (SimGrid runs one engine per process: the
 * pool of driver/pool.h), memoized by annotation text. */
static void
on_done (const PsPoolResult *pr, gpointer user)
{
  GPtrArray *batch = user;
  PsAutoshardCandidate *c = batch->pdata[pr->index];
  g_autoptr (PsStudyRow) row = ps_study_row_from_result (pr, pr->index);
  c->ok = row->ran && row->fits && !row->error;
  c->step_time_s = row->step_time_s;
  c->peak_hbm_bytes = (guint64) row->peak_hbm_bytes;
  if (!c->ok)
    c->why = g_strdup (row->error ? row->error : "did not run");
}

static gboolean
evaluate_batch (Search *s, GPtrArray *choices, GError **error)
{
  g_autoptr (GPtrArray) batch = g_ptr_array_new ();
  g_autoptr (PsPool) pool = ps_pool_new (s->o->jobs, on_done, NULL, batch);
  for (guint j = 0; j < choices->len; j++)
    {
      g_autofree char *text = shard_text (s, choices->pdata[j]);
      if (g_hash_table_contains (s->seen, text))
        continue;
      PsAutoshardCandidate *c = g_new0 (PsAutoshardCandidate, 1);
      c->shard = g_strdup (text);
      g_hash_table_insert (s->seen, c->shard, c);
      g_ptr_array_add (s->all, c);
      g_ptr_array_add (batch, c);
      g_autoptr (GPtrArray) argv = g_ptr_array_new ();
      g_ptr_array_add (argv, (gpointer) "/proc/self/exe");
      g_ptr_array_add (argv, (gpointer) "run");
      for (int i = 0; s->base_argv[i]; i++)
        g_ptr_array_add (argv, s->base_argv[i]);
      g_autofree char *shard = g_strdup_printf ("--shard=%s", text);
      if (*text)
        g_ptr_array_add (argv, shard);
      g_ptr_array_add (argv, (gpointer) "--json");
      g_ptr_array_add (argv, (gpointer) "-q");
      g_ptr_array_add (argv, NULL);
      ps_pool_add (pool, (const char *const *) argv->pdata);
    }
  if (batch->len == 0)
    return TRUE;
  if (!ps_pool_run (pool, error))
    return FALSE;
  if (s->o->progress)
    {
      const PsAutoshardCandidate *b = NULL;
      for (guint i = 0; i < s->all->len; i++)
        if (!b || better (s->all->pdata[i], b))
          b = s->all->pdata[i];
      g_autofree char *space = s->space == G_MAXINT64 ? g_strdup ("over 9e18")
                                                      : g_strdup_printf ("%" G_GINT64_FORMAT, s->space);
      fprintf (stderr, "autoshard: %u of %s combinations run; best so far %s%s\n", s->all->len, space, b && b->ok ? "" : "(none fits) ", b && *b->shard ? b->shard : "(no annotation)");
    }
  return TRUE;
}

static gint
rank_cmp (gconstpointer x, gconstpointer y)
{
  const PsAutoshardCandidate *a = *(PsAutoshardCandidate *const *) x, *b = *(PsAutoshardCandidate *const *) y;
  return better (a, b) ? -1 : better (b, a) ? 1 : 0;
}

PsAutoshardResult *
ps_autoshard_search (const PsParams *p, char **run_argv, const PsAutoshardOptions *o, GError **error)
{
  PsAutoshardOptions defaults = { 0 };
  if (!o)
    o = &defaults;
  int64_t max_exhaustive = o->max_exhaustive > 0 ? o->max_exhaustive : 256;
  int max_passes = o->max_passes > 0 ? o->max_passes : 4;
  g_autoptr (PsModule) m = ps_hlo_parse_file (ps_params_str (p, "file"), error);
  if (!m)
    return NULL;
  int64_t mesh[PS_MAX_RANK];
  int mesh_rank = ps_params_mesh (p, "mesh", mesh);
  if (mesh_rank < 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--mesh: autoshard needs a mesh (AxB) to split over");
      return NULL;
    }
  Search s = { p, o, g_hash_table_new (g_str_hash, g_str_equal),
               g_ptr_array_new_with_free_func (candidate_free), 0, NULL, NULL, NULL, run_argv, 0 };
  GPtrArray *params = m->entry->params;
  s.names = g_new0 (char *, params->len + 1);
  s.cands = g_new0 (char **, params->len + 1);
  s.n_cands = g_new0 (int, params->len + 1);
  int64_t space = 1;
  for (guint i = 0; i < params->len; i++)
    {
      PsInstr *x = params->pdata[i];
      if (ps_shape_is_tuple (x->shape) || x->shape->rank == 0)
        continue;
      char **c = ps_autoshard_candidates (x->shape->rank, x->shape->dims, mesh_rank, mesh);
      int n = (int) g_strv_length (c);
      if (n < 2)
        {
          g_strfreev (c);
          continue;
        }
      s.names[s.n_params] = x->name;
      s.cands[s.n_params] = c;
      s.n_cands[s.n_params] = n;
      s.n_params++;
      space = space > G_MAXINT64 / n ? G_MAXINT64 : space * n;
    }
  PsAutoshardResult *r = g_new0 (PsAutoshardResult, 1);
  r->n_params = s.n_params;
  r->space = space;
  r->exhaustive = space <= max_exhaustive;
  s.space = space;
  gboolean ok = TRUE;
  g_autofree int *choice = g_new0 (int, s.n_params + 1);
  if (r->exhaustive)
    {
      /* Every combination, in odometer order, as one batch. */
      g_autoptr (GPtrArray) all = g_ptr_array_new_with_free_func (g_free);
      for (;;)
        {
          g_ptr_array_add (all, g_memdup2 (choice, sizeof (int) * (s.n_params + 1)));
          int i = 0;
          while (i < s.n_params && ++choice[i] == s.n_cands[i])
            choice[i++] = 0;
          if (i == s.n_params)
            break;
        }
      ok = evaluate_batch (&s, all, error);
    }
  else
    {
      /* One parameter at a time: its candidates (the others held) are one
       * batch; keep the best, until a pass changes nothing. */
      PsAutoshardCandidate *best = NULL;
      for (int pass = 0; ok && pass < max_passes; pass++)
        {
          gboolean changed = FALSE;
          for (int i = 0; ok && i < s.n_params; i++)
            {
              g_autoptr (GPtrArray) batch = g_ptr_array_new_with_free_func (g_free);
              for (int k = 0; k < s.n_cands[i]; k++)
                {
                  int *c = g_memdup2 (choice, sizeof (int) * (s.n_params + 1));
                  c[i] = k;
                  g_ptr_array_add (batch, c);
                }
              if (!(ok = evaluate_batch (&s, batch, error)))
                break;
              for (int k = 0; k < s.n_cands[i]; k++)
                {
                  g_autofree char *text = shard_text (&s, batch->pdata[k]);
                  PsAutoshardCandidate *c = g_hash_table_lookup (s.seen, text);
                  if (!best || better (c, best))
                    {
                      changed = changed || (best != NULL && k != choice[i]);
                      best = c;
                      choice[i] = k;
                    }
                }
            }
          if (!changed)
            break;
        }
    }
  r->n_evaluated = (int) s.all->len;
  g_ptr_array_sort (s.all, rank_cmp);
  r->ranked = s.all;
  g_hash_table_unref (s.seen);
  for (int i = 0; i < s.n_params; i++)
    g_strfreev (s.cands[i]);
  g_free (s.cands);
  g_free (s.names);   /* the names were the module's */
  g_free (s.n_cands);
  if (!ok)
    {
      ps_autoshard_result_free (r);
      return NULL;
    }
  return r;
}
