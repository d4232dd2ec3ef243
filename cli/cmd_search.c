/* podsim search: for a model and a slice, enumerate the strategies (every
 * combination of the family's search axes: mesh factorizations of the
 * slice, sharding presets, device orders, microbatches, remat,
 * weight-update sharding, overlap options, ...), drop the ones that cannot
 * be built, check memory exactly before simulating (one memory check per
 * group of strategies whose per-device program is the same), simulate the
 * rest in parallel (batches of strategies per worker process, each in a
 * fork: cli/search_worker.h), and rank them by step time.
 * doc/manual.md, "What if". */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "cli/commands.h"
#include "cli/model_options.h"
#include "cli/search_worker.h"
#include "driver/pool.h"
#include "driver/study.h"
#include "driver/target.h"
#include "common/error.h"

typedef struct {
  char *axes;
  gint top, jobs;
  gboolean csv, quiet, dry_run, no_prune, no_share;
  double time_limit;
} SearchOptions;

/* Keys whose value cannot change the per-device program's memory: a device
 * order only renames devices; the collective cache acts in the replay, after
 * the memory check. (async_collectives can: an overlapped collective's
 * buffers stay live while compute runs, in the schedule the memory check
 * analyses.) */
static const char *const memory_neutral[] = { "device_order", "cache", NULL };

typedef enum { ST_INVALID, ST_DUPLICATE, ST_NO_FIT, ST_FAILED, ST_SIMULATED, ST_PRUNED, ST_TIMED_OUT } Status;

typedef struct {
  Status status;
  guint same_as;             /* ST_DUPLICATE: the strategy it equals */
  guint memory_rep;          /* the strategy whose memory check stands for it */
  guint share_group;         /* strategies of one share group differ only in keys read after partitioning */
  char *why;                 /* invalid / failed / no-fit reason */
  PsStudyRow *row;           /* ST_SIMULATED (and ST_FAILED when it ran) */
  double peak_hbm_bytes;     /* from the memory check */
  int rank;                  /* 1.. among simulated */
} Strategy;

/* ---- axes ----------------------------------------------------------------------- */

/* Every way to write n as an ordered product of `rank` factors. */
static void
factorizations (int64_t n, int rank, int64_t *dims, int at, GPtrArray *out)
{
  if (at == rank - 1)
    {
      dims[at] = n;
      GString *t = g_string_new (NULL);
      for (int i = 0; i < rank; i++)
        g_string_append_printf (t, "%s%" G_GINT64_FORMAT, i ? "x" : "", dims[i]);
      g_ptr_array_add (out, g_string_free (t, FALSE));
      return;
    }
  for (int64_t d = 1; d <= n; d++)
    if (n % d == 0)
      {
        dims[at] = d;
        factorizations (n / d, rank, dims, at + 1, out);
      }
}

/* The rank of the meshes a searched mesh key tries: the base's, or for
 * a mesh left unset its spec's largest (the moe family's mesh is unset
 * for its 1-D layout and 2-D for the others). */
static int
search_mesh_rank (const PsParamSpec *s, const PsParams *base, int64_t *dims)
{
  int rank = ps_params_mesh (base, s->key, dims);
  return rank >= 1 ? rank : (int) MAX (s->max, 1);
}

/* The values `podsim search` tries for a spec (transfer full). */
static GPtrArray *
axis_values (const PsParamSpec *s, const PsParams *base, const PsModelTarget *t)
{
  GPtrArray *v = g_ptr_array_new_with_free_func (g_free);
  if (strcmp (s->search, "*") != 0)
    {
      g_auto (GStrv) parts = g_strsplit (s->search + (s->search[0] == '+'), "|", -1);
      for (int i = 0; parts[i]; i++)
        g_ptr_array_add (v, g_strdup (parts[i]));
      return v;
    }
  switch (s->type)
    {
    case PS_PARAM_BOOL:
      g_ptr_array_add (v, g_strdup ("false"));
      g_ptr_array_add (v, g_strdup ("true"));
      break;
    case PS_PARAM_CHOICE:
      {
        g_auto (GStrv) parts = g_strsplit (ps_param_choices (s), "|", -1);
        for (int i = 0; parts[i]; i++)
          g_ptr_array_add (v, g_strdup (parts[i]));
        break;
      }
    case PS_PARAM_MESH:
      {
        int64_t dims[PS_PARAM_MESH_MAX_RANK];
        int rank = search_mesh_rank (s, base, dims);
        factorizations (t->n_cores, rank, dims, 0, v);
        break;
      }
    default:
      {
        /* Other types search only explicit lists; keep the base value. */
        g_ptr_array_add (v, ps_params_text (base, s->key));
      }
    }
  return v;
}

typedef struct {
  const PsParamSpec *spec;
  GPtrArray *values;
} Axis;

/* A pipelined family's mesh is one stage's (pipeline_stages x mesh = the
 * slice's cores): a searched mesh takes the factorizations of cores / K
 * for every stage count K searched (or the base's K when stages are not
 * searched), so each K meets the meshes that fit it. */
