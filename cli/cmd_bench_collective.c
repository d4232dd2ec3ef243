/* podsim bench collective: simulates one collective on an idle slice and
 * prints its time, algorithm bandwidth and bus bandwidth, so a user can see
 * what group placement, wrap links and size do to a collective. The
 * algorithms and their closed forms: doc/collectives.md; keys of --json:
 * doc/simulator.md. */
#include "config.h"

#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "common/error.h"
#include "sim/collectives.h"
#include "sim/sgnet.h"
#include "topology/hardware.h"
#include "topology/platform.h"
#include "topology/slice.h"

/* Groups of cores from --groups: x (rows of chips along x), y, xy/all, or an
 * explicit list of device ids "0,1,2,3;4,5,6,7" (braces allowed) mapped by
 * the default device assignment. Returns n_groups x group_size cores.
 * A row lists its cores in the order a ring wants (the order Lingvo's
 * GetNonPod2dMesh and ZigzagOrderOnDeviceMesh give a mesh dimension): with
 * wrap links c0, c1 of each chip in turn; without, core 0 out along the row
 * and core 1 back (one core per chip: zig-zag). */
static int *
parse_groups (const PsSlice *s, const char *spec, int *n_groups, int *group_size, GError **error)
{
  int X = s->chips_x, Y = s->chips_y, C = s->cores_per_chip;
  int n_cores = ps_slice_n_cores (s);
  if (strcmp (spec, "x") == 0 || strcmp (spec, "y") == 0)
    {
      gboolean along_x = spec[0] == 'x';
      *n_groups = along_x ? Y : X;
      *group_size = (along_x ? X : Y) * C;
      int n = along_x ? X : Y;
      gboolean wraps = along_x ? s->wrap_x : s->wrap_y;
      int *cores = g_new (int, n_cores);
      for (int o = 0; o < *n_groups; o++)
        for (int j = 0; j < n; j++)
          for (int c = 0; c < C; c++)
            {
              int pos, at = j;
              if (wraps || C > 2)
                pos = j * C + c;
              else if (C == 2)
                pos = c == 0 ? j : 2 * n - 1 - j;
              else
                {
                  /* zig-zag: position i holds chip 2i, or 2(n-i)-1 past the end */
                  pos = j;
                  at = 2 * j < n ? 2 * j : (n - j) * 2 - 1;
                }
              cores[o * *group_size + pos] = along_x ? ps_slice_core_index (s, at, o, c)
                                                     : ps_slice_core_index (s, o, at, c);
            }
      return cores;
    }
  if (strcmp (spec, "xy") == 0 || strcmp (spec, "all") == 0)
    {
      *n_groups = 1;
      *group_size = n_cores;
      int *cores = g_new (int, n_cores);
      for (int i = 0; i < n_cores; i++)
        cores[i] = i;
      return cores;
    }
  g_autofree char *text = g_strdup (spec);
  g_strdelimit (text, "{", ' ');
  g_autofree char *norm = NULL;
  {
    g_auto (GStrv) parts = g_strsplit (text, "},", -1);
    norm = g_strjoinv (";", parts);
  }
  g_strdelimit (norm, "}", ' ');
  g_auto (GStrv) groups = g_strsplit (norm, ";", -1);
  GArray *cores = g_array_new (FALSE, FALSE, sizeof (int));
  int size = -1, n = 0;
  for (int g = 0; groups[g]; g++)
    {
      g_auto (GStrv) ids = g_strsplit (groups[g], ",", -1);
      int count = 0;
      for (int i = 0; ids[i]; i++)
        {
          guint64 v;
          char *t = g_strstrip (ids[i]);
          if (!g_ascii_string_to_unsigned (t, 10, 0, (guint64) n_cores - 1, &v, NULL))
            {
              g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                           "--groups: '%s' in group %d is not a device of %s (0..%d)", t, g + 1,
                           s->name, n_cores - 1);
              g_array_unref (cores);
              return NULL;
            }
          int c = (int) v;
          g_array_append_val (cores, c);
          count++;
        }
      if (size >= 0 && count != size)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                       "--groups: group %d has %d devices, group 1 has %d (all must be equal)",
                       g + 1, count, size);
          g_array_unref (cores);
          return NULL;
        }
      size = count;
      n++;
    }
  if (size < 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "--groups: '%s' is not x, y, xy, all or a list like 0,1;2,3", spec);
      g_array_unref (cores);
      return NULL;
    }
  *n_groups = n;
  *group_size = size;
  return (int *) g_array_free (cores, FALSE);
}

