/* podsim autoshard's search: driver/autoshard.h says what and why. */
#include "driver/autoshard.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "driver/autoshard_dp.h"
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
  g_free (c->est_why);
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
  int **maps;              /* per parameter: its candidates' dims mappings, rank ints each */
  const PsShape **shapes;
  gboolean *internal;      /* per tensor: not an entry parameter */
  int *use_at;             /* per tensor: where the layer structure first uses it (the DP's chain order) */
  char **base_argv;        /* the run's options after "run" */
  int64_t space;
  PsAutoshardCost *cost;
  int n_full;
  double total_bytes;      /* of every searched tensor */
  gint64 deadline_us;      /* monotonic time the local search stops at (0: none) */
  gboolean stopped;        /* it did */
} Search;

static gboolean
over_budget (Search *s)
{
  if (s->deadline_us > 0 && g_get_monotonic_time () >= s->deadline_us)
    s->stopped = TRUE;
  return s->stopped;
}

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
  if (a->full != b->full)
    return a->full;
  if (!a->full)
    return FALSE;
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

/* The cheap cost's order: those that fit by step, then those that do not
 * by peak (the search walks towards fitting), then the failures. */
static gboolean
better_est (const PsAutoshardCandidate *a, const PsAutoshardCandidate *b)
{
  if (a->est_ran != b->est_ran)
    return a->est_ran;
  if (!a->est_ran)
    return FALSE;
  if (a->est_fits != b->est_fits)
    return a->est_fits;
  if (a->est_fits && a->est_step_s != b->est_step_s)
    return a->est_step_s < b->est_step_s;
  if (a->est_peak_hbm_bytes != b->est_peak_hbm_bytes)
    return a->est_peak_hbm_bytes < b->est_peak_hbm_bytes;
  return strlen (a->shard) != strlen (b->shard) ? strlen (a->shard) < strlen (b->shard)
                                                : strcmp (a->shard, b->shard) < 0;
}

static PsAutoshardCandidate *
candidate_of (Search *s, const char *text)
{
  PsAutoshardCandidate *c = g_hash_table_lookup (s->seen, text);
  if (c)
    return c;
  c = g_new0 (PsAutoshardCandidate, 1);
  c->shard = g_strdup (text);
  g_hash_table_insert (s->seen, c->shard, c);
  g_ptr_array_add (s->all, c);
  return c;
}

/* The cheap cost of one combination, memoized. */
static PsAutoshardCandidate *
estimate (Search *s, const int *choice)
{
  g_autofree char *text = shard_text (s, choice);
  gboolean fresh = !g_hash_table_contains (s->seen, text);
  PsAutoshardCandidate *c = candidate_of (s, text);
  if (fresh || (!c->est_ran && !c->est_why))
    {
      PsAutoshardEstimate e;
      c->est_ran = ps_autoshard_cost_estimate (s->cost, text, &e);
      c->est_fits = e.fits;
      c->est_step_s = e.step_time_s;
      c->est_peak_hbm_bytes = e.peak_hbm_bytes;
      c->est_why = e.why;
    }
  return c;
}

/* The full pipeline for a batch of candidates, each a child `podsim run
 * FILE ... --shard ... --json` (SimGrid runs one engine per process: the
 * pool of driver/pool.h). */
static void
on_done (const PsPoolResult *pr, gpointer user)
{
  GPtrArray *batch = user;
  PsAutoshardCandidate *c = batch->pdata[pr->index];
  g_autoptr (PsStudyRow) row = ps_study_row_from_result (pr, pr->index);
  c->full = TRUE;
  c->ok = row->ran && row->fits && !row->error;
  c->step_time_s = row->step_time_s;
  c->peak_hbm_bytes = (guint64) row->peak_hbm_bytes;
  if (!c->ok)
    c->why = g_strdup (row->error ? row->error : "did not run");
}

static gboolean
run_full (Search *s, GPtrArray *cands, GError **error)
{
  g_autoptr (GPtrArray) batch = g_ptr_array_new ();
  g_autoptr (PsPool) pool = ps_pool_new (s->o->jobs, on_done, NULL, batch);
  for (guint j = 0; j < cands->len; j++)
    {
      PsAutoshardCandidate *c = cands->pdata[j];
      if (c->full)
        continue;
      g_ptr_array_add (batch, c);
      g_autoptr (GPtrArray) argv = g_ptr_array_new ();
      g_ptr_array_add (argv, (gpointer) "/proc/self/exe");
      g_ptr_array_add (argv, (gpointer) "run");
      for (int i = 0; s->base_argv[i]; i++)
        g_ptr_array_add (argv, s->base_argv[i]);
      /* one --shard per annotation: the option takes one item at a time */
      g_auto (GStrv) items = g_strsplit (c->shard, ";", -1);
      g_autoptr (GPtrArray) opts = g_ptr_array_new_with_free_func (g_free);
      for (int i = 0; items[i]; i++)
        if (*items[i])
          {
            g_ptr_array_add (opts, g_strdup_printf ("--shard=%s", items[i]));
            g_ptr_array_add (argv, opts->pdata[opts->len - 1]);
          }
      g_ptr_array_add (argv, (gpointer) "--json");
      g_ptr_array_add (argv, (gpointer) "-q");
      g_ptr_array_add (argv, NULL);
      ps_pool_add (pool, (const char *const *) argv->pdata);
    }
  if (batch->len == 0)
    return TRUE;
  if (!ps_pool_run (pool, error))
    return FALSE;
  s->n_full += (int) batch->len;
  return TRUE;
}