static void
meshes_per_stage_count (GPtrArray *axes, const PsParams *base, const PsModelTarget *t)
{
  Axis *mesh = NULL, *stages = NULL;
  for (guint i = 0; i < axes->len; i++)
    {
      Axis *a = axes->pdata[i];
      if (a->spec->type == PS_PARAM_MESH && strcmp (a->spec->search, "*") == 0)
        mesh = a;
      else if (strcmp (a->spec->key, "pipeline_stages") == 0)
        stages = a;
    }
  if (mesh == NULL || (stages == NULL && !ps_model_family_find_spec (ps_params_family (base), "pipeline_stages")))
    return;
  g_autoptr (GPtrArray) ks = g_ptr_array_new_with_free_func (g_free);
  if (stages)
    for (guint i = 0; i < stages->values->len; i++)
      g_ptr_array_add (ks, g_strdup (stages->values->pdata[i]));
  else
    g_ptr_array_add (ks, ps_params_text (base, "pipeline_stages"));
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  int rank = search_mesh_rank (mesh->spec, base, dims);
  GPtrArray *values = g_ptr_array_new_with_free_func (g_free);
  for (guint i = 0; i < ks->len; i++)
    {
      int64_t k = g_ascii_strtoll (ks->pdata[i], NULL, 10);
      if (k < 1 || t->n_cores % k != 0)
        continue;
      g_autoptr (GPtrArray) v = g_ptr_array_new_with_free_func (g_free);
      factorizations (t->n_cores / k, rank, dims, 0, v);
      for (guint j = 0; j < v->len; j++)
        if (!g_ptr_array_find_with_equal_func (values, v->pdata[j], g_str_equal, NULL))
          g_ptr_array_add (values, g_strdup (v->pdata[j]));
    }
  if (values->len == 0)
    {
      g_ptr_array_free (values, TRUE);
      return;
    }
  g_ptr_array_free (mesh->values, TRUE);
  mesh->values = values;
}

static void
axis_free (gpointer p)
{
  Axis *a = p;
  g_ptr_array_free (a->values, TRUE);
  g_free (a);
}

static GPtrArray *
search_axes (const SearchOptions *o, const PsParams *base, const PsModelTarget *t, GError **error)
{
  const PsModelFamily *f = ps_params_family (base);
  g_autoptr (GPtrArray) axes = g_ptr_array_new_with_free_func (axis_free);
  if (o->axes)
    {
      g_auto (GStrv) keys = g_strsplit (o->axes, ",", -1);
      for (int i = 0; keys[i]; i++)
        {
          g_strstrip (keys[i]);
          const PsParamSpec *s = ps_model_family_find_spec (f, keys[i]);
          if (!s || !s->search)
            {
              g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--axes: '%s' is not a search axis of family %s",
                           keys[i], f->name);
              return NULL;
            }
          Axis *a = g_new0 (Axis, 1);
          a->spec = s;
          a->values = axis_values (s, base, t);
          g_ptr_array_add (axes, a);
        }
    }
  else
    for (int i = 0; i < ps_model_family_n_specs (f); i++)
      {
        const PsParamSpec *s = ps_model_family_spec (f, i);
        if (!s->search || s->search[0] == '+')
          continue;
        Axis *a = g_new0 (Axis, 1);
        a->spec = s;
        a->values = axis_values (s, base, t);
        g_ptr_array_add (axes, a);
      }
  if (axes->len == 0)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "family %s has no search axes", f->name);
      return NULL;
    }
  meshes_per_stage_count (axes, base, t);
  return g_steal_pointer (&axes);
}

/* ---- phases --------------------------------------------------------------------- */

typedef struct {
  PsStudy *study;
  Strategy *st;
  const guint *ids;          /* pool job -> strategy; batches: position in the phase's list */
  const char *what;
  gboolean progress;
  double time_limit_s;
  /* Batches (not --no-share): pool job b runs strategies
   * ids[batch_start[b] .. batch_start[b + 1]) in one worker. */
  gboolean batched;
  GArray *batch_start;       /* guint, n_batches + 1 */
  const char *dir;           /* where batch files go */
  guint n_done, n_total;     /* strategies, for progress */
} Phase;

static void
on_done (const PsPoolResult *r, gpointer user)
{
  Phase *ph = user;
  guint id = ph->ids[r->index];
  Strategy *s = &ph->st[id];
  if (r->timed_out)
    {
      s->status = ST_TIMED_OUT;
      s->why = g_strdup_printf ("stopped at the time limit (--time-limit %g s)", ph->time_limit_s);
      return;
    }
  PsStudyRow *row = ps_study_row_from_result (r, id);
  s->row = row;
  s->peak_hbm_bytes = row->peak_hbm_bytes;
  s->status = row->ran && row->fits && !row->error ? ST_SIMULATED : row->ran && !row->fits ? ST_NO_FIT : ST_FAILED;
  if (s->status != ST_SIMULATED)
    s->why = g_strdup (row->error);
}

static void
on_progress (guint done, guint total, double elapsed_s, gpointer user)
{
  Phase *ph = user;
  if (ph->batched)
    done = ph->n_done, total = ph->n_total;
  if (ph->progress)
    ps_study_progress (ph->what, done, total, elapsed_s);
}

