/* Collective algorithms as phases of transfers; see collectives.h and
 * doc/collectives.md. */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim/collectives.h"

static const char *const algorithm_names[PS_COLL_ALGORITHM_COUNT + 1] = {
  [PS_COLL_TORUS2D] = "torus2d",
  [PS_COLL_DIM_BY_DIM] = "dim-by-dim",
  [PS_COLL_RING] = "ring",
  [PS_COLL_TORUS2D_WRAP_A2A] = "torus2d-wrap-a2a",
  [PS_COLL_TORUS2D_STAGED_A2A] = "torus2d-staged-a2a",
  [PS_COLL_ALGORITHM_COUNT] = NULL,
};

static const char *const algorithm_docs[PS_COLL_ALGORITHM_COUNT] = {
  [PS_COLL_TORUS2D_WRAP_A2A] = "torus2d with the all-to-all through the wrap links",
  [PS_COLL_TORUS2D_STAGED_A2A] = "torus2d with the all-to-all staged per dimension, x then y",
};

const PsParamSpec ps_coll_param_algorithm = {
  .section = "options", .key = "collectives", .type = PS_PARAM_CHOICE, .def = "torus2d",
  .doc = "Collective algorithms (doc/collectives.md)", .choice_names = algorithm_names,
  .choice_docs = algorithm_docs
};

const char *
ps_coll_algorithm_name (PsCollAlgorithm alg)
{
  return alg >= 0 && alg < PS_COLL_ALGORITHM_COUNT ? algorithm_names[alg] : "?";
}

gboolean
ps_coll_algorithm_parse (const char *name, const char *option, PsCollAlgorithm *out,
                         GError **error)
{
  int a;
  if (!ps_parse_name (name, algorithm_names, PS_COLL_ALGORITHM_COUNT, option, "collective algorithm", &a, error))
    return FALSE;
  *out = a;
  return TRUE;
}

static PsPhase *
phase_new (const char *label)
{
  PsPhase *ph = g_new0 (PsPhase, 1);
  ph->label = label;
  ph->flows = g_array_new (FALSE, FALSE, sizeof (PsFlow));
  return ph;
}

static void
phase_free (gpointer data)
{
  PsPhase *ph = data;
  g_array_unref (ph->flows);
  g_free (ph);
}

static void
add_flow (PsPhase *ph, int src, int dst, double bytes)
{
  if (src == dst || bytes <= 0)
    return;
  PsFlow f = { src, dst, bytes };
  g_array_append_val (ph->flows, f);
}

/* Adds one bidirectional ring over `hosts` to a phase: every edge carries
 * `bytes` in each orientation; returns the largest route latency of an edge,
 * which is the latency of one pipelined step. */
static double
add_ring (const PsPlatform *p, PsPhase *ph, const int *hosts, int n, double bytes, int *route)
{
  double worst = 0;
  if (n < 2)
    return 0;
  for (int i = 0; i < n; i++)
    {
      int a = hosts[i], b = hosts[(i + 1) % n];
      add_flow (ph, a, b, bytes);
      add_flow (ph, b, a, bytes);
      double lat;
      ps_platform_route (p, a, b, route, &lat);
      worst = MAX (worst, lat);
    }
  return worst;
}

/* Lingvo's zig-zag (GetNonPod2dMesh): position i holds the element
 * 2i, or 2(n-i)-1 once 2i passes the end, so a ring on a line never needs
 * more than two hops per step. */
static void
zigzag (const int *sorted, int n, int *out)
{
  for (int i = 0; i < n; i++)
    out[i] = sorted[2 * i < n ? 2 * i : (n - i) * 2 - 1];
}

typedef struct {
  int n_chips;
  int *chips;           /* sorted unique chip ids */
  int *rep;             /* per chip index: lowest member core */
  int *count;           /* per chip index: member cores on it */
  int nx, ny;
  int xs[PS_POD_SIDE_CHIPS * 4], ys[PS_POD_SIDE_CHIPS * 4];
  gboolean product;     /* chips == xs x ys and every chip has `k` members */
  int k;
} GroupShape;

static int
cmp_int (const void *a, const void *b)
{
  int x = *(const int *) a, y = *(const int *) b;
  return (x > y) - (x < y);
}

static void
group_shape (const PsPlatform *p, const int *members, int m, GroupShape *gs)
{
  const PsSlice *s = &p->slice;
  int n_all = ps_slice_n_chips (s);
  g_autofree int *rep_of_chip = g_new (int, n_all);
  g_autofree int *cnt_of_chip = g_new0 (int, n_all);
  for (int i = 0; i < n_all; i++)
    rep_of_chip[i] = G_MAXINT;
  for (int i = 0; i < m; i++)
    {
      int chip = members[i] / s->cores_per_chip;
      cnt_of_chip[chip]++;
      rep_of_chip[chip] = MIN (rep_of_chip[chip], members[i]);
    }
  gs->chips = g_new (int, m);
  gs->rep = g_new (int, m);
  gs->count = g_new (int, m);
  gs->n_chips = 0;
  gboolean usedx[PS_POD_SIDE_CHIPS * 4] = { 0 }, usedy[PS_POD_SIDE_CHIPS * 4] = { 0 };
  for (int chip = 0; chip < n_all; chip++)
    if (cnt_of_chip[chip])
      {
        gs->chips[gs->n_chips] = chip;
        gs->rep[gs->n_chips] = rep_of_chip[chip];
        gs->count[gs->n_chips] = cnt_of_chip[chip];
        gs->n_chips++;
        usedx[chip / s->chips_y] = TRUE;
        usedy[chip % s->chips_y] = TRUE;
      }
  gs->nx = gs->ny = 0;
  for (int x = 0; x < s->chips_x; x++)
    if (usedx[x])
      gs->xs[gs->nx++] = x;
  for (int y = 0; y < s->chips_y; y++)
    if (usedy[y])
      gs->ys[gs->ny++] = y;
  gs->k = gs->count[0];
  gs->product = gs->n_chips == gs->nx * gs->ny;
  for (int i = 0; i < gs->n_chips; i++)
    if (gs->count[i] != gs->k)
      gs->product = FALSE;
}