static char *
to_json (const PsSlice *s, const char *op, const char *algorithm, const char *groups,
         int n_groups, int group_size, double bytes, double time_s, double algbw, double busbw)
{
  g_autoptr (JsonBuilder) b = json_builder_new ();
  json_builder_begin_object (b);
#define INT(key, v) (json_builder_set_member_name (b, key), json_builder_add_int_value (b, v))
#define DBL(key, v) (json_builder_set_member_name (b, key), json_builder_add_double_value (b, v))
#define STR(key, v) (json_builder_set_member_name (b, key), json_builder_add_string_value (b, v))
#define BOOL(key, v) (json_builder_set_member_name (b, key), json_builder_add_boolean_value (b, v))
  STR ("op", op);
  STR ("collectives", algorithm);
  STR ("slice", s->name);
  INT ("chips_x", s->chips_x);
  INT ("chips_y", s->chips_y);
  BOOL ("wrap_x", s->wrap_x);
  BOOL ("wrap_y", s->wrap_y);
  STR ("groups", groups);
  INT ("n_groups", n_groups);
  INT ("group_size", group_size);
  DBL ("bytes", bytes);
  DBL ("time_s", time_s);
  DBL ("algbw_bytes_per_s", algbw);
  DBL ("busbw_bytes_per_s", busbw);
#undef INT
#undef DBL
#undef STR
#undef BOOL
  json_builder_end_object (b);
  g_autoptr (JsonGenerator) gen = json_generator_new ();
  g_autoptr (JsonNode) root = json_builder_get_root (b);
  json_generator_set_root (gen, root);
  return json_generator_to_data (gen, NULL);
}