static void
progress (const Search *s, const char *what, const PsAutoshardCandidate *b)
{
  if (!s->o->progress)
    return;
  g_autofree char *space = s->space == G_MAXINT64 ? g_strdup ("over 9e18")
                                                  : g_strdup_printf ("%" G_GINT64_FORMAT, s->space);
  const char *text = b && *b->shard ? b->shard : "(no annotation)";
  g_autofree char *cut = strlen (text) > 160 ? g_strdup_printf ("%.157s...", text) : NULL;
  text = cut ? cut : text;
  if (b && b->full)
    fprintf (stderr, "autoshard: %s: %d of %s combinations run; best so far %s%s\n", what, s->n_full, space,
             b->ok ? "" : "(none fits) ", text);
  else
    fprintf (stderr, "autoshard: %s: %d of %s combinations costed; cheap best %.6g ms, peak %" G_GUINT64_FORMAT
             " B: %s%s\n", what, ps_autoshard_cost_n_runs (s->cost), space, b ? b->est_step_s * 1e3 : 0.0,
             b ? b->est_peak_hbm_bytes : 0, b && b->est_fits ? "" : "(none fits) ", text);
}

static gint
rank_cmp (gconstpointer x, gconstpointer y)
{
  const PsAutoshardCandidate *a = *(PsAutoshardCandidate *const *) x, *b = *(PsAutoshardCandidate *const *) y;
  if (a->full || b->full)
    return better (a, b) ? -1 : better (b, a) ? 1 : 0;
  return better_est (a, b) ? -1 : better_est (b, a) ? 1 : 0;
}

/* The candidate of parameter i whose dims mapping is map, or -1. */
static int
find_candidate (const Search *s, int i, const int *map)
{
  int rank = MIN (s->shapes[i]->rank, PS_MAX_RANK);
  for (int k = 0; k < s->n_cands[i]; k++)
    if (memcmp (s->maps[i] + (gsize) k * rank, map, sizeof (int) * rank) == 0)
      return k;
  return -1;
}

/* A move that changes many parameters at once: the first dim of size
 * sizes[j] over axis axes[j] (n 1 or 2; a size given twice: its first and
 * second dims) in every parameter having such dims; or, with shape_of >= 0, every parameter of that
 * parameter's shape to candidate `k`. */
typedef struct {
  int n;
  int64_t sizes[2];
  int axes[2];
  int shape_of, k;
  int scope;               /* size moves: 0 every tensor, 1 parameters only, 2 internal ones only */
} Move;

static gboolean
apply_move (const Search *s, const Move *mv, const int *from, int *to)
{
  memcpy (to, from, sizeof (int) * (s->n_params + 1));
  gboolean changed = FALSE;
  for (int i = 0; i < s->n_params; i++)
    {
      const PsShape *sh = s->shapes[i];
      int k = -1;
      if (mv->shape_of < 0 && mv->scope && (mv->scope == 2) != s->internal[i])
        continue;
      if (mv->shape_of >= 0)
        {
          if (ps_shape_equal (sh, s->shapes[mv->shape_of]))
            k = mv->k;
        }
      else
        {
          int map[PS_MAX_RANK], hit = 0, rank = MIN (sh->rank, PS_MAX_RANK);
          for (int d = 0; d < rank; d++)
            map[d] = -1;
          for (int j = 0; j < mv->n; j++)
            {
              /* the first dim of that size, the second for the second
               * entry of the same size ([L,M,N,D] with N = D: N first) */
              int occ = j > 0 && mv->sizes[0] == mv->sizes[j], at = -1;
              for (int d = 0; d < rank && at < 0; d++)
                if (sh->dims[d] == mv->sizes[j] && occ-- == 0)
                  at = d;
              if (at >= 0)
                {
                  map[at] = mv->axes[j];
                  hit++;
                }
            }
          if (hit > 0)
            k = find_candidate (s, i, map);
        }
      if (k >= 0 && k != to[i])
        {
          to[i] = k;
          changed = TRUE;
        }
    }
  return changed;
}

/* The many-parameter moves of the search space: every dim size that some
 * parameter has over every axis, every pair of sizes over two axes, every
 * shape shared by several parameters to each of its candidates. */