static void
group_shape_clear (GroupShape *gs)
{
  g_free (gs->chips);
  g_free (gs->rep);
  g_free (gs->count);
}

/* Ring order of the coordinates `coords` (sorted) along a dimension of
 * `side` chips: natural when the group closes the wrapped ring, zig-zag
 * otherwise. */
static void
dim_order (const int *coords, int n, int side, gboolean wraps, int *out)
{
  if (wraps && n == side)
    memcpy (out, coords, sizeof (int) * (gsize) n);
  else
    zigzag (coords, n, out);
}

static int
rep_at (const PsPlatform *p, const GroupShape *gs, int x, int y)
{
  int chip = ps_slice_chip_index (&p->slice, x, y);
  int *hit = bsearch (&chip, gs->chips, (gsize) gs->n_chips, sizeof (int), cmp_int);
  g_assert (hit);
  return gs->rep[hit - gs->chips];
}

/* One phase of rings along x (one ring per y of the group) or along y. */
static PsPhase *
dim_phase (const PsPlatform *p, const GroupShape *gs, gboolean along_x, const char *label,
           double bytes, int steps, int *route)
{
  PsPhase *ph = phase_new (label);
  const PsSlice *s = &p->slice;
  int n = along_x ? gs->nx : gs->ny;
  int other_n = along_x ? gs->ny : gs->nx;
  g_autofree int *order = g_new (int, n);
  g_autofree int *hosts = g_new (int, n);
  dim_order (along_x ? gs->xs : gs->ys, n, along_x ? s->chips_x : s->chips_y,
             along_x ? s->wrap_x : s->wrap_y, order);
  double step_lat = 0;
  for (int o = 0; o < other_n; o++)
    {
      for (int i = 0; i < n; i++)
        hosts[i] = along_x ? rep_at (p, gs, order[i], gs->ys[o]) : rep_at (p, gs, gs->xs[o], order[i]);
      double lat = add_ring (p, ph, hosts, n, bytes, route);
      step_lat = MAX (step_lat, lat);
    }
  ph->latency_s = steps * step_lat;
  return ph;
}

/* Both cores of every chip send `bytes` to each other. */
static PsPhase *
onchip_phase (const PsPlatform *p, const GroupShape *gs, const char *label, double bytes)
{
  PsPhase *ph = phase_new (label);
  for (int i = 0; i < gs->n_chips; i++)
    {
      int c0 = gs->chips[i] * p->slice.cores_per_chip;
      add_flow (ph, c0, c0 + 1, bytes);
      add_flow (ph, c0 + 1, c0, bytes);
    }
  ph->latency_s = p->onchip_latency_s;
  return ph;
}

/* The listed-order ring: one bidirectional ring over the group's cores in
 * the order the replica group gives them, routed hop by hop. */
static PsPhase *
listed_ring_phase (const PsPlatform *p, PsTraceCollectiveKind kind, double D, const int *members,
                   int m, int *route)
{
  PsPhase *ph = phase_new ("ring");
  int steps = kind == PS_TRACE_ALL_REDUCE ? 2 * (m - 1) : m - 1;
  double bytes = steps / (double) m * D / 2;
  double lat = add_ring (p, ph, members, m, bytes, route);
  ph->latency_s = steps * lat;
  return ph;
}

/* Podsim's algorithm until 2026-12 (PS_COLL_DIM_BY_DIM) for a product
 * group: on-chip step first and last, one dimension at a time. */
static void
plan_dim_by_dim (const PsPlatform *p, const GroupShape *gs, PsTraceCollectiveKind kind, double D,
                 PsGroupPlan *gp, int *route)
{
  int nx = gs->nx, ny = gs->ny;
  gboolean two = gs->k == 2;
  /* Per-chip data after the on-chip step: D (split over the two cores). */
  double ring_x = (nx - 1) / (double) nx * D / 2;
  if (kind == PS_TRACE_ALL_REDUCE)
    {
      if (two)
        g_ptr_array_add (gp->phases, onchip_phase (p, gs, "onchip-rs", D / 2));
      if (nx > 1)
        g_ptr_array_add (gp->phases, dim_phase (p, gs, TRUE, "ring-x-rs", ring_x, nx - 1, route));
      if (ny > 1)
        g_ptr_array_add (gp->phases,
                         dim_phase (p, gs, FALSE, "ring-y-ar",
                                    2 * (ny - 1) / (double) ny * (D / nx) / 2, 2 * (ny - 1), route));
      if (nx > 1)
        g_ptr_array_add (gp->phases, dim_phase (p, gs, TRUE, "ring-x-ag", ring_x, nx - 1, route));
      if (two)
        g_ptr_array_add (gp->phases, onchip_phase (p, gs, "onchip-ag", D / 2));
    }
  else if (kind == PS_TRACE_REDUCE_SCATTER)
    {
      if (two)
        g_ptr_array_add (gp->phases, onchip_phase (p, gs, "onchip-rs", D / 2));
      if (nx > 1)
        g_ptr_array_add (gp->phases, dim_phase (p, gs, TRUE, "ring-x-rs", ring_x, nx - 1, route));
      if (ny > 1)
        g_ptr_array_add (gp->phases,
                         dim_phase (p, gs, FALSE, "ring-y-rs",
                                    (ny - 1) / (double) ny * (D / nx) / 2, ny - 1, route));
    }
  else
    {
      if (ny > 1)
        g_ptr_array_add (gp->phases,
                         dim_phase (p, gs, FALSE, "ring-y-ag",
                                    (ny - 1) / (double) ny * (D / nx) / 2, ny - 1, route));
      if (nx > 1)
        g_ptr_array_add (gp->phases, dim_phase (p, gs, TRUE, "ring-x-ag", ring_x, nx - 1, route));
      if (two)
        g_ptr_array_add (gp->phases, onchip_phase (p, gs, "onchip-ag", D / 2));
    }
}

/* Adds to `ph` the rings of one stage of the 2-D algorithm along x (one set
 * per y of the group) or y, over per-member data F. With `with_cores` both
 * member cores of every chip are in the ring (interleaved on a wrapped
 * dimension the group covers, folded otherwise); without, each member core
 * index has its own ring and those rings share the chips' links. Returns
 * the stage's latency: steps x the slowest step of its rings. */
