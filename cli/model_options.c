/* Model options derived from the family registry: see model_options.h. */
#include "config.h"

#include "cli/model_options.h"
#include "cli/commands.h"

#include <string.h>

#include "common/error.h"

typedef struct {
  int spec;                  /* index in the family's specs */
  char *value;
  char *where;               /* "--layers" */
  gboolean append;           /* a list option: add to the list */
} Override;

struct PsModelOptions {
  const PsModelFamily *family;
  const GOptionEntry *command_entries;
  char *base_option;         /* "--grid": a file that may hold the base */
  char *base_file;           /* its value, when the file has a [model] */
  char *preset, *config;
  char **sets;               /* --set KEY=VALUE, in order (also in overrides) */
  GArray *overrides;         /* Override, command-line order */
  GPtrArray *strings;        /* option names and descriptions the entries point to */
  GOptionEntry *entries;
};

static void
override_clear (gpointer p)
{
  Override *o = p;
  g_free (o->value);
  g_free (o->where);
}

/* Does option `arg` ("--x", "-x") take the next argument as its value?
 * Known from the command's entries and every family's specs, so the scan
 * before parsing can tell option values from positional words. */
static gboolean
takes_value (const GOptionEntry *entries, const char *arg)
{
  static const char *model[] = { "--preset", "--config", "--set" };
  for (gsize i = 0; i < G_N_ELEMENTS (model); i++)
    if (strcmp (arg, model[i]) == 0)
      return TRUE;
  for (const GOptionEntry *e = entries; e && e->long_name; e++)
    {
      gboolean value = e->arg != G_OPTION_ARG_NONE && !(e->flags & G_OPTION_FLAG_NO_ARG);
      if ((g_str_has_prefix (arg, "--") && strcmp (arg + 2, e->long_name) == 0)
          || (arg[0] == '-' && arg[1] == e->short_name && arg[1] && !arg[2]))
        return value;
    }
  if (!g_str_has_prefix (arg, "--"))
    return FALSE;
  for (const PsModelFamily *const *f = ps_model_families (); *f; f++)
    for (int i = 0; i < ps_model_family_n_specs (*f); i++)
      {
        const PsParamSpec *s = ps_model_family_spec (*f, i);
        if (s->type != PS_PARAM_BOOL && strcmp (arg + 2, ps_param_option (s)) == 0)
          return TRUE;
      }
  return FALSE;
}

/* The values of --preset, --config and the base option ("--x V" or
 * "--x=V") and the first positional word of argv. transfer none. */
static void
prescan (int argc, char **argv, const GOptionEntry *entries, const char *base_option,
         const char **preset, const char **config, const char **base, const char **word)
{
  *preset = *config = *base = *word = NULL;
  for (int i = 1; i < argc; i++)
    {
      const char *a = argv[i];
      if (strcmp (a, "--") == 0)
        {
          if (!*word && i + 1 < argc)
            *word = argv[i + 1];
          break;
        }
      if (a[0] != '-' || a[1] == '\0')
        {
          if (!*word)
            *word = a;
          continue;
        }
      const char *eq = strchr (a, '=');
      gsize n = eq ? (gsize) (eq - a) : strlen (a);
      const char **slot = NULL;
      if (n == 8 && strncmp (a, "--preset", n) == 0)
        slot = preset;
      else if (n == 8 && strncmp (a, "--config", n) == 0)
        slot = config;
      else if (base_option && n == strlen (base_option) && strncmp (a, base_option, n) == 0)
        slot = base;
      if (slot && eq)
        *slot = eq + 1;
      else if (!eq && takes_value (entries, a) && i + 1 < argc)
        {
          if (slot)
            *slot = argv[i + 1];
          i++;
        }
    }
}

/* A positional word that is a file name rather than a family: it has a
 * '.' or a '/' ("model.hlo", "./dump"). */
static gboolean
is_file_word (const char *w)
{
  return strchr (w, '.') || strchr (w, '/');
}

/* The family that reads files: the one with a PATH key `file`. */
static const PsModelFamily *
file_family (void)
{
  for (const PsModelFamily *const *f = ps_model_families (); *f; f++)
    {
      const PsParamSpec *s = ps_model_family_find_spec (*f, "file");
      if (s && s->type == PS_PARAM_PATH && strcmp (s->section, "model") == 0)
        return *f;
    }
  return NULL;
}

