/* Typed parameters and ini files: see params.h. */
#include "config.h"

#include "common/params.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "common/checked.h"
#include "common/error.h"
#include "common/ndindex.h"

/* ---- specs -------------------------------------------------------------------- */

/* Strings derived from a spec are made once and kept for the program's
 * life, keyed by the spec and what was derived. */
static const char *
derived (const PsParamSpec *s, int what, char *(*make) (const PsParamSpec *s))
{
  static GHashTable *cache[3];
  static GMutex lock;
  g_mutex_lock (&lock);
  if (!cache[what])
    cache[what] = g_hash_table_new (NULL, NULL);
  char *v = g_hash_table_lookup (cache[what], s);
  if (!v)
    {
      v = make (s);
      g_hash_table_insert (cache[what], (gpointer) s, v);
    }
  g_mutex_unlock (&lock);
  return v;
}

static char *
make_option (const PsParamSpec *s)
{
  return g_strdelimit (g_strdup (s->key), "_", '-');
}

static char *
make_choices (const PsParamSpec *s)
{
  return g_strjoinv ("|", (char **) s->choice_names);
}

static char *
make_doc (const PsParamSpec *s)
{
  GString *d = g_string_new (s->doc);
  for (int i = 0; s->choice_names[i]; i++)
    {
      g_string_append_printf (d, "%s%s", i ? ", " : ": ", s->choice_names[i]);
      if (s->choice_docs && s->choice_docs[i])
        g_string_append_printf (d, " (%s)", s->choice_docs[i]);
    }
  return g_string_free (d, FALSE);
}

const char *
ps_param_option (const PsParamSpec *s)
{
  return s->option ? s->option : derived (s, 0, make_option);
}

const char *
ps_param_choices (const PsParamSpec *s)
{
  g_return_val_if_fail (s->type == PS_PARAM_CHOICE && (s->choices || s->choice_names), "");
  return s->choices ? s->choices : derived (s, 1, make_choices);
}

const char *
ps_param_doc (const PsParamSpec *s)
{
  return s->choices || !s->choice_names ? s->doc : derived (s, 2, make_doc);
}

/* The choices split once per spec. */
static char **
choice_list (const PsParamSpec *s)
{
  static GHashTable *split;
  static GMutex lock;
  g_mutex_lock (&lock);
  if (!split)
    split = g_hash_table_new (NULL, NULL);
  char **c = g_hash_table_lookup (split, s);
  if (!c)
    {
      c = g_strsplit (ps_param_choices (s), "|", -1);
      g_hash_table_insert (split, (gpointer) s, c);
    }
  g_mutex_unlock (&lock);
  return c;
}

const char *
ps_param_choice (const PsParamSpec *s, int64_t i)
{
  char **c = choice_list (s);
  g_return_val_if_fail (i >= 0 && i < (int64_t) g_strv_length (c), "");
  return c[i];
}

gboolean
ps_param_name_equal (const char *a, const char *b)
{
  for (; *a && *b; a++, b++)
    {
      char x = *a == '-' ? '_' : *a, y = *b == '-' ? '_' : *b;
      if (x != y)
        return FALSE;
    }
  return *a == *b;
}

/* ---- values ------------------------------------------------------------------- */

typedef struct {
  int64_t i;                 /* INT; BOOL 0/1; CHOICE: index in choices */
  double d;                  /* FLOAT */
  int rank;                  /* MESH */
  int64_t dims[PS_PARAM_MESH_MAX_RANK];
  char *s;                   /* STRING, PATH */
  char *where;               /* "--option" or "FILE:LINE:COL: key" */
} Value;

struct PsParamStore {
  const PsParamSpec *const *specs;
  int n;
  Value *v;
};

/* Parses `text` for spec s into *v. The error message is the problem only;
 * the caller says where. */