static double
add_dim_rings (const PsPlatform *p, const GroupShape *gs, PsPhase *ph, gboolean along_x,
               gboolean with_cores, double F, gboolean all_reduce, int *route)
{
  const PsSlice *s = &p->slice;
  int n = along_x ? gs->nx : gs->ny;
  int other_n = along_x ? gs->ny : gs->nx;
  const int *coords = along_x ? gs->xs : gs->ys;
  int side = along_x ? s->chips_x : s->chips_y;
  gboolean wraps = (along_x ? s->wrap_x : s->wrap_y) && n == side;
  int per_chip = with_cores ? gs->k : 1;
  int rings = with_cores ? 1 : gs->k;
  int m = n * per_chip;
  if (m < 2)
    return 0;
  int steps = all_reduce ? 2 * (m - 1) : m - 1;
  double bytes = steps / (double) m * F / 2;
  g_autofree int *order = g_new (int, n);
  g_autofree int *hosts = g_new (int, m);
  gboolean folded = per_chip == 2 && !wraps;
  if (folded)
    memcpy (order, coords, sizeof (int) * (gsize) n);
  else
    dim_order (coords, n, side, wraps, order);
  double step_lat = 0;
  for (int o = 0; o < other_n; o++)
    for (int r = 0; r < rings; r++)
      {
        for (int i = 0; i < n; i++)
          {
            int rep = along_x ? rep_at (p, gs, order[i], gs->ys[o]) : rep_at (p, gs, gs->xs[o], order[i]);
            if (per_chip == 1)
              hosts[i] = rep + r;
            else if (folded)
              {
                hosts[i] = rep;
                hosts[m - 1 - i] = rep + 1;
              }
            else
              {
                hosts[2 * i] = rep;
                hosts[2 * i + 1] = rep + 1;
              }
          }
        double lat = add_ring (p, ph, hosts, m, bytes, route);
        step_lat = MAX (step_lat, lat);
      }
  return steps * step_lat;
}

/* The 2-D torus algorithm (PS_COLL_TORUS2D) for a product group spanning
 * both dimensions: half A of the buffer goes x then y, half B y then x, the
 * two halves' rings of a stage run together; the cores of each chip are
 * members of the first stage's rings (reduce-scatter) or last stage's
 * (all-gather). */
static void
plan_torus2d (const PsPlatform *p, const GroupShape *gs, PsTraceCollectiveKind kind, double D,
              PsGroupPlan *gp, int *route)
{
  double h = D / 2;
  double fa = h / (gs->nx * gs->k), fb = h / (gs->ny * gs->k);
  gboolean rs_first = kind == PS_TRACE_REDUCE_SCATTER || kind == PS_TRACE_ALL_REDUCE;
  gboolean ag_last = kind == PS_TRACE_ALL_GATHER || kind == PS_TRACE_ALL_REDUCE;
  if (rs_first)
    {
      PsPhase *ph = phase_new ("2d-rs-1");
      double la = add_dim_rings (p, gs, ph, TRUE, TRUE, h, FALSE, route);
      double lb = add_dim_rings (p, gs, ph, FALSE, TRUE, h, FALSE, route);
      ph->latency_s = MAX (la, lb);
      g_ptr_array_add (gp->phases, ph);
    }
  {
    gboolean ar = kind == PS_TRACE_ALL_REDUCE;
    PsPhase *ph = phase_new (ar ? "2d-ar-2" : rs_first ? "2d-rs-2" : "2d-ag-1");
    double la = add_dim_rings (p, gs, ph, FALSE, FALSE, fa, ar, route);
    double lb = add_dim_rings (p, gs, ph, TRUE, FALSE, fb, ar, route);
    ph->latency_s = MAX (la, lb);
    g_ptr_array_add (gp->phases, ph);
  }
  if (ag_last)
    {
      PsPhase *ph = phase_new ("2d-ag-2");
      double la = add_dim_rings (p, gs, ph, TRUE, TRUE, h, FALSE, route);
      double lb = add_dim_rings (p, gs, ph, FALSE, TRUE, h, FALSE, route);
      ph->latency_s = MAX (la, lb);
      g_ptr_array_add (gp->phases, ph);
    }
}

static void
plan_ring_group (const PsPlatform *p, PsCollAlgorithm alg, PsTraceCollectiveKind kind, double D,
                 const int *members, int m, PsGroupPlan *gp, int *route)
{
  GroupShape gs;
  group_shape (p, members, m, &gs);
  gboolean regular = gs.product && (gs.k == 1 || gs.k == 2);
  if (alg == PS_COLL_DIM_BY_DIM && regular)
    plan_dim_by_dim (p, &gs, kind, D, gp, route);
  else if ((alg == PS_COLL_TORUS2D || alg == PS_COLL_TORUS2D_WRAP_A2A
            || alg == PS_COLL_TORUS2D_STAGED_A2A)
           && regular && gs.nx > 1 && gs.ny > 1)
    plan_torus2d (p, &gs, kind, D, gp, route);
  else
    g_ptr_array_add (gp->phases, listed_ring_phase (p, kind, D, members, m, route));
  group_shape_clear (&gs);
}

/* The links from `from` to `to` along one dimension (x when along_x, in row
 * `fixed`; else y in column `fixed`) without wrap links: straight along the
 * line, as on a mesh, even where the slice has wrap links. */
static int
line_route (const PsPlatform *p, gboolean along_x, int fixed, int from, int to, int *links)
{
  const PsSlice *s = &p->slice;
  int sign = to > from ? 1 : -1;
  int steps = abs (to - from);
  for (int i = 0, c = from; i < steps; i++, c += sign)
    {
      int chip = along_x ? ps_slice_chip_index (s, c, fixed) : ps_slice_chip_index (s, fixed, c);
      links[i] = chip * PS_LINKS_PER_CHIP
                 + (along_x ? (sign > 0 ? PS_LINK_X_PLUS : PS_LINK_X_MINUS)
                            : (sign > 0 ? PS_LINK_Y_PLUS : PS_LINK_Y_MINUS));
    }
  return steps;
}

