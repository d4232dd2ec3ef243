/* The registry of model families, model files and presets: see family.h.
 * This file sits above the families' own files (models/<name>_family.c)
 * and the model files they build, which call only family.c: so the
 * registry calls down and nothing calls back up into it. */
#include "config.h"

#include "models/family.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/checked.h"
#include "common/error.h"
#include "models/family_private.h"

/* ---- the registry ------------------------------------------------------------- */

static const char *const sections[] = { "model", "parallelism", "slice", "options", NULL };

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
              /* The file may be saved anywhere: name paths absolutely.
               * Joined to the working folder, not canonicalized: that
               * drops a trailing '/', and 'run /' became 'run ', whose
               * space the reader trims, so the printed file did not
               * print itself (fuzz_model, session 7). */
              g_autofree char *cwd = g_get_current_dir ();
              char *abs = g_build_filename (cwd, v, NULL);
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
