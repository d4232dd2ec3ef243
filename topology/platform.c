/* Links and dimension-ordered routes of a slice; see platform.h. */
#include "config.h"

#include <stdlib.h>

#include "topology/platform.h"

static int
chip_neighbour (const PsSlice *s, int chip, int dir, gboolean *exists)
{
  int x = chip / s->chips_y, y = chip % s->chips_y;
  int nx = x, ny = y;
  gboolean wrap = (dir == PS_LINK_X_PLUS || dir == PS_LINK_X_MINUS) ? s->wrap_x : s->wrap_y;
  switch (dir)
    {
    case PS_LINK_X_PLUS: nx = x + 1; break;
    case PS_LINK_X_MINUS: nx = x - 1; break;
    case PS_LINK_Y_PLUS: ny = y + 1; break;
    case PS_LINK_Y_MINUS: ny = y - 1; break;
    default: *exists = TRUE; return chip;
    }
  *exists = TRUE;
  if (nx < 0 || nx >= s->chips_x || ny < 0 || ny >= s->chips_y)
    {
      *exists = wrap;
      nx = (nx + s->chips_x) % s->chips_x;
      ny = (ny + s->chips_y) % s->chips_y;
    }
  return nx * s->chips_y + ny;
}

PsPlatform *
ps_platform_new (const PsSlice *slice, const PsHardware *hw, GError **error)
{
  if (slice->cores_per_chip > 2)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
                   "%d TensorCores per chip: the on-chip model joins at most two",
                   slice->cores_per_chip);
      return NULL;
    }
  PsPlatform *p = g_new0 (PsPlatform, 1);
  p->slice = *slice;
  p->slice.name = g_strdup (slice->name);
  p->n_links = ps_slice_n_chips (slice) * PS_LINKS_PER_CHIP;
  p->present = g_new0 (guint8, p->n_links);
  p->ici_bw_bytes_per_s = hw->ici_link_bw_bytes_per_s;
  p->ici_latency_s = hw->ici_hop_latency_s;
  p->onchip_bw_bytes_per_s = hw->onchip_bw_bytes_per_s;
  p->onchip_latency_s = hw->onchip_latency_s;
  for (int chip = 0; chip < ps_slice_n_chips (slice); chip++)
    for (int dir = 0; dir < PS_LINKS_PER_CHIP; dir++)
      {
        gboolean exists;
        int other = chip_neighbour (slice, chip, dir, &exists);
        if (dir >= PS_LINK_ONCHIP_FROM_CORE0)
          exists = slice->cores_per_chip == 2;
        /* A 1-chip-wide dimension has no ports at all. */
        else if (other == chip)
          exists = FALSE;
        p->present[chip * PS_LINKS_PER_CHIP + dir] = exists;
      }
  return p;
}

void
ps_platform_free (PsPlatform *p)
{
  if (!p)
    return;
  g_free (p->slice.name);
  g_free (p->present);
  g_free (p);
}

gboolean
ps_platform_link_present (const PsPlatform *p, int link)
{
  return link >= 0 && link < p->n_links && p->present[link];
}

static gboolean
is_onchip (int link)
{
  return link % PS_LINKS_PER_CHIP >= PS_LINK_ONCHIP_FROM_CORE0;
}

double
ps_platform_link_bw (const PsPlatform *p, int link)
{
  return is_onchip (link) ? p->onchip_bw_bytes_per_s : p->ici_bw_bytes_per_s;
}

double
ps_platform_link_latency (const PsPlatform *p, int link)
{
  return is_onchip (link) ? p->onchip_latency_s : p->ici_latency_s;
}

const char *
ps_platform_link_kind (const PsPlatform *p, int link)
{
  return is_onchip (link) ? "onchip" : "ici";
}

void
ps_platform_link_chips (const PsPlatform *p, int link, int *src_chip, int *dst_chip)
{
  gboolean exists;
  int chip = link / PS_LINKS_PER_CHIP;
  *src_chip = chip;
  *dst_chip = chip_neighbour (&p->slice, chip, link % PS_LINKS_PER_CHIP, &exists);
}