/* One phase of a routed exchange: every link with load becomes one
 * transfer between its ends carrying that load (and `load` is zeroed);
 * the phase's latency is its longest route, `max_hops` ICI hops, or one
 * on-chip hop when no ICI link is loaded. */
static void
load_phase (const PsPlatform *p, const char *label, double *load, int max_hops, PsGroupPlan *gp)
{
  int cpc = p->slice.cores_per_chip;
  PsPhase *ph = phase_new (label);
  for (int l = 0; l < p->n_links; l++)
    {
      if (load[l] <= 0)
        continue;
      int sc, dc, dir = l % PS_LINKS_PER_CHIP;
      ps_platform_link_chips (p, l, &sc, &dc);
      if (dir == PS_LINK_ONCHIP_FROM_CORE0)
        add_flow (ph, sc * cpc, sc * cpc + 1, load[l]);
      else if (dir == PS_LINK_ONCHIP_FROM_CORE1)
        add_flow (ph, sc * cpc + 1, sc * cpc, load[l]);
      else
        add_flow (ph, sc * cpc, dc * cpc, load[l]);
      load[l] = 0;
    }
  ph->latency_s = max_hops > 0 ? max_hops * p->ici_latency_s : p->onchip_latency_s;
  g_ptr_array_add (gp->phases, ph);
}

/* All-to-all: every member sends D/m to every other, all at once. Routed
 * here rather than pair by pair in SimGrid; each loaded link becomes one
 * transfer between its ends. A dimension-ordered route is its x part along
 * the source's row, then its y part along the target's column, so the x
 * links of row y carry, for each (xa, xb), the members of (xa, y) times the
 * members of column xb, and the y links of column x, for each (ya, yb), the
 * members of row ya times those of (x, yb): O(X^2 Y + Y^2 X) routes instead
 * of O(chips^2). With `wrap` routes take the shorter way round where the
 * slice has wrap links; without, they run straight along each dimension
 * (doc/collectives.md says why that is the default). */
static void
plan_all_to_all_group (const PsPlatform *p, double D, const int *members, int m, gboolean wrap,
                       PsGroupPlan *gp, double *load, int *route)
{
  const PsSlice *s = &p->slice;
  int X = s->chips_x, Y = s->chips_y, cpc = s->cores_per_chip;
  double piece = D / m;
  g_autofree int *cnt = g_new0 (int, X * Y);
  g_autofree int *col = g_new0 (int, X);
  g_autofree int *row = g_new0 (int, Y);
  for (int i = 0; i < m; i++)
    {
      int chip = members[i] / cpc;
      cnt[chip]++;
      col[chip / Y]++;
      row[chip % Y]++;
    }
  int max_dx = 0, max_dy = 0;
  for (int y = 0; y < Y; y++)
    for (int xa = 0; xa < X; xa++)
      {
        int na = cnt[ps_slice_chip_index (s, xa, y)];
        if (na == 0)
          continue;
        for (int xb = 0; xb < X; xb++)
          {
            if (xb == xa || col[xb] == 0)
              continue;
            int n = wrap ? ps_platform_dim_route (p, TRUE, y, xa, xb, route)
                         : line_route (p, TRUE, y, xa, xb, route);
            max_dx = MAX (max_dx, n);
            for (int i = 0; i < n; i++)
              load[route[i]] += (double) na * col[xb] * piece;
          }
      }
  for (int x = 0; x < X; x++)
    for (int yb = 0; yb < Y; yb++)
      {
        int nb = cnt[ps_slice_chip_index (s, x, yb)];
        if (nb == 0)
          continue;
        for (int ya = 0; ya < Y; ya++)
          {
            if (ya == yb || row[ya] == 0)
              continue;
            int n = wrap ? ps_platform_dim_route (p, FALSE, x, ya, yb, route)
                         : line_route (p, FALSE, x, ya, yb, route);
            max_dy = MAX (max_dy, n);
            for (int i = 0; i < n; i++)
              load[route[i]] += (double) row[ya] * nb * piece;
          }
      }
  for (int chip = 0; chip < X * Y; chip++)
    if (cnt[chip] == 2)
      {
        load[chip * PS_LINKS_PER_CHIP + PS_LINK_ONCHIP_FROM_CORE0] += piece;
        load[chip * PS_LINKS_PER_CHIP + PS_LINK_ONCHIP_FROM_CORE1] += piece;
      }
  /* The longest route is at most the longest x part plus the longest y part
   * (exact for regular groups). */
  load_phase (p, "direct", load, max_dx + max_dy, gp);
}

/* The staged all-to-all (PS_COLL_TORUS2D_STAGED_A2A) over a product group
 * Xs x Ys of nx x ny chips with k member cores each (m = k nx ny), one
 * dimension at a time, as Mesh TensorFlow's two-level MoE exchanges along
 * one mesh axis and then the other (doc/collectives.md, "Staged"):
 *  1. along x, within every row of the group: core (x, y, i) sends core
 *     (x', y, j) the ny pieces of D/m bound for the cores (x', y'', j) of
 *     its column, for every y'' (the k cores of a chip included);
 *  2. along y, within every column and core index j: core (x, y, j) sends
 *     core (x, y'', j) the k nx pieces it gathered for it.
 * Each stage routes straight along its dimension like the one-shot
 * default, so its x links carry what the one-shot's do, and so do its y
 * links; the stages add where the one-shot overlaps them. Groups of
 * other shapes (and 1-D groups, where the second stage is empty) run the
 * one-shot exchange. */
