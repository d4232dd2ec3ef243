#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/checked.h"
#include "common/error.h"

int
ps_cli_fail (GError *error)
{
  fprintf (stderr, "podsim: %s\n", error ? error->message : "unknown error");
  if (error)
    g_error_free (error);
  return PS_EXIT_USAGE;
}

gboolean
ps_cli_parse (GOptionContext *ctx, int *argc, char ***argv)
{
  GError *error = NULL;
  if (!g_option_context_parse (ctx, argc, argv, &error))
    {
      fprintf (stderr, "%s: %s (see '%s --help')\n", g_get_prgname (), error->message,
               g_get_prgname ());
      g_error_free (error);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_cli_read_input (const char *path, char **out, gsize *len, GError **error)
{
  return ps_read_text_file (path, PS_MAX_TEXT_BYTES, out, len, error);
}

int
ps_cli_not_yet (const char *what)
{
  fprintf (stderr, "podsim: '%s' is not implemented yet\n", what);
  return PS_EXIT_USAGE;
}

void
ps_cli_propagate_options (PsPropagateOptions *o, const PsModule *m, gboolean to_output,
                          gboolean to_parameters)
{
  static const gboolean yes = TRUE, no = FALSE;
  ps_propagate_options_init (o);
  o->n_to_output = 1;
  o->to_output = to_output ? &yes : &no;
  if (!to_output && m->n_prop_to_output > 0)
    {
      o->n_to_output = m->n_prop_to_output;
      o->to_output = m->prop_to_output;
    }
  o->n_to_parameters = 1;
  o->to_parameters = to_parameters ? &yes : &no;
  if (!to_parameters && m->n_prop_to_params > 0)
    {
      o->n_to_parameters = m->n_prop_to_params;
      o->to_parameters = m->prop_to_params;
    }
}

gboolean
ps_cli_json_depth_ok (const char *line, const char *file, int line_no, GError **error)
{
  int depth = 0;
  gboolean in_string = FALSE;
  for (const char *c = line; *c; c++)
    {
      if (in_string)
        {
          if (*c == '\\' && c[1])
            c++;
          else if (*c == '"')
            in_string = FALSE;
        }
      else if (*c == '"')
        in_string = TRUE;
      else if (*c == '[' || *c == '{')
        {
          if (++depth > PS_MAX_NESTING)
            {
              ps_set_error_at (error, PS_ERROR_LIMIT, file, line_no, (int) (c - line) + 1,
                               "JSON nested more than %d deep (doc/robustness.md)", PS_MAX_NESTING);
              return FALSE;
            }
        }
      else if (*c == ']' || *c == '}')
        depth--;
    }
  return TRUE;
}
