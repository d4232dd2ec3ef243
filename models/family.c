/* Model families' parameters (the typed values of a run) and the helpers
 * of the families' checks: see family.h. The registry of the families,
 * model files and presets are in family_files.c, above the families'
 * files, which call these. */
#include "config.h"

#include "models/family.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "common/error.h"
#include "models/family_private.h"

/* ---- checks ------------------------------------------------------------- */

gboolean
ps_params_check_devices (const PsParams *p, const PsModelTarget *t, int64_t n, const char *what, GError **error)
{
  if (!t || n == t->n_cores || (n < t->n_cores && ps_params_bool (p, "idle_cores")))
    return TRUE;
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s has %" G_GINT64_FORMAT " devices but slice %s has %d cores%s",
               what, n, ps_params_str (p, "slice"), t->n_cores,
               n < t->n_cores ? " (--idle-cores leaves the rest idle)" : "");
  return FALSE;
}

void
ps_model_info_init (PsModelInfo *info, int n_annotations, int64_t n_instructions, double params,
                    double model_flops, double items_per_step)
{
  memset (info, 0, sizeof *info);
  info->n_annotations = n_annotations;
  info->n_instructions = n_instructions;
  info->params = params;
  info->model_flops = model_flops;
  info->items_per_step = items_per_step;
}

gboolean
ps_params_check_layer_copies (const PsParams *p, int64_t copies, const char *what, GError **error)
{
  int64_t max = ps_params_int (p, "max_layer_copies");
  if (copies <= max)
    return TRUE;
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s make a program of %" G_GINT64_FORMAT " layer copies, more "
               "than --max-layer-copies %" G_GINT64_FORMAT " (the time to build and partition a program grows "
               "faster than its copies: doc/robustness.md); fewer, or a larger --max-layer-copies, runs it",
               what, copies, max);
  return FALSE;
}

/* [slice] and [options]: the same for every family, appended to its specs.
 * They are declared by the modules that read them, below this floor or
 * above it, and registered by the driver (driver/target.h). */
static const PsParamSpec *const *common_specs;
static int n_common_specs;

void
ps_model_family_set_common_specs (const PsParamSpec *const *specs, int n)
{
  common_specs = specs;
  n_common_specs = n;
}

int
ps_model_family_n_specs (const PsModelFamily *f)
{
  if (!common_specs)
    g_error ("model families: no [slice] and [options] specs registered (ps_target_init)");
  return f->n_specs + n_common_specs;
}

const PsParamSpec *
ps_model_family_spec (const PsModelFamily *f, int i)
{
  g_return_val_if_fail (i >= 0 && i < ps_model_family_n_specs (f), NULL);
  return i < f->n_specs ? &f->specs[i] : common_specs[i - f->n_specs];
}

static int
spec_index (const PsModelFamily *f, const char *name)
{
  int n = ps_model_family_n_specs (f);
  for (int i = 0; i < n; i++)
    {
      const PsParamSpec *s = ps_model_family_spec (f, i);
      if (ps_param_name_equal (name, s->key) || ps_param_name_equal (name, ps_param_option (s)))
        return i;
    }
  return -1;
}

const PsParamSpec *
ps_model_family_find_spec (const PsModelFamily *f, const char *name)
{
  int i = spec_index (f, name);
  return i < 0 ? NULL : ps_model_family_spec (f, i);
}

/* A family's specs as the list a store holds: its own, then the common
 * ones; made once per family. */
static const PsParamSpec *const *
family_spec_list (const PsModelFamily *f)
{
  static GHashTable *lists;
  static GMutex lock;
  g_mutex_lock (&lock);
  if (!lists)
    lists = g_hash_table_new (NULL, NULL);
  const PsParamSpec **l = g_hash_table_lookup (lists, f);
  if (!l)
    {
      int n = ps_model_family_n_specs (f);
      l = g_new (const PsParamSpec *, n);
      for (int i = 0; i < n; i++)
        l[i] = ps_model_family_spec (f, i);
      g_hash_table_insert (lists, (gpointer) f, l);
    }
  g_mutex_unlock (&lock);
  return l;
}

/* ---- values ------------------------------------------------------------------- */