static void
plan_all_to_all_staged (const PsPlatform *p, double D, const int *members, int m,
                        PsGroupPlan *gp, double *load, int *route)
{
  GroupShape gs;
  group_shape (p, members, m, &gs);
  if (!gs.product || gs.k < 1 || gs.k > 2 || gs.nx < 2 || gs.ny < 2)
    {
      group_shape_clear (&gs);
      plan_all_to_all_group (p, D, members, m, FALSE, gp, load, route);
      return;
    }
  int k = gs.k, nx = gs.nx, ny = gs.ny;
  double piece = D / m;
  int max_hops = 0;
  /* stage 1: x, one exchange per row of the group */
  for (int yi = 0; yi < ny; yi++)
    for (int a = 0; a < nx; a++)
      for (int b = 0; b < nx; b++)
        {
          if (a == b)
            continue;
          int n = line_route (p, TRUE, gs.ys[yi], gs.xs[a], gs.xs[b], route);
          max_hops = MAX (max_hops, n);
          for (int i = 0; i < n; i++)
            load[route[i]] += (double) k * k * ny * piece;
        }
  if (k == 2)
    for (int c = 0; c < gs.n_chips; c++)
      {
        load[gs.chips[c] * PS_LINKS_PER_CHIP + PS_LINK_ONCHIP_FROM_CORE0] += ny * piece;
        load[gs.chips[c] * PS_LINKS_PER_CHIP + PS_LINK_ONCHIP_FROM_CORE1] += ny * piece;
      }
  load_phase (p, "a2a-x", load, max_hops, gp);
  /* stage 2: y, one exchange per column and core index: the k exchanges
   * of a column share its links */
  max_hops = 0;
  for (int xi = 0; xi < nx; xi++)
    for (int a = 0; a < ny; a++)
      for (int b = 0; b < ny; b++)
        {
          if (a == b)
            continue;
          int n = line_route (p, FALSE, gs.xs[xi], gs.ys[a], gs.ys[b], route);
          max_hops = MAX (max_hops, n);
          for (int i = 0; i < n; i++)
            load[route[i]] += (double) k * k * nx * piece;
        }
  load_phase (p, "a2a-y", load, max_hops, gp);
  group_shape_clear (&gs);
}

static PsCollPlan *
plan_alloc (const PsPlatform *p, PsTraceCollectiveKind kind, double bytes, int n_groups,
            int group_size, double launch_s)
{
  PsCollPlan *plan = g_new0 (PsCollPlan, 1);
  int n_cores = ps_slice_n_cores (&p->slice);
  plan->platform = p;
  plan->kind = kind;
  plan->bytes = bytes;
  plan->n_groups = n_groups;
  plan->group_size = group_size;
  plan->launch_s = launch_s;
  plan->group_of_core = g_new (int, n_cores);
  for (int i = 0; i < n_cores; i++)
    plan->group_of_core[i] = -1;
  plan->groups = g_new0 (PsGroupPlan, n_groups);
  for (int g = 0; g < n_groups; g++)
    plan->groups[g].phases = g_ptr_array_new_with_free_func (phase_free);
  plan->link_bytes = g_new0 (double, p->n_links);
  return plan;
}

/* Merges the one-link transfers of a phase that cross the same link into
 * one transfer carrying their bytes. On an idle network that changes
 * nothing (the last transfer on a link finishes when the link has carried
 * all their bytes); it keeps a pod-wide phase at about one transfer per
 * link, which SimGrid needs: it finishes each transfer in time linear in
 * the number in flight. Under contention a merged transfer takes one
 * max-min share, as the all-to-all's per-link transfers do. `slot` has one
 * entry per link, all -1, and is left so. */
static void
merge_one_hop (const PsPlatform *p, PsPhase *ph, int *route, int *slot)
{
  GArray *out = g_array_sized_new (FALSE, FALSE, sizeof (PsFlow), ph->flows->len);
  for (guint f = 0; f < ph->flows->len; f++)
    {
      PsFlow *fl = &g_array_index (ph->flows, PsFlow, f);
      int n = ps_platform_route (p, fl->src_core, fl->dst_core, route, NULL);
      if (n == 1 && slot[route[0]] >= 0)
        g_array_index (out, PsFlow, slot[route[0]]).bytes += fl->bytes;
      else
        {
          if (n == 1)
            slot[route[0]] = (int) out->len;
          g_array_append_val (out, *fl);
        }
    }
  for (guint f = 0; f < out->len; f++)
    {
      PsFlow *fl = &g_array_index (out, PsFlow, f);
      if (ps_platform_route (p, fl->src_core, fl->dst_core, route, NULL) == 1)
        slot[route[0]] = -1;
    }
  g_array_unref (ph->flows);
  ph->flows = out;
}

/* Merges one-hop transfers (above), sums the bytes each link carries, and
 * finds whether any link is ever shared (PsCollPlan.exclusive_links). */
static void
plan_finish (PsCollPlan *plan)
{
  const PsPlatform *p = plan->platform;
  g_autofree int *route = g_new (int, ps_platform_max_route_links (p));
  g_autofree int *slot = g_new (int, p->n_links);
  g_autofree int *owner = g_new (int, p->n_links);
  g_autofree int *stamp = g_new (int, p->n_links);
  g_autofree int *parent = g_new (int, plan->n_groups + 1);
  for (int g = 0; g < plan->n_groups; g++)
    parent[g] = g;
  int phase_id = 0;
  plan->exclusive_links = TRUE;
  for (int l = 0; l < p->n_links; l++)
    {
      slot[l] = -1;
      owner[l] = -1;
      stamp[l] = -1;
    }
  for (int g = 0; g < plan->n_groups; g++)
    for (guint i = 0; i < plan->groups[g].phases->len; i++)
      {
        PsPhase *ph = plan->groups[g].phases->pdata[i];
        merge_one_hop (p, ph, route, slot);
        phase_id++;
        for (guint f = 0; f < ph->flows->len; f++)
          {
            PsFlow *fl = &g_array_index (ph->flows, PsFlow, f);
            int n = ps_platform_route (p, fl->src_core, fl->dst_core, route, NULL);
            for (int r = 0; r < n; r++)
              {
                int l = route[r];
                plan->link_bytes[l] += fl->bytes;
                if ((owner[l] >= 0 && owner[l] != g) || stamp[l] == phase_id)
                  plan->exclusive_links = FALSE;
                if (owner[l] >= 0 && owner[l] != g)
                  {
                    int a = owner[l], b = g;
                    while (parent[a] != a)
                      a = parent[a];
                    while (parent[b] != b)
                      b = parent[b];
                    parent[MAX (a, b)] = MIN (a, b);
                  }
                owner[l] = g;
                stamp[l] = phase_id;
              }
          }
      }
  plan->group_flows = g_new0 (int, plan->n_groups + 1);
  for (int g = 0; g < plan->n_groups; g++)
    for (guint i = 0; i < plan->groups[g].phases->len; i++)
      plan->group_flows[g] = MAX (plan->group_flows[g],
                                  (int) ((const PsPhase *) plan->groups[g].phases->pdata[i])->flows->len);
  plan->component = g_new (int, plan->n_groups + 1);
  plan->n_components = 0;
  for (int g = 0; g < plan->n_groups; g++)
    {
      int r = g;
      while (parent[r] != r)
        r = parent[r];
      plan->component[g] = r == g ? plan->n_components++ : plan->component[r];
    }
}

