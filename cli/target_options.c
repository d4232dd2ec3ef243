/* The target's options of commands without a model: see target_options.h. */
#include "config.h"

#include "cli/target_options.h"

#include <string.h>

#include "cli/model_options.h"
#include "common/error.h"

struct PsTargetOptions {
  const PsParamSpec **specs; /* the target's, then the command's extra ones */
  PsParamStore *store;       /* every spec; only `keys` have options */
  GPtrArray *keys;           /* of the command, borrowed strings */
  gboolean *given;           /* per store index */
  GPtrArray *strings;        /* what the entries point at */
  GOptionEntry *entries;
};

PsTargetOptions *
ps_target_options_new (const char *const *keys)
{
  return ps_target_options_new_with (keys, NULL, 0);
}

PsTargetOptions *
ps_target_options_new_with (const char *const *keys, const PsParamSpec *const *extra, int n_extra)
{
  PsTargetOptions *to = g_new0 (PsTargetOptions, 1);
  int n_target = 0;
  const PsParamSpec *const *target = ps_target_specs (&n_target);
  int n = n_target + n_extra;
  to->specs = g_new (const PsParamSpec *, n);
  memcpy (to->specs, target, sizeof *target * (gsize) n_target);
  if (n_extra)
    memcpy (to->specs + n_target, extra, sizeof *extra * (gsize) n_extra);
  to->store = ps_param_store_new (to->specs, n, "target");
  to->given = g_new0 (gboolean, n);
  to->keys = g_ptr_array_new ();
  for (int i = 0; keys[i]; i++)
    {
      g_return_val_if_fail (ps_param_store_find (to->store, keys[i]) >= 0, to);
      g_ptr_array_add (to->keys, (gpointer) keys[i]);
    }
  to->strings = g_ptr_array_new_with_free_func (g_free);
  return to;
}

void
ps_target_options_free (PsTargetOptions *to)
{
  if (!to)
    return;
  ps_param_store_free (to->store);
  g_free (to->specs);
  g_ptr_array_free (to->keys, TRUE);
  g_ptr_array_free (to->strings, TRUE);
  g_free (to->given);
  g_free (to->entries);
  g_free (to);
}

static gboolean
on_option (const char *name, const char *value, gpointer data, GError **error)
{
  PsTargetOptions *to = data;
  for (guint k = 0; k < to->keys->len; k++)
    {
      int i = ps_param_store_find (to->store, to->keys->pdata[k]);
      const char *text;
      if (!ps_cli_param_option_value (ps_param_store_spec (to->store, i), name, value, &text))
        continue;
      to->given[i] = TRUE;
      return ps_param_store_set (to->store, i, text, name, error);
    }
  g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_UNKNOWN_OPTION, "unknown option %s", name);
  return FALSE;
}

GOptionGroup *
ps_target_options_group (PsTargetOptions *to, const GOptionEntry *entries)
{
  GOptionGroup *g = g_option_group_new ("target", "Target options", "Show the target options", to, NULL);
  if (entries)
    g_option_group_add_entries (g, entries);
  g_free (to->entries);
  to->entries = g_new0 (GOptionEntry, 2 * to->keys->len + 1);
  int k = 0;
  for (guint i = 0; i < to->keys->len; i++)
    {
      const PsParamSpec *s = ps_param_store_spec (to->store, ps_param_store_find (to->store, to->keys->pdata[i]));
      k += ps_cli_param_entries (s, on_option, to->strings, to->entries + k);
    }
  g_option_group_add_entries (g, to->entries);
  return g;
}

gboolean
ps_target_options_given (const PsTargetOptions *to, const char *key)
{
  int i = ps_param_store_find (to->store, key);
  g_return_val_if_fail (i >= 0, FALSE);
  return to->given[i];
}

const char *
ps_target_options_str (const PsTargetOptions *to, const char *key)
{
  int i = ps_param_store_find (to->store, key);
  g_return_val_if_fail (i >= 0, "");
  return ps_param_store_str (to->store, i);
}

int64_t
ps_target_options_int (const PsTargetOptions *to, const char *key)
{
  int i = ps_param_store_find (to->store, key);
  g_return_val_if_fail (i >= 0, 0);
  return ps_param_store_int (to->store, i);
}

int
ps_target_options_mesh (const PsTargetOptions *to, const char *key, int64_t *dims)
{
  int i = ps_param_store_find (to->store, key);
  g_return_val_if_fail (i >= 0, 0);
  return ps_param_store_mesh (to->store, i, dims);
}

PsTarget *
ps_target_options_target (const PsTargetOptions *to, gboolean with_slice, GError **error)
{
  PsTarget *t = ps_target_from_store (to->store, with_slice, error);
  return t;
}
