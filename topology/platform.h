/* The network of a slice as the simulator sees it: directed links and the
 * dimension-ordered routes between TensorCores. GLib only; sim/ turns it into
 * a SimGrid platform (sim/sgnet.h).
 *
 * Every chip owns six directed links, indexed chip * PS_LINKS_PER_CHIP + dir:
 * its four ICI ports (+x, -x, +y, -y; each leaves this chip towards the
 * neighbour) and the on-chip path from each of its two cores to the other.
 * A port is absent on a mesh edge where the slice has no wrap link; the index
 * space keeps it so link ids are stable, ps_platform_link_present() says
 * whether it exists.
 *
 * Routes are dimension ordered (x first, then y), like the ICI routers. On a
 * wrapped dimension a transfer takes the shorter way round; at exactly half
 * way it goes + from an even source coordinate and - from an odd one, so that
 * all-to-all traffic spreads over both directions deterministically. Two cores
 * of one chip talk over the on-chip link only; ICI hops use the chip's router,
 * which both cores share.
 *
 * Ownership: ps_platform_new() is transfer full and copies what it needs from
 * the slice and hardware (both transfer none).
 */
#ifndef PS_TOPOLOGY_PLATFORM_H
#define PS_TOPOLOGY_PLATFORM_H

#include <glib.h>

#include "topology/hardware.h"
#include "topology/slice.h"

G_BEGIN_DECLS

typedef enum {
  PS_LINK_X_PLUS = 0,
  PS_LINK_X_MINUS,
  PS_LINK_Y_PLUS,
  PS_LINK_Y_MINUS,
  PS_LINK_ONCHIP_FROM_CORE0, /* core 0 -> core 1 of the same chip */
  PS_LINK_ONCHIP_FROM_CORE1, /* core 1 -> core 0 */
  PS_LINKS_PER_CHIP
} PsLinkDir;

typedef struct {
  PsSlice slice;               /* a copy; slice.name owned */
  int n_links;                 /* n_chips * PS_LINKS_PER_CHIP (index space) */
  guint8 *present;             /* per link id */
  double ici_bw_bytes_per_s;   /* per direction */
  double ici_latency_s;        /* per hop */
  double onchip_bw_bytes_per_s;
  double onchip_latency_s;
} PsPlatform;

/* FALSE-returning cases: more than two cores per chip (the on-chip model
 * joins exactly two). transfer full. */
PsPlatform *ps_platform_new (const PsSlice *slice, const PsHardware *hw, GError **error);
void ps_platform_free (PsPlatform *p);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsPlatform, ps_platform_free)

gboolean ps_platform_link_present (const PsPlatform *p, int link);
double ps_platform_link_bw (const PsPlatform *p, int link);
double ps_platform_link_latency (const PsPlatform *p, int link);
/* Source and destination chip of a link (equal for on-chip links). */
void ps_platform_link_chips (const PsPlatform *p, int link, int *src_chip, int *dst_chip);
/* "x3.y4.+x", "x3.y4.c0>c1". transfer full. */
char *ps_platform_link_name (const PsPlatform *p, int link);
/* "ici" or "onchip". transfer none. */
const char *ps_platform_link_kind (const PsPlatform *p, int link);

/* Upper bound on the links of any route (for sizing buffers). */
int ps_platform_max_route_links (const PsPlatform *p);
/* Writes the links from core src to core dst into `links` (at least
 * ps_platform_max_route_links entries) and returns how many; 0 when
 * src == dst. *latency_s, if not NULL, gets the summed link latency. */
int ps_platform_route (const PsPlatform *p, int src_core, int dst_core, int *links,
                       double *latency_s);
/* The x part (along_x) or y part of a dimension-ordered route: the links
 * from coordinate `from` to `to` along the row y = fixed (along_x) or the
 * column x = fixed. Returns how many. */
int ps_platform_dim_route (const PsPlatform *p, gboolean along_x, int fixed, int from, int to,
                           int *links);
/* Number of chip-to-chip hops from src to dst chip (0 on the same chip). */
int ps_platform_chip_hops (const PsPlatform *p, int src_chip, int dst_chip);

G_END_DECLS

#endif