static gboolean
parse_value (const PsParamSpec *s, const char *text, Value *v, char **problem)
{
  switch (s->type)
    {
    case PS_PARAM_INT:
      {
        gint64 x;
        GError *e = NULL;
        if (!g_ascii_string_to_signed (text, 10, G_MININT64, G_MAXINT64, &x, &e))
          {
            gboolean range = g_error_matches (e, G_NUMBER_PARSER_ERROR, G_NUMBER_PARSER_ERROR_OUT_OF_BOUNDS);
            g_error_free (e);
            /* Beyond int64 on either side: a huge negative is no case of
             * "at most", so it gets the whole range. */
            if (range && text[strspn (text, " \t")] == '-')
              *problem = g_strdup_printf ("must be in %" G_GINT64_FORMAT " .. %" G_GINT64_FORMAT " (got %s)",
                                          s->min, s->max, text);
            else
              *problem = range ? g_strdup_printf ("must be at most %" G_GINT64_FORMAT " (got %s)", s->max, text)
                               : g_strdup_printf ("'%s' is not an integer", text);
            return FALSE;
          }
        if (x < s->min)
          {
            if (s->min == 1)
              *problem = g_strdup_printf ("must be positive (got %" G_GINT64_FORMAT ")", x);
            else
              *problem = g_strdup_printf ("must be at least %" G_GINT64_FORMAT " (got %" G_GINT64_FORMAT ")",
                                          s->min, x);
            return FALSE;
          }
        if (x > s->max)
          {
            *problem = g_strdup_printf ("must be at most %" G_GINT64_FORMAT " (got %" G_GINT64_FORMAT ")",
                                        s->max, x);
            return FALSE;
          }
        v->i = x;
        return TRUE;
      }
    case PS_PARAM_FLOAT:
      {
        char *end = NULL;
        double x = g_ascii_strtod (text, &end);
        if (end == text || *end != '\0' || !isfinite (x))
          {
            *problem = g_strdup_printf ("'%s' is not a number", text);
            return FALSE;
          }
        if (x < (double) s->min || x > (double) s->max)
          {
            *problem = g_strdup_printf ("must be between %" G_GINT64_FORMAT " and %" G_GINT64_FORMAT " (got %s)",
                                        s->min, s->max, text);
            return FALSE;
          }
        v->d = x;
        return TRUE;
      }
    case PS_PARAM_BOOL:
      {
        static const char *yes[] = { "true", "1", "yes", "on" }, *no[] = { "false", "0", "no", "off" };
        for (gsize k = 0; k < G_N_ELEMENTS (yes); k++)
          if (g_ascii_strcasecmp (text, yes[k]) == 0 || g_ascii_strcasecmp (text, no[k]) == 0)
            {
              v->i = g_ascii_strcasecmp (text, yes[k]) == 0;
              return TRUE;
            }
        *problem = g_strdup_printf ("'%s' is not true or false", text);
        return FALSE;
      }
    case PS_PARAM_CHOICE:
      {
        char **c = choice_list (s);
        for (int k = 0; c[k]; k++)
          if (strcmp (c[k], text) == 0)
            {
              v->i = k;
              return TRUE;
            }
        g_autofree char *pretty = g_strjoinv (", ", c);
        *problem = g_strdup_printf ("'%s' is not one of %s", text, pretty);
        return FALSE;
      }
    case PS_PARAM_MESH:
      {
        if (*text == '\0' && s->min == 0)
          {
            v->rank = 0;
            return TRUE;
          }
        int rank = 0;
        int64_t dims[PS_PARAM_MESH_MAX_RANK] = { 0 };
        if (!ps_parse_shape (text, PS_PARAM_MESH_MAX_RANK, PS_PARAM_MESH_MAX_DEVICES, dims, &rank))
          {
            *problem = g_strdup_printf ("'%s' is not a mesh like 8x16 (dims of 1 or more, separated by 'x')", text);
            return FALSE;
          }
        if (rank < s->min || rank > s->max)
          {
            if (s->min == s->max)
              *problem = g_strdup_printf ("'%s' has %d dims, this model takes %" G_GINT64_FORMAT, text, rank, s->min);
            else
              *problem = g_strdup_printf ("'%s' has %d dims, this model takes %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT,
                                          text, rank, s->min, s->max);
            return FALSE;
          }
        v->rank = rank;
        memcpy (v->dims, dims, sizeof dims);
        return TRUE;
      }
    case PS_PARAM_STRING:
    case PS_PARAM_PATH:
    case PS_PARAM_LIST:
      g_free (v->s);
      v->s = g_strdup (text);
      return TRUE;
    }
  g_assert_not_reached ();
}