int
ps_cmd_bench_collective (int argc, char **argv)
{
  g_autofree char *opt_slice = NULL, *opt_op = NULL, *opt_bytes = NULL, *opt_groups = NULL;
  g_autofree char *opt_wrap = NULL, *opt_hw = NULL, *opt_coll = NULL;
  gboolean opt_json = FALSE;
  GOptionEntry entries[] = {
    { "slice", 0, 0, G_OPTION_ARG_STRING, &opt_slice, "Pod slice (v3-8 .. v3-2048)", "SLICE" },
    { "op", 0, 0, G_OPTION_ARG_STRING, &opt_op,
      "all-reduce, all-gather, reduce-scatter, all-to-all or collective-permute", "OP" },
    { "bytes", 0, 0, G_OPTION_ARG_STRING, &opt_bytes,
      "Per-device buffer (64MiB, 1GB, 4096)", "SIZE" },
    { "groups", 0, 0, G_OPTION_ARG_STRING, &opt_groups,
      "x, y, xy, all (default) or device lists 0,1;2,3", "GROUPS" },
    { "wrap", 0, 0, G_OPTION_ARG_STRING, &opt_wrap, "Wrap links: auto (default), on, off", "MODE" },
    { "hw", 0, 0, G_OPTION_ARG_FILENAME, &opt_hw, "Hardware file (default: bundled TPU v3)", "FILE" },
    { "collectives", 0, 0, G_OPTION_ARG_STRING, &opt_coll,
      "Collective algorithm: torus2d (default), dim-by-dim, ring (doc/collectives.md)", "NAME" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &opt_json, "Print one JSON object", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- time one collective on a slice");
  g_option_context_add_main_entries (ctx, entries, NULL);
  g_option_context_set_description (ctx,
    "Simulates the collective on an idle slice with SimGrid and prints the\n"
    "simulated time, algorithm bandwidth (bytes / time) and bus bandwidth\n"
    "(NCCL's convention). Algorithms: doc/collectives.md.\n");
  if (!ps_cli_parse (ctx, &argc, &argv))
    return PS_EXIT_USAGE;
  GError *error = NULL;
  if (argc > 1)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "unexpected argument '%s'", argv[1]);
      return ps_cli_fail (error);
    }
  if (!opt_slice || !opt_op || !opt_bytes)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION,
                   "--slice, --op and --bytes are required (see 'podsim bench collective --help')");
      return ps_cli_fail (error);
    }
  PsTraceCollectiveKind kind;
  if (!ps_coll_kind_parse (opt_op, &kind))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION,
                   "--op: unknown collective '%s' (all-reduce, all-gather, reduce-scatter, "
                   "all-to-all, collective-permute)", opt_op);
      return ps_cli_fail (error);
    }
  guint64 bytes;
  if (!ps_parse_bytes (opt_bytes, "--bytes", &bytes, &error))
    return ps_cli_fail (error);
  PsWrapMode wrap = PS_WRAP_AUTO;
  if (opt_wrap && !ps_wrap_mode_parse (opt_wrap, &wrap, &error))
    return ps_cli_fail (error);
  PsCollAlgorithm coll = PS_COLL_TORUS2D;
  if (opt_coll && !ps_coll_algorithm_parse (opt_coll, "--collectives", &coll, &error))
    return ps_cli_fail (error);
  g_autoptr (PsHardware) hw = ps_hardware_load_or_default (opt_hw, &error);
  if (!hw)
    return ps_cli_fail (error);
  g_autoptr (PsSlice) slice = ps_slice_new (opt_slice, wrap, hw->tensorcores_per_chip, &error);
  if (!slice)
    return ps_cli_fail (error);
  g_autoptr (PsPlatform) platform = ps_platform_new (slice, hw, &error);
  if (!platform)
    return ps_cli_fail (error);
  const char *groups_spec = opt_groups ? opt_groups : "all";
  int n_groups, group_size;
  g_autofree int *cores = parse_groups (slice, groups_spec, &n_groups, &group_size, &error);
  if (!cores)
    return ps_cli_fail (error);
  PsCollPlan *plan;
  if (kind == PS_TRACE_COLLECTIVE_PERMUTE)
    {
      /* Every member sends to the next one of its group, cyclically. */
      g_autofree int *pairs = g_new (int, 2 * n_groups * group_size);
      for (int g = 0; g < n_groups; g++)
        for (int i = 0; i < group_size; i++)
          {
            int k = g * group_size + i;
            pairs[2 * k] = cores[k];
            pairs[2 * k + 1] = cores[g * group_size + (i + 1) % group_size];
          }
      plan = ps_coll_plan_new_permute (platform, (double) bytes, pairs, n_groups * group_size,
                                       hw->collective_launch_overhead_s, &error);
    }
  else
    plan = ps_coll_plan_new (platform, coll, kind, (double) bytes, cores, n_groups, group_size,
                             hw->collective_launch_overhead_s, &error);
  if (!plan)
    return ps_cli_fail (error);
  PsSgNet *net = ps_sgnet_new (platform, &error);
  if (!net)
    {
      ps_coll_plan_free (plan);
      return ps_cli_fail (error);
    }
  double *durations[1];
  double time_s = ps_coll_simulate (net, &plan, 1, durations);
  g_free (durations[0]);
  double algbw, busbw;
  ps_coll_bandwidths (kind, (double) bytes, group_size, time_s, &algbw, &busbw);
  if (opt_json)
    {
      g_autofree char *json = to_json (slice, opt_op, ps_coll_algorithm_name (coll), groups_spec, n_groups, group_size,
                                       (double) bytes, time_s, algbw, busbw);
      printf ("%s\n", json);
    }
  else
    {
      g_autofree char *b = ps_format_bytes ((double) bytes);
      g_autofree char *t = ps_format_seconds (time_s);
      printf ("%s of %s per device on %s (%dx%d chips, wrap %s%s%s), groups %s: %d x %d devices\n",
              opt_op, b, slice->name, slice->chips_x, slice->chips_y,
              slice->wrap_x ? "x" : "", slice->wrap_y ? "y" : "",
              slice->wrap_x || slice->wrap_y ? "" : "none", groups_spec, n_groups, group_size);
      printf ("algorithm:           %s\n", ps_coll_algorithm_name (coll));
      printf ("simulated time:      %s\n", t);
      printf ("algorithm bandwidth: %.2f GB/s\n", algbw / 1e9);
      printf ("bus bandwidth:       %.2f GB/s\n", busbw / 1e9);
    }
  ps_coll_plan_free (plan);
  ps_sgnet_free (net);
  return 0;
}
