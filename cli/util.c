#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/commands.h"
#include "common/checked.h"
#include "common/error.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/ir/async.h"

int
ps_cli_fail (GError *error)
{
  fprintf (stderr, "podsim: %s\n", error ? error->message : "unknown error");
  if (error)
    g_error_free (error);
  return PS_EXIT_USAGE;
}

int
ps_cli_module_entries (PsCliModuleOptions *o, gboolean with_devices, GOptionEntry *out)
{
  int k = 0;
  if (with_devices)
    out[k++] = ps_cli_devices_entry (&o->devices);
  out[k++] = (GOptionEntry) { "to-output", 0, 0, G_OPTION_ARG_NONE, &o->to_output,
                              "Let propagation choose (or refine) the entry root's sharding (else the module "
                              "header decides; default: keep what the file says)", NULL };
  out[k++] = (GOptionEntry) { "to-parameters", 0, 0, G_OPTION_ARG_NONE, &o->to_parameters,
                              "Let propagation choose (or refine) the entry parameters' shardings", NULL };
  out[k++] = ps_cli_module_name_entry (&o->module_name);
  return k;
}

GOptionEntry
ps_cli_devices_entry (gint64 *devices)
{
  return (GOptionEntry) { "devices", 'n', 0, G_OPTION_ARG_INT64, devices,
                          "Number of devices (partitions)", "N" };
}

void
ps_cli_module_options_clear (PsCliModuleOptions *o)
{
  g_clear_pointer (&o->module_name, g_free);
}

GOptionEntry
ps_cli_module_name_entry (char **name)
{
  return (GOptionEntry) { "module", 0, 0, G_OPTION_ARG_STRING, name,
                          "Read the module NAME of a file holding several (default: the first)", "NAME" };
}

int
ps_cli_failf (const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  return ps_cli_fail (g_error_new_literal (PS_ERROR, PS_ERROR_OPTION, msg));
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

/* The child: runs fn, writes its result, exits without running atexit
 * handlers or flushing the parent's stdio buffers a second time. */
static void G_GNUC_NORETURN
isolated_child (int fd, PsIsolatedFn fn, gpointer data)
{
  GString *r = fn (data);
  const char *p = r->str;
  gsize left = r->len;
  while (left > 0)
    {
      ssize_t w = write (fd, p, left);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        break;
      p += w;
      left -= (gsize) w;
    }
  close (fd);
  _exit (0);
}

GString *
ps_cli_run_isolated (PsIsolatedFn fn, gpointer data, gint64 timeout_s, char **why)
{
  *why = NULL;
  int fds[2];
  if (pipe (fds) != 0)
    {
      *why = g_strdup_printf ("pipe: %s", g_strerror (errno));
      return NULL;
    }
  fflush (stdout);
  fflush (stderr);
  pid_t pid = fork ();
  if (pid < 0)
    {
      *why = g_strdup_printf ("fork: %s", g_strerror (errno));
      close (fds[0]);
      close (fds[1]);
      return NULL;
    }
  if (pid == 0)
    {
      close (fds[0]);
      isolated_child (fds[1], fn, data);
    }
  close (fds[1]);
  /* Read until the child closes the pipe or the time runs out. */
  GString *out = g_string_new (NULL);
  gint64 deadline = g_get_monotonic_time () + timeout_s * G_USEC_PER_SEC;
  gboolean timed_out = FALSE;
  for (;;)
    {
      gint64 left = deadline - g_get_monotonic_time ();
      if (left <= 0)
        {
          timed_out = TRUE;
          break;
        }
      fd_set rd;
      FD_ZERO (&rd);
      FD_SET (fds[0], &rd);
      struct timeval tv = { (time_t) (left / G_USEC_PER_SEC), (suseconds_t) (left % G_USEC_PER_SEC) };
      int r = select (fds[0] + 1, &rd, NULL, NULL, &tv);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0)
        {
          timed_out = r == 0;
          break;
        }
      char chunk[4096];
      ssize_t n = read (fds[0], chunk, sizeof chunk);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        break;
      g_string_append_len (out, chunk, n);
    }
  close (fds[0]);
  if (timed_out)
    kill (pid, SIGKILL);
  int status = 0;
  while (waitpid (pid, &status, 0) < 0 && errno == EINTR)
    ;
  if (timed_out)
    *why = g_strdup_printf ("timed out after %" G_GINT64_FORMAT " s", timeout_s);
  else if (WIFSIGNALED (status))
    *why = g_strdup_printf ("crashed (signal %d: %s)", WTERMSIG (status), g_strsignal (WTERMSIG (status)));
  else if (!WIFEXITED (status) || WEXITSTATUS (status) != 0)
    *why = g_strdup_printf ("exited with status %d", WIFEXITED (status) ? WEXITSTATUS (status) : -1);
  return out;
}

