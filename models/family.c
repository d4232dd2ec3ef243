/* Model families, their parameters and model files: see family.h. */
#include "config.h"

#include "models/family.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "common/error.h"

/* ---- the registry ------------------------------------------------------------- */

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

gboolean
ps_model_fail (GError **error, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error_literal (error, PS_ERROR, PS_ERROR_OPTION, msg);
  return FALSE;
}

const char *
ps_model_label (const PsParams *p, const char *key, const char *option)
{
  return p ? ps_params_where (p, key) : option;
}

/* One line per family; each lives in its own models/<name>_family.c. */
extern const PsModelFamily ps_dense_family;
extern const PsModelFamily ps_hlo_family;
extern const PsModelFamily ps_moe_family;
extern const PsModelFamily ps_unet_family;
extern const PsModelFamily ps_conformer_family;
extern const PsModelFamily ps_encdec_family;

static const PsModelFamily *const families[] = {
  &ps_dense_family,
  &ps_moe_family,
  &ps_unet_family,
  &ps_conformer_family,
  &ps_encdec_family,
  &ps_hlo_family,
  NULL
};

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

static const char *const sections[] = { "model", "parallelism", "slice", "options", NULL };

const PsModelFamily *const *
ps_model_families (void)
{
  return families;
}

const PsModelFamily *
ps_model_family_find (const char *name, GError **error)
{
  for (int i = 0; families[i]; i++)
    if (g_ascii_strcasecmp (name, families[i]->name) == 0)
      return families[i];
  GString *known = g_string_new (NULL);
  for (int i = 0; families[i]; i++)
    g_string_append_printf (known, "%s%s", i ? ", " : "", families[i]->name);
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "unknown model family '%s' (known: %s)", name, known->str);
  g_string_free (known, TRUE);
  return NULL;
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

/* A run's parameters: the family's typed values (common/params.h) and the
 * [published] section of the file they came from. */
struct PsParams {
  const PsModelFamily *family;
  PsParamStore *st;
  double published;          /* [published] throughput, 0 when none */
  char *published_table;
  char *published_source;
  double published_step_s;   /* [published] step_time: a published step time
                              * of a run whose configuration is not known */
  char *published_series;    /* [published] series */
};

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

/* ---- model files ---------------------------------------------------------------- */

/* The sections a model file may have. */
static const char *const file_sections[] = { "model", "parallelism", "slice", "options", "published", NULL };

static gboolean
find_family (const char *section, const char *key, const char *value, const PsIniPos *at, gpointer data,
             GError **error)
{
  const PsModelFamily **f = data;
  if (strcmp (section, "model") != 0 || strcmp (key, "family") != 0)
    return TRUE;
  if (*f)
    {
      ps_set_error_at (error, PS_ERROR_PARSE, at->path, at->line, at->key_col, "family is set twice");
      return FALSE;
    }
  GError *local = NULL;
  *f = ps_model_family_find (value, &local);
  if (!*f)
    {
      ps_set_error_at (error, PS_ERROR_PARSE, at->path, at->line, at->value_col, "%s", local->message);
      g_error_free (local);
      return FALSE;
    }
  return TRUE;
}

typedef struct {
  PsParams *p;
  const char *const *extra;
  gboolean *seen;            /* per spec */
  guint published_seen;      /* bit per [published] key */
  char *dir;                 /* the file's folder, for relative paths */
} Load;

static gboolean
set_published (Load *l, const char *key, const char *value, const PsIniPos *at, GError **error)
{
  static const char *keys[] = { "throughput", "table", "source", "step_time", "series" };
  int k = -1;
  for (int i = 0; i < (int) G_N_ELEMENTS (keys); i++)
    if (strcmp (key, keys[i]) == 0)
      k = i;
  if (k < 0)
    {
      ps_set_error_at (error, PS_ERROR_PARSE, at->path, at->line, at->key_col,
                       "unknown key '%s' in [published] (known: throughput, table, source, step_time, series)", key);
      return FALSE;
    }
  if (l->published_seen & (1u << k))
    {
      ps_set_error_at (error, PS_ERROR_PARSE, at->path, at->line, at->key_col, "'%s' is set twice", key);
      return FALSE;
    }
  l->published_seen |= 1u << k;
  if (k == 0 || k == 3)
    {
      char *end = NULL;
      double x = g_ascii_strtod (value, &end);
      if (end == value || *end != '\0' || !(x > 0) || x > 1e18)
        {
          ps_set_error_at (error, PS_ERROR_PARSE, at->path, at->line, at->value_col,
                           "%s: '%s' is not a positive number", key, value);
          return FALSE;
        }
      if (k == 0)
        l->p->published = x;
      else
        l->p->published_step_s = x;
    }
  else if (k == 1)
    l->p->published_table = g_strdup (value);
  else if (k == 2)
    l->p->published_source = g_strdup (value);
  else
    l->p->published_series = g_strdup (value);
  return TRUE;
}

