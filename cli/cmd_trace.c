/* podsim trace: step-trace tools.
 *   podsim trace check FILE   validate a trace and print a summary
 *   podsim trace dump FILE    print a trace as plain text (canonical form) */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "traces/trace.h"

/* Bytes with the exact count, so scripts can compare. */
static void
print_bytes (const char *label, guint64 bytes)
{
  g_autofree char *h = ps_format_bytes ((double) bytes);
  printf ("%-18s %s (%" G_GUINT64_FORMAT " bytes)\n", label, h, bytes);
}

static int
trace_check (int argc, char **argv)
{
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE - validate a step trace");
  g_option_context_set_summary (ctx,
      "Reads a step trace (.pst or .pst.gz, '-' for standard input), checks every\n"
      "line, the end line's event count and checksum and the header totals, and\n"
      "prints a summary: devices, mesh, events by kind, FLOPs, HBM bytes and\n"
      "collective bytes by kind. Exit status 2 with one error line on bad input.");
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  if (argc != 2)
    {
      fprintf (stderr, "podsim trace check: expected one FILE (see --help)\n");
      return PS_EXIT_USAGE;
    }
  GError *error = NULL;
  g_autoptr (PsTraceReader) r = ps_trace_reader_open (argv[1], &error);
  if (!r)
    return ps_cli_fail (error);

  guint64 n_kind[4] = { 0 }, n_op[PS_TRACE_OP_COUNT] = { 0 };
  guint64 flops_op[PS_TRACE_OP_COUNT] = { 0 };
  guint64 n_coll[PS_TRACE_COLLECTIVE_COUNT] = { 0 }, bytes_coll[PS_TRACE_COLLECTIVE_COUNT] = { 0 };
  guint64 n_async = 0;
  for (;;)
    {
      const PsTraceEvent *e;
      if (!ps_trace_reader_next (r, &e, &error))
        return ps_cli_fail (error);
      if (!e)
        break;
      n_kind[e->kind]++;
      if (e->kind == PS_TRACE_EVENT_COMPUTE)
        {
          n_op[e->compute.op]++;
          flops_op[e->compute.op] += e->compute.flops;
        }
      else if (e->kind == PS_TRACE_EVENT_COLLECTIVE)
        {
          n_coll[e->collective.kind]++;
          bytes_coll[e->collective.kind] += e->collective.in_bytes;
          n_async += e->collective.async_id != 0;
        }
    }

  const PsTraceHeader *h = ps_trace_reader_header (r);
  printf ("%s: valid step trace, format version %u\n",
          strcmp (argv[1], "-") == 0 ? "<stdin>" : argv[1], h->version);
  printf ("%-18s %s\n", "program:", h->program);
  printf ("%-18s %" G_GUINT64_FORMAT "\n", "devices:", h->n_devices);
  GString *mesh = g_string_new (NULL);
  for (guint i = 0; i < h->mesh.rank; i++)
    g_string_append_printf (mesh, i ? "x%" G_GINT64_FORMAT : "%" G_GINT64_FORMAT,
                            h->mesh.dims[i]);
  static const char *const orders[] = { "arange", "arange_T", "nonpod2d", "list" };
  printf ("%-18s %s order %s\n", "mesh:", mesh->str, orders[h->mesh.order]);
  g_string_free (mesh, TRUE);
  if (h->slice)
    printf ("%-18s %s\n", "slice:", h->slice);
  printf ("%-18s %" G_GUINT64_FORMAT " (compute %" G_GUINT64_FORMAT ", collective %"
          G_GUINT64_FORMAT " of which async %" G_GUINT64_FORMAT ", memory %"
          G_GUINT64_FORMAT ")\n", "events:", h->totals.n_events,
          n_kind[PS_TRACE_EVENT_COMPUTE], n_kind[PS_TRACE_EVENT_COLLECTIVE], n_async,
          n_kind[PS_TRACE_EVENT_MEMORY]);
  for (int i = 0; i < PS_TRACE_OP_COUNT; i++)
    if (n_op[i])
      printf ("  compute %-14s %" G_GUINT64_FORMAT " events, %" G_GUINT64_FORMAT " FLOPs\n",
              ps_trace_op_kind_name ((PsTraceOpKind) i), n_op[i], flops_op[i]);
  printf ("%-18s %" G_GUINT64_FORMAT " (%.4g)\n", "FLOPs per device:", h->totals.flops,
          (double) h->totals.flops);
  print_bytes ("HBM read:", h->totals.read_bytes);
  print_bytes ("HBM written:", h->totals.write_bytes);
  print_bytes ("collective bytes:", h->totals.collective_bytes);
  for (int i = 0; i < PS_TRACE_COLLECTIVE_COUNT; i++)
    if (n_coll[i])
      {
        g_autofree char *b = ps_format_bytes ((double) bytes_coll[i]);
        printf ("  %-22s %" G_GUINT64_FORMAT " events, %s (%" G_GUINT64_FORMAT " bytes)\n",
                ps_trace_collective_kind_name ((PsTraceCollectiveKind) i), n_coll[i], b,
                bytes_coll[i]);
      }
  print_bytes ("peak memory:", h->totals.peak_bytes);
  return 0;
}

static int
trace_dump (int argc, char **argv)
{
  g_autoptr (GOptionContext) ctx = g_option_context_new ("FILE - print a step trace as text");
  g_option_context_set_summary (ctx,
      "Reads and validates a step trace (.pst or .pst.gz, '-' for standard input)\n"
      "and prints it as plain text in canonical form (doc/trace-format.md).");
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  if (argc != 2)
    {
      fprintf (stderr, "podsim trace dump: expected one FILE (see --help)\n");
      return PS_EXIT_USAGE;
    }
  GError *error = NULL;
  g_autoptr (PsTrace) t = ps_trace_read (argv[1], &error);
  if (!t)
    return ps_cli_fail (error);
  gsize len;
  g_autofree char *text = ps_trace_to_text (t, &len);
  fwrite (text, 1, len, stdout);
  return 0;
}

static const struct {
  const char *name;
  const char *summary;
  int (*fn) (int argc, char **argv);
} subcommands[] = {
  { "check", "validate a step trace and print a summary", trace_check },
  { "dump", "print a step trace as plain text", trace_dump },
};

int
ps_cmd_trace (int argc, char **argv)
{
  if (argc >= 2 && (strcmp (argv[1], "--help") == 0 || strcmp (argv[1], "-h") == 0))
    {
      printf ("Usage: podsim trace COMMAND [OPTION...] FILE\n\nStep-trace tools.\n\n"
              "Commands:\n");
      for (gsize i = 0; i < G_N_ELEMENTS (subcommands); i++)
        printf ("  %-8s %s\n", subcommands[i].name, subcommands[i].summary);
      printf ("\nRun 'podsim trace COMMAND --help' for a command's options.\n");
      return 0;
    }
  if (argc < 2)
    {
      fprintf (stderr, "podsim trace: expected a command: check or dump (see --help)\n");
      return PS_EXIT_USAGE;
    }
  for (gsize i = 0; i < G_N_ELEMENTS (subcommands); i++)
    if (strcmp (argv[1], subcommands[i].name) == 0)
      {
        g_autofree char *prg = g_strdup_printf ("podsim trace %s", subcommands[i].name);
        g_set_prgname (prg);
        argv[1] = prg;
        return subcommands[i].fn (argc - 1, argv + 1);
      }
  fprintf (stderr, "podsim trace: unknown command '%s' (expected check or dump)\n", argv[1]);
  return PS_EXIT_USAGE;
}
