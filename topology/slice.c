/* Slices, wrap links and device assignment; see slice.h. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "topology/slice.h"

typedef struct {
  const char *name;
  int chips_x, chips_y;
} SliceShape;

/* tpuv3.md, "Pod and slices" (TensorFlow grpc_tpu_worker.py host bounds). */
static const SliceShape slice_shapes[] = {
  { "v3-8", 2, 2 },     { "v3-32", 4, 4 },     { "v3-64", 4, 8 },
  { "v3-128", 8, 8 },   { "v3-256", 8, 16 },   { "v3-512", 16, 16 },
  { "v3-1024", 16, 32 }, { "v3-2048", 32, 32 },
};

static const char *const slice_names[] = {
  "v3-8", "v3-32", "v3-64", "v3-128", "v3-256", "v3-512", "v3-1024", "v3-2048", NULL
};

const char *const *
ps_slice_names (void)
{
  return slice_names;
}

gboolean
ps_wrap_mode_parse (const char *text, PsWrapMode *out, GError **error)
{
  if (g_strcmp0 (text, "auto") == 0)
    *out = PS_WRAP_AUTO;
  else if (g_strcmp0 (text, "on") == 0)
    *out = PS_WRAP_ON;
  else if (g_strcmp0 (text, "off") == 0)
    *out = PS_WRAP_OFF;
  else
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                   "--wrap: unknown mode '%s' (auto, on or off)", text ? text : "");
      return FALSE;
    }
  return TRUE;
}

/* In PsWrapMode order. */
static const char *const wrap_names[] = { "auto", "on", "off", NULL };
static const char *const wrap_docs[] = { "only on dimensions spanning the full pod", NULL, NULL };

const PsParamSpec ps_slice_param_slice = {
  .section = "slice", .key = "slice", .type = PS_PARAM_STRING, .def = "v3-8",
  .doc = "Pod slice: v3-8, v3-32, v3-64, v3-128, v3-256, v3-512, v3-1024 or v3-2048"
};

const PsParamSpec ps_slice_param_wrap = {
  .section = "slice", .key = "wrap", .type = PS_PARAM_CHOICE, .def = "auto",
  .doc = "Wrap links", .choice_names = wrap_names, .choice_docs = wrap_docs
};

const char *
ps_wrap_mode_name (PsWrapMode mode)
{
  switch (mode)
    {
    case PS_WRAP_ON: return "on";
    case PS_WRAP_OFF: return "off";
    default: return "auto";
    }
}

static gboolean
dim_wraps (int chips, PsWrapMode mode)
{
  switch (mode)
    {
    /* A 2-chip ring would only double the one link; real slices have none. */
    case PS_WRAP_ON: return chips > 2;
    case PS_WRAP_OFF: return FALSE;
    default: return chips == PS_POD_SIDE_CHIPS;
    }
}

PsSlice *
ps_slice_new (const char *name, PsWrapMode wrap, int cores_per_chip, GError **error)
{
  g_return_val_if_fail (cores_per_chip >= 1, NULL);
  for (gsize i = 0; i < G_N_ELEMENTS (slice_shapes); i++)
    if (g_strcmp0 (name, slice_shapes[i].name) == 0)
      {
        PsSlice *s = g_new0 (PsSlice, 1);
        s->name = g_strdup (name);
        s->chips_x = slice_shapes[i].chips_x;
        s->chips_y = slice_shapes[i].chips_y;
        s->cores_per_chip = cores_per_chip;
        s->wrap_x = dim_wraps (s->chips_x, wrap);
        s->wrap_y = dim_wraps (s->chips_y, wrap);
        return s;
      }
  g_autofree char *known = g_strjoinv (", ", (char **) slice_names);
  g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "unknown slice '%s' (known: %s)",
               name ? name : "", known);
  return NULL;
}

void
ps_slice_free (PsSlice *slice)
{
  if (!slice)
    return;
  g_free (slice->name);
  g_free (slice);
}

int
ps_slice_n_chips (const PsSlice *slice)
{
  return slice->chips_x * slice->chips_y;
}

int
ps_slice_n_cores (const PsSlice *slice)
{
  return ps_slice_n_chips (slice) * slice->cores_per_chip;
}

int
ps_slice_chip_index (const PsSlice *slice, int x, int y)
{
  return x * slice->chips_y + y;
}

void
ps_slice_core_coords (const PsSlice *slice, int core, int *x, int *y, int *c)
{
  int chip = core / slice->cores_per_chip;
  if (c)
    *c = core % slice->cores_per_chip;
  if (x)
    *x = chip / slice->chips_y;
  if (y)
    *y = chip % slice->chips_y;
}

int
ps_slice_core_index (const PsSlice *slice, int x, int y, int c)
{
  return ps_slice_chip_index (slice, x, y) * slice->cores_per_chip + c;
}

PsDeviceAssignment *
ps_device_assignment_default (const PsSlice *slice, int n_devices, GError **error)
{
  int cores = ps_slice_n_cores (slice);
  if (n_devices < 1 || n_devices > cores)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                   "%d devices do not fit slice %s (%dx%d chips, %d cores)", n_devices,
                   slice->name, slice->chips_x, slice->chips_y, cores);
      return NULL;
    }
  PsDeviceAssignment *a = g_new0 (PsDeviceAssignment, 1);
  a->n_devices = n_devices;
  a->core_of_device = g_new (int, n_devices);
  for (int d = 0; d < n_devices; d++)
    a->core_of_device[d] = d;
  return a;
}

static gboolean
parse_int (const char *s, int lo, int hi, int *out)
{
  char *end = NULL;
  long v = strtol (s, &end, 10);
  if (end == s || *end != '\0' || v < lo || v > hi)
    return FALSE;
  *out = (int) v;
  return TRUE;
}

PsDeviceAssignment *
ps_device_assignment_parse (const PsSlice *slice, const char *text, GError **error)
{
  int cores = ps_slice_n_cores (slice);
  g_auto (GStrv) items = g_strsplit (text, ",", -1);
  int n = (int) g_strv_length (items);
  g_autofree gboolean *used = g_new0 (gboolean, cores);
  g_autofree int *map = g_new (int, n > 0 ? n : 1);
  for (int i = 0; i < n; i++)
    {
      char *item = g_strstrip (items[i]);
      g_auto (GStrv) parts = g_strsplit (item, ":", -1);
      int core = -1;
      gboolean ok;
      if (g_strv_length (parts) == 3)
        {
          int x, y, c;
          ok = parse_int (parts[0], 0, slice->chips_x - 1, &x)
               && parse_int (parts[1], 0, slice->chips_y - 1, &y)
               && parse_int (parts[2], 0, slice->cores_per_chip - 1, &c);
          if (ok)
            core = ps_slice_core_index (slice, x, y, c);
        }
      else
        ok = parse_int (item, 0, cores - 1, &core);
      if (!ok)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                       "device assignment: item %d '%s' is not a core of %s (0..%d or x:y:c)",
                       i + 1, item, slice->name, cores - 1);
          return NULL;
        }
      if (used[core])
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION,
                       "device assignment: core %d appears twice (item %d)", core, i + 1);
          return NULL;
        }
      used[core] = TRUE;
      map[i] = core;
    }
  if (n < 1)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "device assignment: empty list");
      return NULL;
    }
  PsDeviceAssignment *a = g_new0 (PsDeviceAssignment, 1);
  a->n_devices = n;
  a->core_of_device = g_steal_pointer (&map);
  return a;
}

void
ps_device_assignment_free (PsDeviceAssignment *a)
{
  if (!a)
    return;
  g_free (a->core_of_device);
  g_free (a);
}