static GArray *
group_moves (const Search *s, int mesh_rank, const int64_t *mesh)
{
  GArray *moves = g_array_new (FALSE, TRUE, sizeof (Move));
  g_autoptr (GArray) sizes = g_array_new (FALSE, FALSE, sizeof (int64_t));
  for (int i = 0; i < s->n_params; i++)
    for (int d = 0; d < s->shapes[i]->rank; d++)
      {
        int64_t v = s->shapes[i]->dims[d];
        gboolean have = v <= 1;
        for (guint j = 0; j < sizes->len && !have; j++)
          have = g_array_index (sizes, int64_t, j) == v;
        if (!have)
          g_array_append_val (sizes, v);
      }
  /* With internal tensors, each size move also for the parameters alone
   * and the internal tensors alone (weights and activations split one
   * letter differently, as the 2D sharding splits M). */
  gboolean any_internal = FALSE;
  for (int i = 0; i < s->n_params; i++)
    any_internal = any_internal || s->internal[i];
  for (int scope = 0; scope <= (any_internal ? 2 : 0); scope++)
    for (guint j = 0; j < sizes->len; j++)
      for (int a = 0; a < mesh_rank; a++)
        if (mesh[a] > 1 && g_array_index (sizes, int64_t, j) % mesh[a] == 0)
          {
            Move mv = { 1, { g_array_index (sizes, int64_t, j), 0 }, { a, -1 }, -1, 0, scope };
            g_array_append_val (moves, mv);
            for (guint j1 = 0; j1 < sizes->len; j1++)
              for (int a1 = a + 1; a1 < mesh_rank; a1++)
                if (mesh[a1] > 1 && g_array_index (sizes, int64_t, j1) % mesh[a1] == 0)
                  {
                    Move m2 = { 2, { g_array_index (sizes, int64_t, j), g_array_index (sizes, int64_t, j1) },
                                { a, a1 }, -1, 0, scope };
                    g_array_append_val (moves, m2);
                  }
          }
  for (int i = 0; i < s->n_params; i++)
    {
      int first = i, n_same = 0;
      for (int j = 0; j < s->n_params; j++)
        if (ps_shape_equal (s->shapes[i], s->shapes[j]))
          {
            first = MIN (first, j);
            n_same++;
          }
      if (first != i || n_same < 2)
        continue;
      for (int k = 0; k < s->n_cands[i]; k++)
        {
          Move mv = { 0, { 0, 0 }, { -1, -1 }, i, k, 0 };
          g_array_append_val (moves, mv);
        }
    }
  return moves;
}

/* Is a better than b by more than 0.01 % (of the step when both fit, of
 * the peak when neither does)? A pass that gains less ends the search:
 * another pass costs as many runs as the first. */
static gboolean
significantly_better (const PsAutoshardCandidate *a, const PsAutoshardCandidate *b)
{
  if (a->est_ran != b->est_ran || a->est_fits != b->est_fits)
    return better_est (a, b);
  if (!a->est_ran)
    return FALSE;
  if (a->est_fits)
    return a->est_step_s < b->est_step_s * (1 - 1e-4);
  return (double) a->est_peak_hbm_bytes < (double) b->est_peak_hbm_bytes * (1 - 1e-4);
}

/* Local search under the cheap cost: sweeps of many-parameter moves while
 * one improves, then each parameter's best candidate with the others held;
 * until a pass improves nothing. */
static PsAutoshardCandidate *
local_search (Search *s, int max_passes, int mesh_rank, const int64_t *mesh, gboolean group, int *choice,
              int *n_rounds)
{
  g_autoptr (GArray) moves = group ? group_moves (s, mesh_rank, mesh) : g_array_new (FALSE, TRUE, sizeof (Move));
  g_autofree int *trial = g_new0 (int, s->n_params + 1);
  PsAutoshardCandidate *best = estimate (s, choice);
  progress (s, "start", best);
  for (int pass = 0; pass < max_passes && !over_budget (s); pass++)
    {
      gboolean improved = FALSE;
      const PsAutoshardCandidate *at_start = best;
      /* Sweeps over the many-parameter moves until a sweep takes none.
       * The first sweep of the search takes the best move from the start
       * (all of them are costed from there anyway); later ones take each
       * move as soon as it improves (steepest descent would cost every
       * move per step taken). */
      for (gboolean taken = moves->len > 0, steepest = pass == 0; taken; steepest = FALSE)
        {
          taken = FALSE;
          g_autofree int *from = g_memdup2 (choice, sizeof (int) * (s->n_params + 1));
          for (guint m = 0; m < moves->len && !over_budget (s); m++)
            if (apply_move (s, &g_array_index (moves, Move, m), steepest ? from : choice, trial))
              {
                PsAutoshardCandidate *c = estimate (s, trial);
                if (better_est (c, best))
                  {
                    best = c;
                    memcpy (choice, trial, sizeof (int) * (s->n_params + 1));
                    taken = improved = TRUE;
                    (*n_rounds)++;
                    progress (s, "group move", best);
                  }
              }
        }
      for (int i = 0; i < s->n_params && !over_budget (s); i++)
        {
          /* A tensor of under 0.1 % of the searched bytes changes the step
           * little on its own (the group moves still move it): not worth
           * its candidates' runs. */
          if ((double) ps_shape_bytes (s->shapes[i]) < 1e-3 * s->total_bytes)
            continue;
          memcpy (trial, choice, sizeof (int) * (s->n_params + 1));
          int keep = choice[i];
          for (int k = 0; k < s->n_cands[i]; k++)
            {
              trial[i] = k;
              PsAutoshardCandidate *c = estimate (s, trial);
              if (better_est (c, best))
                {
                  best = c;
                  keep = k;
                }
            }
          if (keep != choice[i])
            {
              choice[i] = keep;
              improved = TRUE;
              (*n_rounds)++;
            }
        }
      progress (s, "single-parameter pass", best);
      if (!improved || !significantly_better (best, at_start))
        break;
    }
  return best;
}

