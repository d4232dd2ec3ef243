/* Chrome trace-event JSON writer. The JSON is printed by hand rather than
 * through json-glib because the simulator may add millions of events and the
 * output must be byte-for-byte deterministic (fixed number format, sorted
 * events); strings are escaped per RFC 8259. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "traces/timeline.h"

typedef enum { EV_COMPLETE, EV_COUNTER } EvKind;

typedef struct {
  EvKind kind;
  int pid, tid;
  guint64 seq;          /* insertion order: the last sort key */
  double start_s, dur_s;
  const char *name;     /* interned */
  const char *category; /* interned or NULL */
  const char *series;   /* counters */
  double value;         /* counters */
  char *args_json;      /* complete events: "{...}" or NULL; owned */
} Ev;

typedef struct {
  int pid, tid;         /* tid -1: process name */
  char *name;
} Meta;

struct PsTimeline {
  GArray *events;       /* Ev */
  GArray *meta;         /* Meta */
  GStringChunk *strings;
};

PsTimeline *
ps_timeline_new (void)
{
  PsTimeline *tl = g_new0 (PsTimeline, 1);
  tl->events = g_array_new (FALSE, TRUE, sizeof (Ev));
  tl->meta = g_array_new (FALSE, TRUE, sizeof (Meta));
  tl->strings = g_string_chunk_new (4096);
  return tl;
}

void
ps_timeline_free (PsTimeline *tl)
{
  if (!tl)
    return;
  for (guint i = 0; i < tl->events->len; i++)
    g_free (g_array_index (tl->events, Ev, i).args_json);
  for (guint i = 0; i < tl->meta->len; i++)
    g_free (g_array_index (tl->meta, Meta, i).name);
  g_array_free (tl->events, TRUE);
  g_array_free (tl->meta, TRUE);
  g_string_chunk_free (tl->strings);
  g_free (tl);
}

static void
append_json_string (GString *out, const char *s)
{
  g_string_append_c (out, '"');
  for (const unsigned char *p = (const unsigned char *) s; *p; p++)
    {
      switch (*p)
        {
        case '"': g_string_append (out, "\\\""); break;
        case '\\': g_string_append (out, "\\\\"); break;
        case '\n': g_string_append (out, "\\n"); break;
        case '\t': g_string_append (out, "\\t"); break;
        case '\r': g_string_append (out, "\\r"); break;
        default:
          if (*p < 0x20)
            g_string_append_printf (out, "\\u%04x", *p);
          else
            g_string_append_c (out, (char) *p);
        }
    }
  g_string_append_c (out, '"');
}

/* JSON has no NaN or infinity; a fixed %.17g keeps doubles exact and
 * the output locale-independent. */
static void
append_json_number (GString *out, double v)
{
  if (!isfinite (v))
    {
      g_string_append (out, "null");
      return;
    }
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd (buf, sizeof buf, "%.17g", v);
  g_string_append (out, buf);
}

/* Microseconds with nanosecond resolution: exact enough for Perfetto and
 * short enough to keep files small. */
static void
append_us (GString *out, double seconds)
{
  if (!isfinite (seconds))
    {
      g_string_append (out, "0");
      return;
    }
  char buf[G_ASCII_DTOSTR_BUF_SIZE];
  g_ascii_formatd (buf, sizeof buf, "%.3f", seconds * 1e6);
  g_string_append (out, buf);
}

static void
set_meta (PsTimeline *tl, int pid, int tid, const char *name)
{
  for (guint i = 0; i < tl->meta->len; i++)
    {
      Meta *m = &g_array_index (tl->meta, Meta, i);
      if (m->pid == pid && m->tid == tid)
        {
          g_free (m->name);
          m->name = g_strdup (name);
          return;
        }
    }
  Meta m = { pid, tid, g_strdup (name) };
  g_array_append_val (tl->meta, m);
}

void
ps_timeline_set_process_name (PsTimeline *tl, int pid, const char *name)
{
  g_return_if_fail (tl != NULL && name != NULL);
  set_meta (tl, pid, -1, name);
}

void
ps_timeline_set_thread_name (PsTimeline *tl, int pid, int tid, const char *name)
{
  g_return_if_fail (tl != NULL && name != NULL && tid >= 0);
  set_meta (tl, pid, tid, name);
}

static Ev *
add_event (PsTimeline *tl, EvKind kind, int pid, int tid, const char *name)
{
  Ev e = { .kind = kind, .pid = pid, .tid = tid, .seq = tl->events->len,
           .name = g_string_chunk_insert_const (tl->strings, name ? name : "") };
  g_array_append_val (tl->events, e);
  return &g_array_index (tl->events, Ev, tl->events->len - 1);
}

void
ps_timeline_add_complete (PsTimeline *tl, int pid, int tid, const char *name,
                          const char *category, double start_s, double dur_s,
                          const char *const *args)
{
  g_return_if_fail (tl != NULL);
  Ev *e = add_event (tl, EV_COMPLETE, pid, tid, name);
  e->start_s = start_s;
  e->dur_s = dur_s < 0 ? 0 : dur_s;
  e->category = category ? g_string_chunk_insert_const (tl->strings, category) : NULL;
  if (args && args[0])
    {
      GString *s = g_string_new ("{");
      for (guint i = 0; args[i] && args[i + 1]; i += 2)
        {
          if (i)
            g_string_append_c (s, ',');
          append_json_string (s, args[i]);
          g_string_append_c (s, ':');
          append_json_string (s, args[i + 1]);
        }
      g_string_append_c (s, '}');
      e->args_json = g_string_free (s, FALSE);
    }
}

