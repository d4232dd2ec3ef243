/* Private to trace*.c (traces/, private prefix tr_ and Tr; see
 * doc/architecture.md): the checks that both the reader and
 * ps_trace_validate() apply, and the compact-form parsers.
 *
 * Checks return NULL when fine, else a message (transfer full) without a
 * location; callers add "FILE:LINE:COL: " or "event N: ". */
#ifndef PS_TRACES_TRACE_PRIVATE_H
#define PS_TRACES_TRACE_PRIVATE_H

#include "traces/trace.h"

G_BEGIN_DECLS

struct PsTrace {
  PsTraceHeader header;
  GArray *events;          /* PsTraceEvent; arrays inside owned */
  GStringChunk *names;     /* event names */
};

/* Running state of the per-event checks over one event list. */
typedef struct {
  const PsTraceHeader *header;
  GHashTable *open_async;  /* async id -> PsTraceAsyncStart* (owned) */
  PsTraceTotals sums;      /* peak_bytes: largest memory event */
  /* Open loops, innermost last: each frame's run count (product of the
   * trip counts so far), the 1-based event index of its loop line, and a
   * serial number telling loop bodies apart. */
  guint depth;
  guint64 mult[PS_TRACE_MAX_LOOP_DEPTH + 1];
  guint64 loop_event[PS_TRACE_MAX_LOOP_DEPTH + 1];
  guint64 body[PS_TRACE_MAX_LOOP_DEPTH + 1];
  guint64 next_body;
} TrChecker;

/* Runs of each event of an event list (product of enclosing trip counts),
 * saturating at G_MAXUINT64; and the totals of the list. */
void tr_sum_events (const GArray *events, PsTraceTotals *sums);

void tr_checker_init (TrChecker *c, const PsTraceHeader *header);
void tr_checker_clear (TrChecker *c);
/* `key` receives the field the problem concerns (static), or NULL. Groups
 * of collectives must be resolved (n_groups/group_size set). */
char *tr_checker_event (TrChecker *c, const PsTraceEvent *e,
                        const char **key);
/* At the end: unfinished async collectives; with check_totals, header
 * totals against the sums. */
char *tr_checker_finish (TrChecker *c, gboolean check_totals);

/* Header consistency (devices vs mesh, order parameters). */
char *tr_check_header (const PsTraceHeader *h);
/* Fills n_groups/group_size (AXES, ALL) and checks the groups fit. */
char *tr_groups_resolve (PsTraceGroups *g, const PsTraceHeader *h);
char *tr_check_pairs (const PsTracePairs *p, const PsTraceHeader *h);

/* Compact forms. On failure return FALSE and set *why (transfer full);
 * *why_offset is the byte offset in `text` the problem is at. Arrays in the
 * results are g_malloc'ed. */
gboolean tr_parse_groups (const char *text, PsTraceGroups *out, char **why,
                          gsize *why_offset);
gboolean tr_parse_pairs (const char *text, PsTracePairs *out, char **why,
                         gsize *why_offset);
/* "arange", "arange_T", "nonpod2d:XxYxC", "list:0,1,..." into mesh->order... */
gboolean tr_parse_order (const char *text, PsTraceMesh *mesh, char **why,
                         gsize *why_offset);
char *tr_order_to_string (const PsTraceMesh *mesh);

/* Event names: printable ASCII except '%' and space verbatim, the rest %XX. */
void tr_append_name (GString *out, const char *name);
/* Decodes in place; FALSE on a bad escape. */
gboolean tr_decode_name (char *name);

void tr_event_clear (PsTraceEvent *e);
void tr_header_clear (PsTraceHeader *h);
void tr_header_copy (PsTraceHeader *dst, const PsTraceHeader *src);

/* Appends one event line (with '\n'). */
void tr_append_event (GString *out, const PsTraceEvent *e);

G_END_DECLS

#endif