static double
coll_trace_bytes (const PsTraceCollective *c)
{
  return (double) MAX (c->in_bytes, c->out_bytes);
}

char *
ps_coll_trace_key (const PsTraceCollective *c)
{
  g_autofree char *form = c->kind == PS_TRACE_COLLECTIVE_PERMUTE ? ps_trace_pairs_to_string (&c->pairs)
                                                                 : ps_trace_groups_to_string (&c->groups);
  return g_strdup_printf ("%d|%.17g|%s", c->kind, coll_trace_bytes (c), form);
}

PsCollPlan *
ps_coll_plan_for_trace (const PsPlatform *p, PsCollAlgorithm alg, const PsTraceHeader *h,
                        const PsTraceCollective *c, const int *core_of_device, double launch_s,
                        GError **error)
{
  double bytes = coll_trace_bytes (c);
  if (c->kind == PS_TRACE_COLLECTIVE_PERMUTE)
    {
      guint64 n_pairs;
      g_autofree guint32 *ids = ps_trace_pairs_expand (&c->pairs, h, &n_pairs);
      g_autofree int *pairs = g_new (int, 2 * n_pairs + 1);
      for (guint64 i = 0; i < 2 * n_pairs; i++)
        pairs[i] = core_of_device[ids[i]];
      return ps_coll_plan_new_permute (p, bytes, pairs, (int) n_pairs, launch_s, error);
    }
  guint64 n_groups, size;
  g_autofree guint32 *ids = ps_trace_groups_expand (&c->groups, h, &n_groups, &size);
  g_autofree int *cores = g_new (int, n_groups * size + 1);
  for (guint64 i = 0; i < n_groups * size; i++)
    cores[i] = core_of_device[ids[i]];
  return ps_coll_plan_new (p, alg, c->kind, bytes, cores, (int) n_groups, (int) size, launch_s, error);
}

PsCollPlan *
ps_coll_plan_new (const PsPlatform *p, PsCollAlgorithm alg, PsTraceCollectiveKind kind,
                  double bytes, const int *cores, int n_groups, int group_size, double launch_s,
                  GError **error)
{
  g_return_val_if_fail (kind != PS_TRACE_COLLECTIVE_PERMUTE, NULL);
  int n_cores = ps_slice_n_cores (&p->slice);
  g_autoptr (PsCollPlan) plan = plan_alloc (p, kind, bytes, n_groups, group_size, launch_s);
  plan->algorithm = alg;
  for (int g = 0; g < n_groups; g++)
    for (int i = 0; i < group_size; i++)
      {
        int c = cores[g * group_size + i];
        if (c < 0 || c >= n_cores)
          {
            g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                         "replica group %d: core %d is not on slice %s (%d cores)", g, c,
                         p->slice.name, n_cores);
            return NULL;
          }
        if (plan->group_of_core[c] >= 0)
          {
            g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                         "replica groups: core %d is in group %d and in group %d", c,
                         plan->group_of_core[c], g);
            return NULL;
          }
        plan->group_of_core[c] = g;
      }
  g_autofree int *route = g_new (int, ps_platform_max_route_links (p));
  g_autofree double *load = kind == PS_TRACE_ALL_TO_ALL ? g_new0 (double, p->n_links) : NULL;
  for (int g = 0; g < n_groups; g++)
    {
      const int *members = cores + g * group_size;
      plan->groups[g].first_core = members[0];
      if (group_size < 2)
        continue;
      if (kind == PS_TRACE_ALL_TO_ALL && alg == PS_COLL_TORUS2D_STAGED_A2A)
        plan_all_to_all_staged (p, bytes, members, group_size, &plan->groups[g], load, route);
      else if (kind == PS_TRACE_ALL_TO_ALL)
        plan_all_to_all_group (p, bytes, members, group_size, alg == PS_COLL_TORUS2D_WRAP_A2A,
                               &plan->groups[g], load, route);
      else
        plan_ring_group (p, alg, kind, bytes, members, group_size, &plan->groups[g], route);
    }
  plan_finish (plan);
  return g_steal_pointer (&plan);
}

PsCollPlan *
ps_coll_plan_new_permute (const PsPlatform *p, double bytes, const int *pairs, int n_pairs,
                          double launch_s, GError **error)
{
  int n_cores = ps_slice_n_cores (&p->slice);
  g_autoptr (PsCollPlan) plan = plan_alloc (p, PS_TRACE_COLLECTIVE_PERMUTE, bytes, 1,
                                            n_pairs, launch_s);
  PsPhase *ph = phase_new ("direct");
  g_ptr_array_add (plan->groups[0].phases, ph);
  plan->groups[0].first_core = n_pairs > 0 ? pairs[0] : 0;
  for (int i = 0; i < 2 * n_pairs; i++)
    {
      if (pairs[i] < 0 || pairs[i] >= n_cores)
        {
          g_set_error (error, PS_ERROR, PS_ERROR_INVALID,
                       "collective-permute pair %d: core %d is not on slice %s (%d cores)", i / 2,
                       pairs[i], p->slice.name, n_cores);
          return NULL;
        }
      plan->group_of_core[pairs[i]] = 0;
    }
  g_autofree int *route = g_new (int, ps_platform_max_route_links (p));
  for (int i = 0; i < n_pairs; i++)
    {
      double lat;
      add_flow (ph, pairs[2 * i], pairs[2 * i + 1], bytes);
      ps_platform_route (p, pairs[2 * i], pairs[2 * i + 1], route, &lat);
      ph->latency_s = MAX (ph->latency_s, lat);
    }
  plan_finish (plan);
  return g_steal_pointer (&plan);
}