static char *
batch_path (const Phase *ph, guint b)
{
  g_autofree char *leaf = g_strdup_printf ("batch-%u.txt", b);
  return g_build_filename (ph->dir, leaf, NULL);
}

/* One strategy's record from a batch worker: as the result of a child of
 * its own. */
static void
on_strategy_done (const PsPoolResult *r, gpointer user)
{
  Phase *ph = user;
  if (r->index >= ph->n_total || ph->st[ph->ids[r->index]].row || ph->st[ph->ids[r->index]].status == ST_TIMED_OUT)
    return;
  PsPoolResult one = *r;
  /* on_done maps a job through ids; here the record's index is already a
   * position in the phase's list. */
  on_done (&one, ph);
  ph->n_done++;
}

static void
on_batch_done (const PsPoolResult *r, gpointer user)
{
  Phase *ph = user;
  guint from = g_array_index (ph->batch_start, guint, r->index);
  guint to = g_array_index (ph->batch_start, guint, r->index + 1);
  g_autofree char *path = batch_path (ph, r->index);
  g_unlink (path);
  ps_pool_batch_results (r->out, r->out_len, on_strategy_done, ph, NULL);
  /* Strategies the worker wrote no record for (it crashed or was killed)
   * get the worker's end as their result. */
  for (guint i = from; i < to; i++)
    {
      Strategy *s = &ph->st[ph->ids[i]];
      if (s->row || s->status == ST_TIMED_OUT)
        continue;
      PsPoolResult one = *r;
      one.index = i;
      one.out = "";
      one.out_len = 0;
      one.timed_out = FALSE;
      if (one.exited && one.exit_status == 0)
        {
          one.exit_status = 1;
          one.err = "podsim: the batch worker ended without this strategy's result";
        }
      on_done (&one, ph);
      ph->n_done++;
    }
}

/* A batch worker's argv, its batch file written when it starts. */
static char **
batch_argv (guint b, gpointer user)
{
  Phase *ph = user;
  guint from = g_array_index (ph->batch_start, guint, b);
  guint to = g_array_index (ph->batch_start, guint, b + 1);
  GString *file = g_string_new (NULL);
  ps_search_batch_begin (file, ph->time_limit_s);
  for (guint i = from; i < to; i++)
    {
      g_auto (GStrv) argv = ps_study_child_argv (ph->study, ph->ids[i], NULL);
      ps_search_batch_add (file, i, ph->st[ph->ids[i]].share_group, (const char *const *) argv);
    }
  g_autofree char *path = batch_path (ph, b);
  GError *error = NULL;
  /* A file that cannot be written makes the worker fail: each strategy
   * then says so. */
  if (!g_file_set_contents (path, file->str, (gssize) file->len, &error))
    g_clear_error (&error);
  g_string_free (file, TRUE);
  char **argv = g_new0 (char *, 5);
  argv[0] = g_strdup (ps_study_exe ());
  argv[1] = g_strdup ("search");
  argv[2] = g_strdup ("--batch-worker");
  argv[3] = g_steal_pointer (&path);
  return argv;
}

/* Batches of the phase's strategies: each share group whole (its
 * strategies next to each other), about 4 batches per job so the jobs end
 * together, at most 16 strategies each: starting a worker then costs a few
 * per cent of its batch. */
static GArray *
make_batches (Phase *ph, GArray *todo, int jobs, GArray **order)
{
  guint n = todo->len;
  guint per = CLAMP (n / (4u * (guint) MAX (jobs, 1)), 1u, 16u);
  g_autoptr (GHashTable) first = g_hash_table_new (g_direct_hash, g_direct_equal);
  g_autoptr (GPtrArray) groups = g_ptr_array_new_with_free_func ((GDestroyNotify) g_array_unref);
  for (guint i = 0; i < n; i++)
    {
      guint id = g_array_index (todo, guint, i);
      gpointer key = GUINT_TO_POINTER (ph->st[id].share_group + 1);
      GArray *g = g_hash_table_lookup (first, key);
      if (!g)
        {
          g = g_array_new (FALSE, FALSE, sizeof (guint));
          g_ptr_array_add (groups, g);
          g_hash_table_insert (first, key, g);
        }
      g_array_append_val (g, id);
    }
  *order = g_array_sized_new (FALSE, FALSE, sizeof (guint), n);
  GArray *start = g_array_new (FALSE, FALSE, sizeof (guint));
  guint zero = 0;
  g_array_append_val (start, zero);
  guint in_batch = 0;
  for (guint k = 0; k < groups->len; k++)
    {
      GArray *g = groups->pdata[k];
      if (in_batch > 0 && in_batch + g->len > per)
        {
          guint at = (*order)->len;
          g_array_append_val (start, at);
          in_batch = 0;
        }
      g_array_append_vals (*order, g->data, g->len);
      in_batch += g->len;
    }
  if (in_batch > 0)
    {
      guint at = (*order)->len;
      g_array_append_val (start, at);
    }
  return start;
}

/* A child's argv when it starts, as sweep makes them: a phase of many
 * strategies does not hold every command line at once. */
