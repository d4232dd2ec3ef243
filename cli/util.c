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

static void
group_help (const PsCommandGroup *g, FILE *out)
{
  fputs (g->usage, out);
  fputs ("\nCommands:\n", out);
  for (gsize i = 0; i < g->n_commands; i++)
    fprintf (out, "  %-12s %s\n", g->commands[i].name, g->commands[i].summary);
  if (g->footer)
    fprintf (out, "\n%s", g->footer);
}

int
ps_cli_dispatch (const PsCommandGroup *g, int argc, char **argv)
{
  if (argc < 2)
    {
      group_help (g, stderr);
      return PS_EXIT_USAGE;
    }
  const char *name = argv[1];
  if (strcmp (name, "--help") == 0 || strcmp (name, "-h") == 0)
    {
      group_help (g, stdout);
      return 0;
    }
  for (gsize i = 0; i < g->n_commands; i++)
    if (strcmp (name, g->commands[i].name) == 0)
      {
        g_autofree char *prg = g_strdup_printf ("%s %s", g->prefix, name);
        g_set_prgname (prg);
        char *saved = argv[1];
        argv[1] = prg;
        int rc = g->commands[i].fn (argc - 1, argv + 1);
        argv[1] = saved;
        return rc;
      }
  GString *known = g_string_new (NULL);
  for (gsize i = 0; i < g->n_commands; i++)
    g_string_append_printf (known, "%s%s", i ? ", " : "", g->commands[i].name);
  fprintf (stderr, "%s: unknown command '%s' (one of: %s; see '%s --help')\n", g->prefix, name, known->str,
           g->prefix);
  g_string_free (known, TRUE);
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