void
ps_coll_plan_free (PsCollPlan *plan)
{
  if (!plan)
    return;
  for (int g = 0; g < plan->n_groups; g++)
    g_ptr_array_unref (plan->groups[g].phases);
  g_free (plan->groups);
  g_free (plan->group_of_core);
  g_free (plan->link_bytes);
  g_free (plan->component);
  g_free (plan->group_flows);
  g_free (plan);
}

/* SimGrid finds a finished transfer in its sender's list of activities by a
 * linear search, so one actor with thousands of transfers in flight costs
 * O(n^2); a phase is therefore sent by helpers of at most this many. */
#define FLOWS_PER_SENDER 32

typedef struct {
  PsSgNet *net;
  const PsFlow *flows;
  guint n;
} Sender;

static void
send_and_wait (PsSgNet *net, const PsFlow *flows, guint n)
{
  PsSgComm *comms[FLOWS_PER_SENDER];
  guint k = 0;
  for (guint f = 0; f < n; f++)
    comms[k++] = ps_sgnet_send_async (net, flows[f].src_core, flows[f].dst_core,
                                      round (flows[f].bytes));
  ps_sgnet_wait_all (comms, k);
}

static void
sender_actor (void *data)
{
  Sender *s = data;
  send_and_wait (s->net, s->flows, s->n);
}

void
ps_coll_run_group (PsSgNet *net, const PsCollPlan *plan, int group)
{
  ps_sgnet_sleep (plan->launch_s);
  GPtrArray *phases = plan->groups[group].phases;
  for (guint i = 0; i < phases->len; i++)
    {
      PsPhase *ph = phases->pdata[i];
      guint n = ph->flows->len;
      const PsFlow *flows = (const PsFlow *) (void *) ph->flows->data;
      if (n <= FLOWS_PER_SENDER)
        send_and_wait (net, flows, n);
      else
        {
          guint n_senders = (n + FLOWS_PER_SENDER - 1) / FLOWS_PER_SENDER;
          g_autofree Sender *senders = g_new (Sender, n_senders);
          g_autofree PsSgActor **actors = g_new (PsSgActor *, n_senders);
          for (guint s = 0; s < n_senders; s++)
            {
              guint first = s * FLOWS_PER_SENDER;
              senders[s] = (Sender) { net, flows + first, MIN (FLOWS_PER_SENDER, n - first) };
              actors[s] = ps_sgnet_spawn_joinable (net, flows[first].src_core, "sender",
                                                   sender_actor, &senders[s]);
            }
          for (guint s = 0; s < n_senders; s++)
            ps_sgnet_join (actors[s]);
        }
      ps_sgnet_sleep (ph->latency_s);
    }
}

typedef struct GroupRun {
  PsSgNet *net;
  const PsCollPlan *plan;
  int group;
  double start_s;
  double *duration_out;
  struct GroupRun *after;  /* chained: starts `delay_s` after this one ends */
  double delay_s;
  PsSgSem *ended;          /* released once per chained follower */
  int n_followers;
} GroupRun;

static void
group_actor (void *data)
{
  GroupRun *r = data;
  if (r->after)
    {
      ps_sgnet_sem_acquire (r->after->ended);
      ps_sgnet_sleep (r->delay_s);
      r->start_s = ps_sgnet_clock ();
    }
  else
    ps_sgnet_sleep (r->start_s - ps_sgnet_clock ());
  ps_coll_run_group (r->net, r->plan, r->group);
  *r->duration_out = ps_sgnet_clock () - r->start_s;
  for (int k = 0; k < r->n_followers; k++)
    ps_sgnet_sem_release (r->ended);
}

double
ps_coll_simulate (PsSgNet *net, PsCollPlan *const *plans, int n_plans, double **group_durations_out)
{
  return ps_coll_simulate_at (net, plans, n_plans, NULL, group_durations_out);
}

/* A group of a plan whose links are exclusive, alone: launch, then per
 * phase the slowest transfer at its route's slowest link (SimGrid moves
 * round(bytes)) plus the phase's latency. */
static double
exclusive_group_duration (const PsCollPlan *plan, int g, int *route)
{
  const PsPlatform *p = plan->platform;
  double t = plan->launch_s;
  GPtrArray *phases = plan->groups[g].phases;
  for (guint i = 0; i < phases->len; i++)
    {
      const PsPhase *ph = phases->pdata[i];
      double slowest = 0;
      for (guint f = 0; f < ph->flows->len; f++)
        {
          const PsFlow *fl = &g_array_index (ph->flows, PsFlow, f);
          int n = ps_platform_route (p, fl->src_core, fl->dst_core, route, NULL);
          double bw = G_MAXDOUBLE;
          for (int r = 0; r < n; r++)
            bw = MIN (bw, ps_platform_link_bw (p, route[r]));
          if (n > 0)
            slowest = MAX (slowest, round (fl->bytes) / bw);
        }
      t += slowest;
      t += ph->latency_s;
    }
  return t;
}

double
ps_coll_plan_time_bound (const PsCollPlan *plan)
{
  const PsPlatform *p = plan->platform;
  g_autofree int *route = g_new (int, ps_platform_max_route_links (p));
  double t = 0;
  for (int g = 0; g < plan->n_groups; g++)
    t = MAX (t, exclusive_group_duration (plan, g, route));
  if (plan->exclusive_links)
    return t;
  /* Shared links: no transfer ends before its busiest link has moved all
   * its bytes. */
  double busiest = 0, latency = 0;
  for (int l = 0; l < p->n_links; l++)
    if (plan->link_bytes[l] > 0)
      busiest = MAX (busiest, plan->link_bytes[l] / ps_platform_link_bw (p, l));
  for (int g = 0; g < plan->n_groups; g++)
    {
      double lat = 0;
      for (guint i = 0; i < plan->groups[g].phases->len; i++)
        lat += ((const PsPhase *) plan->groups[g].phases->pdata[i])->latency_s;
      latency = MAX (latency, lat);
    }
  return MAX (t, plan->launch_s + busiest + latency);
}

double
ps_coll_simulate_at (PsSgNet *net, PsCollPlan *const *plans, int n_plans,
                     const double *const *offsets, double **group_durations_out)
{
  return ps_coll_simulate_chained (net, plans, n_plans, offsets, NULL, group_durations_out, NULL);
}