static char *
value_text (const PsParamSpec *s, const Value *v)
{
  switch (s->type)
    {
    case PS_PARAM_INT:
      return g_strdup_printf ("%" G_GINT64_FORMAT, v->i);
    case PS_PARAM_FLOAT:
      {
        /* The shortest text that reads back to the same number. */
        char buf[G_ASCII_DTOSTR_BUF_SIZE];
        g_ascii_formatd (buf, sizeof buf, "%.15g", v->d);
        if (g_ascii_strtod (buf, NULL) != v->d)
          g_ascii_formatd (buf, sizeof buf, "%.17g", v->d);
        return g_strdup (buf);
      }
    case PS_PARAM_BOOL:
      return g_strdup (v->i ? "true" : "false");
    case PS_PARAM_CHOICE:
      return g_strdup (ps_param_choice (s, v->i));
    case PS_PARAM_MESH:
      {
        GString *g = g_string_new (NULL);
        for (int k = 0; k < v->rank; k++)
          g_string_append_printf (g, "%s%" G_GINT64_FORMAT, k ? "x" : "", v->dims[k]);
        return g_string_free (g, FALSE);
      }
    case PS_PARAM_STRING:
    case PS_PARAM_PATH:
    case PS_PARAM_LIST:
      return g_strdup (v->s ? v->s : "");
    }
  g_assert_not_reached ();
}

static char *
option_where (const PsParamSpec *s)
{
  return g_strdup_printf ("--%s", ps_param_option (s));
}

PsParamStore *
ps_param_store_new (const PsParamSpec *const *specs, int n, const char *owner)
{
  PsParamStore *st = g_new0 (PsParamStore, 1);
  st->specs = specs;
  st->n = n;
  st->v = g_new0 (Value, n);
  for (int i = 0; i < n; i++)
    {
      const PsParamSpec *s = specs[i];
      g_autofree char *problem = NULL;
      if (!parse_value (s, s->def, &st->v[i], &problem))
        g_error ("%s: the default of %s: %s", owner, s->key, problem);
      st->v[i].where = option_where (s);
    }
  return st;
}

PsParamStore *
ps_param_store_copy (const PsParamStore *st)
{
  PsParamStore *c = g_new0 (PsParamStore, 1);
  *c = *st;
  c->v = g_new0 (Value, st->n);
  for (int i = 0; i < st->n; i++)
    {
      c->v[i] = st->v[i];
      c->v[i].s = g_strdup (st->v[i].s);
      c->v[i].where = g_strdup (st->v[i].where);
    }
  return c;
}

void
ps_param_store_free (PsParamStore *st)
{
  if (!st)
    return;
  for (int i = 0; i < st->n; i++)
    {
      g_free (st->v[i].s);
      g_free (st->v[i].where);
    }
  g_free (st->v);
  g_free (st);
}

int
ps_param_store_n (const PsParamStore *st)
{
  return st->n;
}

const PsParamSpec *
ps_param_store_spec (const PsParamStore *st, int i)
{
  g_return_val_if_fail (i >= 0 && i < st->n, NULL);
  return st->specs[i];
}

int
ps_param_store_find (const PsParamStore *st, const char *name)
{
  for (int i = 0; i < st->n; i++)
    if (ps_param_name_equal (name, st->specs[i]->key) || ps_param_name_equal (name, ps_param_option (st->specs[i])))
      return i;
  return -1;
}