static const char *const grid_sections[] = { "vary", "sweep", NULL };

/* Does the base file hold a model ([model] section)? */
static gboolean
base_has_model (const char *path)
{
  g_autofree char *text = ps_ini_load_text (path, NULL);
  gboolean found = FALSE;
  g_autoptr (GPtrArray) e = text ? ps_ini_read_section (path, text, grid_sections, "model", &found, NULL) : NULL;
  return e && found;
}

PsModelOptions *
ps_model_options_new (int argc, char **argv, const GOptionEntry *entries, const char *base_option)
{
  PsModelOptions *mo = g_new0 (PsModelOptions, 1);
  mo->command_entries = entries;
  mo->base_option = g_strdup (base_option);
  mo->overrides = g_array_new (FALSE, TRUE, sizeof (Override));
  g_array_set_clear_func (mo->overrides, override_clear);
  mo->strings = g_ptr_array_new_with_free_func (g_free);
  const char *preset, *config, *base, *word;
  prescan (argc, argv, entries, base_option, &preset, &config, &base, &word);
  if (base && base_has_model (base))
    {
      mo->base_file = g_strdup (base);
      g_autofree char *text = ps_ini_load_text (base, NULL);
      g_autoptr (PsParams) p = ps_params_read_extra (base, text, grid_sections, NULL);
      if (p && !preset && !config)
        mo->family = ps_params_family (p);
    }
  if (mo->family)
    ;
  else if (preset)
    {
      g_autoptr (PsParams) p = ps_model_preset_load (preset, NULL);
      if (p)
        mo->family = ps_params_family (p);
    }
  else if (config)
    {
      g_autoptr (PsParams) p = ps_params_load (config, NULL);
      if (p)
        mo->family = ps_params_family (p);
    }
  if (!mo->family && word)
    mo->family = is_file_word (word) ? file_family () : ps_model_family_find (word, NULL);
  if (!mo->family)
    mo->family = ps_model_families ()[0];
  return mo;
}

void
ps_model_options_free (PsModelOptions *mo)
{
  if (!mo)
    return;
  g_free (mo->preset);
  g_free (mo->config);
  g_free (mo->base_option);
  g_free (mo->base_file);
  g_strfreev (mo->sets);
  g_array_free (mo->overrides, TRUE);
  g_ptr_array_free (mo->strings, TRUE);
  g_free (mo->entries);
  g_free (mo);
}

/* Strings the entries point at live as long as `keep`. */
static const char *
kept (GPtrArray *keep, char *s)
{
  g_ptr_array_add (keep, s);
  return s;
}

static gboolean
on_option (const char *name, const char *value, gpointer data, GError **error)
{
  PsModelOptions *mo = data;
  int n = ps_model_family_n_specs (mo->family);
  for (int i = 0; i < n; i++)
    {
      const PsParamSpec *s = ps_model_family_spec (mo->family, i);
      const char *text;
      if (!ps_cli_param_option_value (s, name, value, &text))
        continue;
      Override ov = { i, g_strdup (text), g_strdup (name), s->type == PS_PARAM_LIST };
      g_array_append_val (mo->overrides, ov);
      return TRUE;
    }
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_UNKNOWN_OPTION, "unknown option %s", name);
  return FALSE;
}

/* --set KEY=VALUE: any parameter by its key (what sweeps and searches pass
 * to the runs they start). */
static gboolean
on_set (const char *name, const char *value, gpointer data, GError **error)
{
  PsModelOptions *mo = data;
  const char *eq = strchr (value, '=');
  g_autofree char *key = eq ? g_strndup (value, (gsize) (eq - value)) : g_strdup (value);
  const PsParamSpec *s = ps_model_family_find_spec (mo->family, key);
  if (!eq || !s)
    {
      g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                   eq ? "%s %s: '%s' is not a parameter of model family %s"
                      : "%s %s: expected KEY=VALUE", name, value, key, mo->family->name);
      return FALSE;
    }
  int n = ps_model_family_n_specs (mo->family), i = 0;
  while (i < n && ps_model_family_spec (mo->family, i) != s)
    i++;
  Override ov = { i, g_strdup (eq + 1), g_strdup_printf ("--set %s", s->key), FALSE };
  g_array_append_val (mo->overrides, ov);
  return TRUE;
}