const PsModelFamily *
ps_params_family (const PsParams *p)
{
  return p->family;
}

const PsParamStore *
ps_params_store (const PsParams *p)
{
  return p->st;
}

PsParams *
ps_params_new (const PsModelFamily *f)
{
  PsParams *p = g_new0 (PsParams, 1);
  p->family = f;
  g_autofree char *owner = g_strdup_printf ("model family %s", f->name);
  p->st = ps_param_store_new (family_spec_list (f), ps_model_family_n_specs (f), owner);
  return p;
}

PsParams *
ps_params_copy (const PsParams *p)
{
  PsParams *c = g_new0 (PsParams, 1);
  *c = *p;
  c->st = ps_param_store_copy (p->st);
  c->published_table = g_strdup (p->published_table);
  c->published_source = g_strdup (p->published_source);
  c->published_step_s = p->published_step_s;
  c->published_series = g_strdup (p->published_series);
  return c;
}

void
ps_params_free (PsParams *p)
{
  if (!p)
    return;
  ps_param_store_free (p->st);
  g_free (p->published_table);
  g_free (p->published_source);
  g_free (p->published_series);
  g_free (p);
}

gboolean
ps_params_set (PsParams *p, const char *key, const char *text, const char *where, GError **error)
{
  int i = ps_param_store_find (p->st, key);
  if (i < 0)
    {
      g_set_error (error, PS_ERROR, g_str_has_prefix (where, "--") ? PS_ERROR_OPTION : PS_ERROR_PARSE,
                   "%s: '%s' is not a parameter of model family %s", where, key, p->family->name);
      return FALSE;
    }
  return ps_param_store_set (p->st, i, text, where, error);
}

gboolean
ps_params_append (PsParams *p, const char *key, const char *text, const char *where, GError **error)
{
  int i = ps_param_store_find (p->st, key);
  g_return_val_if_fail (i >= 0 && ps_param_store_spec (p->st, i)->type == PS_PARAM_LIST, FALSE);
  if (strchr (text, ';'))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: '%s': one item at a time (no ';')", where, text);
      return FALSE;
    }
  const char *old = ps_param_store_str (p->st, i);
  old = old ? old : "";
  g_autofree char *joined = *old ? g_strconcat (old, ";", text, NULL) : g_strdup (text);
  return ps_param_store_set (p->st, i, joined, where, error);
}

static int
index_of (const PsParams *p, const char *key)
{
  int i = ps_param_store_find (p->st, key);
  g_assert (i >= 0);
  return i;
}

int64_t
ps_params_int (const PsParams *p, const char *key)
{
  return ps_param_store_int (p->st, index_of (p, key));
}

double
ps_params_double (const PsParams *p, const char *key)
{
  return ps_param_store_double (p->st, index_of (p, key));
}

gboolean
ps_params_bool (const PsParams *p, const char *key)
{
  return ps_param_store_bool (p->st, index_of (p, key));
}

const char *
ps_params_str (const PsParams *p, const char *key)
{
  return ps_param_store_str (p->st, index_of (p, key));
}

void
ps_params_fill (const PsParams *p, gpointer config)
{
  ps_param_store_fill (p->st, config);
}

int
ps_params_mesh (const PsParams *p, const char *key, int64_t *dims)
{
  return ps_param_store_mesh (p->st, index_of (p, key), dims);
}

int64_t
ps_params_mesh_size (const PsParams *p, const char *key)
{
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  int rank = ps_params_mesh (p, key, dims);
  int64_t n = 1;
  for (int k = 0; k < rank; k++)
    n *= dims[k];
  return n;
}

char *
ps_params_text (const PsParams *p, const char *key)
{
  return ps_param_store_text (p->st, index_of (p, key));
}

const char *
ps_params_where (const PsParams *p, const char *key)
{
  return ps_param_store_where (p->st, index_of (p, key));
}

double
ps_params_published_step (const PsParams *p, const char **series)
{
  if (series)
    *series = p->published_series;
  return p->published_step_s;
}

double
ps_params_published (const PsParams *p, const char **table, const char **source)
{
  if (table)
    *table = p->published_table;
  if (source)
    *source = p->published_source;
  return p->published;
}