static char **
phase_argv (guint index, gpointer user)
{
  Phase *ph = user;
  return ps_study_child_argv (ph->study, ph->ids[index], NULL);
}

static gboolean
run_phase (Phase *ph, int jobs, GArray *todo, GError **error)
{
  ph->n_done = 0;
  ph->n_total = todo->len;
  if (ph->batched)
    {
      g_autoptr (GArray) order = NULL;
      g_autoptr (GArray) start = make_batches (ph, todo, jobs, &order);
      ph->batch_start = start;
      ph->ids = (const guint *) order->data;
      /* The workers keep each strategy's time limit themselves. */
      g_autoptr (PsPool) pool = ps_pool_new (jobs, on_batch_done, on_progress, ph);
      ps_pool_add_n (pool, start->len - 1, batch_argv, ph);
      gboolean ok = ps_pool_run (pool, error);
      /* Batch files of workers that were stopped. */
      for (guint b = 0; b + 1 < start->len; b++)
        {
          g_autofree char *path = batch_path (ph, b);
          g_unlink (path);
        }
      ph->batch_start = NULL;
      ph->ids = NULL;
      return ok;
    }
  g_autoptr (PsPool) pool = ps_pool_new (jobs, on_done, on_progress, ph);
  ps_pool_set_time_limit (pool, ph->time_limit_s);
  ph->ids = (const guint *) todo->data;
  ps_pool_add_n (pool, todo->len, phase_argv, ph);
  return ps_pool_run (pool, error);
}

/* ---- the report ----------------------------------------------------------------- */

static int
cmp_rank (gconstpointer a, gconstpointer b, gpointer user)
{
  const Strategy *st = user;
  guint x = *(const guint *) a, y = *(const guint *) b;
  double tx = st[x].row->step_time_s, ty = st[y].row->step_time_s;
  if (tx != ty)
    return tx < ty ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;  /* ties: enumeration order */
}

static char *
settings_text (PsStudy *s, guint id)
{
  GString *out = g_string_new (NULL);
  for (guint k = 0; k < ps_study_n_keys (s); k++)
    g_string_append_printf (out, "%s%s=%s", k ? " " : "", ps_study_key (s, k), ps_study_value (s, id, k));
  return g_string_free (out, FALSE);
}

/* Why a simulated strategy lost against the best: how much slower, and
 * which part of the step grew most. */
static char *
slower_text (const PsStudyRow *r, const PsStudyRow *best)
{
  double pct = 100.0 * (r->step_time_s / best->step_time_s - 1);
  double dc = r->compute_s - best->compute_s, de = r->exposed_communication_s - best->exposed_communication_s;
  double di = r->idle_s - best->idle_s;
  const char *part = "exposed communication";
  double d = de;
  if (dc > d)
    part = "compute", d = dc;
  if (di > d)
    part = "idle", d = di;
  g_autofree char *dt = ps_format_seconds (fabs (d));
  return g_strdup_printf ("slower by %.1f %% (%s %s%s)", pct, part, d >= 0 ? "+" : "-", dt);
}

static const char *
status_name (Status s)
{
  static const char *names[] = { "invalid", "duplicate", "no-fit", "failed", "simulated", "pruned", "timed-out" };
  return names[s];
}

static void
print_csv (PsStudy *s, Strategy *st, guint n, const PsStudyRow *best)
{
  GString *out = g_string_new ("rank,id");
  for (guint k = 0; k < ps_study_n_keys (s); k++)
    ps_study_csv_field (out, ps_study_key (s, k));
  const char *cols[] = { "status", "step_time_s", "throughput_per_s", "compute_s", "exposed_communication_s",
                         "idle_s", "peak_hbm_bytes", "why" };
  for (gsize i = 0; i < G_N_ELEMENTS (cols); i++)
    ps_study_csv_field (out, cols[i]);
  g_string_append_c (out, '\n');
  for (guint id = 0; id < n; id++)
    {
      Strategy *x = &st[id];
      if (x->rank)
        g_string_append_printf (out, "%d,%u", x->rank, id);
      else
        g_string_append_printf (out, ",%u", id);
      for (guint k = 0; k < ps_study_n_keys (s); k++)
        ps_study_csv_field (out, ps_study_value (s, id, k));
      ps_study_csv_field (out, status_name (x->status));
      gboolean sim = x->status == ST_SIMULATED;
      double v[] = { sim ? x->row->step_time_s : 0, sim ? x->row->throughput_per_s : 0,
                     sim ? x->row->compute_s : 0, sim ? x->row->exposed_communication_s : 0,
                     sim ? x->row->idle_s : 0 };
      for (gsize i = 0; i < G_N_ELEMENTS (v); i++)
        {
          g_autofree char *t = sim ? g_strdup_printf ("%.9g", v[i]) : NULL;
          ps_study_csv_field (out, t);
        }
      g_autofree char *peak = x->peak_hbm_bytes > 0 ? g_strdup_printf ("%.0f", x->peak_hbm_bytes) : NULL;
      ps_study_csv_field (out, peak);
      g_autofree char *why = NULL;
      if (sim && x->rank > 1)
        why = slower_text (x->row, best);
      else if (sim)
        why = g_strdup ("best");
      else if (x->status == ST_DUPLICATE)
        why = g_strdup_printf ("the same run as %u", x->same_as);
      else
        why = g_strdup (x->why);
      ps_study_csv_field (out, why);
      g_string_append_c (out, '\n');
    }
  fputs (out->str, stdout);
  g_string_free (out, TRUE);
}