void
ps_timeline_add_complete_num (PsTimeline *tl, int pid, int tid, const char *name,
                              const char *category, double start_s, double dur_s,
                              guint n_args, const char *const *keys, const double *values)
{
  g_return_if_fail (tl != NULL);
  ps_timeline_add_complete (tl, pid, tid, name, category, start_s, dur_s, NULL);
  if (n_args == 0)
    return;
  Ev *e = &g_array_index (tl->events, Ev, tl->events->len - 1);
  GString *s = g_string_new ("{");
  for (guint i = 0; i < n_args; i++)
    {
      if (i)
        g_string_append_c (s, ',');
      append_json_string (s, keys[i]);
      g_string_append_c (s, ':');
      append_json_number (s, values[i]);
    }
  g_string_append_c (s, '}');
  e->args_json = g_string_free (s, FALSE);
}

void
ps_timeline_add_counter (PsTimeline *tl, int pid, const char *name, const char *series,
                         double time_s, double value)
{
  g_return_if_fail (tl != NULL);
  Ev *e = add_event (tl, EV_COUNTER, pid, 0, name);
  e->start_s = time_s;
  e->series = g_string_chunk_insert_const (tl->strings, series ? series : "value");
  e->value = value;
}

guint64
ps_timeline_n_events (const PsTimeline *tl)
{
  return tl->events->len;
}

static int
cmp_ev (const void *a, const void *b)
{
  const Ev *x = *(const Ev *const *) a, *y = *(const Ev *const *) b;
  if (x->start_s != y->start_s)
    return x->start_s < y->start_s ? -1 : 1;
  if (x->pid != y->pid)
    return x->pid < y->pid ? -1 : 1;
  if (x->tid != y->tid)
    return x->tid < y->tid ? -1 : 1;
  return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int
cmp_meta (const void *a, const void *b)
{
  const Meta *x = a, *y = b;
  if (x->pid != y->pid)
    return x->pid < y->pid ? -1 : 1;
  return x->tid < y->tid ? -1 : x->tid > y->tid;
}

char *
ps_timeline_to_json (const PsTimeline *tl, gsize *len_out)
{
  GString *out = g_string_sized_new (64 + 128 * (gsize) tl->events->len);
  g_string_append (out, "{\"traceEvents\":[\n");
  gboolean first = TRUE;

  g_autofree Meta *meta = g_new (Meta, tl->meta->len + 1);
  if (tl->meta->len)
    memcpy (meta, tl->meta->data, tl->meta->len * sizeof (Meta));
  qsort (meta, tl->meta->len, sizeof (Meta), cmp_meta);
  for (guint i = 0; i < tl->meta->len; i++)
    {
      const Meta *m = &meta[i];
      g_string_append (out, first ? "" : ",\n");
      first = FALSE;
      g_string_append_printf (out, "{\"ph\":\"M\",\"pid\":%d,", m->pid);
      if (m->tid >= 0)
        g_string_append_printf (out, "\"tid\":%d,\"name\":\"thread_name\"", m->tid);
      else
        g_string_append (out, "\"name\":\"process_name\"");
      g_string_append (out, ",\"args\":{\"name\":");
      append_json_string (out, m->name);
      g_string_append (out, "}}");
    }

  g_autofree const Ev **order = g_new (const Ev *, tl->events->len + 1);
  for (guint i = 0; i < tl->events->len; i++)
    order[i] = &g_array_index (tl->events, Ev, i);
  qsort (order, tl->events->len, sizeof *order, cmp_ev);
  for (guint i = 0; i < tl->events->len; i++)
    {
      const Ev *e = order[i];
      g_string_append (out, first ? "" : ",\n");
      first = FALSE;
      if (e->kind == EV_COMPLETE)
        {
          g_string_append_printf (out, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":",
                                  e->pid, e->tid);
          append_json_string (out, e->name);
          if (e->category)
            {
              g_string_append (out, ",\"cat\":");
              append_json_string (out, e->category);
            }
          g_string_append (out, ",\"ts\":");
          append_us (out, e->start_s);
          g_string_append (out, ",\"dur\":");
          append_us (out, e->dur_s);
          if (e->args_json)
            g_string_append_printf (out, ",\"args\":%s", e->args_json);
          g_string_append_c (out, '}');
        }
      else
        {
          g_string_append_printf (out, "{\"ph\":\"C\",\"pid\":%d,\"name\":", e->pid);
          append_json_string (out, e->name);
          g_string_append (out, ",\"ts\":");
          append_us (out, e->start_s);
          g_string_append (out, ",\"args\":{");
          append_json_string (out, e->series);
          g_string_append_c (out, ':');
          append_json_number (out, e->value);
          g_string_append (out, "}}");
        }
    }
  g_string_append (out, "\n],\"displayTimeUnit\":\"ms\"}\n");
  if (len_out)
    *len_out = out->len;
  return g_string_free (out, FALSE);
}

gboolean
ps_timeline_write (const PsTimeline *tl, const char *path, GError **error)
{
  gsize len;
  g_autofree char *json = ps_timeline_to_json (tl, &len);
  return ps_write_file_atomic (path, json, len, error);
}
