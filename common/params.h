/* Typed parameters and the ini files they are read from: the one store of
 * settings that model files, `--set KEY=VALUE` and every command-line option
 * derived from a parameter go through.
 *
 * A parameter is declared once, as a PsParamSpec, next to the code that
 * reads it: the slice, wrap links and hardware file in topology/, the
 * collective algorithms in sim/, the schedule in partitioner/analysis/, a
 * model's own parameters in its models/<name>_family.c. A declaration
 * whose choices are a module's own name table (choice_names) takes its
 * choice list, its `--help` and its model-file comment from that table,
 * so a new algorithm or policy appears everywhere without another edit.
 * A registry above (models/family.h, driver/target.h) assembles the
 * declarations of a run into one list; a PsParamStore holds one value per
 * declaration, checked as it is set.
 *
 * The ini reader is the syntax of model files (GKeyFile-like: `[section]`,
 * `key = value`, `#` comments): ps_ini_walk() calls back for every entry
 * with its position, so errors name FILE:LINE:COL.
 *
 * Ownership: PsParamStore is transfer full from its constructors; specs are
 * static and borrowed; strings returned for a spec (option, choices, doc)
 * are static storage, valid for the program's life.
 */
#ifndef PS_COMMON_PARAMS_H
#define PS_COMMON_PARAMS_H

#include <glib.h>
#include <stddef.h>
#include <stdint.h>

G_BEGIN_DECLS

typedef enum {
  PS_PARAM_INT,    /* a 64-bit integer in [min, max] */
  PS_PARAM_FLOAT,  /* a finite number in [min, max] ("2", "1.25", "1e-2") */
  PS_PARAM_BOOL,   /* true | false (also 1/0, yes/no, on/off when read) */
  PS_PARAM_CHOICE, /* one of `choices` ("2d|1d|dp") or of choice_names */
  PS_PARAM_MESH,   /* AxB..., `min` to `max` dims (rank), each >= 1; with
                    * min 0 the empty text is rank 0 (no mesh) */
  PS_PARAM_STRING, /* free text; "" allowed */
  PS_PARAM_PATH,   /* a file name; relative ones in a model file are
                    * relative to that file's folder; "" allowed */
  PS_PARAM_LIST,   /* items separated by ';' ("" = none); its option
                    * adds one item each time it is given */
} PsParamType;

#define PS_PARAM_MESH_MAX_RANK 4
/* A MESH value holds at most this many devices: what a step trace holds
 * (traces/trace.h, PS_TRACE_MAX_DEVICES). */
#define PS_PARAM_MESH_MAX_DEVICES (1u << 24)

/* One parameter. `search` makes it an axis of `podsim search`: "*" tries
 * every value (both booleans, every choice, every factorization of the
 * slice's cores into a mesh of this rank), otherwise a '|'-separated list
 * of values ("1|2|4|8"); a list that starts with '+' ("+1|2|4") is an
 * axis only when --axes names it (a costly one: pipelined strategies
 * multiply the search); NULL: not searched.
 *
 * Declare with designated initializers; unset fields are 0/NULL. */
typedef struct {
  const char *section;   /* "model", "parallelism", "slice" or "options" */
  const char *key;       /* lower_case; unique across sections */
  PsParamType type;
  const char *def;       /* default, as written in a file */
  const char *doc;       /* one line, for --help, --print-config and doc/ */
  int64_t min, max;      /* INT, FLOAT: value range; MESH: rank range */
  const char *choices;   /* CHOICE, written out: "2d|1d|dp" */
  const char *option;    /* command-line option without "--"; NULL: key with '-' for '_' */
  const char *search;
  /* CHOICE, when `choices` is NULL: the names the module that reads the
   * value parses, NULL-terminated; choice_docs (may be NULL; an entry may
   * be NULL) says what each means. The doc then ends with the list:
   * "DOC: name (what), name, name". */
  const char *const *choice_names;
  const char *const *choice_docs;
  /* Where a config struct keeps the value (PS_PARAM_FIELD), for
   * ps_param_store_fill(); 0: nowhere, its reader takes it itself. */
  size_t field_offset;       /* offsetof + 1 */
  size_t field_size;
  /* CHOICE into an enum field (PS_PARAM_ENUM_FIELD): the field gets the
   * value's index in these names (NULL-terminated: the reading module's
   * table, which holds every choice). NULL: the field is a string. */
  const char *const *field_names;
} PsParamSpec;

/* In a spec: the value goes to field f of struct T: an INT to an int or
 * int64_t, a FLOAT to a double, a BOOL to a gboolean, a CHOICE, STRING,
 * PATH or LIST to a const char * (the store's, valid while it lives), a
 * MESH to an int64_t array (its dims; the rest zero). */
#define PS_PARAM_FIELD(T, f) .field_offset = offsetof (T, f) + 1, .field_size = sizeof (((T *) 0)->f)
/* In a CHOICE spec: the value goes to enum field f of T as its index in
 * `names` (a NULL-terminated table holding every choice). */
#define PS_PARAM_ENUM_FIELD(T, f, names) PS_PARAM_FIELD (T, f), .field_names = names