GOptionGroup *
ps_model_options_group (PsModelOptions *mo)
{
  GOptionGroup *g = g_option_group_new ("model", "Model options", "Show the model options", mo, NULL);
  if (mo->command_entries)
    g_option_group_add_entries (g, mo->command_entries);
  int n = ps_model_family_n_specs (mo->family);
  g_free (mo->entries);
  mo->entries = g_new0 (GOptionEntry, 2 * n + 4);
  int k = 0;
  mo->entries[k++] = (GOptionEntry) { "preset", 0, 0, G_OPTION_ARG_STRING, &mo->preset,
    "Start from a published configuration (models/presets/NAME.ini)", "NAME" };
  mo->entries[k++] = (GOptionEntry) { "config", 0, 0, G_OPTION_ARG_FILENAME, &mo->config,
    "Start from a model file (write one with --print-config; doc/models.md)", "FILE.ini" };
  mo->entries[k++] = (GOptionEntry) { "set", 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) on_set,
    "Set any parameter by its model-file key (repeatable)", "KEY=VALUE" };
  for (int i = 0; i < n; i++)
    k += ps_cli_param_entries (ps_model_family_spec (mo->family, i), on_option, mo->strings, mo->entries + k);
  g_option_group_add_entries (g, mo->entries);
  return g;
}

int
ps_cli_param_entries (const PsParamSpec *s, GOptionArgFunc cb, GPtrArray *keep, GOptionEntry *out)
{
  const char *arg = s->type == PS_PARAM_INT ? "N"
                    : s->type == PS_PARAM_FLOAT ? "X"
                    : s->type == PS_PARAM_MESH ? "AxB"
                    : s->type == PS_PARAM_PATH ? "FILE"
                    : s->type == PS_PARAM_CHOICE ? kept (keep, g_strdelimit (g_strdup (ps_param_choices (s)), "|", ','))
                    : s->type == PS_PARAM_LIST ? "ITEM"
                    : "TEXT";
  const char *doc = s->type == PS_PARAM_BOOL
    ? kept (keep, g_strdup_printf ("%s (default %s; --no-%s: %s)", ps_param_doc (s), s->def, ps_param_option (s),
                                   strcmp (s->def, "true") == 0 ? "off" : "off, the default"))
    : kept (keep, *s->def ? g_strdup_printf ("%s (default %s)", ps_param_doc (s), s->def)
                          /* not "none", which reads as a value (--sharding none) */
                          : g_strdup_printf ("%s (default: not set)", ps_param_doc (s)));
  if (s->type != PS_PARAM_BOOL)
    {
      out[0] = (GOptionEntry) { ps_param_option (s), 0, 0, G_OPTION_ARG_CALLBACK, (gpointer) cb, doc, arg };
      return 1;
    }
  /* Both forms take no value from GLib: a GLib optional value would also
   * swallow the next word ("--remat moe" read "moe" as the value), and a
   * GLib no-value option silently drops what follows "=". "--x=true" and
   * "--x=false" are rewritten to "--x" and "--no-x" before parsing
   * (ps_cli_param_argv_rewrite), which also refuses the other spellings. */
  ps_cli_bool_option_add (ps_param_option (s));
  out[0] = (GOptionEntry) { ps_param_option (s), 0, G_OPTION_FLAG_NO_ARG, G_OPTION_ARG_CALLBACK, (gpointer) cb,
                            doc, NULL };
  out[1] = (GOptionEntry) { kept (keep, g_strdup_printf ("no-%s", ps_param_option (s))), 0,
                            G_OPTION_FLAG_NO_ARG | G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_CALLBACK, (gpointer) cb,
                            NULL, NULL };
  return 2;
}

gboolean
ps_cli_param_option_value (const PsParamSpec *s, const char *name, const char *value, const char **text)
{
  const char *opt = name + 2;
  const char *o = ps_param_option (s);
  gboolean negated = s->type == PS_PARAM_BOOL && g_str_has_prefix (opt, "no-") && strcmp (opt + 3, o) == 0;
  if (strcmp (opt, o) != 0 && !negated)
    return FALSE;
  *text = s->type == PS_PARAM_BOOL ? (negated ? "false" : "true") : value;
  return TRUE;
}