/* Counts of identical reasons, most frequent first, at most `max`. */
static void
print_reasons (const char *label, Strategy *st, guint n, Status status, int max)
{
  GHashTable *count = g_hash_table_new (g_str_hash, g_str_equal);
  GPtrArray *order = g_ptr_array_new ();
  guint total = 0;
  for (guint id = 0; id < n; id++)
    if (st[id].status == status)
      {
        const char *why = st[id].why ? st[id].why : "?";
        gpointer c = g_hash_table_lookup (count, why);
        if (!c)
          g_ptr_array_add (order, (gpointer) why);
        g_hash_table_insert (count, (gpointer) why, GUINT_TO_POINTER (GPOINTER_TO_UINT (c) + 1));
        total++;
      }
  if (total)
    {
      printf ("  %s: %u\n", label, total);
      for (int k = 0; k < max && order->len > 0; k++)
        {
          guint best = 0;
          for (guint i = 1; i < order->len; i++)
            if (GPOINTER_TO_UINT (g_hash_table_lookup (count, order->pdata[i]))
                > GPOINTER_TO_UINT (g_hash_table_lookup (count, order->pdata[best])))
              best = i;
          printf ("    %4u x %s\n", GPOINTER_TO_UINT (g_hash_table_lookup (count, order->pdata[best])),
                  (const char *) order->pdata[best]);
          g_ptr_array_remove_index (order, best);
        }
      if (order->len > 0)
        printf ("    ... and %u other reasons\n", order->len);
    }
  g_ptr_array_free (order, TRUE);
  g_hash_table_destroy (count);
}

/* The first strategy that had KEY (transfer full), or ID, which is then
 * recorded as the first. */
static guint
first_with_key (GHashTable *firsts, char *key, guint id)
{
  gpointer prev;
  if (g_hash_table_lookup_extended (firsts, key, NULL, &prev))
    {
      g_free (key);
      return GPOINTER_TO_UINT (prev);
    }
  g_hash_table_insert (firsts, key, GUINT_TO_POINTER (id));
  return id;
}

/* Sets the family's KEYS in P back to BASE's values, so strategies that
 * differ only in them get the same parameter key. */
static void
reset_keys (PsParams *p, const PsParams *base, const PsModelFamily *f, const char *const *keys)
{
  for (int k = 0; keys[k]; k++)
    if (ps_model_family_find_spec (f, keys[k]))
      {
        g_autofree char *v = ps_params_text (base, keys[k]);
        ps_params_set (p, keys[k], v, "--x", NULL);
      }
}