static gboolean
set_entry (const char *section, const char *key, const char *value, const PsIniPos *at, gpointer data,
           GError **error)
{
  Load *l = data;
  for (int i = 0; l->extra && l->extra[i]; i++)
    if (strcmp (section, l->extra[i]) == 0)
      return TRUE;
  if (strcmp (section, "published") == 0)
    return set_published (l, key, value, at, error);
  if (strcmp (section, "model") == 0 && strcmp (key, "family") == 0)
    return TRUE;
  int i = -1, n = ps_param_store_n (l->p->st);
  for (int k = 0; k < n && i < 0; k++)
    if (strcmp (ps_param_store_spec (l->p->st, k)->key, key) == 0)
      i = k;
  if (i < 0)
    {
      ps_set_error_at (error, PS_ERROR_PARSE, at->path, at->line, at->key_col,
                       "unknown key '%s' for model family %s (podsim run %s --print-config lists them)", key,
                       l->p->family->name, l->p->family->name);
      return FALSE;
    }
  const PsParamSpec *s = ps_param_store_spec (l->p->st, i);
  if (strcmp (s->section, section) != 0)
    {
      ps_set_error_at (error, PS_ERROR_PARSE, at->path, at->line, at->key_col, "'%s' belongs in [%s], not [%s]",
                       key, s->section, section);
      return FALSE;
    }
  if (l->seen[i])
    {
      ps_set_error_at (error, PS_ERROR_PARSE, at->path, at->line, at->key_col, "'%s' is set twice", key);
      return FALSE;
    }
  l->seen[i] = TRUE;
  g_autofree char *where = g_strdup_printf ("%s:%d:%d", at->path, at->line, at->value_col);
  g_autofree char *resolved = NULL;
  if (s->type == PS_PARAM_PATH && *value && !g_path_is_absolute (value) && l->dir)
    resolved = g_build_filename (l->dir, value, NULL);
  return ps_param_store_set (l->p->st, i, resolved ? resolved : value, where, error);
}

PsParams *
ps_params_read (const char *path, const char *text, GError **error)
{
  return ps_params_read_extra (path, text, NULL, error);
}

PsParams *
ps_params_read_extra (const char *path, const char *text, const char *const *extra, GError **error)
{
  const PsModelFamily *f = NULL;
  if (!ps_ini_walk (path, text, file_sections, extra, find_family, &f, error))
    return NULL;
  if (!f)
    {
      GString *known = g_string_new (NULL);
      for (int i = 0; families[i]; i++)
        g_string_append_printf (known, "%s%s", i ? ", " : "", families[i]->name);
      ps_set_error_at (error, PS_ERROR_PARSE, path, 0, 0,
                       "no 'family' in [model] (known families: %s)", known->str);
      g_string_free (known, TRUE);
      return NULL;
    }
  g_autoptr (PsParams) p = ps_params_new (f);
  g_autofree gboolean *seen = g_new0 (gboolean, ps_param_store_n (p->st));
  g_autofree char *dir = strchr (path, '/') ? g_path_get_dirname (path) : NULL;
  Load l = { p, extra, seen, 0, dir };
  if (!ps_ini_walk (path, text, file_sections, extra, set_entry, &l, error))
    return NULL;
  return g_steal_pointer (&p);
}

GPtrArray *
ps_ini_read_section (const char *path, const char *text, const char *const *extra, const char *section,
                     gboolean *found, GError **error)
{
  return ps_ini_collect_section (path, text, file_sections, extra, section, found, error);
}

PsParams *
ps_params_load (const char *path, GError **error)
{
  g_autofree char *text = ps_ini_load_text (path, error);
  return text ? ps_params_read (path, text, error) : NULL;
}


const char *
ps_params_series_match (const PsParams *p)
{
  for (const PsModelPreset *pr = ps_model_presets (); pr->name; pr++)
    {
      g_autoptr (PsParams) q = ps_model_preset_load (pr->name, NULL);
      if (q->family != p->family || q->published > 0 || q->published_step_s <= 0)
        continue;
      g_autofree char *d = ps_params_diff (p, q);
      if (*d == '\0')
        return pr->name;
    }
  return NULL;
}

