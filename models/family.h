/* Model families: the table of models podsim can build, each with a typed
 * parameter schema, its presets, and a build function. Everything a run is
 * made of (the model's parameters, its parallelism, the slice, the
 * simulator's options) is one PsParams, which reads from and writes to a
 * model file (GKeyFile syntax):
 *
 *   [model]        family = dense, then every model parameter
 *   [parallelism]  mesh, device order, sharding, microbatches, remat, ...
 *   [slice]        slice, wrap, hw              (the same for every family)
 *   [options]      async_collectives, ...       (the same for every family)
 *   [published]    only in presets of published runs: throughput, table,
 *                  source; or step_time and series for a published trend
 *
 * The command line derives from the same schema: key `model_dim` is option
 * `--model-dim` (a spec may name another option), a boolean `remat` is
 * `--remat`/`--no-remat`; `podsim sweep --vary KEY=...` and `podsim search`
 * take their axes from it. Presets are model files compiled into podsim
 * (models/presets/NAME.ini).
 *
 * Adding a family (doc/models.md, "Adding a model family"): write a
 * `const PsModelFamily ps_<name>_family` with its specs (section, key, type,
 * default, one-line doc, range) and a build function that reads its values
 * with ps_params_int() & co; add it to `families[]` in models/family.c and
 * its preset files to PS_MODEL_PRESETS in models/local.mk.
 *
 * Errors: values are checked as they are set (type, range, choices) with
 * messages that name where the value came from: "FILE:LINE:COL: key ..."
 * for files, "--option ..." for the command line.
 *
 * The values themselves live in a typed store (common/params.h: the spec
 * type, value checks, the ini syntax), which this registry fills with a
 * family's specs and the common [slice] and [options] ones.
 *
 * Ownership: PsParams is transfer full from its constructors
 * (ps_params_free); families and specs are static (transfer none).
 */
#ifndef PS_MODELS_FAMILY_H
#define PS_MODELS_FAMILY_H

#include <glib.h>
#include <stdint.h>

#include "common/params.h"
#include "partitioner/ir/ir.h"
#include "traces/trace.h"

G_BEGIN_DECLS

typedef struct PsParams PsParams;
typedef struct PsModelFamily PsModelFamily;

/* A part of the step a family reports on its own (`run` prints its time
 * and share of the step; --json has KEY_s and KEY_share): the compute of
 * every instruction whose op_name (metadata the model gives with
 * ps_builder_set_op_name, kept by autodiff and the partitioner) starts
 * with one of `prefixes`. */
typedef struct {
  const char *key;           /* "gating" */
  const char *label;         /* for the report: "gating" */
  const char *prefixes[4];   /* NULL-terminated */
} PsOpGroup;

/* The slice a model is built for (filled by the caller from topology/). */
typedef struct {
  int n_cores;
  int64_t physical[3];   /* chips x, chips y, cores per chip */
} PsModelTarget;

/* What a build produced, for lowering and reports. */
typedef struct {
  int n_annotations;         /* tensors a user annotates */
  int64_t n_instructions;    /* in the entry computation */
  double params;             /* trainable parameters */
  double model_flops;        /* per step, the usual utilization basis */
  double items_per_step;     /* in the family's item_unit */
  PsTraceMesh mesh;          /* logical mesh (dims, device order) for lowering;
                              * LIST devices owned */
  /* Propagation keeps the entry's written shardings unless the module
   * header allows changing them (XLA's default for a module from a file);
   * FALSE: propagation may choose the entry's shardings (built models). */
  gboolean keep_entry_shardings;
  /* The program asks for fewer devices than the slice has cores (an HLO
   * module's num_partitions): it runs on the first cores, the rest idle,
   * without --idle-cores. */
  gboolean uses_first_cores;
  /* The program is already per device (an HLO module after XLA's SPMD
   * partitioner): propagation and partitioning are skipped. */
  gboolean already_partitioned;
  /* Iterations of a while loop whose trip count cannot be found (a
   * module's --trip-count); 0: such a loop is an error. */
  int64_t default_trip_count;
} PsModelInfo;

