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
#include "cli/target_options.h"
#include "cli/picture.h"
#include "common/error.h"
#include "common/json_out.h"
#include "common/ndindex.h"
#include "sim/collectives.h"
#include "sim/results.h"
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
  ps_json_str (b, "op", op);
  ps_json_str (b, "collectives", algorithm);
  ps_replay_json_slice (b, s);
  ps_json_str (b, "groups", groups);
  ps_json_int (b, "n_groups", n_groups);
  ps_json_int (b, "group_size", group_size);
  ps_json_dbl (b, "bytes", bytes);
  ps_json_dbl (b, "time_s", time_s);
  ps_json_dbl (b, "algbw_bytes_per_s", algbw);
  ps_json_dbl (b, "busbw_bytes_per_s", busbw);
  return ps_json_finish (b, FALSE);
}

/* Groups from a logical mesh: the devices that differ only along the mesh
 * axes in `axes` ("1", "0,1") form a group, in mesh order (device ids as
 * the mesh's order lays them out; device d runs on core d). */
static int *
mesh_groups (const PsSlice *s, const char *mesh_text, const char *order, const char *axes_text,
             int *n_groups, int *group_size, int **device_of_core, GError **error)
{
  PsTraceMesh mesh = { 0 };
  if (!ps_trace_mesh_parse_dims (mesh_text, "--mesh", &mesh, error))
    return NULL;
  gint64 n = ps_product ((int) mesh.rank, mesh.dims);
  if (n != ps_slice_n_cores (s))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--mesh %s: not a mesh of the %d cores of %s", mesh_text,
                   ps_slice_n_cores (s), s->name);
      return NULL;
    }
  gint64 physical[3] = { s->chips_x, s->chips_y, s->cores_per_chip };
  if ((strcmp (order, "nonpod2d") == 0 && mesh.rank != 2) || !ps_trace_mesh_set_order (&mesh, order, physical))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--device-order: '%s' is not arange, arange_T or "
                   "nonpod2d (2-D meshes)", order);
      return NULL;
    }
  gboolean along[PS_TRACE_MAX_RANK] = { FALSE };
  g_auto (GStrv) ax = g_strsplit (axes_text, ",", -1);
  for (int i = 0; ax[i]; i++)
    {
      guint64 a;
      if (!g_ascii_string_to_unsigned (g_strstrip (ax[i]), 10, 0, mesh.rank - 1, &a, NULL))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--axes: '%s' is not a mesh axis (0 .. %u)", ax[i],
                       mesh.rank - 1);
          return NULL;
        }
      along[a] = TRUE;
    }
  guint64 n_ids = 0;
  g_autofree guint32 *ids = ps_trace_mesh_device_ids (&mesh, &n_ids);
  if (!ids)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "--device-order %s does not fit mesh %s", order, mesh_text);
      return NULL;
    }
  int size = 1;
  for (guint i = 0; i < mesh.rank; i++)
    if (along[i])
      size *= (int) mesh.dims[i];
  *group_size = size;
  *n_groups = (int) (n / size);
  /* Group = the other axes' coordinates; member index = the chosen axes'. */
  int *cores = g_new (int, n);
  *device_of_core = g_new (int, n);
  for (gint64 pos = 0; pos < n; pos++)
    {
      gint64 rest = pos, g = 0, m = 0;
      gint64 coord[PS_TRACE_MAX_RANK];
      for (int i = (int) mesh.rank - 1; i >= 0; i--)
        {
          coord[i] = rest % mesh.dims[i];
          rest /= mesh.dims[i];
        }
      for (guint i = 0; i < mesh.rank; i++)
        {
          if (along[i])
            m = m * mesh.dims[i] + coord[i];
          else
            g = g * mesh.dims[i] + coord[i];
        }
      cores[g * size + m] = (int) ids[pos];
      (*device_of_core)[ids[pos]] = (int) ids[pos];
    }
  return cores;
}