gboolean
ps_param_store_set (PsParamStore *st, int i, const char *text, const char *where, GError **error)
{
  const PsParamSpec *s = ps_param_store_spec (st, i);
  gboolean is_option = g_str_has_prefix (where, "--");
  g_autofree char *problem = NULL;
  Value v = st->v[i];
  v.s = NULL;
  /* A value is one line of a model file: a newline would inject lines
   * (sections, keys) into the files and CSV rows it is written to. */
  if (strpbrk (text, "\n\r"))
    {
      g_set_error (error, PS_ERROR, is_option ? PS_ERROR_OPTION : PS_ERROR_PARSE,
                   "%s%s%s: a value cannot hold a line break", where, is_option ? "" : ": ", is_option ? "" : s->key);
      return FALSE;
    }
  if (!parse_value (s, text, &v, &problem))
    {
      g_free (v.s);
      /* "--layers must be positive (got 0)", "--layers: 'x' is not an integer". */
      const char *sep = g_str_has_prefix (problem, "must ") ? " " : ": ";
      if (is_option)
        g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s%s%s", where, sep, problem);
      else
        g_set_error (error, PS_ERROR, PS_ERROR_PARSE, "%s: %s%s%s", where, s->key, sep, problem);
      return FALSE;
    }
  if (s->type != PS_PARAM_STRING && s->type != PS_PARAM_PATH && s->type != PS_PARAM_LIST)
    v.s = g_strdup (st->v[i].s);
  g_free (st->v[i].s);
  g_free (st->v[i].where);
  st->v[i] = v;
  st->v[i].where = is_option ? g_strdup (where) : g_strdup_printf ("%s: %s", where, s->key);
  return TRUE;
}

void
ps_param_store_reset_where (PsParamStore *st, int i)
{
  g_free (st->v[i].where);
  st->v[i].where = option_where (ps_param_store_spec (st, i));
}

static const Value *
get (const PsParamStore *st, int i, PsParamType type)
{
  const PsParamSpec *s = ps_param_store_spec (st, i);
  g_assert (s != NULL);
  g_assert (s->type == type || (type == PS_PARAM_STRING && (s->type == PS_PARAM_PATH
                                                            || s->type == PS_PARAM_LIST)));
  return &st->v[i];
}

int64_t
ps_param_store_int (const PsParamStore *st, int i)
{
  return get (st, i, PS_PARAM_INT)->i;
}

double
ps_param_store_double (const PsParamStore *st, int i)
{
  return get (st, i, PS_PARAM_FLOAT)->d;
}

gboolean
ps_param_store_bool (const PsParamStore *st, int i)
{
  return get (st, i, PS_PARAM_BOOL)->i != 0;
}

const char *
ps_param_store_str (const PsParamStore *st, int i)
{
  const PsParamSpec *s = ps_param_store_spec (st, i);
  if (s->type == PS_PARAM_CHOICE)
    return ps_param_choice (s, st->v[i].i);
  return get (st, i, PS_PARAM_STRING)->s;
}

int
ps_param_store_mesh (const PsParamStore *st, int i, int64_t *dims)
{
  const Value *v = get (st, i, PS_PARAM_MESH);
  memcpy (dims, v->dims, sizeof v->dims);
  return v->rank;
}

char *
ps_param_store_text (const PsParamStore *st, int i)
{
  return value_text (ps_param_store_spec (st, i), &st->v[i]);
}

const char *
ps_param_store_where (const PsParamStore *st, int i)
{
  return st->v[i].where;
}

const char *
ps_param_store_label (const PsParamStore *st, const char *key, const char *option)
{
  if (st == NULL)
    return option;
  int i = ps_param_store_find (st, key);
  g_return_val_if_fail (i >= 0, option);
  return ps_param_store_where (st, i);
}

gboolean
ps_param_fail (GError **error, const char *fmt, ...)
{
  va_list ap;
  va_start (ap, fmt);
  g_autofree char *msg = g_strdup_vprintf (fmt, ap);
  va_end (ap);
  g_set_error_literal (error, PS_ERROR, PS_ERROR_OPTION, msg);
  return FALSE;
}