/* Option names (without "--") of every boolean parameter this process
 * declared (ps_cli_bool_option_add), for ps_cli_param_argv_rewrite;
 * interned strings. */
static GHashTable *
bool_option_names (void)
{
  static GHashTable *names;
  if (!names)
    names = g_hash_table_new (g_str_hash, g_str_equal);
  return names;
}

void
ps_cli_bool_option_add (const char *name)
{
  g_hash_table_add (bool_option_names (), (gpointer) g_intern_string (name));
}

gboolean
ps_cli_param_argv_rewrite (int argc, char **argv, GError **error)
{
  GHashTable *names = bool_option_names ();
  for (int i = 1; i < argc; i++)
    {
      const char *a = argv[i];
      if (strcmp (a, "--") == 0)
        break;
      if (!g_str_has_prefix (a, "--"))
        continue;
      const char *eq = strchr (a, '=');
      g_autofree char *name = eq ? g_strndup (a + 2, (gsize) (eq - a - 2)) : g_strdup (a + 2);
      gboolean negated = g_str_has_prefix (name, "no-") && g_hash_table_contains (names, name + 3);
      if (!negated && !g_hash_table_contains (names, name))
        continue;
      const char *o = negated ? name + 3 : name;
      if (negated && eq)
        {
          g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                       "--no-%s takes no value: write --no-%s, --%s=false or --%s=true", o, o, o, o);
          return FALSE;
        }
      if (eq)
        {
          if (strcmp (eq + 1, "true") != 0 && strcmp (eq + 1, "false") != 0)
            {
              g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE, "--%s: '%s' is not true or false",
                           o, eq + 1);
              return FALSE;
            }
          g_autofree char *form = g_strdup_printf ("--%s%s", strcmp (eq + 1, "true") == 0 ? "" : "no-", o);
          argv[i] = (char *) g_intern_string (form);
          continue;
        }
      /* "--remat false" would leave "false" as a positional word (a
       * family of that name): say how to write it instead. */
      if (i + 1 < argc && (strcmp (argv[i + 1], "true") == 0 || strcmp (argv[i + 1], "false") == 0))
        {
          if (negated)
            g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                         "--no-%s takes no value: write --no-%s, --%s=false or --%s=true", o, o, o, o);
          else
            g_set_error (error, G_OPTION_ERROR, G_OPTION_ERROR_BAD_VALUE,
                         "--%s %s: a boolean option takes its value after '=' (--%s=%s)", o, argv[i + 1], o,
                         argv[i + 1]);
          return FALSE;
        }
    }
  return TRUE;
}

gboolean
ps_cli_parse (GOptionContext *ctx, int *argc, char ***argv)
{
  GError *error = NULL;
  /* GLib converts option values from the locale's encoding and says only
   * "Invalid byte sequence in conversion input": name the argument. */
  g_autofree char *bad = NULL;
  for (int i = 1; i < *argc && !bad; i++)
    if (!g_utf8_validate ((*argv)[i], -1, NULL))
      bad = g_strescape ((*argv)[i], NULL);
  if (!ps_cli_param_argv_rewrite (*argc, *argv, &error) || !g_option_context_parse (ctx, argc, argv, &error))
    {
      if (bad && error->domain == G_CONVERT_ERROR)
        fprintf (stderr, "%s: the argument '%s' is not UTF-8 text (bytes shown as octal escapes)\n",
                 g_get_prgname (), bad);
      else
        fprintf (stderr, "%s: %s (see '%s --help')\n", g_get_prgname (), error->message,
                 g_get_prgname ());
      g_error_free (error);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_cli_parse_one (GOptionContext *ctx, int *argc, char ***argv, const char *what)
{
  if (!ps_cli_parse (ctx, argc, argv))
    return FALSE;
  if (*argc == 2)
    return TRUE;
  fprintf (stderr, "%s: expected one %s (see '%s --help')\n", g_get_prgname (), what, g_get_prgname ());
  return FALSE;
}

PsModule *
ps_cli_load_unpartitioned (const char *path, const char *module_name, GError **error)
{
  PsModule *m = ps_hlo_load (path, module_name, error);
  if (m && ps_async_module_is_partitioned (m))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED, "%s: the module is already partitioned (a per-device "
                   "SPMD program: entry '%s', no shardings, partition-id or collectives); 'podsim run %s' "
                   "lowers and simulates it as it is", path, m->entry->name, path);
      g_clear_pointer (&m, ps_module_free);
    }
  return m;
}

gboolean
ps_cli_read_input (const char *path, char **out, gsize *len, GError **error)
{
  return ps_read_text_file (path, PS_MAX_TEXT_BYTES, out, len, error);
}