char *
ps_params_print (const PsParams *p, const char *comment)
{
  GString *out = g_string_new (NULL);
  if (comment)
    {
      g_auto (GStrv) lines = g_strsplit (comment, "\n", -1);
      for (int i = 0; lines[i]; i++)
        g_string_append_printf (out, "# %s\n", lines[i]);
    }
  for (int k = 0; sections[k]; k++)
    {
      g_string_append_printf (out, "%s[%s]\n", out->len ? "\n" : "", sections[k]);
      if (k == 0)
        g_string_append_printf (out, "# %s\nfamily = %s\n", p->family->summary, p->family->name);
      for (int i = 0; i < ps_param_store_n (p->st); i++)
        {
          const PsParamSpec *s = ps_param_store_spec (p->st, i);
          if (strcmp (s->section, sections[k]) != 0)
            continue;
          g_autofree char *v = ps_param_store_text (p->st, i);
          if (s->type == PS_PARAM_PATH && *v && !g_path_is_absolute (v))
            {
              /* The file may be saved anywhere: name paths absolutely. */
              char *abs = g_canonicalize_filename (v, NULL);
              g_free (v);
              v = abs;
            }
          ps_param_append_doc (out, s);
          g_string_append_printf (out, "%s =%s%s\n", s->key, *v ? " " : "", v);
        }
    }
  double throughput = 0;
  const char *row = ps_params_published_match (p, &throughput);
  if (!row)
    row = ps_params_series_match (p);
  if (row)
    {
      g_autoptr (PsParams) pre = ps_model_preset_load (row, NULL);
      g_string_append (out, "\n[published]\n");
      if (throughput > 0)
        g_string_append_printf (out, "# The published throughput of this configuration, %s per second\n"
                                "throughput = %.10g\n", p->family->item_unit, throughput);
      if (pre && pre->published_table)
        g_string_append_printf (out, "# The table it belongs to (podsim tables TABLE)\ntable = %s\n",
                                pre->published_table);
      if (pre && pre->published_step_s > 0)
        g_string_append_printf (out, "# A published step time (seconds) of a run of unknown configuration\n"
                                "step_time = %.10g\n", pre->published_step_s);
      if (pre && pre->published_series)
        g_string_append_printf (out, "# The series it belongs to (podsim tables: step time against the series' "
                                "smallest run)\nseries = %s\n", pre->published_series);
      if (pre && pre->published_source)
        g_string_append_printf (out, "# Where it was published\nsource = %s\n", pre->published_source);
    }
  return g_string_free (out, FALSE);
}

char *
ps_params_key (const PsParams *p)
{
  GString *out = g_string_new (NULL);
  for (int i = 0; i < ps_param_store_n (p->st); i++)
    {
      g_autofree char *v = ps_param_store_text (p->st, i);
      g_string_append_printf (out, "%s=%s\n", ps_param_store_spec (p->st, i)->key, v);
    }
  return g_string_free (out, FALSE);
}

char *
ps_params_diff (const PsParams *a, const PsParams *b)
{
  g_return_val_if_fail (a->family == b->family, g_strdup ("family"));
  GString *out = g_string_new (NULL);
  for (int i = 0; i < ps_param_store_n (a->st); i++)
    {
      const PsParamSpec *s = ps_param_store_spec (a->st, i);
      if (strcmp (s->section, "options") == 0)
        continue;
      g_autofree char *x = ps_param_store_text (a->st, i);
      g_autofree char *y = ps_param_store_text (b->st, i);
      if (strcmp (x, y) != 0)
        g_string_append_printf (out, "%s%s", out->len ? ", " : "", ps_param_option (s));
    }
  return g_string_free (out, FALSE);
}

/* ---- presets -------------------------------------------------------------------- */

/* models/presets.c, generated from models/presets/NAME.ini by models/local.mk. */
extern const PsModelPreset ps_model_preset_table[];

const PsModelPreset *
ps_model_presets (void)
{
  return ps_model_preset_table;
}

PsParams *
ps_model_preset_load (const char *name, GError **error)
{
  for (const PsModelPreset *pr = ps_model_preset_table; pr->name; pr++)
    if (g_ascii_strcasecmp (name, pr->name) == 0)
      {
        g_autofree char *path = g_strdup_printf ("models/presets/%s.ini", pr->name);
        GError *local = NULL;
        PsParams *p = ps_params_read (path, pr->text, &local);
        if (!p)
          g_error ("compiled-in preset %s", local->message);
        /* A preset's values are the run's starting point: checks name the
         * option that changes them, not a line of a compiled-in file. */
        for (int i = 0; i < ps_param_store_n (p->st); i++)
          ps_param_store_reset_where (p->st, i);
        return p;
      }
  GString *known = g_string_new (NULL);
  for (const PsModelPreset *pr = ps_model_preset_table; pr->name; pr++)
    g_string_append_printf (known, "%s%s", known->len ? ", " : "", pr->name);
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "unknown preset '%s' (known: %s)", name, known->str);
  g_string_free (known, TRUE);
  return NULL;
}

const char *
ps_params_published_match (const PsParams *p, double *throughput)
{
  for (const PsModelPreset *pr = ps_model_preset_table; pr->name; pr++)
    {
      g_autoptr (PsParams) q = ps_model_preset_load (pr->name, NULL);
      if (q->family != p->family || q->published <= 0)
        continue;
      g_autofree char *d = ps_params_diff (p, q);
      if (*d == '\0')
        {
          if (throughput)
            *throughput = q->published;
          return pr->name;
        }
    }
  if (throughput)
    *throughput = 0;
  return NULL;
}