/* The option of a spec without "--" ("model-dim"). */
const char *ps_param_option (const PsParamSpec *s);
/* CHOICE: the choices '|'-separated ("torus2d|dim-by-dim|ring"). */
const char *ps_param_choices (const PsParamSpec *s);
/* The one-line doc, with the choices when they come from choice_names. */
const char *ps_param_doc (const PsParamSpec *s);
/* The i-th choice of a CHOICE spec. */
const char *ps_param_choice (const PsParamSpec *s, int64_t i);
/* Keys and options match with '-' and '_' alike. */
gboolean ps_param_name_equal (const char *a, const char *b);

/* ---- the store ------------------------------------------------------------------ */

typedef struct PsParamStore PsParamStore;

/* One value per spec (specs[0..n-1] borrowed, outliving the store), each at
 * its default; a default that does not parse is a programmer error naming
 * `owner`. transfer full. */
PsParamStore *ps_param_store_new (const PsParamSpec *const *specs, int n, const char *owner);
PsParamStore *ps_param_store_copy (const PsParamStore *st);
void ps_param_store_free (PsParamStore *st);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsParamStore, ps_param_store_free)

int ps_param_store_n (const PsParamStore *st);
const PsParamSpec *ps_param_store_spec (const PsParamStore *st, int i);
/* The index of a spec by key or option name; -1 when unknown. */
int ps_param_store_find (const PsParamStore *st, const char *name);

/* Sets value i from text; `where` is "--option" (errors PS_ERROR_OPTION:
 * "--layers must be positive (got 0)") or a file position "FILE:LINE:COL"
 * (PS_ERROR_PARSE: "FILE:LINE:COL: layers must be ..."); kept for later
 * checks (ps_param_store_where). */
gboolean ps_param_store_set (PsParamStore *st, int i, const char *text, const char *where, GError **error);
/* Forgets where value i came from: checks name its option again. */
void ps_param_store_reset_where (PsParamStore *st, int i);

/* Typed reads; value i must have that type (programmer error).
 * ps_param_store_str reads CHOICE, STRING, PATH and LIST values. */
int64_t ps_param_store_int (const PsParamStore *st, int i);
double ps_param_store_double (const PsParamStore *st, int i);
gboolean ps_param_store_bool (const PsParamStore *st, int i);
const char *ps_param_store_str (const PsParamStore *st, int i);
/* MESH: returns the rank, fills dims (PS_PARAM_MESH_MAX_RANK entries). */
int ps_param_store_mesh (const PsParamStore *st, int i, int64_t *dims);
/* The value as a file writes it. transfer full. */
char *ps_param_store_text (const PsParamStore *st, int i);
/* Where value i was set ("--option" for a default). transfer none. */
const char *ps_param_store_where (const PsParamStore *st, int i);

/* How a check names a setting: where value `key` was set
 * (ps_param_store_where: "--heads", "run.ini:5:9: heads"), or `option`
 * when st is NULL (a config not made from parameters: a test's or a
 * table's own). transfer none. */
const char *ps_param_store_label (const PsParamStore *st, const char *key, const char *option);
/* Sets a PS_ERROR_OPTION error with the message and returns FALSE: what a
 * check says about a bad setting. */
gboolean ps_param_fail (GError **error, const char *fmt, ...) G_GNUC_PRINTF (2, 3);

/* Copies every value whose spec names a field (PS_PARAM_FIELD) into the
 * struct at `config`: a family's config_from is this one loop, plus the
 * values that need a conversion. */
void ps_param_store_fill (const PsParamStore *st, gpointer config);

/* "# DOC (range or choices)\n": a spec's comment in a written file. */
void ps_param_append_doc (GString *out, const PsParamSpec *s);

/* ---- ini files ------------------------------------------------------------------ */

/* Where an entry stands: line and 1-based columns of its key and value. */
typedef struct {
  const char *path;
  int line;
  int key_col, value_col;
} PsIniPos;

/* Called for every `key = value` (trimmed; keys are [A-Za-z0-9_-]+) with
 * its section; FALSE (with error set) stops the walk. */
typedef gboolean (*PsIniEntryFn) (const char *section, const char *key, const char *value,
                                  const PsIniPos *at, gpointer data, GError **error);

/* Walks a whole file: syntax errors, a key before the first section and a
 * section not in `known` or `extra` (both NULL-terminated; extra may be
 * NULL) are PS_ERROR_PARSE "PATH:LINE:COL: ..." errors. */
gboolean ps_ini_walk (const char *path, const char *text, const char *const *known,
                      const char *const *extra, PsIniEntryFn fn, gpointer data, GError **error);

/* One `key = value` of a section, with where its key and value start. */
typedef struct {
  char *key, *value;
  char *where;               /* "FILE:LINE:COL" of the value */
  char *key_where;           /* "FILE:LINE:COL" of the key */
} PsIniEntry;
void ps_ini_entry_free (PsIniEntry *e);

/* Checks a whole file's syntax (as ps_ini_walk) and returns the entries of
 * [section] in file order (PsIniEntry, transfer full); *found (may be
 * NULL) says whether the section is there at all, keys or not. */
GPtrArray *ps_ini_collect_section (const char *path, const char *text, const char *const *known,
                                   const char *const *extra, const char *section, gboolean *found,
                                   GError **error);

/* A whole text file, capped at PS_MAX_CONFIG_BYTES (common/checked.h) and
 * read once per process and path (PS_ERROR_IO; a NUL byte is an error).
 * transfer full. */
char *ps_ini_load_text (const char *path, GError **error);

G_END_DECLS

#endif