/* The DP's variables: groups of tensors of one shape (a loop's Q, K, V and
 * O weights, a weight and its optimizer slots), parameters and internal
 * tensors apart; each group takes one candidate for all its tensors. */
typedef struct {
  Search *s;
  int n_vars;
  int *var_of;          /* per tensor: its variable, -1 when not searched */
  int *n_cands;         /* per variable */
  int *tensors;         /* scratch: a combination of the tensors */
  const int *around;    /* the tensors' combination the other tensors keep */
} DpVars;

static void
dp_expand (const DpVars *v, const int *vars, int *tensors)
{
  memcpy (tensors, v->around, sizeof (int) * (gsize) (v->s->n_params + 1));
  for (int i = 0; i < v->s->n_params; i++)
    if (v->var_of[i] >= 0)
      tensors[i] = vars[v->var_of[i]];
}

/* The DP's measurements: the cheap cost, memoized with every other
 * candidate (so later rounds and the full runs see them too). */
static gboolean
dp_eval (const int *choice, PsDpCost *out, gpointer user)
{
  DpVars *v = user;
  dp_expand (v, choice, v->tensors);
  PsAutoshardCandidate *c = estimate (v->s, v->tensors);
  out->ran = c->est_ran;
  out->step_s = c->est_step_s;
  out->peak_bytes = (double) c->est_peak_hbm_bytes;
  return !over_budget (v->s);
}

static int *dp_keys;   /* for chain_cmp (qsort has no user data) */

static int
chain_cmp (const void *x, const void *y)
{
  int a = *(const int *) x, b = *(const int *) y;
  return dp_keys[a] != dp_keys[b] ? (dp_keys[a] < dp_keys[b] ? -1 : 1) : a - b;
}

/* The best candidate costed so far (the DP measures many on its way). */
static PsAutoshardCandidate *
best_estimated (const Search *s)
{
  PsAutoshardCandidate *best = NULL;
  for (guint i = 0; i < s->all->len; i++)
    {
      PsAutoshardCandidate *c = s->all->pdata[i];
      if (c->est_ran && (!best || better_est (c, best)))
        best = c;
    }
  return best;
}

/* The choice array of a candidate's text (every candidate costed came
 * from one: found by its text again). */
static void
choice_of (const Search *s, const PsAutoshardCandidate *c, int *choice)
{
  memset (choice, 0, sizeof (int) * (gsize) (s->n_params + 1));
  g_auto (GStrv) items = g_strsplit (c->shard, ";", -1);
  for (int j = 0; items[j]; j++)
    {
      char *eq = strchr (items[j], '=');
      if (!eq)
        continue;
      *eq = 0;
      for (int i = 0; i < s->n_params; i++)
        if (strcmp (s->names[i], items[j]) == 0)
          for (int k = 0; k < s->n_cands[i]; k++)
            if (strcmp (s->cands[i][k], eq + 1) == 0)
              choice[i] = k;
    }
}

/* The DP over the chain of tensors of at least 0.1 % of the searched bytes
 * (the others stay as they are: propagation completes them), in the order
 * the layer structure uses them. Round 1 expands the cost around no
 * annotation; each later round around the best combination costed so far
 * (its terms are then the moves of one tensor and of two neighbours from
 * there, which a single annotation's propagation makes far from additive
 * around no annotation), until a round gains under 0.01 % or `rounds` are
 * done. The best goes to choice. */
