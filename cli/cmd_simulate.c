/* podsim simulate: replays a step trace on a TPU slice with SimGrid and
 * reports step time, where each core's time went, MXU utilization, peak HBM
 * and ICI link load. Model: doc/simulator.md (also the --json keys and the
 * --links columns). */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/target_options.h"
#include "common/error.h"
#include "sim/replay.h"
#include "sim/results.h"
#include "topology/hardware.h"
#include "topology/platform.h"
#include "topology/slice.h"

static void
show_progress (const char *text, gpointer data)
{
  (void) data;
  ps_progress (TRUE, "podsim simulate: %s", text);
}

static int *
parse_devices (const char *text, int n_devices, int *n_out, GError **error)
{
  g_auto (GStrv) items = g_strsplit (text, ",", -1);
  int n = (int) g_strv_length (items);
  int *out = g_new (int, n > 0 ? n : 1);
  for (int i = 0; i < n; i++)
    {
      guint64 v;
      if (!g_ascii_string_to_unsigned (g_strstrip (items[i]), 10, 0, (guint64) n_devices - 1, &v,
                                       NULL))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                       "--timeline-devices: '%s' is not a device id (0..%d)", items[i],
                       n_devices - 1);
          g_free (out);
          return NULL;
        }
      out[i] = (int) v;
    }
  *n_out = n;
  return out;
}

int
ps_cmd_simulate (int argc, char **argv)
{
  g_autofree char *opt_timeline = NULL, *opt_links = NULL, *opt_tl_devices = NULL;
  gboolean opt_json = FALSE, opt_quiet = FALSE;
  static const char *const target_keys[] = { "slice", "wrap", "hw", "collectives", "cache", NULL };
  g_autoptr (PsTargetOptions) to = ps_target_options_new (target_keys);
  GOptionEntry entries[] = {
    { "json", 0, 0, G_OPTION_ARG_NONE, &opt_json, "Print one JSON object", NULL },
    { "timeline", 0, 0, G_OPTION_ARG_FILENAME, &opt_timeline,
      "Write a Chrome trace-event timeline (Perfetto)", "OUT.json" },
    { "timeline-devices", 0, 0, G_OPTION_ARG_STRING, &opt_tl_devices,
      "Devices on the timeline (default 0,1)", "LIST" },
    { "links", 0, 0, G_OPTION_ARG_FILENAME, &opt_links, "Write per-link bytes and utilization",
      "OUT.csv" },
    { "quiet", 'q', 0, G_OPTION_ARG_NONE, &opt_quiet,
      "No progress on stderr (shown on a terminal: reading, collectives simulated, replay passes)", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("TRACE - replay a step trace on a slice");
  g_option_context_set_main_group (ctx, ps_target_options_group (to, entries));
  g_option_context_set_description (ctx,
    "Replays TRACE (.pst or .pst.gz) on a SimGrid model of the slice (devices that\n"
    "behave alike replayed once; --no-cache: one SimGrid actor per TensorCore) and\n"
    "prints the step time, per-core compute / communication / exposed\n"
    "communication / idle, MXU utilization, peak HBM and ICI traffic.\n"
    "See doc/simulator.md.\n");
  if (!ps_cli_parse_one (ctx, &argc, &argv, "TRACE"))
    return PS_EXIT_USAGE;
  GError *error = NULL;
  /* A trace names no slice it must run on: the user says which. */
  if (!ps_target_options_given (to, "slice"))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--slice is required (e.g. --slice v3-512)");
      return ps_cli_fail (error);
    }
  g_autoptr (PsTarget) target = ps_target_options_target (to, TRUE, &error);
  if (!target)
    return ps_cli_fail (error);
  const PsHardware *hw = target->hw;
  const PsSlice *slice = target->slice;
  g_autoptr (PsPlatform) platform = ps_platform_new (slice, hw, &error);
  if (!platform)
    return ps_cli_fail (error);
  int n_tl = 0;
  g_autofree int *tl_devices = NULL;
  if (opt_timeline)
    {
      tl_devices = parse_devices (opt_tl_devices ? opt_tl_devices : "0,1",
                                  ps_slice_n_cores (slice), &n_tl, &error);
      if (!tl_devices)
        return ps_cli_fail (error);
    }
  gboolean progress = ps_progress_on (opt_quiet);
  PsReplayOptions opt = { hw, platform, !target->cache, tl_devices, n_tl, target->collectives,
                          progress ? show_progress : NULL, NULL };
  ps_progress (progress, "podsim simulate: reading %s ...", argv[1]);
  g_autoptr (PsReplayResult) r = ps_replay_file (argv[1], &opt, &error);
  ps_progress (progress, NULL);
  if (!r)
    return ps_cli_fail (error);
  /* Render everything before writing anything. */
  g_autofree char *links_csv = NULL;
  gsize links_len = 0;
  if (opt_links)
    links_csv = ps_replay_result_links_csv (r, &links_len);
  if (opt_timeline && !ps_timeline_write (r->timeline, opt_timeline, &error))
    return ps_cli_fail (error);
  if (opt_links && !ps_write_file_atomic (opt_links, links_csv, links_len, &error))
    return ps_cli_fail (error);
  g_autofree char *report = opt_json ? ps_replay_result_to_json (r) : ps_replay_result_to_text (r);
  fputs (report, stdout);
  if (opt_json)
    fputc ('\n', stdout);
  return 0;
}
