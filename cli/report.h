/* `podsim run ... --report DIR`: one self-contained HTML page of a run
 * (DIR/index.html: the figures, the step breakdown and the link
 * utilization as inline SVG, the most expensive collectives, the memory
 * peak, the stages, the configuration), with the run's model file
 * (DIR/config.ini) and its timeline (DIR/timeline.json, for Perfetto or
 * chrome://tracing) next to it. The page needs no server, no script and
 * nothing from the network: it opens from disk.
 *
 * Ownership: everything is borrowed.
 */
#ifndef PS_CLI_REPORT_H
#define PS_CLI_REPORT_H

#include <glib.h>

#include "driver/driver.h"
#include "models/family.h"
#include "topology/hardware.h"

typedef struct {
  const char *name;          /* the run's name */
  const PsParams *params;
  double published;          /* published throughput, 0: none */
  const PsDriverResult *result;
  const PsHardware *hw;
  const char *command;       /* the command line that made it, for the page */
  const char *no_fit;        /* why the model does not fit in HBM (the result
                              * then stops at the memory stage), or NULL */
  const char *pipelining;    /* the terminal's pipeline lines (bubble), or NULL */
} PsReportInput;

/* Writes DIR/index.html, DIR/config.ini and DIR/timeline.json (the result
 * must have a timeline), creating DIR. Each file is written atomically.
 * A model that does not fit (no_fit set) has no step: the page says why,
 * with the memory breakdown and the configuration, and there is no
 * timeline.json. */
gboolean ps_report_write (const char *dir, const PsReportInput *in, GError **error);

/* An SVG document made to sit inline in an HTML page: the XML declaration
 * dropped and every id (and reference to it) prefixed, so several pictures
 * on one page do not share glyph or surface ids. transfer full. */
char *ps_report_inline_svg (const char *svg, const char *prefix);

#endif