struct PsModelFamily {
  const char *name;          /* "dense": `podsim run dense`, [model] family = dense */
  const char *summary;       /* one line */
  const char *doc;           /* where it is documented ("doc/models.md") */
  const char *item_unit;     /* what throughput counts: "tokens", "images", ... */
  const PsParamSpec *specs;  /* [model] and [parallelism]; the common [slice]
                              * and [options] specs are appended by the registry */
  int n_specs;
  /* Cross-parameter checks (divisibility, mesh vs slice) before building;
   * PS_ERROR_OPTION errors naming ps_params_where(). May be NULL. */
  gboolean (*check) (const PsParams *p, const PsModelTarget *t, GError **error);
  /* Builds the annotated single-device training step. transfer full. */
  PsModule *(*build) (const PsParams *p, const PsModelTarget *t, PsModelInfo *info,
                      GError **error);
  /* The report's "model" and "parallelism" lines, without the labels
   * (transfer full); NULL: a generic key=value list. */
  char *(*describe_model) (const PsParams *p, const PsModelInfo *info);
  char *(*describe_parallelism) (const PsParams *p, const PsModelInfo *info);
  /* Optional: rewrites settings that cannot change the run into one form
   * (dense: a 1d or dp sharding in arange order does not depend on the
   * mesh's shape), so `podsim search` runs each distinct strategy once. */
  void (*canonicalize) (PsParams *p, const PsModelTarget *t);
  /* Optional, terminated by a NULL key: parts of the step by op_name. */
  const PsOpGroup *op_groups;
};

/* A family file names its parts alike (the spec table `specs` and the
 * functions check, build, describe_model, describe_parallelism), so its
 * PsModelFamily lists them with this instead of one line each. */
#define PS_MODEL_FAMILY_HOOKS \
  .specs = specs, .n_specs = G_N_ELEMENTS (specs), .check = check, .build = build, \
  .describe_model = describe_model, .describe_parallelism = describe_parallelism

/* Fills a build's PsModelInfo (zeroed first) with what a model's own
 * builder reports: its annotations, entry instructions, parameters, model
 * FLOPs and items per step; the caller sets the mesh. */
void ps_model_info_init (PsModelInfo *info, int n_annotations, int64_t n_instructions, double params,
                         double model_flops, double items_per_step);

/* ---- the registry ----------------------------------------------------------- */

/* Every family, NULL-terminated. transfer none. */
const PsModelFamily *const *ps_model_families (void);
/* By name (case-insensitive); NULL with PS_ERROR_OPTION listing the known ones. */
const PsModelFamily *ps_model_family_find (const char *name, GError **error);
/* The [slice] and [options] specs every family has, declared by the modules
 * that read them (driver/target.h registers them: ps_target_init). The
 * array is borrowed for the program's life. */
void ps_model_family_set_common_specs (const PsParamSpec *const *specs, int n);
/* Every spec of a family: its own, then [slice] and [options]. transfer none. */
const PsParamSpec *ps_model_family_spec (const PsModelFamily *f, int i);
int ps_model_family_n_specs (const PsModelFamily *f);
/* A spec by key or option name ('-' and '_' alike); NULL when unknown. */
const PsParamSpec *ps_model_family_find_spec (const PsModelFamily *f, const char *name);
/* ---- presets ---------------------------------------------------------------- */

typedef struct {
  const char *name;          /* "DenseLm128B8x8" (file models/presets/NAME.ini) */
  const char *text;          /* the file, compiled in */
} PsModelPreset;

/* Every preset, sorted by name, NULL-terminated (name NULL). transfer none. */
const PsModelPreset *ps_model_presets (void);
/* A preset's parameters (its file read with ps_params_read). NULL with
 * PS_ERROR_OPTION listing the known names when unknown. transfer full. */
PsParams *ps_model_preset_load (const char *name, GError **error);

/* ---- parameters --------------------------------------------------------------- */

/* Every value at its spec's default. transfer full. */
PsParams *ps_params_new (const PsModelFamily *f);
PsParams *ps_params_copy (const PsParams *p);
void ps_params_free (PsParams *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsParams, ps_params_free)

const PsModelFamily *ps_params_family (const PsParams *p);
/* The typed values themselves (common/params.h). transfer none. */
const PsParamStore *ps_params_store (const PsParams *p);

/* Reads a model file (`path` names it in errors; text is its content). The
 * [model] family key chooses the family; unknown sections or keys, values
 * of the wrong type or out of range, duplicates and syntax errors are
 * PS_ERROR_PARSE "PATH:LINE:COL: ..." errors. Missing keys keep their
 * defaults. transfer full. */
PsParams *ps_params_read (const char *path, const char *text, GError **error);
/* Reads a file from disk (PS_ERROR_IO when it cannot be read). */
PsParams *ps_params_load (const char *path, GError **error);
/* As ps_params_read, skipping the sections named in `extra` (a file that
 * is also a sweep grid: [vary], [sweep]). */
PsParams *ps_params_read_extra (const char *path, const char *text, const char *const *extra,
                                GError **error);