static PsAutoshardCandidate *
dp_search (Search *s, int rounds, int *choice, PsAutoshardResult *r)
{
  int n = s->n_params;
  DpVars v = { s, 0, g_new (int, n + 1), g_new0 (int, n + 1), g_new0 (int, n + 1), choice };
  g_autofree int *first = g_new0 (int, n + 1);     /* per variable: its first tensor */
  g_autofree double *bytes = g_new0 (double, n + 1);
  for (int i = 0; i < n; i++)
    {
      v.var_of[i] = -1;
      for (int j = 0; j < i && v.var_of[i] < 0; j++)
        if (s->internal[j] == s->internal[i] && ps_shape_equal (s->shapes[i], s->shapes[j]))
          v.var_of[i] = v.var_of[j];
      if (v.var_of[i] < 0)
        {
          first[v.n_vars] = i;
          v.n_cands[v.n_vars] = s->n_cands[i];
          v.var_of[i] = v.n_vars++;
        }
      bytes[v.var_of[i]] += (double) ps_shape_bytes (s->shapes[i]);
    }
  /* The chain: every internal tensor's variable (chosen as what a user
   * would annotate) and those of the parameters of at least 0.1 % of the
   * searched bytes (the others stay as they are: propagation completes
   * them), in the order the layer structure first uses them. */
  g_autofree int *order = g_new0 (int, v.n_vars + 1), *keys = g_new0 (int, v.n_vars + 1);
  int m = 0;
  for (int g = 0; g < v.n_vars; g++)
    {
      keys[g] = G_MAXINT;
      for (int i = 0; i < n; i++)
        if (v.var_of[i] == g)
          keys[g] = MIN (keys[g], s->use_at[i]);
      if (s->internal[first[g]] || bytes[g] >= 1e-3 * s->total_bytes)
        order[m++] = g;
    }
  for (int i = 0; i < n; i++)
    {
      int g = v.var_of[i];
      gboolean in = FALSE;
      for (int j = 0; j < m; j++)
        in = in || order[j] == g;
      if (!in)
        v.var_of[i] = -1;
    }
  dp_keys = keys;
  qsort (order, (size_t) m, sizeof (int), chain_cmp);
  dp_keys = NULL;
  PsDpProblem pb = { v.n_vars, v.n_cands, order, m, s->o->dp_width, (double) ps_autoshard_cost_hbm_bytes (s->cost) };
  PsAutoshardCandidate *best = estimate (s, choice);
  g_autofree int *base = g_new0 (int, v.n_vars + 1);
  r->dp_chain = m;
  ps_autoshard_cost_set_past_no_fit (s->cost, TRUE);
  for (int round = 0; round < rounds && !over_budget (s); round++)
    {
      PsAutoshardCandidate *at_start = best;
      for (int g = 0; g < v.n_vars; g++)
        base[g] = choice[first[g]];
      g_autoptr (GPtrArray) sols = g_ptr_array_new_with_free_func (g_free);
      PsDpStats st;
      ps_autoshard_dp_solve (&pb, base, dp_eval, &v, sols, &st);
      for (guint j = 0; j < sols->len; j++)
        {
          dp_expand (&v, sols->pdata[j], v.tensors);
          estimate (s, v.tensors);
        }
      best = best_estimated (s);
      choice_of (s, best, choice);
      r->dp_rounds++;
      r->dp_measured += st.n_measured;
      r->dp_pairs += st.n_pairs;
      if (s->o->progress)
        fprintf (stderr, "autoshard: dp round %d: %d variables in the chain (%d tensors), %d measured (%d "
                 "neighbour pairs), %d lambdas, %u solutions\n", round + 1, m, n, st.n_measured, st.n_pairs,
                 st.n_lambdas, sols->len);
      progress (s, "dp", best);
      if (!significantly_better (best, at_start))
        break;
    }
  ps_autoshard_cost_set_past_no_fit (s->cost, FALSE);
  r->dp_best_s = best && best->est_ran && best->est_fits ? best->est_step_s : 0;
  g_free (v.var_of);
  g_free (v.n_cands);
  g_free (v.tensors);
  return best;
}

/* Where the layer structure first uses each instruction: every
 * instruction numbered in program order, a while loop's body right after
 * the loop (once: the body is the layer). */
static void
number_instrs (const PsComputation *c, GHashTable *pos, int *next, int depth)
{
  for (guint i = 0; i < c->instrs->len; i++)
    {
      PsInstr *x = c->instrs->pdata[i];
      g_hash_table_insert (pos, x, GINT_TO_POINTER (++*next));
      if (x->opcode == PS_OP_WHILE && x->n_called >= 2 && depth < 8)
        number_instrs (x->called[1], pos, next, depth + 1);
    }
}

/* The first use of x: its first user's number; through a tuple into a
 * while loop, the first use of that element in the body (a stacked weight
 * is used where the layer uses it, not where the loop starts). */
static int
first_use (const PsInstr *x, GHashTable *pos, int depth)
{
  int best = G_MAXINT;
  for (guint u = 0; u < x->users->len; u++)
    {
      const PsInstr *y = x->users->pdata[u];
      int at = GPOINTER_TO_INT (g_hash_table_lookup (pos, y));
      if (at == 0)
        continue;
      if (y->opcode == PS_OP_TUPLE && depth < 8)
        for (guint w = 0; w < y->users->len; w++)
          {
            const PsInstr *loop = y->users->pdata[w];
            if (loop->opcode != PS_OP_WHILE || loop->n_called < 2 || loop->operands[0] != y
                || loop->called[1]->params->len < 1)
              continue;
            const PsInstr *carried = loop->called[1]->params->pdata[0];
            int inner = G_MAXINT;
            for (int k = 0; k < y->n_operands; k++)
              if (y->operands[k] == x)
                for (guint g = 0; g < carried->users->len; g++)
                  {
                    const PsInstr *e = carried->users->pdata[g];
                    if (e->opcode == PS_OP_GET_TUPLE_ELEMENT && e->tuple_index == k)
                      inner = MIN (inner, first_use (e, pos, depth + 1));
                  }
            if (inner != G_MAXINT)
              at = inner;
          }
      best = MIN (best, at);
    }
  return best == G_MAXINT ? GPOINTER_TO_INT (g_hash_table_lookup (pos, x)) : best;
}

/* Spearman's rank correlation of the cheap and the full step over the
 * candidates both say fit (2 when fewer than 2), and the full rank of the
 * cheap cost's best. */
