/* A user's own HLO module as a model family: `podsim run FILE.hlo --slice S`
 * reads the module (a JAX or PyTorch/XLA dump, doc/hlo.md), adds the
 * annotations given with `--shard NAME=SHARDING`, and runs it through the
 * same pipeline and report as the built-in models.
 *
 * A sharding is XLA's text ("{devices=[2,1]0,1}", "{replicated}") or a
 * dims mapping "[0,-1]": the GSPMD paper's mesh_split over the mesh of
 * `--mesh` in the order of `--device-order` (tensor dim i split over mesh
 * axis mapping[i], -1 not split). Without --mesh the mesh is one axis of
 * all the module's devices: its num_partitions when written (a module for
 * fewer devices than the slice has runs on the slice's first cores, the
 * rest idle), else the slice's cores. The mesh is also the one the trace is
 * written with, so collectives along its axes are recognised as such.
 *
 * A module that is already a per-device program (XLA's partitioner output:
 * entry `..._spmd`, partition-id or collectives and no shardings; see
 * partitioner/ir/async.h) is lowered as it is, not partitioned again. */
#include "config.h"

#include <string.h>

#include "common/error.h"
#include "models/family.h"
#include "partitioner/analysis/cost.h"
#include "partitioner/hlo/hlo_parser.h"
#include "partitioner/ir/async.h"
#include "partitioner/ir/sharding.h"

static const PsParamSpec specs[] = {
  { .section = "model", .key = "file", .type = PS_PARAM_PATH, .def = "",
    .doc = "The HLO text module (podsim run FILE.hlo sets it)" },
  { .section = "model", .key = "module", .type = PS_PARAM_STRING, .def = "",
    .doc = "The module NAME of a file holding several (empty: the first)" },
  PS_COST_PARAM_TRIP_COUNT,
  { .section = "model", .key = "shard", .type = PS_PARAM_LIST, .def = "",
    .doc = "Extra annotations NAME=SHARDING, ';'-separated (each --shard adds one): a parameter or instruction by name and XLA sharding text or a dims mapping [0,-1] over the mesh" },
  PS_TRACE_PARAM_MESH,
  { .section = "parallelism", .key = "device_order", .type = PS_PARAM_CHOICE, .def = "arange",
    .doc = "Device order of the mesh: np.arange, its transpose, or Lingvo's non-pod 2D mesh",
    .choices = "arange|arange_T|nonpod2d" },
};

/* The mesh of the run as the trace writes it. */
static gboolean
run_mesh (const PsParams *p, const PsModelTarget *t, int64_t n_default, PsTraceMesh *mesh, GError **error)
{
  memset (mesh, 0, sizeof *mesh);
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  int rank = ps_params_mesh (p, "mesh", dims);
  gboolean given = rank > 0;
  if (rank == 0)
    {
      rank = 1;
      dims[0] = n_default;
    }
  int64_t n = 1;
  mesh->rank = (guint) rank;
  for (int i = 0; i < rank; i++)
    {
      mesh->dims[i] = dims[i];
      n *= dims[i];
    }
  if (given && n < t->n_cores && ps_params_bool (p, "idle_cores"))
    ;
  else if (n != (given ? t->n_cores : n_default))
    {
      g_autofree char *text = ps_params_text (p, "mesh");
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s has %" G_GINT64_FORMAT
                   " devices but slice %s has %d cores%s", ps_params_where (p, "mesh"), text, n,
                   ps_params_str (p, "slice"), t->n_cores,
                   n < t->n_cores ? " (--idle-cores runs it on the first cores, the rest idle)" : "");
      return FALSE;
    }
  const char *order = ps_params_str (p, "device_order");
  if (strcmp (order, "nonpod2d") == 0 && rank != 2)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s nonpod2d needs a 2-D --mesh",
                   ps_params_where (p, "device_order"));
      return FALSE;
    }
  ps_trace_mesh_set_order (mesh, order, t->physical);
  return TRUE;
}

static gboolean
check (const PsParams *p, const PsModelTarget *t, GError **error)
{
  if (!*ps_params_str (p, "file"))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "no HLO file (podsim run FILE.hlo)");
      return FALSE;
    }
  PsTraceMesh mesh;
  return run_mesh (p, t, t->n_cores, &mesh, error);
}