static int
search (SearchOptions *o, PsModelOptions *mo, int argc, char **argv)
{
  GError *error = NULL;
  if (!(o->time_limit >= 0) || o->time_limit > 1e9)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--time-limit must be between 0 and 1e9 seconds (got %g)",
                   o->time_limit);
      return ps_cli_fail (error);
    }
  if (o->jobs < 0 || o->top < 0)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "%s must be positive (got %d)", o->jobs < 0 ? "--jobs" : "--top",
                   o->jobs < 0 ? o->jobs : o->top);
      return ps_cli_fail (error);
    }
  g_autoptr (PsParams) base = ps_model_options_params_argv (mo, argc, argv, &error);
  if (!base)
    return ps_cli_fail (error);
  double published = 0;
  g_autofree char *name = ps_model_options_name (mo, base, &published);
  g_autoptr (PsTarget) target = ps_target_from_params (base, &error);
  if (!target)
    return ps_cli_fail (error);
  const PsModelFamily *f = ps_params_family (base);
  g_autoptr (GPtrArray) axes = search_axes (o, base, &target->model, &error);
  if (!axes)
    return ps_cli_fail (error);

  /* Every combination, the first axis outermost. */
  g_autofree const char **keys = g_new0 (const char *, axes->len + 1);
  g_autofree const char **where = g_new0 (const char *, axes->len + 1);
  g_autofree GPtrArray **values = g_new0 (GPtrArray *, axes->len + 1);
  for (guint i = 0; i < axes->len; i++)
    {
      Axis *a = axes->pdata[i];
      keys[i] = a->spec->key;
      where[i] = "search axis";
      values[i] = a->values;
    }
  g_autoptr (PsStudy) study = ps_study_new (base, keys);
  if (!ps_study_add_grid (study, values, where, 1000000, &error))
    {
      g_prefix_error (&error, "too many strategies (narrow them with --axes, or fix a key with its option): ");
      return ps_cli_fail (error);
    }
  guint n = ps_study_n_configs (study);

  /* Cheap checks in this process: what cannot be built, and what is the
   * same run as an earlier strategy. Then one memory check per group of
   * strategies that differ only in memory-neutral keys. */
  Strategy *st = g_new0 (Strategy, n);
  g_autoptr (GHashTable) seen = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (GHashTable) groups = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (GHashTable) shares = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, NULL);
  g_autoptr (GArray) memory_todo = g_array_new (FALSE, FALSE, sizeof (guint));
  guint n_invalid = 0, n_dup = 0;
  for (guint id = 0; id < n; id++)
    {
      g_autoptr (PsParams) p = ps_study_params (study, id);
      if (f->canonicalize)
        f->canonicalize (p, &target->model);
      guint same = first_with_key (seen, ps_params_key (p), id);
      if (same != id)
        {
          st[id].status = ST_DUPLICATE;
          st[id].same_as = same;
          n_dup++;
          continue;
        }
      GError *local = NULL;
      if (f->check && !f->check (p, &target->model, &local))
        {
          st[id].status = ST_INVALID;
          st[id].why = g_strdup (local->message);
          g_error_free (local);
          n_invalid++;
          continue;
        }
      /* Share groups: the same program up to partitioning. */
      g_autoptr (PsParams) q = ps_params_copy (p);
      reset_keys (q, base, f, ps_search_post_partition_keys);
      st[id].share_group = first_with_key (shares, ps_params_key (q), id);
      reset_keys (p, base, f, memory_neutral);
      st[id].memory_rep = first_with_key (groups, ps_params_key (p), id);
      if (st[id].memory_rep == id)
        g_array_append_val (memory_todo, id);
      st[id].status = ST_SIMULATED;   /* provisional: to be checked and run */
    }

  if (o->dry_run)
    {
      g_autoptr (GString) line = g_string_new (NULL);
      guint left = n - n_invalid - n_dup;
      printf ("search       %s on %s: %u strategies; %u cannot be built, %u repeat another; "
              "%u memory checks, then up to %u simulations\n", name, ps_params_str (base, "slice"), n,
              n_invalid, n_dup, memory_todo->len, left);
      /* what each axis tries, so a dry run shows the strategies' settings */
      for (guint i = 0; i < axes->len; i++)
        {
          const Axis *a = axes->pdata[i];
          g_string_truncate (line, 0);
          for (guint j = 0; j < a->values->len; j++)
            g_string_append_printf (line, "%s%s", j ? " " : "", (const char *) a->values->pdata[j]);
          printf ("axis         %s (%u): %s\n", a->spec->key, a->values->len, line->str);
        }
      for (guint id = 0; id < n; id++)
        g_free (st[id].why);
      g_free (st);
      return 0;
    }
  g_autofree char *tmp = g_dir_make_tmp ("podsim-search-XXXXXX", &error);
  const char *base_path = tmp ? ps_study_write_base (study, tmp, name, &error) : NULL;
  if (!base_path)
    return ps_cli_fail (error);
  gboolean tty = ps_progress_on (o->quiet);
  gint64 t0 = g_get_monotonic_time ();
  /* First each group's representative, in full: its run stops at the
   * memory check when it does not fit, which then stands for the group;
   * then the rest of the groups that fit. */
  Phase ph = { study, st, NULL, "podsim search: memory checks", tty, o->time_limit, !o->no_share, NULL, tmp, 0, 0 };
  gboolean ok = run_phase (&ph, o->jobs, memory_todo, &error);
  /* The lower-bound prune. A strategy that differs from its group's
   * representative only in memory-neutral keys (device order, cache) runs
   * the same per-device program, so the same compute on every device, and
   * a step is never shorter than a device's compute (it only adds waits).
   * When the representative's compute alone already exceeds the best step
   * the representatives reached, the strategy cannot be the best and is
   * not run. The bound is that of the first phase as a whole, never of the
   * runs finished so far, so the same strategies are pruned for any --jobs
   * and any order of completion. */
  guint best_rep = G_MAXUINT;
  for (guint id = 0; ok && id < n; id++)
    if (st[id].status == ST_SIMULATED && id == st[id].memory_rep && st[id].row
        && (best_rep == G_MAXUINT || st[id].row->step_time_s < st[best_rep].row->step_time_s))
      best_rep = id;
  g_autoptr (GArray) sim_todo = g_array_new (FALSE, FALSE, sizeof (guint));
  guint n_nofit = 0, n_failed = 0, n_pruned = 0, n_timed_out = 0;
  for (guint id = 0; ok && id < n; id++)
    {
      if (st[id].status != ST_SIMULATED || id == st[id].memory_rep)
        continue;
      Strategy *rep = &st[st[id].memory_rep];
      st[id].peak_hbm_bytes = rep->peak_hbm_bytes;
      if (rep->status == ST_NO_FIT)
        {
          st[id].status = rep->status;
          st[id].why = g_strdup (rep->why);
          continue;
        }
      /* 1e-12: compute_s is a mean over devices of equal sums */
      if (!o->no_prune && rep->status == ST_SIMULATED && best_rep != G_MAXUINT
          && rep->row->compute_s > st[best_rep].row->step_time_s * (1 + 1e-12))
        {
          g_autofree char *b = ps_format_seconds (rep->row->compute_s);
          g_autofree char *t = ps_format_seconds (st[best_rep].row->step_time_s);
          st[id].status = ST_PRUNED;
          st[id].why = g_strdup_printf ("pruned: compute alone %s (that of %u) exceeds the step of %u, %s",
                                        b, st[id].memory_rep, best_rep, t);
          continue;
        }
      g_array_append_val (sim_todo, id);
    }
  ph.what = "podsim search: simulations";
  ok = ok && run_phase (&ph, o->jobs, sim_todo, &error);
  g_unlink (base_path);
  g_rmdir (tmp);
  if (!ok)
    {
      for (guint id = 0; id < n; id++)
        {
          g_free (st[id].why);
          ps_study_row_free (st[id].row);
        }
      g_free (st);
      return ps_cli_fail (error);
    }
  double wall = (double) (g_get_monotonic_time () - t0) / 1e6;

  /* Rank. */
  g_autoptr (GArray) ranked = g_array_new (FALSE, FALSE, sizeof (guint));
  for (guint id = 0; id < n; id++)
    {
      n_nofit += st[id].status == ST_NO_FIT;
      n_failed += st[id].status == ST_FAILED;
      n_pruned += st[id].status == ST_PRUNED;
      n_timed_out += st[id].status == ST_TIMED_OUT;
      if (st[id].status == ST_SIMULATED)
        g_array_append_val (ranked, id);
    }
  g_array_sort_with_data (ranked, cmp_rank, st);
  for (guint i = 0; i < ranked->len; i++)
    st[g_array_index (ranked, guint, i)].rank = (int) i + 1;
  const PsStudyRow *best = ranked->len ? st[g_array_index (ranked, guint, 0)].row : NULL;

  /* The base configuration's own strategy, when it is one of them. */
  guint base_id = G_MAXUINT;
  for (guint id = 0; id < n && base_id == G_MAXUINT; id++)
    {
      gboolean same = TRUE;
      for (guint k = 0; k < ps_study_n_keys (study) && same; k++)
        {
          g_autofree char *v = ps_params_text (base, ps_study_key (study, k));
          same = strcmp (v, ps_study_value (study, id, k)) == 0;
        }
      if (same)
        base_id = id;
    }

  if (o->csv)
    print_csv (study, st, n, best);
  else
    {
      GString *axes_text = g_string_new (NULL);
      for (guint i = 0; i < axes->len; i++)
        g_string_append_printf (axes_text, "%s%s (%u)", i ? " x " : "", ((Axis *) axes->pdata[i])->spec->key,
                                ((Axis *) axes->pdata[i])->values->len);
      g_autofree char *wt = ps_format_duration (wall);
      printf ("search       %s on %s: %u strategies = %s\n", name, ps_params_str (base, "slice"), n,
              axes_text->str);
      g_string_free (axes_text, TRUE);
      g_autofree char *failed = n_failed ? g_strdup_printf (", %u failed", n_failed) : g_strdup ("");
      g_autofree char *pruned = n_pruned ? g_strdup_printf ("; %u pruned (compute alone above the best step)",
                                                            n_pruned) : g_strdup ("");
      g_autofree char *timed = n_timed_out ? g_strdup_printf ("; %u stopped at the time limit", n_timed_out)
                                           : g_strdup ("");
      printf ("             %u cannot be built, %u repeat another, %u memory checks: %u do not fit; "
              "%u simulated%s in %s%s%s\n", n_invalid, n_dup, memory_todo->len, n_nofit, ranked->len, failed,
              wt, pruned, timed);
      int top = o->top > 0 ? o->top : 10;
      if (ranked->len)
        {
          g_autofree char *unit = g_strdup_printf ("%s/s", f->item_unit);
          printf ("%-4s %10s %12s %10s %10s %10s  %s\n", "rank", "step", unit, "compute", "exp. comm",
                  "peak HBM", "strategy");
          for (guint i = 0; i < ranked->len && (int) i < top; i++)
            {
              guint id = g_array_index (ranked, guint, i);
              const PsStudyRow *r = st[id].row;
              g_autofree char *step = ps_format_seconds (r->step_time_s);
              g_autofree char *c = ps_format_seconds (r->compute_s);
              g_autofree char *e = ps_format_seconds (r->exposed_communication_s);
              g_autofree char *pk = ps_format_bytes (st[id].peak_hbm_bytes);
              g_autofree char *set = settings_text (study, id);
              printf ("%4u %10s %12.0f %10s %10s %10s  %s%s\n", i + 1, step, r->throughput_per_s, c, e, pk, set,
                      id != base_id ? "" : published > 0 ? "   <- published" : "   <- given");
            }
        }
      if (base_id != G_MAXUINT)
        {
          Strategy *b = &st[base_id];
          g_autofree char *set = settings_text (study, base_id);
          const char *which = published > 0 ? "the published configuration" : "the given configuration";
          if (b->status == ST_SIMULATED)
            {
              g_autofree char *sl = b->rank > 1 ? slower_text (b->row, best) : g_strdup ("the best");
              printf ("%s ranks %d of %u: %s\n", which, b->rank, ranked->len, sl);
            }
          else
            printf ("%s (%s): %s\n", which, set, b->status == ST_DUPLICATE ? "a repeat of another strategy"
                                                  : b->why ? b->why : status_name (b->status));
        }
      printf ("why the others lost:\n");
      if (ranked->len > (guint) top)
        {
          const PsStudyRow *last = st[g_array_index (ranked, guint, ranked->len - 1)].row;
          const PsStudyRow *first_out = st[g_array_index (ranked, guint, top)].row;
          g_autofree char *a = slower_text (first_out, best), *z = slower_text (last, best);
          printf ("  simulated, slower than the top %d: %u (from %s to %s; podsim search --csv lists each)\n",
                  top, ranked->len - top, a, z);
        }
      print_reasons ("did not fit in HBM", st, n, ST_NO_FIT, 3);
      print_reasons ("cannot be built", st, n, ST_INVALID, 3);
      print_reasons ("failed", st, n, ST_FAILED, 3);
      print_reasons ("stopped at the time limit", st, n, ST_TIMED_OUT, 1);
      if (n_dup)
        printf ("  repeat another strategy (the same run): %u\n", n_dup);
    }
  for (guint id = 0; id < n; id++)
    {
      g_free (st[id].why);
      ps_study_row_free (st[id].row);
    }
  g_free (st);
  return 0;
}