static void
rank_quality (const GPtrArray *ranked, PsAutoshardResult *r)
{
  g_autoptr (GPtrArray) fit = g_ptr_array_new ();
  for (guint i = 0; i < ranked->len; i++)
    {
      PsAutoshardCandidate *c = ranked->pdata[i];
      if (c->full && c->ok && c->est_ran && c->est_fits)
        g_ptr_array_add (fit, c);
    }
  int n = (int) fit->len;
  r->rank_correlation = 2;
  r->cheap_best_rank = 0;
  if (n == 0)
    return;
  /* fit is in full order; the cheap rank of each, ties averaged. */
  g_autofree double *cheap_rank = g_new0 (double, n);
  int best = 0;
  for (int i = 0; i < n; i++)
    {
      const PsAutoshardCandidate *a = fit->pdata[i];
      int less = 0, same = 0;
      for (int j = 0; j < n; j++)
        {
          const PsAutoshardCandidate *b = fit->pdata[j];
          less += b->est_step_s < a->est_step_s;
          same += b->est_step_s == a->est_step_s;
        }
      cheap_rank[i] = less + (same + 1) / 2.0;
      if (a->est_step_s < ((const PsAutoshardCandidate *) fit->pdata[best])->est_step_s)
        best = i;
    }
  r->cheap_best_rank = best + 1;
  if (n < 2)
    return;
  double mean = (n + 1) / 2.0, sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < n; i++)
    {
      /* the full rank, ties averaged */
      const PsAutoshardCandidate *a = fit->pdata[i];
      int less = 0, same = 0;
      for (int j = 0; j < n; j++)
        {
          const PsAutoshardCandidate *b = fit->pdata[j];
          less += b->step_time_s < a->step_time_s;
          same += b->step_time_s == a->step_time_s;
        }
      double x = less + (same + 1) / 2.0 - mean, y = cheap_rank[i] - mean;
      sxy += x * y;
      sxx += x * x;
      syy += y * y;
    }
  r->rank_correlation = sxx > 0 && syy > 0 ? sxy / sqrt (sxx * syy) : 2;
}

static gint
bytes_desc (gconstpointer x, gconstpointer y)
{
  const PsInstr *a = *(PsInstr *const *) x, *b = *(PsInstr *const *) y;
  int64_t na = ps_shape_bytes (a->shape), nb = ps_shape_bytes (b->shape);
  return na != nb ? (na > nb ? -1 : 1) : strcmp (a->name, b->name);
}

static gboolean
has_shape_of (const GPtrArray *xs, const PsShape *shape)
{
  for (guint k = 0; k < xs->len; k++)
    if (ps_shape_equal (shape, ((const PsInstr *) xs->pdata[k])->shape))
      return TRUE;
  return FALSE;
}

/* Internal tensors a user would annotate, largest first: the values the
 * entry's while loops carry that are not entry parameters' shapes (the
 * stacked weights and their slots are the parameters themselves), i.e.
 * the layer stack's activations and what it saves for the backward, each
 * as its get-tuple-element in the body; then, for what the loops leave
 * (a program without loops), the entry's dot and convolution results,
 * the first of each shape (in program order: the forward's), as GShard
 * annotates the dispatched experts' inputs and the spatial partitioning
 * the convolutions' outputs. transfer container. */
/* With all_of_shape (autoshard --tie-shapes), the shapes are chosen from
 * the contractions' operands too (an MoE's dispatch and combine masks are
 * converts, its expert inputs transposes), and every contraction result
 * or operand of a chosen shape joins: the DP gives tensors of one shape
 * one variable, so the forward, its recomputation and the backward of a
 * layer, and all the layers, take one split together, as a model's
 * split_on(x, 0) annotates every one of them (doc/manual.md, "Automatic
 * sharding": the MoE case). max then counts shapes, not tensors. */
static GPtrArray *
internal_tensors (const PsModule *m, int max, gboolean all_of_shape)
{
  GPtrArray *out = g_ptr_array_new ();
  GPtrArray *params = m->entry->params;
  for (guint i = 0; i < m->entry->instrs->len; i++)
    {
      const PsInstr *w = m->entry->instrs->pdata[i];
      if (w->opcode != PS_OP_WHILE || w->n_called < 2)
        continue;
      const PsComputation *body = w->called[1];
      for (guint j = 0; j < body->instrs->len; j++)
        {
          PsInstr *x = body->instrs->pdata[j];
          if (x->opcode != PS_OP_GET_TUPLE_ELEMENT || x->n_operands != 1
              || x->operands[0]->opcode != PS_OP_PARAMETER || ps_shape_is_tuple (x->shape) || x->shape->rank < 2)
            continue;
          if (!has_shape_of (params, x->shape))
            g_ptr_array_add (out, x);
        }
    }
  g_ptr_array_sort (out, bytes_desc);
  if ((int) out->len >= max)
    return out;
  g_autoptr (GPtrArray) results = g_ptr_array_new ();
  g_autoptr (GHashTable) operand = g_hash_table_new (g_direct_hash, g_direct_equal);
  if (all_of_shape)
    for (guint i = 0; i < m->entry->instrs->len; i++)
      {
        const PsInstr *y = m->entry->instrs->pdata[i];
        if (y->opcode == PS_OP_DOT || y->opcode == PS_OP_CONVOLUTION)
          for (int k = 0; k < y->n_operands; k++)
            if (y->operands[k]->opcode != PS_OP_PARAMETER)
              g_hash_table_add (operand, y->operands[k]);
      }
  for (guint i = 0; i < m->entry->instrs->len; i++)
    {
      PsInstr *x = m->entry->instrs->pdata[i];
      gboolean contraction = x->opcode == PS_OP_DOT || x->opcode == PS_OP_CONVOLUTION
                             || g_hash_table_contains (operand, x);
      if (contraction && !ps_shape_is_tuple (x->shape)
          && x->shape->rank >= 2 && !has_shape_of (params, x->shape) && !has_shape_of (results, x->shape))
        g_ptr_array_add (results, x);
    }
  g_ptr_array_sort (results, bytes_desc);
  guint first = out->len;
  for (guint i = 0; i < results->len && (int) out->len < max; i++)
    g_ptr_array_add (out, results->pdata[i]);
  if (!all_of_shape)
    return out;
  g_autoptr (GPtrArray) chosen = g_ptr_array_new ();
  for (guint i = first; i < out->len; i++)
    g_ptr_array_add (chosen, out->pdata[i]);
  for (guint i = 0; i < m->entry->instrs->len; i++)
    {
      PsInstr *x = m->entry->instrs->pdata[i];
      gboolean contraction = x->opcode == PS_OP_DOT || x->opcode == PS_OP_CONVOLUTION
                             || g_hash_table_contains (operand, x);
      gboolean have = FALSE;
      for (guint k = first; k < out->len && !have; k++)
        have = out->pdata[k] == x;
      if (contraction && !have && !ps_shape_is_tuple (x->shape) && has_shape_of (chosen, x->shape))
        g_ptr_array_add (out, x);
    }
  return out;
}