/* Transfers that can be in flight at once in one SimGrid run
 * (PsCollPlan.group_flows summed over its groups) above which a single
 * collective sends them as mailbox puts (ps_sgnet_set_mailboxes), as
 * clusters always do: SimGrid 3.32 keeps every host-to-host comm in one
 * list that each completion searches, so their cost grows with the square
 * of the transfers in flight, while mailboxes cost a receiver actor per
 * destination core. Measured both ways (doc/simulator.md, "Performance"):
 * 128 in flight (each of DenseLm128B32x32's 32-core groups on v3-2048)
 * 0.012-0.020 s per collective with host-to-host comms, 0.06-0.13 s with
 * mailboxes; 8,192 (ConformerL's 8 groups of 256 cores) 0.67-2.5 s against
 * 0.31-0.58 s. */
#define MAILBOX_FLOWS 1024

double
ps_coll_simulate_chained (PsSgNet *net, PsCollPlan *const *plans, int n_plans,
                          const double *const *offsets, const PsCollChain *const *chain,
                          double **group_durations_out, double **starts_out)
{
  if (n_plans == 1 && plans[0]->exclusive_links && !plans[0]->use_network)
    {
      const PsCollPlan *plan = plans[0];
      g_autofree int *route = g_new (int, ps_platform_max_route_links (plan->platform));
      group_durations_out[0] = g_new0 (double, plan->n_groups);
      if (starts_out)
        starts_out[0] = g_new0 (double, plan->n_groups);
      double end = 0;
      for (int g = 0; g < plan->n_groups; g++)
        {
          if (starts_out)
            starts_out[0][g] = offsets && offsets[0] ? offsets[0][g] : 0;
          group_durations_out[0][g] = exclusive_group_duration (plan, g, route);
          end = MAX (end, (offsets && offsets[0] ? offsets[0][g] : 0) + group_durations_out[0][g]);
        }
      return end;
    }
  int total = 0;
  g_autofree int *first = g_new (int, n_plans + 1);
  for (int i = 0; i < n_plans; i++)
    {
      first[i] = total;
      total += plans[i]->n_groups;
      group_durations_out[i] = g_new0 (double, plans[i]->n_groups);
      if (starts_out)
        starts_out[i] = g_new0 (double, plans[i]->n_groups);
    }
  g_autofree GroupRun *runs = g_new0 (GroupRun, total > 0 ? total : 1);
  /* chained groups need their predecessor in the same SimGrid run */
  if (chain && n_plans == 1)
    chain = NULL;
  /* one plan: each component of link-sharing groups on its own (they never
   * meet); several plans: all together */
  int n_runs = n_plans == 1 && plans[0]->n_components > 1 ? plans[0]->n_components : 1;
  double end = 0;
  for (int run = 0; run < n_runs; run++)
    {
      double start = ps_sgnet_clock ();
      int r = 0;
      int in_flight = 0;
      for (int i = 0; i < n_plans; i++)
        for (int g = 0; g < plans[i]->n_groups; g++, r++)
          {
            if (n_runs > 1 && plans[i]->component[g] != run)
              continue;
            in_flight += plans[i]->group_flows[g];
            double off = offsets && offsets[i] ? offsets[i][g] : 0;
            runs[r].net = net;
            runs[r].plan = plans[i];
            runs[r].group = g;
            runs[r].start_s = start + off;
            runs[r].duration_out = &group_durations_out[i][g];
            const PsCollChain *ch = chain && chain[i] ? &chain[i][g] : NULL;
            if (ch && ch->plan >= 0)
              {
                g_assert (ch->plan < i && ch->group < plans[ch->plan]->n_groups);
                GroupRun *pre = &runs[first[ch->plan] + ch->group];
                runs[r].after = pre;
                runs[r].delay_s = ch->delay_s;
                if (!pre->ended)
                  pre->ended = ps_sgnet_sem_new (0);
                pre->n_followers++;
              }
            char name[32];
            g_snprintf (name, sizeof name, "coll%d.g%d", i, g);
            ps_sgnet_spawn (net, plans[i]->groups[g].first_core, name, group_actor, &runs[r]);
          }
      /* Mailboxes for clusters of overlapping collectives and for one
       * collective with thousands of transfers in flight; for a few
       * hundred their receiver actors cost more than SimGrid's list search
       * they avoid (MAILBOX_FLOWS; same times either way). */
      ps_sgnet_set_mailboxes (net, n_plans > 1 || in_flight > MAILBOX_FLOWS);
      ps_sgnet_run (net);
      ps_sgnet_set_mailboxes (net, 0);
      end = MAX (end, ps_sgnet_clock () - start);
      if (starts_out)
        for (int i = 0; i < n_plans; i++)
          for (int g = 0; g < plans[i]->n_groups; g++)
            if (n_runs == 1 || plans[i]->component[g] == run)
              starts_out[i][g] = runs[first[i] + g].start_s - start;
    }
  for (int r = 0; r < total; r++)
    if (runs[r].ended)
      ps_sgnet_sem_free (runs[r].ended);
  return end;
}

void
ps_coll_bandwidths (PsTraceCollectiveKind kind, double bytes, int n, double time_s, double *algbw,
                    double *busbw)
{
  double alg = time_s > 0 ? bytes / time_s : 0;
  double f = 1;
  if (n > 1)
    switch (kind)
      {
      case PS_TRACE_ALL_REDUCE: f = 2.0 * (n - 1) / n; break;
      case PS_TRACE_ALL_GATHER:
      case PS_TRACE_REDUCE_SCATTER:
      case PS_TRACE_ALL_TO_ALL: f = (n - 1) / (double) n; break;
      default: f = 1; break;
      }
  *algbw = alg;
  *busbw = alg * f;
}

gboolean
ps_coll_kind_parse (const char *name, PsTraceCollectiveKind *out)
{
  for (int k = 0; k < PS_TRACE_COLLECTIVE_COUNT; k++)
    if (g_strcmp0 (name, ps_trace_collective_kind_name (k)) == 0)
      {
        *out = k;
        return TRUE;
      }
  return FALSE;
}