PsParams *
ps_model_options_params (PsModelOptions *mo, const char *word, GError **error)
{
  const char *family = word && !is_file_word (word) ? word : NULL;
  if (mo->preset && mo->config)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--preset and --config exclude each other");
      return NULL;
    }
  if (mo->base_file && (mo->preset || mo->config))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s holds a model: --preset and --config "
                   "exclude it", mo->base_option, mo->base_file);
      return NULL;
    }
  g_autoptr (PsParams) p = NULL;
  if (mo->preset)
    p = ps_model_preset_load (mo->preset, error);
  else if (mo->config)
    p = ps_params_load (mo->config, error);
  else if (mo->base_file)
    {
      g_autofree char *text = ps_ini_load_text (mo->base_file, error);
      p = text ? ps_params_read_extra (mo->base_file, text, grid_sections, error) : NULL;
    }
  else
    p = ps_params_new (mo->family);
  if (!p)
    return NULL;
  if (word && !family)
    {
      /* FILE for the family that reads files. */
      const PsModelFamily *ff = file_family ();
      if (!ff || ps_params_family (p) != ff)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: a file only for %s runs, not %s ones", word,
                       ff ? ff->name : "file-reading", ps_params_family (p)->name);
          return NULL;
        }
      if (!ps_params_set (p, "file", word, "--file", error))
        return NULL;
    }
  if (family)
    {
      const PsModelFamily *f = ps_model_family_find (family, error);
      if (!f)
        return NULL;
      if (f != ps_params_family (p))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s is a %s model, not %s",
                       mo->preset ? "--preset" : "--config", mo->preset ? mo->preset : mo->config,
                       ps_params_family (p)->name, f->name);
          return NULL;
        }
    }
  /* The options were made for the family found before parsing. */
  if (ps_params_family (p) != mo->family)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "give --preset or --config once");
      return NULL;
    }
  for (guint i = 0; i < mo->overrides->len; i++)
    {
      Override *o = &g_array_index (mo->overrides, Override, i);
      const PsParamSpec *s = ps_model_family_spec (mo->family, o->spec);
      if (!(o->append ? ps_params_append : ps_params_set) (p, s->key, o->value, o->where, error))
        return NULL;
    }
  return g_steal_pointer (&p);
}

PsParams *
ps_model_options_params_argv (PsModelOptions *mo, int argc, char **argv, GError **error)
{
  if (argc > 2)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "expected at most one FAMILY or FILE (see '%s --help')",
                   g_get_prgname ());
      return NULL;
    }
  return ps_model_options_params (mo, argc == 2 ? argv[1] : NULL, error);
}

char *
ps_model_options_name (const PsModelOptions *mo, const PsParams *p, double *published)
{
  const char *row = ps_params_published_match (p, published);
  if (!row)
    row = ps_params_series_match (p);
  if (row)
    return g_strdup (row);
  g_autoptr (PsParams) base = NULL;
  g_autofree char *base_name = NULL;
  if (mo->preset)
    {
      base = ps_model_preset_load (mo->preset, NULL);
      base_name = g_strdup (mo->preset);
    }
  else if (mo->config || mo->base_file)
    {
      const char *path = mo->config ? mo->config : mo->base_file;
      g_autofree char *text = ps_ini_load_text (path, NULL);
      base = text ? ps_params_read_extra (path, text, grid_sections, NULL) : NULL;
      g_autofree char *b = g_path_get_basename (path);
      base_name = g_str_has_suffix (b, ".ini") ? g_strndup (b, strlen (b) - 4) : g_strdup (b);
    }
  if (!base || ps_params_family (base) != ps_params_family (p))
    {
      const PsParamSpec *file = ps_model_family_find_spec (ps_params_family (p), "file");
      if (file && *ps_params_str (p, "file"))
        return g_path_get_basename (ps_params_str (p, "file"));
      return g_strdup (ps_params_family (p)->name);
    }
  g_autofree char *diff = ps_params_diff (p, base);
  if (*diff)
    return g_strdup_printf ("%s modified (%s)", base_name, diff);
  return g_steal_pointer (&base_name);
}
