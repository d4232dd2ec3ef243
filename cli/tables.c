/* What every table of `podsim tables` shares (tables.h): each row a child
 * `podsim run --json`, and reading its figures back. The tables themselves
 * (cmd_tables*.c) call into this file, never into each other. */
#include "config.h"

#include <math.h>
#include <string.h>

#include "cli/tables.h"
#include "common/error.h"

JsonParser *
ps_tables_run (const char *const *args, const PsTablesOptions *ro, GError **error)
{
  GPtrArray *argv = g_ptr_array_new ();
  g_ptr_array_add (argv, "/proc/self/exe");
  g_ptr_array_add (argv, "run");
  for (int i = 0; args[i]; i++)
    g_ptr_array_add (argv, (gpointer) args[i]);
  g_ptr_array_add (argv, "--json");
  g_ptr_array_add (argv, "-q");
  if (ro->hw)
    {
      g_ptr_array_add (argv, "--hw");
      g_ptr_array_add (argv, (gpointer) ro->hw);
    }
  if (ro->collectives)
    {
      g_ptr_array_add (argv, "--collectives");
      g_ptr_array_add (argv, (gpointer) ro->collectives);
    }
  if (ro->schedule)
    {
      g_ptr_array_add (argv, "--schedule");
      g_ptr_array_add (argv, (gpointer) ro->schedule);
    }
  if (ro->buffer_tiling)
    {
      g_ptr_array_add (argv, "--buffer-tiling");
      g_ptr_array_add (argv, (gpointer) ro->buffer_tiling);
    }
  g_ptr_array_add (argv, NULL);
  g_autofree char *out = NULL, *err = NULL;
  int status = 0;
  gboolean spawned = g_spawn_sync (NULL, (char **) argv->pdata, NULL, G_SPAWN_DEFAULT, NULL, NULL,
                                   &out, &err, &status, error);
  g_ptr_array_free (argv, TRUE);
  if (!spawned)
    return NULL;
  if (!g_spawn_check_wait_status (status, NULL))
    {
      g_strstrip (err);
      const char *msg = g_str_has_prefix (err, "podsim: ") ? err + 8 : err;
      g_set_error (error, PS_ERROR,
                   g_str_has_prefix (msg, "the model does not fit") ? PS_ERROR_NO_FIT : PS_ERROR_INVALID,
                   "%s", *msg ? msg : "podsim run failed");
      return NULL;
    }
  JsonParser *parser = json_parser_new ();
  if (!json_parser_load_from_data (parser, out, -1, error))
    {
      g_object_unref (parser);
      return NULL;
    }
  return parser;
}

double
ps_tables_peak_of_message (const char *msg)
{
  const char *p = strstr (msg, "peak ");
  if (!p)
    return 0;
  char *end = NULL;
  double v = g_ascii_strtod (p + 5, &end);
  while (end && *end == ' ')
    end++;
  if (!end)
    return 0;
  static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB" };
  for (int u = 4; u >= 0; u--)
    if (g_str_has_prefix (end, units[u]))
      return v * pow (1024.0, u);
  return 0;
}