void
ps_param_store_fill (const PsParamStore *st, gpointer config)
{
  for (int i = 0; i < st->n; i++)
    {
      const PsParamSpec *s = st->specs[i];
      if (!s->field_offset)
        continue;
      char *at = (char *) config + s->field_offset - 1;
      const Value *v = &st->v[i];
      switch (s->type)
        {
        case PS_PARAM_INT:
          if (s->field_size == sizeof (int))
            *(int *) at = (int) v->i;
          else
            {
              g_assert (s->field_size == sizeof (int64_t));
              *(int64_t *) at = v->i;
            }
          break;
        case PS_PARAM_BOOL:
          g_assert (s->field_size == sizeof (gboolean));
          *(gboolean *) at = v->i != 0;
          break;
        case PS_PARAM_FLOAT:
          g_assert (s->field_size == sizeof (double));
          *(double *) at = v->d;
          break;
        case PS_PARAM_MESH:
          {
            size_t n = s->field_size / sizeof (int64_t);
            g_assert (n * sizeof (int64_t) == s->field_size && (size_t) v->rank <= n);
            for (size_t k = 0; k < n; k++)
              ((int64_t *) at)[k] = (int) k < v->rank ? v->dims[k] : 0;
            break;
          }
        case PS_PARAM_CHOICE:
          if (s->field_names)
            {
              g_assert (s->field_size == sizeof (int));
              int k = 0;
              while (s->field_names[k] && strcmp (s->field_names[k], ps_param_store_str (st, i)) != 0)
                k++;
              g_assert (s->field_names[k]);   /* a choice the table lacks: a programmer error */
              *(int *) at = k;
              break;
            }
          /* fall through */
        case PS_PARAM_STRING:
        case PS_PARAM_PATH:
        case PS_PARAM_LIST:
          g_assert (s->field_size == sizeof (const char *));
          *(const char **) at = ps_param_store_str (st, i);
          break;
        }
    }
}

void
ps_param_append_doc (GString *out, const PsParamSpec *s)
{
  g_string_append_printf (out, "# %s", ps_param_doc (s));
  if ((s->type == PS_PARAM_INT || s->type == PS_PARAM_FLOAT) && s->max != G_MAXINT64)
    g_string_append_printf (out, " (%" G_GINT64_FORMAT " .. %" G_GINT64_FORMAT ")", s->min, s->max);
  else if (s->type == PS_PARAM_CHOICE)
    {
      g_autofree char *c = g_strdup (ps_param_choices (s));
      g_strdelimit (c, "|", ' ');
      g_string_append_printf (out, " (%s)", c);
    }
  g_string_append (out, "\n");
}

/* ---- ini files ------------------------------------------------------------------ */

static gboolean
is_key_char (char c)
{
  return g_ascii_isalnum (c) || c == '_' || c == '-';
}

static gboolean
in_list (const char *const *list, const char *name)
{
  for (int i = 0; list && list[i]; i++)
    if (strcmp (list[i], name) == 0)
      return TRUE;
  return FALSE;
}

gboolean
ps_ini_walk (const char *path, const char *text, const char *const *known, const char *const *extra,
             PsIniEntryFn fn, gpointer data, GError **error)
{
  g_autofree char *section = NULL;
  const char *p = text;
  PsIniPos at = { path, 0, 0, 0 };
  while (*p)
    {
      const char *eol = strchr (p, '\n');
      if (!eol)
        eol = p + strlen (p);
      const char *line = p;
      at.line++;
      const char *q = p;
      while (q < eol && (*q == ' ' || *q == '\t'))
        q++;
      const char *end = eol;
      while (end > q && g_ascii_isspace (end[-1]))
        end--;
      if (q == end || *q == '#')
        ;
      else if (*q == '[')
        {
          const char *close = memchr (q, ']', (size_t) (end - q));
          if (!close || close + 1 != end)
            {
              ps_set_error_at (error, PS_ERROR_PARSE, path, at.line, (int) (q - line) + 1,
                               "a section header is '[name]' on its own line");
              return FALSE;
            }
          g_free (section);
          section = g_strndup (q + 1, (gsize) (close - q - 1));
          if (!in_list (known, section) && !in_list (extra, section))
            {
              g_autofree char *names = g_strjoinv (", ", (char **) known);
              g_autofree char *more = extra ? g_strjoinv (", ", (char **) extra) : NULL;
              ps_set_error_at (error, PS_ERROR_PARSE, path, at.line, (int) (q + 1 - line) + 1,
                               "unknown section [%s] (known: %s%s%s)", section, names, more ? ", " : "",
                               more ? more : "");
              return FALSE;
            }
        }
      else
        {
          const char *k = q;
          while (q < end && is_key_char (*q))
            q++;
          const char *kend = q;
          while (q < end && (*q == ' ' || *q == '\t'))
            q++;
          if (kend == k || q == end || *q != '=')
            {
              ps_set_error_at (error, PS_ERROR_PARSE, path, at.line, (int) (k - line) + 1,
                               "expected 'key = value', '[section]' or a '#' comment");
              return FALSE;
            }
          q++;
          while (q < end && (*q == ' ' || *q == '\t'))
            q++;
          if (!section)
            {
              ps_set_error_at (error, PS_ERROR_PARSE, path, at.line, (int) (k - line) + 1,
                               "a key before the first [section]");
              return FALSE;
            }
          g_autofree char *key = g_strndup (k, (gsize) (kend - k));
          g_autofree char *value = g_strndup (q, (gsize) (end - q));
          at.key_col = (int) (k - line) + 1;
          at.value_col = (int) (q - line) + 1;
          if (!fn (section, key, value, &at, data, error))
            return FALSE;
        }
      p = *eol ? eol + 1 : eol;
    }
  return TRUE;
}