int
ps_cmd_bench_collective (int argc, char **argv)
{
  g_autofree char *opt_op = NULL, *opt_bytes = NULL, *opt_groups = NULL;
  static const char *const target_keys[] = { "slice", "wrap", "hw", "collectives", NULL };
  g_autoptr (PsTargetOptions) to = ps_target_options_new (target_keys);
  g_autofree char *opt_picture = NULL, *opt_groups_picture = NULL, *opt_mesh = NULL, *opt_order = NULL;
  g_autofree char *opt_axes = NULL;
  gboolean opt_json = FALSE;
  GOptionEntry entries[] = {
    { "op", 0, 0, G_OPTION_ARG_STRING, &opt_op,
      "all-reduce, all-gather, reduce-scatter, all-to-all or collective-permute", "OP" },
    { "bytes", 0, 0, G_OPTION_ARG_STRING, &opt_bytes,
      "Per-device buffer (64MiB, 1GB, 4096)", "SIZE" },
    { "groups", 0, 0, G_OPTION_ARG_STRING, &opt_groups,
      "x, y, xy, all (default) or device lists 0,1;2,3", "GROUPS" },
    { "mesh", 0, 0, G_OPTION_ARG_STRING, &opt_mesh,
      "Groups from a logical mesh of the slice's cores (with --axes)", "AxB" },
    { "device-order", 0, 0, G_OPTION_ARG_STRING, &opt_order,
      "The mesh's device order: arange (default), arange_T, nonpod2d", "ORDER" },
    { "axes", 0, 0, G_OPTION_ARG_STRING, &opt_axes,
      "With --mesh: the mesh axes a group spans, e.g. 1 or 0,1 (default: all)", "A,..." },
    { "picture", 0, 0, G_OPTION_ARG_FILENAME, &opt_picture,
      "Draw every ICI link colored by its utilization during the collective", "FILE.png|svg" },
    { "groups-picture", 0, 0, G_OPTION_ARG_FILENAME, &opt_groups_picture,
      "Draw the replica groups on the chips and the ring transfers planned for them", "FILE.png|svg" },
    { "json", 0, 0, G_OPTION_ARG_NONE, &opt_json, "Print one JSON object", NULL },
    { NULL }
  };
  g_autoptr (GOptionContext) ctx = g_option_context_new ("- time one collective on a slice");
  g_option_context_set_main_group (ctx, ps_target_options_group (to, entries));
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
  if (!ps_target_options_given (to, "slice") || !opt_op || !opt_bytes)
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
  g_autoptr (PsTarget) target = ps_target_options_target (to, TRUE, &error);
  if (!target)
    return ps_cli_fail (error);
  const PsHardware *hw = target->hw;
  const PsSlice *slice = target->slice;
  PsCollAlgorithm coll = target->collectives;
  g_autoptr (PsPlatform) platform = ps_platform_new (slice, hw, &error);
  if (!platform)
    return ps_cli_fail (error);
  PsPictureFormat pf1 = PS_PICTURE_PNG, pf2 = PS_PICTURE_PNG;
  if ((opt_picture && !ps_picture_format_for (opt_picture, "--picture", &pf1, &error))
      || (opt_groups_picture && !ps_picture_format_for (opt_groups_picture, "--groups-picture", &pf2, &error)))
    return ps_cli_fail (error);
  if (opt_mesh && opt_groups)
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--groups and --mesh exclude each other");
      return ps_cli_fail (error);
    }
  if (!opt_mesh && (opt_order || opt_axes))
    {
      g_set_error (&error, PS_ERROR, PS_ERROR_OPTION, "--device-order and --axes need --mesh");
      return ps_cli_fail (error);
    }
  g_autofree char *mesh_spec = NULL;
  const char *groups_spec = opt_groups ? opt_groups : "all";
  int n_groups, group_size;
  g_autofree int *device_of_core = NULL;
  g_autofree int *cores = NULL;
  if (opt_mesh)
    {
      g_autofree char *all_axes = NULL;
      if (!opt_axes)
        {
          GString *a = g_string_new (NULL);
          guint r = 1;
          for (const char *c = opt_mesh; *c; c++)
            r += *c == 'x';
          for (guint i = 0; i < r; i++)
            g_string_append_printf (a, "%s%u", i ? "," : "", i);
          all_axes = g_string_free (a, FALSE);
        }
      const char *order = opt_order ? opt_order : "arange";
      cores = mesh_groups (slice, opt_mesh, order, opt_axes ? opt_axes : all_axes, &n_groups, &group_size,
                           &device_of_core, &error);
      mesh_spec = g_strdup_printf ("mesh %s (%s) axes %s", opt_mesh, order, opt_axes ? opt_axes : all_axes);
      groups_spec = mesh_spec;
    }
  else
    cores = parse_groups (slice, groups_spec, &n_groups, &group_size, &error);
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
  /* Pictures are rendered before anything is printed, so a failure leaves
   * no half output. */
  g_autoptr (GString) pic1 = g_string_new (NULL), pic2 = g_string_new (NULL);
  g_autofree char *b_text = ps_format_bytes ((double) bytes);
  g_autofree char *title = g_strdup_printf ("%s of %s per device on %s, groups %s (%d x %d)", opt_op, b_text,
                                            slice->name, groups_spec, n_groups, group_size);
  if ((opt_picture && !ps_picture_links (platform, plan->link_bytes, time_s, title, pf1, pic1, &error))
      || (opt_groups_picture && !ps_picture_groups (platform, plan, device_of_core, title, pf2, pic2, &error))
      || (opt_picture && !ps_picture_save (opt_picture, pic1, &error))
      || (opt_groups_picture && !ps_picture_save (opt_groups_picture, pic2, &error)))
    {
      ps_coll_plan_free (plan);
      ps_sgnet_free (net);
      return ps_cli_fail (error);
    }
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