/* Checks a whole file's syntax (sections: the model file's and `extra`)
 * and returns the entries of [section] in file order (PsIniEntry, transfer
 * full); *found (may be NULL) says whether the section is there at all. */
GPtrArray *ps_ini_read_section (const char *path, const char *text, const char *const *extra,
                                const char *section, gboolean *found, GError **error);
/* Sets one value from text. `where` says where the text came from for
 * error messages and later checks ("--layers", "run.ini:4:10"); copied.
 * Errors: PS_ERROR_OPTION (or PS_ERROR_PARSE when `where` is a file
 * position) naming `where`. */
gboolean ps_params_set (PsParams *p, const char *key, const char *text, const char *where,
                        GError **error);

/* Adds one item to a LIST value (`text` must not contain ';'). */
gboolean ps_params_append (PsParams *p, const char *key, const char *text, const char *where,
                           GError **error);

/* Typed reads; the key must exist and have that type (programmer error).
 * ps_params_str reads CHOICE, STRING, PATH and LIST values. */
int64_t ps_params_int (const PsParams *p, const char *key);
double ps_params_double (const PsParams *p, const char *key);
gboolean ps_params_bool (const PsParams *p, const char *key);
const char *ps_params_str (const PsParams *p, const char *key);
/* Copies every value whose spec names a field of the family's config
 * struct (PS_PARAM_FIELD) into *config (ps_param_store_fill). */
void ps_params_fill (const PsParams *p, gpointer config);
/* MESH: returns the rank, fills dims (PS_PARAM_MESH_MAX_RANK entries). */
int ps_params_mesh (const PsParams *p, const char *key, int64_t *dims);
/* Product of a MESH value's dims. */
int64_t ps_params_mesh_size (const PsParams *p, const char *key);
/* The value as a file writes it. transfer full. */
char *ps_params_text (const PsParams *p, const char *key);
/* Where the value was set: its `where`, or "--option" when it is a default
 * or a preset's. transfer none. */
const char *ps_params_where (const PsParams *p, const char *key);

/* ---- helpers of the models' checks ------------------------------------------------ */

/* For a family's check: a program of n devices must have the slice's
 * cores, or fewer with the idle_cores option. `what` names the setting
 * in the error ("--mesh 2x4 has 8 devices but slice v3-32 has 32 cores").
 * NULL t: nothing to check. */
gboolean ps_params_check_devices (const PsParams *p, const PsModelTarget *t, int64_t n, const char *what,
                                  GError **error);

/* For a family's check, before anything is built: a program of `copies`
 * layer bodies (the layers it writes out, times the microbatches it writes
 * out) is refused above the max_layer_copies option, its error naming
 * `what` (the options whose product it is, by option name: a sweep's
 * children read them from a temporary file) and how to lift the limit. Each
 * option has its own bound; their product made programs that took hours
 * (the time grows faster than the copies). */
gboolean ps_params_check_layer_copies (const PsParams *p, int64_t copies, const char *what, GError **error);

/* The file for these parameters: a comment line per `comment` line (may
 * be NULL), then every section and key with its doc as a comment, then
 * the [published] section of the published run p equals, if any.
 * ps_params_read() reads it back to equal parameters. transfer full. */
char *ps_params_print (const PsParams *p, const char *comment);

/* Every value, in spec order, as one string: equal strings, equal runs.
 * transfer full. */
char *ps_params_key (const PsParams *p);

/* The keys of [model], [parallelism] and [slice] whose values differ, as
 * option names comma-separated ("layers, model-dim"); "" when the two
 * describe the same run. [options] (how podsim models the run, not what
 * runs) are not compared. Both must be of one family. transfer full. */
char *ps_params_diff (const PsParams *a, const PsParams *b);

/* The preset of a published run that p equals (ps_params_diff ""), or
 * NULL; *throughput gets its published figure (items per second). */
const char *ps_params_published_match (const PsParams *p, double *throughput);
/* The same for a preset of a published trend point (a [published]
 * step_time, no throughput), or NULL: a printed model file of it keeps
 * its [published] section and its name. */
const char *ps_params_series_match (const PsParams *p);

/* The [published] section a file had: the published throughput (items per
 * second, the family's item_unit; 0 when there was none), the table it
 * belongs to (`podsim tables TABLE`) and its source. transfer none. */
double ps_params_published (const PsParams *p, const char **table, const char **source);

/* A published step time (seconds, [published] step_time; 0 when none) of
 * a run whose configuration is not published, only its trend: the rows of
 * one `series` are compared as step times relative to the series' smallest
 * run (`podsim tables`). *series may be set to NULL. */
double ps_params_published_step (const PsParams *p, const char **series);

G_END_DECLS

#endif