int
ps_cmd_search (int argc, char **argv)
{
  /* A batch worker of another search (search_worker.h): not a user's command. */
  if (argc == 3 && strcmp (argv[1], "--batch-worker") == 0)
    return ps_search_worker (argv[2]);
  SearchOptions o = { 0 };
  GOptionEntry entries[] = {
    { "top", 'k', 0, G_OPTION_ARG_INT, &o.top, "Strategies to list (default 10)", "K" },
    { "csv", 0, 0, G_OPTION_ARG_NONE, &o.csv, "Every strategy as CSV: rank, settings, status, figures, why", NULL },
    { "axes", 0, 0, G_OPTION_ARG_STRING, &o.axes,
      "Only these search axes, comma-separated (default: every axis of the family but pipeline_stages, "
      "which multiplies the search: name it to try pipelines)", "KEY,..." },
    { "jobs", 'j', 0, G_OPTION_ARG_INT, &o.jobs, "Strategies run at once (default: the number of processors)", "N" },
    { "dry-run", 0, 0, G_OPTION_ARG_NONE, &o.dry_run, "Count the strategies and the runs they need; run nothing", NULL },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &o.quiet, "No progress on stderr", NULL },
    { "time-limit", 0, 0, G_OPTION_ARG_DOUBLE, &o.time_limit,
      "Stop a strategy's run after SECONDS of wall time; it is listed as timed-out (default: no limit)",
      "SECONDS" },
    { "no-share", 0, 0, G_OPTION_ARG_NONE, &o.no_share,
      "Run each strategy as a podsim run of its own (default: batches of strategies per worker process, "
      "those that differ only in async_collectives, schedule, fusion, collectives or cache partitioned once; "
      "the ranking is the same)", NULL },
    { "no-prune", 0, 0, G_OPTION_ARG_NONE, &o.no_prune,
      "Run every strategy, also those whose compute alone exceeds the best step (see the description)", NULL },
    { NULL }
  };
  g_autoptr (PsModelOptions) mo = ps_model_options_new (argc, argv, entries, NULL);
  g_autoptr (GOptionContext) ctx = g_option_context_new ("[FAMILY] - rank the strategies for a model on a slice");
  g_option_context_set_main_group (ctx, ps_model_options_group (mo));
  g_option_context_set_description (ctx,
    "The model and slice come from the model options (as for podsim run); the\n"
    "strategies are every combination of the family's search axes (dense: mesh\n"
    "factorizations of the slice, device order, sharding, weight-update sharding,\n"
    "microbatches, remat, and the overlap option async_collectives; pipeline\n"
    "stages 1, 2, 4 when --axes names pipeline_stages, the mesh then being one\n"
    "stage's). Strategies that cannot be built are dropped, memory is checked\n"
    "exactly (one check per group that differs only in device order), the rest\n"
    "are simulated and ranked by step time (ties: enumeration order).\n"
    "Strategies run in batches, one worker process each, every strategy in a\n"
    "fork of it; those that differ only in async_collectives, schedule,\n"
    "fusion, collectives or cache are partitioned once (--no-share: one\n"
    "podsim run process per strategy; the same ranking). A strategy that differs from its memory group's\n"
    "representative only in device order or cache runs the same compute, and\n"
    "no step is shorter than its compute: when the representative's compute\n"
    "alone exceeds the best step of the representatives, it is not run but\n"
    "listed as pruned, unranked (--no-prune runs it).\n"
    "Example: podsim search --preset DenseLm128B8x8\n"
    "         podsim search --preset DenseLm128B8x8 --axes mesh,microbatches,pipeline_stages\n"
    "Walk-through: doc/manual.md, 'What if'.\n");
  int rc = PS_EXIT_USAGE;
  if (ps_cli_parse (ctx, &argc, &argv))
    rc = search (&o, mo, argc, argv);
  g_free (o.axes);
  return rc;
}