/* "[0,-1]" as a dims mapping of `rank` entries. */
static gboolean
parse_mapping (const char *text, int rank, int mesh_rank, int64_t *map, char **problem)
{
  gsize len = strlen (text);
  if (len < 2 || text[len - 1] != ']')
    {
      *problem = g_strdup_printf ("'%s' is not a dims mapping like [0,-1]", text);
      return FALSE;
    }
  g_autofree char *inner = g_strndup (text + 1, len - 2);
  g_auto (GStrv) parts = g_strsplit (inner, ",", -1);
  int n = *inner ? (int) g_strv_length (parts) : 0;
  if (n != rank)
    {
      *problem = g_strdup_printf ("%s has %d entries but the tensor has %d dims", text, n, rank);
      return FALSE;
    }
  for (int i = 0; i < n; i++)
    {
      gint64 v;
      g_strstrip (parts[i]);
      if (!g_ascii_string_to_signed (parts[i], 10, -1, mesh_rank - 1, &v, NULL))
        {
          *problem = g_strdup_printf ("%s: '%s' is not a mesh axis (0 .. %d) or -1", text, parts[i],
                                      mesh_rank - 1);
          return FALSE;
        }
      map[i] = v;
    }
  return TRUE;
}

/* Applies one NAME=SHARDING item. */
static gboolean
apply_shard (PsModule *m, const char *item, const PsTraceMesh *mesh, const int64_t *devices,
             const char *where, GError **error)
{
  const char *eq = strchr (item, '=');
  if (!eq || eq == item)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s '%s': expected NAME=SHARDING", where, item);
      return FALSE;
    }
  g_autofree char *name = g_strndup (item, (gsize) (eq - item));
  const char *spec = eq + 1;
  PsInstr *x = ps_computation_find_instr (m->entry, name);
  if (!x)
    x = ps_module_find_instr (m, name);
  if (!x)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: the module has no instruction named '%s'",
                   where, item, name);
      return FALSE;
    }
  g_autoptr (PsSharding) s = NULL;
  GError *local = NULL;
  if (spec[0] == '[')
    {
      if (ps_shape_is_tuple (x->shape))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: '%s' is a tuple; give XLA sharding text",
                       where, item, name);
          return FALSE;
        }
      int64_t map[PS_TRACE_MAX_RANK * 4];
      g_autofree char *problem = NULL;
      if (x->shape->rank > (int) G_N_ELEMENTS (map)
          || !parse_mapping (spec, x->shape->rank, (int) mesh->rank, map, &problem))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: %s", where, item,
                       problem ? problem : "too many dims");
          return FALSE;
        }
      s = ps_sharding_mesh_split (x->shape->rank, (int) mesh->rank, mesh->dims, devices, map, &local);
    }
  else
    s = ps_sharding_from_string (spec, name, &local);
  if (!s)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: %s", where, item, local->message);
      g_error_free (local);
      return FALSE;
    }
  int64_t n = 1;
  for (guint i = 0; i < mesh->rank; i++)
    n *= mesh->dims[i];
  if (ps_sharding_min_devices (s) > n)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: the sharding names device %" G_GINT64_FORMAT
                   " but the slice has %" G_GINT64_FORMAT " cores", where, item,
                   ps_sharding_min_devices (s) - 1, n);
      return FALSE;
    }
  if (ps_sharding_is_tuple (s))
    {
      /* What the HLO reader checks of a tuple sharding in a file (shape_infer's check_sharding). */
      int leaves = ps_shape_is_tuple (x->shape) ? ps_shape_leaf_count (x->shape) : 0;
      if (!ps_shape_is_tuple (x->shape))
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: a tuple sharding, but '%s' is not a tuple",
                       where, item, name);
          return FALSE;
        }
      if (s->n_elems != leaves)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: the tuple sharding has %d elements but '%s' has "
                       "%d leaves", where, item, s->n_elems, name, leaves);
          return FALSE;
        }
      g_autoptr (GPtrArray) lv = ps_shape_leaves (x->shape);
      for (int i = 0; i < s->n_elems; i++)
        if (s->elems[i]->kind == PS_SHARDING_TILED
            && ps_sharding_data_rank (s->elems[i]) != ((PsShape *) lv->pdata[i])->rank)
          {
            g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: element %d of the sharding has %d data dims but "
                         "leaf %d of '%s' has %d", where, item, i, ps_sharding_data_rank (s->elems[i]), i, name,
                         ((PsShape *) lv->pdata[i])->rank);
            return FALSE;
          }
    }
  else if (ps_shape_is_tuple (x->shape))
    {
      /* One sharding on a tuple applies to every leaf, as in a file. */
      PsSharding *t = ps_sharding_expand_to_shape (s, x->shape);
      ps_sharding_free (s);
      s = t;
    }
  if (!ps_sharding_is_tuple (s) && !ps_sharding_is_replicated (s) && !ps_sharding_is_maximal (s)
      && !ps_sharding_is_manual (s)
      && (ps_shape_is_tuple (x->shape) || ps_sharding_data_rank (s) != x->shape->rank))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: the sharding has %d data dims but '%s' has %d",
                   where, item, ps_sharding_data_rank (s), name,
                   ps_shape_is_tuple (x->shape) ? 0 : x->shape->rank);
      return FALSE;
    }
  ps_instr_set_sharding (x, s);
  return TRUE;
}

