/* Pictures (cairo, PNG or SVG) for teaching and what-if studies:
 *
 *  - links: the slice as a grid of chips, each ICI link an arrow colored by
 *    its utilization (wrap links as arrows leaving one edge and entering
 *    the other; absent links not drawn; on-chip links between the two
 *    cores), with a color legend (0 to the hottest link's utilization);
 *  - groups: the chips and cores of a slice with each replica group of one
 *    collective in its own color, labelled with device ids, and the ring
 *    transfers the simulator plans for it drawn as arrows (why arange and
 *    nonpod2d orders differ);
 *  - breakdown: stacked bars of a step (compute, exposed communication,
 *    idle) per run, next to the published step time;
 *  - scaling: throughput and utilization against cores, simulated and
 *    published.
 *
 * Each function renders into `out` (PNG or SVG bytes); ps_picture_save
 * writes them atomically. The format follows the file name (.png, .svg).
 * Layout geometry is exposed so tests can sample the pixels of a link.
 *
 * Ownership: inputs are borrowed; `out` is the caller's.
 */
#ifndef PS_CLI_PICTURE_H
#define PS_CLI_PICTURE_H

#include <glib.h>

#include "sim/collectives.h"
#include "topology/platform.h"

typedef enum { PS_PICTURE_PNG, PS_PICTURE_SVG } PsPictureFormat;

/* From a file name's extension; PS_ERROR_OPTION naming `option` otherwise. */
gboolean ps_picture_format_for (const char *path, const char *option, PsPictureFormat *f, GError **error);
/* Writes rendered bytes to path atomically. */
gboolean ps_picture_save (const char *path, const GString *bytes, GError **error);

/* The colormap (perceptually ordered, dark blue to yellow): t in [0, 1]. */
void ps_picture_colormap (double t, double rgb[3]);

/* Geometry of a slice picture (pixels). */
typedef struct {
  int chips_x, chips_y;
  double cell;               /* chip pitch */
  double pad;                /* half the gap between chip boxes */
  double left, top;          /* the grid's origin (chip 0,0's cell corner) */
  double width, height;      /* the whole picture */
  double line;               /* arrow width */
  /* The chip coordinates around the grid: the x numbers' baseline below
   * it, the y numbers' right edge left of it (outside the wrap arrows). */
  double axis_x_baseline, axis_y_right;
} PsSliceLayout;

void ps_slice_layout_init (PsSliceLayout *l, const PsPlatform *p, double legend_height);
/* A point on link `link`'s arrow, half way along it (a wrap link: half way
 * along the part leaving its source chip). */
void ps_slice_layout_link_point (const PsSliceLayout *l, const PsPlatform *p, int link, double *x, double *y);
/* The centre of a core's square. */
void ps_slice_layout_core_point (const PsSliceLayout *l, const PsPlatform *p, int core, double *x, double *y);

/* Link utilization: link_bytes per platform link id over time_s. */
gboolean ps_picture_links (const PsPlatform *p, const double *link_bytes, double time_s, const char *title,
                           PsPictureFormat f, GString *out, GError **error);

/* The groups of `plan` (device ids: device_of_core[core], -1 for none;
 * NULL = core number) and its ring transfers. */
gboolean ps_picture_groups (const PsPlatform *p, const PsCollPlan *plan, const int *device_of_core,
                            const char *title, PsPictureFormat f, GString *out, GError **error);

typedef struct {
  const char *label;
  double compute_s, exposed_s, idle_s;   /* per core, means */
  double published_step_s;               /* 0: none */
} PsBreakdownRow;

gboolean ps_picture_breakdown (const PsBreakdownRow *rows, int n, const char *title, PsPictureFormat f,
                               GString *out, GError **error);

typedef struct {
  const char *label;
  double cores;
  double throughput, published;          /* items per second; published 0: none */
  double utilization;                    /* 0..1 (MXU) */
} PsScalingPoint;

gboolean ps_picture_scaling (const PsScalingPoint *pts, int n, const char *unit, const char *title,
                             PsPictureFormat f, GString *out, GError **error);

#endif