void
ps_ini_entry_free (PsIniEntry *e)
{
  if (!e)
    return;
  g_free (e->key);
  g_free (e->value);
  g_free (e->where);
  g_free (e->key_where);
  g_free (e);
}

typedef struct {
  const char *section;
  GPtrArray *entries;
} Collect;

static gboolean
collect_entry (const char *section, const char *key, const char *value, const PsIniPos *at, gpointer data,
               GError **error)
{
  Collect *c = data;
  (void) error;
  if (strcmp (section, c->section) != 0)
    return TRUE;
  PsIniEntry *e = g_new0 (PsIniEntry, 1);
  e->key = g_strdup (key);
  e->value = g_strdup (value);
  e->where = g_strdup_printf ("%s:%d:%d", at->path, at->line, at->value_col);
  e->key_where = g_strdup_printf ("%s:%d:%d", at->path, at->line, at->key_col);
  g_ptr_array_add (c->entries, e);
  return TRUE;
}

/* A section header alone, without keys, still counts as present. */
static gboolean
has_section (const char *text, const char *section)
{
  g_autofree char *hdr = g_strdup_printf ("[%s]", section);
  for (const char *p = text; (p = strstr (p, hdr)); p += strlen (hdr))
    {
      const char *b = p;
      while (b > text && (b[-1] == ' ' || b[-1] == '\t'))
        b--;
      if (b == text || b[-1] == '\n')
        return TRUE;
    }
  return FALSE;
}

GPtrArray *
ps_ini_collect_section (const char *path, const char *text, const char *const *known, const char *const *extra,
                        const char *section, gboolean *found, GError **error)
{
  g_autoptr (GPtrArray) entries = g_ptr_array_new_with_free_func ((GDestroyNotify) ps_ini_entry_free);
  Collect c = { section, entries };
  if (!ps_ini_walk (path, text, known, extra, collect_entry, &c, error))
    return NULL;
  if (found)
    *found = has_section (text, section);
  return g_steal_pointer (&entries);
}

char *
ps_ini_load_text (const char *path, GError **error)
{
  /* Capped, and stopped at a NUL byte: /dev/zero or a FIFO fed forever
   * fails at once instead of growing without bound. Each path is read once
   * per process (the option parser looks at --config more than once), so
   * a FIFO or standard input works and every reader sees the same text. */
  G_LOCK_DEFINE_STATIC (loaded);
  static GHashTable *loaded;
  G_LOCK (loaded);
  const char *seen = loaded ? g_hash_table_lookup (loaded, path) : NULL;
  char *copy = seen ? g_strdup (seen) : NULL;
  G_UNLOCK (loaded);
  if (copy)
    return copy;
  char *text = NULL;
  gsize len = 0;
  if (!ps_read_text_file (path, PS_MAX_CONFIG_BYTES, &text, &len, error))
    return NULL;
  G_LOCK (loaded);
  if (!loaded)
    loaded = g_hash_table_new_full (g_str_hash, g_str_equal, g_free, g_free);
  g_hash_table_replace (loaded, g_strdup (path), g_strdup (text));
  G_UNLOCK (loaded);
  return text;
}