static int
count_annotations (const PsModule *m)
{
  int n = 0;
  for (guint c = 0; c < m->computations->len; c++)
    {
      const PsComputation *comp = m->computations->pdata[c];
      for (guint i = 0; i < comp->instrs->len; i++)
        n += ((PsInstr *) comp->instrs->pdata[i])->sharding != NULL;
    }
  return n;
}

static PsModule *
build (const PsParams *p, const PsModelTarget *t, PsModelInfo *info, GError **error)
{
  memset (info, 0, sizeof *info);
  if (!check (p, t, error))
    return NULL;
  const char *path = ps_params_str (p, "file");
  g_autoptr (PsModule) m = ps_hlo_load (path, ps_params_str (p, "module"), error);
  if (!m)
    return NULL;
  if (m->num_partitions > t->n_cores)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: the module is written for num_partitions=%"
                   G_GINT64_FORMAT " but slice %s has %d cores (a larger --slice runs it)", path,
                   m->num_partitions, ps_params_str (p, "slice"), t->n_cores);
      return NULL;
    }
  /* A module for fewer devices runs on the slice's first cores. */
  int64_t n_dev = m->num_partitions > 0 ? m->num_partitions : t->n_cores;
  int64_t given_dims[PS_PARAM_MESH_MAX_RANK];
  if (ps_params_mesh (p, "mesh", given_dims) > 0 && m->num_partitions > 0
      && ps_params_mesh_size (p, "mesh") != m->num_partitions)
    {
      g_autofree char *text = ps_params_text (p, "mesh");
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s has %" G_GINT64_FORMAT " devices but %s is "
                   "written for num_partitions=%" G_GINT64_FORMAT, ps_params_where (p, "mesh"), text,
                   ps_params_mesh_size (p, "mesh"), path, m->num_partitions);
      return NULL;
    }
  if (!run_mesh (p, t, n_dev, &info->mesh, error))
    return NULL;
  n_dev = 1;
  for (guint i = 0; i < info->mesh.rank; i++)
    n_dev *= info->mesh.dims[i];
  m->num_partitions = n_dev;
  info->uses_first_cores = n_dev < t->n_cores;
  info->already_partitioned = ps_async_module_is_partitioned (m);
  info->default_trip_count = ps_params_int (p, "trip_count");
  if (info->already_partitioned && *ps_params_str (p, "shard"))
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s: %s is already partitioned (a per-device "
                   "program), so it takes no annotations", ps_params_where (p, "shard"), path);
      return NULL;
    }
  guint64 n = 0;
  g_autofree guint32 *ids = ps_trace_mesh_device_ids (&info->mesh, &n);
  g_autofree int64_t *devices = g_new (int64_t, n);
  for (guint64 i = 0; i < n; i++)
    devices[i] = ids[i];
  g_auto (GStrv) items = g_strsplit (ps_params_str (p, "shard"), ";", -1);
  for (int i = 0; items[i]; i++)
    if (*items[i] && !apply_shard (m, items[i], &info->mesh, devices, ps_params_where (p, "shard"), error))
      return NULL;
  info->n_annotations = count_annotations (m);
  info->n_instructions = m->entry->instrs->len;
  info->items_per_step = 1;
  info->keep_entry_shardings = TRUE;
  return g_steal_pointer (&m);
}

static char *
describe_model (const PsParams *p, const PsModelInfo *info)
{
  g_autofree char *base = g_path_get_basename (ps_params_str (p, "file"));
  return g_strdup_printf ("HLO module %s, %" G_GINT64_FORMAT " entry instructions%s", base,
                          info->n_instructions,
                          info->already_partitioned ? "; already partitioned: lowered as written, "
                          "not partitioned again" : "");
}

static char *
describe_parallelism (const PsParams *p, const PsModelInfo *info)
{
  GString *mesh = g_string_new (NULL);
  for (guint i = 0; i < info->mesh.rank; i++)
    g_string_append_printf (mesh, "%s%" G_GINT64_FORMAT, i ? "x" : "", info->mesh.dims[i]);
  const char *shard = ps_params_str (p, "shard");
  int n = 0;
  if (*shard)
    {
      g_auto (GStrv) items = g_strsplit (shard, ";", -1);
      n = (int) g_strv_length (items);
    }
  char *out = g_strdup_printf ("mesh %s (%s), slice %s; %d --shard annotation%s", mesh->str,
                               ps_params_str (p, "device_order"), ps_params_str (p, "slice"), n,
                               n == 1 ? "" : "s");
  g_string_free (mesh, TRUE);
  return out;
}

const PsModelFamily ps_hlo_family = {
  .name = "hlo",
  .summary = "A user's own HLO module (podsim run FILE.hlo: a JAX or PyTorch/XLA dump)",
  .doc = "doc/models.md",
  .item_unit = "steps",
  PS_MODEL_FAMILY_HOOKS,
};