PsAutoshardResult *
ps_autoshard_search (const PsParams *p, char **run_argv, const PsAutoshardOptions *o, GError **error)
{
  PsAutoshardOptions defaults = { 0 };
  if (!o)
    o = &defaults;
  int64_t max_exhaustive = o->max_exhaustive > 0 ? o->max_exhaustive : 256;
  int max_passes = o->max_passes > 0 ? o->max_passes : 4;
  int full_runs = o->full_runs > 0 ? o->full_runs : 8;
  int max_internal = o->max_internal >= 0 ? o->max_internal : 8;
  int r_internal = 0;
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
  g_autoptr (PsAutoshardCost) cost = ps_autoshard_cost_new (p, error);
  if (!cost)
    return NULL;
  Search s = { 0 };
  s.p = p;
  s.o = o;
  s.seen = g_hash_table_new (g_str_hash, g_str_equal);
  s.all = g_ptr_array_new_with_free_func (candidate_free);
  s.base_argv = run_argv;
  s.cost = cost;
  s.deadline_us = o->budget_s > 0 ? g_get_monotonic_time () + (gint64) (o->budget_s * 1e6) : 0;
  /* The tensors: every entry parameter, then up to max_internal
   * loop-carried values that are not parameters (activations, saved
   * stacks), the largest first. */
  GPtrArray *params = m->entry->params;
  g_autoptr (GPtrArray) tensors = g_ptr_array_new ();
  for (guint i = 0; i < params->len; i++)
    g_ptr_array_add (tensors, params->pdata[i]);
  g_autoptr (GPtrArray) inner = internal_tensors (m, max_internal, o->tie_shapes);
  for (guint i = 0; i < inner->len && ((int) i < max_internal || o->tie_shapes); i++)
    g_ptr_array_add (tensors, inner->pdata[i]);
  s.names = g_new0 (char *, tensors->len + 1);
  s.cands = g_new0 (char **, tensors->len + 1);
  s.n_cands = g_new0 (int, tensors->len + 1);
  s.maps = g_new0 (int *, tensors->len + 1);
  s.shapes = g_new0 (const PsShape *, tensors->len + 1);
  s.internal = g_new0 (gboolean, tensors->len + 1);
  s.use_at = g_new0 (int, tensors->len + 1);
  g_autoptr (GHashTable) pos = g_hash_table_new (g_direct_hash, g_direct_equal);
  int n_numbered = 0;
  number_instrs (m->entry, pos, &n_numbered, 0);
  int64_t space = 1;
  for (guint i = 0; i < tensors->len; i++)
    {
      PsInstr *x = tensors->pdata[i];
      if (ps_shape_is_tuple (x->shape) || x->shape->rank == 0)
        continue;
      char **c = ps_autoshard_candidates (x->shape->rank, x->shape->dims, mesh_rank, mesh);
      int n = (int) g_strv_length (c);
      if (n < 2)
        {
          g_strfreev (c);
          continue;
        }
      int rank = MIN (x->shape->rank, PS_MAX_RANK);
      s.names[s.n_params] = x->name;
      s.cands[s.n_params] = c;
      s.n_cands[s.n_params] = n;
      s.shapes[s.n_params] = x->shape;
      s.internal[s.n_params] = i >= params->len;
      /* a result computed in the entry sits where it is defined, between
       * its operands and its users; a loop-carried value where its body
       * uses it */
      s.use_at[s.n_params] = i >= params->len && x->opcode != PS_OP_GET_TUPLE_ELEMENT
                               ? GPOINTER_TO_INT (g_hash_table_lookup (pos, x))
                               : first_use (x, pos, 0);
      r_internal += i >= params->len;
      /* the mappings back from their text "[a,b,...]" */
      s.maps[s.n_params] = g_new0 (int, (gsize) n * rank + 1);
      for (int k = 0; k < n; k++)
        {
          const char *t = c[k] + 1;
          for (int d = 0; d < rank; d++)
            {
              char *end;
              s.maps[s.n_params][k * rank + d] = (int) g_ascii_strtoll (t, &end, 10);
              t = end + 1;
            }
        }
      s.total_bytes += (double) ps_shape_bytes (x->shape);
      s.n_params++;
      space = space > G_MAXINT64 / n ? G_MAXINT64 : space * n;
    }
  PsAutoshardResult *r = g_new0 (PsAutoshardResult, 1);
  r->n_params = s.n_params - r_internal;
  r->n_internal = r_internal;
  r->space = space;
  PsAutoshardSolver solver = o->solver;
  if (solver == PS_AUTOSHARD_SOLVER_AUTO)
    solver = space <= max_exhaustive ? PS_AUTOSHARD_SOLVER_EXHAUSTIVE : PS_AUTOSHARD_SOLVER_DP;
  gboolean ok = TRUE;
  if (solver == PS_AUTOSHARD_SOLVER_EXHAUSTIVE && space > max_exhaustive)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--solver exhaustive: %s%" G_GINT64_FORMAT
                   " combinations, over --exhaustive-limit %" G_GINT64_FORMAT " (each is a full run)",
                   space == G_MAXINT64 ? "over " : "", space, max_exhaustive);
      ok = FALSE;
    }
  if ((r->exhaustive = solver == PS_AUTOSHARD_SOLVER_EXHAUSTIVE))
    r->solver = "exhaustive";
  else
    r->solver = solver == PS_AUTOSHARD_SOLVER_DP ? "dp" : "local-search";
  s.space = space;
  g_autofree int *choice = g_new0 (int, s.n_params + 1);
  if (!ok)
    ;
  else if (r->exhaustive)
    {
      /* Every combination, in odometer order: the full run decides; the
       * cheap cost of each measures how well it ranks. */
      g_autoptr (GPtrArray) batch = g_ptr_array_new ();
      for (;;)
        {
          g_ptr_array_add (batch, estimate (&s, choice));
          int i = 0;
          while (i < s.n_params && ++choice[i] == s.n_cands[i])
            choice[i++] = 0;
          if (i == s.n_params)
            break;
        }
      ok = run_full (&s, batch, error);
    }
  else
    {
      const PsAutoshardCandidate *found = NULL;
      if (solver == PS_AUTOSHARD_SOLVER_DP)
        {
          /* The DP's rounds; the local search from no annotation when
           * nothing they found fits. */
          found = dp_search (&s, o->dp_rounds > 0 ? o->dp_rounds : 8, choice, r);
          if (!found->est_ran || !found->est_fits)
            {
              r->dp_fallback = TRUE;
              r->solver = "dp, then local-search";
              memset (choice, 0, sizeof (int) * (gsize) (s.n_params + 1));
              s.stopped = FALSE;
              found = NULL;
            }
        }
      if (!found)
        local_search (&s, max_passes, mesh_rank, mesh, TRUE, choice, &r->n_rounds);
      r->stopped = s.stopped;
      /* The cheap search's best few (those that fit) get the full run. */
      /* (a copy would take the array's free function: a view instead) */
      g_autoptr (GPtrArray) order = g_ptr_array_sized_new (s.all->len);
      for (guint i = 0; i < s.all->len; i++)
        g_ptr_array_add (order, s.all->pdata[i]);
      g_ptr_array_sort (order, rank_cmp);
      g_autoptr (GPtrArray) batch = g_ptr_array_new ();
      /* Candidates of the same cheap step and peak are, almost always, one
       * program that propagation completed alike: one of each. */
      const PsAutoshardCandidate *last = NULL;
      for (guint i = 0; i < order->len && (int) batch->len < full_runs; i++)
        {
          PsAutoshardCandidate *c = order->pdata[i];
          if (!c->est_ran || !c->est_fits)
            continue;
          if (last && c->est_step_s == last->est_step_s && c->est_peak_hbm_bytes == last->est_peak_hbm_bytes)
            continue;
          g_ptr_array_add (batch, c);
          last = c;
        }
      if (batch->len == 0 && order->len)
        g_ptr_array_add (batch, order->pdata[0]);   /* none fits: the full run says why */
      ok = run_full (&s, batch, error);
    }
  if (ok)
    {
      g_ptr_array_sort (s.all, rank_cmp);
      progress (&s, "full runs", s.all->len ? s.all->pdata[0] : NULL);
    }
  r->n_evaluated = s.n_full;
  r->n_estimated = ps_autoshard_cost_n_runs (cost);
  r->ranked = s.all;
  if (r->exhaustive)
    rank_quality (r->ranked, r);
  g_hash_table_unref (s.seen);
  for (int i = 0; i < s.n_params; i++)
    {
      g_strfreev (s.cands[i]);
      g_free (s.maps[i]);
    }
  g_free (s.maps);
  g_free (s.cands);
  g_free (s.names);   /* the names and shapes were the module's */
  g_free (s.shapes);
  g_free (s.internal);
  g_free (s.use_at);
  g_free (s.n_cands);
  if (!ok)
    {
      ps_autoshard_result_free (r);
      return NULL;
    }
  return r;
}