char *
ps_platform_link_name (const PsPlatform *p, int link)
{
  static const char *const dir_names[] = { "+x", "-x", "+y", "-y", "c0>c1", "c1>c0" };
  int chip = link / PS_LINKS_PER_CHIP;
  return g_strdup_printf ("x%d.y%d.%s", chip / p->slice.chips_y, chip % p->slice.chips_y,
                          dir_names[link % PS_LINKS_PER_CHIP]);
}

int
ps_platform_max_route_links (const PsPlatform *p)
{
  return p->slice.chips_x + p->slice.chips_y + 1;
}

/* Steps and direction (+1/-1) from a to b along a dimension of n chips. */
static int
dim_steps (int a, int b, int n, gboolean wrap, int *sign)
{
  if (a == b)
    {
      *sign = 0;
      return 0;
    }
  if (!wrap)
    {
      *sign = b > a ? 1 : -1;
      return abs (b - a);
    }
  int fwd = ((b - a) % n + n) % n;
  int bwd = n - fwd;
  if (fwd < bwd || (fwd == bwd && a % 2 == 0))
    {
      *sign = 1;
      return fwd;
    }
  *sign = -1;
  return bwd;
}

int
ps_platform_dim_route (const PsPlatform *p, gboolean along_x, int fixed, int from, int to,
                       int *links)
{
  const PsSlice *s = &p->slice;
  int sign;
  int side = along_x ? s->chips_x : s->chips_y;
  int steps = dim_steps (from, to, side, along_x ? s->wrap_x : s->wrap_y, &sign);
  int c = from;
  for (int i = 0; i < steps; i++)
    {
      int chip = along_x ? ps_slice_chip_index (s, c, fixed) : ps_slice_chip_index (s, fixed, c);
      links[i] = chip * PS_LINKS_PER_CHIP
                 + (along_x ? (sign > 0 ? PS_LINK_X_PLUS : PS_LINK_X_MINUS)
                            : (sign > 0 ? PS_LINK_Y_PLUS : PS_LINK_Y_MINUS));
      c = (c + sign + side) % side;
    }
  return steps;
}

int
ps_platform_chip_hops (const PsPlatform *p, int src_chip, int dst_chip)
{
  const PsSlice *s = &p->slice;
  int sign;
  return dim_steps (src_chip / s->chips_y, dst_chip / s->chips_y, s->chips_x, s->wrap_x, &sign)
         + dim_steps (src_chip % s->chips_y, dst_chip % s->chips_y, s->chips_y, s->wrap_y,
                      &sign);
}

int
ps_platform_route (const PsPlatform *p, int src_core, int dst_core, int *links,
                   double *latency_s)
{
  const PsSlice *s = &p->slice;
  int n = 0;
  double lat = 0;
  if (src_core != dst_core)
    {
      int sx, sy, sc, dx, dy, dc;
      ps_slice_core_coords (s, src_core, &sx, &sy, &sc);
      ps_slice_core_coords (s, dst_core, &dx, &dy, &dc);
      if (sx == dx && sy == dy)
        {
          links[n++] = ps_slice_chip_index (s, sx, sy) * PS_LINKS_PER_CHIP
                       + PS_LINK_ONCHIP_FROM_CORE0 + sc;
          lat += p->onchip_latency_s;
        }
      else
        {
          int sign;
          int x = sx, y = sy;
          int steps = dim_steps (sx, dx, s->chips_x, s->wrap_x, &sign);
          for (int i = 0; i < steps; i++)
            {
              links[n++] = ps_slice_chip_index (s, x, y) * PS_LINKS_PER_CHIP
                           + (sign > 0 ? PS_LINK_X_PLUS : PS_LINK_X_MINUS);
              x = (x + sign + s->chips_x) % s->chips_x;
            }
          steps = dim_steps (sy, dy, s->chips_y, s->wrap_y, &sign);
          for (int i = 0; i < steps; i++)
            {
              links[n++] = ps_slice_chip_index (s, x, y) * PS_LINKS_PER_CHIP
                           + (sign > 0 ? PS_LINK_Y_PLUS : PS_LINK_Y_MINUS);
              y = (y + sign + s->chips_y) % s->chips_y;
            }
          lat += n * p->ici_latency_s;
        }
    }
  if (latency_s)
    *latency_s = lat;
  return n;
}
