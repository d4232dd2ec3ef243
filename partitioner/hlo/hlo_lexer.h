/* Private to the HLO reader (hlo_parser.c, hlo_lexer.c, hlo_attrs.c): the
 * reader's state and its lexical and attribute-value primitives. They work
 * on byte offsets into the whole text (instructions span lines, comments go
 * anywhere) and report the first error as "FILE:LINE:COL: message"; after
 * an error every primitive returns at once, so callers check FAILED() at
 * their own pace. Not for use outside the reader.
 */
#ifndef PS_PARTITIONER_HLO_LEXER_H
#define PS_PARTITIONER_HLO_LEXER_H

#include <glib.h>
#include <stdint.h>

#include "partitioner/ir/ir.h"

G_BEGIN_DECLS

typedef struct {
  const char *text;          /* NUL-terminated copy */
  gsize len, pos;
  const char *file;
  GError *err;               /* the first error, or NULL */
  PsModule *m;
  /* Current computation: name -> PsInstr*, name -> definition offset. */
  GHashTable *scope;
  GHashTable *scope_pos;
  /* Last position turned into line:col, so that numbering every
   * instruction stays linear in the text size. */
  gsize lc_off, lc_line_start;
  int lc_line;
  gsize alias_pos;           /* where input_output_alias was written, or 0 */
  int64_t sharding_ids;      /* device ids of the shardings read so far */
  /* The header's spmd_parameters_shardings (PsSharding*, owned, or NULL)
   * and spmd_output_sharding (or NULL), where they were written. */
  GPtrArray *spmd_params;
  PsSharding *spmd_out;
  gsize spmd_params_pos, spmd_out_pos;
} PsHloReader;

#define FAILED(p) ((p)->err != NULL)
#define CUR(p) ((p)->pos < (p)->len ? (p)->text[(p)->pos] : '\0')

void ps_hlo_error (PsHloReader *p, gsize off, PsErrorCode code, const char *fmt, ...) G_GNUC_PRINTF (4, 5);
/* Line and column (1-based, bytes) of `off`, as ps_text_position() but
 * cheap for offsets that only grow. */
void ps_hlo_position (PsHloReader *p, gsize off, int *line, int *col);
void ps_hlo_skip_ws (PsHloReader *p);
char ps_hlo_peek (PsHloReader *p);
gboolean ps_hlo_is_ident_start (char c);
gboolean ps_hlo_is_ident_char (char c);
char *ps_hlo_describe (PsHloReader *p, gsize off);
gboolean ps_hlo_accept (PsHloReader *p, char c);
gboolean ps_hlo_expect (PsHloReader *p, char c, const char *context);
char *ps_hlo_name (PsHloReader *p, const char *what);
gboolean ps_hlo_at_keyword (PsHloReader *p, const char *kw);
gboolean ps_hlo_int (PsHloReader *p, int64_t *out, const char *what);
gboolean ps_hlo_bool (PsHloReader *p, gboolean *out);
char *ps_hlo_string (PsHloReader *p);
gboolean ps_hlo_skip_balanced (PsHloReader *p);
char *ps_hlo_normalize_raw (const char *s, gsize n);
char *ps_hlo_raw_value (PsHloReader *p);
gboolean ps_hlo_at_shape (PsHloReader *p);
PsShape *ps_hlo_shape (PsHloReader *p);
gboolean ps_hlo_int_list (PsHloReader *p, PsInts *out);
gboolean ps_hlo_groups (PsHloReader *p, int *n_groups, int *group_size, int64_t **ids, int want_size);
/* XLA's iota form of replica groups, [G,S]<=[d0,d1,...] optionally followed
 * by T(p0,p1,...): the ids 0..N-1 laid out as dims d, transposed by p, read
 * row-major as G groups of S (what newer XLA prints). */
gboolean ps_hlo_iota_groups (PsHloReader *p, int *n_groups, int *group_size, int64_t **ids);
gboolean ps_hlo_token (PsHloReader *p, const char *extra, gsize *s, gsize *e);
gboolean ps_hlo_window (PsHloReader *p, PsWindow *w);
gboolean ps_hlo_dim_labels (PsHloReader *p, PsConvDims *c);
gboolean ps_hlo_slice (PsHloReader *p, PsInstr *in);
gboolean ps_hlo_precision (PsHloReader *p, PsInstr *in);
PsComputation *ps_hlo_computation_ref (PsHloReader *p);
gboolean ps_hlo_sharding (PsHloReader *p, PsInstr *in);
gboolean ps_hlo_metadata (PsHloReader *p, char **out);
gboolean ps_hlo_comparison (PsHloReader *p, PsInstr *in);
gboolean ps_hlo_padding (PsHloReader *p, PsInstr *in);

G_END_DECLS

#endif
