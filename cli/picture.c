/* Pictures with cairo: see picture.h. */
#include "config.h"

#include "cli/picture.h"

#include <cairo-svg.h>
#include <cairo.h>
#include <math.h>
#include <string.h>

#include "common/error.h"

/* ---- output --------------------------------------------------------------------- */

gboolean
ps_picture_format_for (const char *path, const char *option, PsPictureFormat *f, GError **error)
{
  if (g_str_has_suffix (path, ".png"))
    *f = PS_PICTURE_PNG;
  else if (g_str_has_suffix (path, ".svg"))
    *f = PS_PICTURE_SVG;
  else
    {
      g_set_error (error, PS_ERROR, PS_ERROR_OPTION, "%s %s: a picture is FILE.png or FILE.svg", option, path);
      return FALSE;
    }
  return TRUE;
}

gboolean
ps_picture_save (const char *path, const GString *bytes, GError **error)
{
  return ps_write_file_atomic (path, bytes->str, bytes->len, error);
}

static cairo_status_t
append_bytes (void *closure, const unsigned char *data, unsigned int length)
{
  g_string_append_len (closure, (const char *) data, length);
  return CAIRO_STATUS_SUCCESS;
}

typedef struct {
  cairo_surface_t *surface;
  cairo_t *cr;
  PsPictureFormat format;
  GString *out;
} Canvas;

static void
canvas_begin (Canvas *c, PsPictureFormat f, double w, double h, GString *out)
{
  c->format = f;
  c->out = out;
  g_string_truncate (out, 0);
  if (f == PS_PICTURE_SVG)
    c->surface = cairo_svg_surface_create_for_stream (append_bytes, out, w, h);
  else
    c->surface = cairo_image_surface_create (CAIRO_FORMAT_ARGB32, (int) ceil (w), (int) ceil (h));
  c->cr = cairo_create (c->surface);
  cairo_set_source_rgb (c->cr, 1, 1, 1);
  cairo_paint (c->cr);
  cairo_select_font_face (c->cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, CAIRO_FONT_WEIGHT_NORMAL);
}

static gboolean
canvas_end (Canvas *c, GError **error)
{
  cairo_status_t st = cairo_status (c->cr);
  cairo_destroy (c->cr);
  if (st == CAIRO_STATUS_SUCCESS && c->format == PS_PICTURE_PNG)
    st = cairo_surface_write_to_png_stream (c->surface, append_bytes, c->out);
  cairo_surface_finish (c->surface);
  if (st == CAIRO_STATUS_SUCCESS)
    st = cairo_surface_status (c->surface);
  cairo_surface_destroy (c->surface);
  if (st != CAIRO_STATUS_SUCCESS)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_IO, "drawing the picture: %s", cairo_status_to_string (st));
      return FALSE;
    }
  return TRUE;
}

static void
text (cairo_t *cr, double x, double y, double size, const char *s, double align)
{
  cairo_set_font_size (cr, size);
  cairo_text_extents_t e;
  cairo_text_extents (cr, s, &e);
  cairo_move_to (cr, x - align * e.x_advance, y);
  cairo_show_text (cr, s);
}

/* ---- colors --------------------------------------------------------------------- */

void
ps_picture_colormap (double t, double rgb[3])
{
  /* Viridis at five stops (matplotlib's, CC0), linearly interpolated. */
  static const double stops[5][3] = {
    { 0.267, 0.005, 0.329 }, { 0.231, 0.322, 0.545 }, { 0.129, 0.569, 0.549 },
    { 0.369, 0.788, 0.384 }, { 0.993, 0.906, 0.144 },
  };
  if (!(t > 0))
    t = 0;
  if (t > 1)
    t = 1;
  double u = t * 4;
  int i = (int) floor (u);
  if (i >= 4)
    i = 3;
  double f = u - i;
  for (int k = 0; k < 3; k++)
    rgb[k] = stops[i][k] * (1 - f) + stops[i + 1][k] * f;
}

/* Qualitative colors for groups (Tableau 10). */
static void
group_color (int g, double rgb[3])
{
  static const guint32 palette[] = { 0x4e79a7, 0xf28e2b, 0xe15759, 0x76b7b2, 0x59a14f,
                                     0xedc948, 0xb07aa1, 0xff9da7, 0x9c755f, 0xbab0ac };
  guint32 c = palette[g % G_N_ELEMENTS (palette)];
  rgb[0] = ((c >> 16) & 0xff) / 255.0;
  rgb[1] = ((c >> 8) & 0xff) / 255.0;
  rgb[2] = (c & 0xff) / 255.0;
}

/* ---- slice geometry ------------------------------------------------------------- */

void
ps_slice_layout_init (PsSliceLayout *l, const PsPlatform *p, double legend_height)
{
  memset (l, 0, sizeof *l);
  l->chips_x = p->slice.chips_x;
  l->chips_y = p->slice.chips_y;
  int m = MAX (l->chips_x, l->chips_y);
  l->cell = CLAMP (960.0 / m, 28.0, 110.0);
  l->pad = 0.22 * l->cell;
  l->line = MAX (3.0, 0.07 * l->cell);
  double margin = 0.6 * l->cell;
  double title = 30;
  /* Room left of and below the grid for the chip coordinates and their
   * axis names, so a picture on a slide says which chip is which. */
  const double axis = 40;
  double gw = l->chips_x * l->cell, gh = l->chips_y * l->cell;
  l->width = MAX (gw + 2 * margin + axis, 420.0);
  l->height = title + gh + 2 * margin + axis + legend_height;
  l->left = axis + (l->width - axis - gw) / 2;
  l->top = title + margin;
  l->axis_x_baseline = l->top + gh + margin + 12;
  l->axis_y_right = l->left - margin - 4;
}

/* A chip's box: corner and side. */
static void
chip_box (const PsSliceLayout *l, int x, int y, double *bx, double *by, double *s)
{
  *bx = l->left + x * l->cell + l->pad;
  *by = l->top + y * l->cell + l->pad;
  *s = l->cell - 2 * l->pad;
}

/* The arrow of a link: from (x0,y0) to (x1,y1); a wrap link also has the
 * part entering its destination, (x2,y2) to (x3,y3). Returns TRUE for wrap. */
static gboolean
link_arrow (const PsSliceLayout *l, const PsPlatform *p, int link, double *pt)
{
  int chip = link / PS_LINKS_PER_CHIP, dir = link % PS_LINKS_PER_CHIP;
  int Y = p->slice.chips_y;
  int x = chip / Y, y = chip % Y;
  double bx, by, s;
  chip_box (l, x, y, &bx, &by, &s);
  double cx = bx + s / 2, cy = by + s / 2, off = 0.22 * s, gap = 2 * l->pad;
  gboolean wrap = FALSE;
  switch (dir)
    {
    case PS_LINK_X_PLUS:
      pt[0] = bx + s, pt[1] = cy - off, pt[2] = bx + s + gap, pt[3] = cy - off;
      wrap = x == l->chips_x - 1;
      if (wrap)
        {
          double b0x, b0y, s0;
          chip_box (l, 0, y, &b0x, &b0y, &s0);
          pt[4] = b0x - gap, pt[5] = cy - off, pt[6] = b0x, pt[7] = cy - off;
        }
      break;
    case PS_LINK_X_MINUS:
      pt[0] = bx, pt[1] = cy + off, pt[2] = bx - gap, pt[3] = cy + off;
      wrap = x == 0;
      if (wrap)
        {
          double b1x, b1y, s1;
          chip_box (l, l->chips_x - 1, y, &b1x, &b1y, &s1);
          pt[4] = b1x + s1 + gap, pt[5] = cy + off, pt[6] = b1x + s1, pt[7] = cy + off;
        }
      break;
    case PS_LINK_Y_PLUS:
      pt[0] = cx + off, pt[1] = by + s, pt[2] = cx + off, pt[3] = by + s + gap;
      wrap = y == l->chips_y - 1;
      if (wrap)
        {
          double b0x, b0y, s0;
          chip_box (l, x, 0, &b0x, &b0y, &s0);
          pt[4] = cx + off, pt[5] = b0y - gap, pt[6] = cx + off, pt[7] = b0y;
        }
      break;
    case PS_LINK_Y_MINUS:
      pt[0] = cx - off, pt[1] = by, pt[2] = cx - off, pt[3] = by - gap;
      wrap = y == 0;
      if (wrap)
        {
          double b1x, b1y, s1;
          chip_box (l, x, l->chips_y - 1, &b1x, &b1y, &s1);
          pt[4] = cx - off, pt[5] = b1y + s1 + gap, pt[6] = cx - off, pt[7] = b1y + s1;
        }
      break;
    default:
      {
        /* On chip: between the two core squares, above (core 0 to 1) or
         * below (1 to 0) the middle. */
        double dy = dir == PS_LINK_ONCHIP_FROM_CORE0 ? -0.3 * s : 0.3 * s;
        double a = bx + 0.38 * s, b = bx + 0.62 * s;
        if (dir == PS_LINK_ONCHIP_FROM_CORE0)
          pt[0] = a, pt[2] = b;
        else
          pt[0] = b, pt[2] = a;
        pt[1] = pt[3] = cy + dy;
      }
    }
  return wrap;
}

void
ps_slice_layout_link_point (const PsSliceLayout *l, const PsPlatform *p, int link, double *x, double *y)
{
  double pt[8];
  link_arrow (l, p, link, pt);
  *x = (pt[0] + pt[2]) / 2;
  *y = (pt[1] + pt[3]) / 2;
}

void
ps_slice_layout_core_point (const PsSliceLayout *l, const PsPlatform *p, int core, double *x, double *y)
{
  int cx, cy, c;
  ps_slice_core_coords (&p->slice, core, &cx, &cy, &c);
  double bx, by, s;
  chip_box (l, cx, cy, &bx, &by, &s);
  int n = p->slice.cores_per_chip;
  *x = bx + s * (c + 0.5) / n;
  *y = by + s / 2;
}

static void
arrow (cairo_t *cr, double x0, double y0, double x1, double y1, double w, gboolean head)
{
  double dx = x1 - x0, dy = y1 - y0, len = hypot (dx, dy);
  if (len <= 0)
    return;
  double ux = dx / len, uy = dy / len, h = head ? MIN (2.2 * w, 0.45 * len) : 0;
  cairo_set_line_width (cr, w);
  cairo_set_line_cap (cr, CAIRO_LINE_CAP_BUTT);
  cairo_move_to (cr, x0, y0);
  cairo_line_to (cr, x1 - ux * h, y1 - uy * h);
  cairo_stroke (cr);
  if (head)
    {
      cairo_move_to (cr, x1, y1);
      cairo_line_to (cr, x1 - ux * h - uy * h * 0.6, y1 - uy * h + ux * h * 0.6);
      cairo_line_to (cr, x1 - ux * h + uy * h * 0.6, y1 - uy * h - ux * h * 0.6);
      cairo_close_path (cr);
      cairo_fill (cr);
    }
}

/* Chip coordinates (x along the columns, y down the rows, as
 * ps_slice_chip_index numbers them) and the axes' names. */
static void
draw_axes (cairo_t *cr, const PsSliceLayout *l)
{
  double fs = CLAMP (0.3 * l->cell, 9.0, 12.0);
  cairo_set_source_rgb (cr, 0.25, 0.25, 0.25);
  for (int x = 0; x < l->chips_x; x++)
    {
      g_autofree char *t = g_strdup_printf ("%d", x);
      text (cr, l->left + (x + 0.5) * l->cell, l->axis_x_baseline, fs, t, 0.5);
    }
  for (int y = 0; y < l->chips_y; y++)
    {
      g_autofree char *t = g_strdup_printf ("%d", y);
      text (cr, l->axis_y_right, l->top + (y + 0.5) * l->cell + 0.35 * fs, fs, t, 1);
    }
  text (cr, l->left + 0.5 * l->chips_x * l->cell, l->axis_x_baseline + 15, 11, "chip x", 0.5);
  /* "chip y" turned up, left of the widest y number. */
  g_autofree char *widest = g_strdup_printf ("%d", l->chips_y - 1);
  cairo_set_font_size (cr, fs);
  cairo_text_extents_t e;
  cairo_text_extents (cr, widest, &e);
  cairo_save (cr);
  cairo_translate (cr, l->axis_y_right - e.x_advance - 5, l->top + 0.5 * l->chips_y * l->cell);
  cairo_rotate (cr, -G_PI / 2);
  text (cr, 0, 0, 11, "chip y", 0.5);
  cairo_restore (cr);
}

static void
draw_chips (cairo_t *cr, const PsSliceLayout *l, const PsPlatform *p, gboolean cores)
{
  draw_axes (cr, l);
  for (int x = 0; x < l->chips_x; x++)
    for (int y = 0; y < l->chips_y; y++)
      {
        double bx, by, s;
        chip_box (l, x, y, &bx, &by, &s);
        cairo_rectangle (cr, bx, by, s, s);
        cairo_set_source_rgb (cr, 0.95, 0.95, 0.95);
        cairo_fill_preserve (cr);
        cairo_set_source_rgb (cr, 0.55, 0.55, 0.55);
        cairo_set_line_width (cr, 1);
        cairo_stroke (cr);
        if (!cores)
          continue;
        int n = p->slice.cores_per_chip;
        for (int c = 0; c < n; c++)
          {
            double w = 0.22 * s;
            cairo_rectangle (cr, bx + s * (c + 0.5) / n - w / 2, by + s / 2 - w / 2, w, w);
            cairo_set_source_rgb (cr, 0.8, 0.8, 0.8);
            cairo_fill (cr);
          }
      }
}

/* The title at the top left, shrunk to fit the picture's width. */
static void
title_text (cairo_t *cr, const char *title, double width)
{
  const char *t = title ? title : "";
  double size = 14;
  cairo_set_font_size (cr, size);
  cairo_text_extents_t e;
  cairo_text_extents (cr, t, &e);
  if (e.x_advance > width - 20)
    size = MAX (7.0, size * (width - 20) / e.x_advance);
  cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
  text (cr, 10, 20, size, t, 0);
}

/* ---- links ---------------------------------------------------------------------- */

gboolean
ps_picture_links (const PsPlatform *p, const double *link_bytes, double time_s, const char *title,
                  PsPictureFormat f, GString *out, GError **error)
{
  PsSliceLayout l;
  const double legend = 56;
  ps_slice_layout_init (&l, p, legend);
  double max_util = 0;
  for (int k = 0; k < p->n_links; k++)
    if (ps_platform_link_present (p, k) && time_s > 0)
      max_util = MAX (max_util, link_bytes[k] / ps_platform_link_bw (p, k) / time_s);
  Canvas c;
  canvas_begin (&c, f, l.width, l.height, out);
  cairo_t *cr = c.cr;
  title_text (cr, title, l.width);
  draw_chips (cr, &l, p, TRUE);
  /* Idle links first, then loaded ones in order of load, so the hottest
   * arrows are drawn last and never covered. */
  g_autofree int *order = g_new (int, p->n_links);
  int n = 0;
  for (int k = 0; k < p->n_links; k++)
    if (ps_platform_link_present (p, k))
      order[n++] = k;
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && link_bytes[order[j - 1]] / ps_platform_link_bw (p, order[j - 1])
                               > link_bytes[order[j]] / ps_platform_link_bw (p, order[j]); j--)
      {
        int t = order[j];
        order[j] = order[j - 1];
        order[j - 1] = t;
      }
  for (int i = 0; i < n; i++)
    {
      int k = order[i];
      double pt[8];
      gboolean wrap = link_arrow (&l, p, k, pt);
      double util = time_s > 0 ? link_bytes[k] / ps_platform_link_bw (p, k) / time_s : 0;
      double w = k % PS_LINKS_PER_CHIP >= PS_LINK_ONCHIP_FROM_CORE0 ? 0.6 * l.line : l.line;
      if (link_bytes[k] > 0 && max_util > 0)
        {
          double rgb[3];
          ps_picture_colormap (util / max_util, rgb);
          cairo_set_source_rgb (cr, rgb[0], rgb[1], rgb[2]);
        }
      else
        {
          cairo_set_source_rgb (cr, 0.82, 0.82, 0.82);
          w *= 0.5;
        }
      arrow (cr, pt[0], pt[1], pt[2], pt[3], w, !wrap);
      if (wrap)
        arrow (cr, pt[4], pt[5], pt[6], pt[7], w, TRUE);
    }
  /* Legend: the colormap from idle to the hottest link. */
  double lx = 20, ly = l.height - legend + 14, lw = MIN (260.0, l.width - 200), lh = 12;
  for (int i = 0; i < (int) lw; i++)
    {
      double rgb[3];
      ps_picture_colormap (i / (lw - 1), rgb);
      cairo_set_source_rgb (cr, rgb[0], rgb[1], rgb[2]);
      cairo_rectangle (cr, lx + i, ly, 1.5, lh);
      cairo_fill (cr);
    }
  /* Ticks at quarters of the hottest link's utilization, each labelled. */
  cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
  cairo_set_line_width (cr, 1);
  for (int i = 0; i <= 4; i++)
    {
      double tx = floor (lx + (lw - 1) * i / 4.0) + 0.5;
      cairo_move_to (cr, tx, ly + lh);
      cairo_line_to (cr, tx, ly + lh + 4);
      cairo_stroke (cr);
      g_autofree char *t = g_strdup_printf ("%.*f %%", max_util * 25 < 10 ? 1 : 0, 100 * max_util * i / 4.0);
      text (cr, tx, ly + lh + 15, 10, t, i == 0 ? 0 : i == 4 ? 1 : 0.5);
    }
  g_autofree char *hot = g_strdup_printf ("(hottest link %.1f %%)", 100 * max_util);
  text (cr, lx + lw + 20, ly + lh + 15, 10, hot, 0);
  cairo_set_source_rgb (cr, 0.82, 0.82, 0.82);
  cairo_rectangle (cr, lx + lw + 20, ly + 4, 24, 4);
  cairo_fill (cr);
  cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
  text (cr, lx + lw + 50, ly + lh - 1, 11, "idle", 0);
  text (cr, lx, ly - 3, 11, "link utilization (busy time / step):", 0);
  return canvas_end (&c, error);
}

/* ---- groups --------------------------------------------------------------------- */

gboolean
ps_picture_groups (const PsPlatform *p, const PsCollPlan *plan, const int *device_of_core, const char *title,
                   PsPictureFormat f, GString *out, GError **error)
{
  PsSliceLayout l;
  ps_slice_layout_init (&l, p, 36);
  Canvas c;
  canvas_begin (&c, f, l.width, l.height, out);
  cairo_t *cr = c.cr;
  title_text (cr, title, l.width);
  draw_chips (cr, &l, p, FALSE);
  int n_cores = ps_slice_n_cores (&p->slice);
  double s = l.cell - 2 * l.pad;
  double w = 0.9 * s / p->slice.cores_per_chip;
  for (int core = 0; core < n_cores; core++)
    {
      double x, y, rgb[3] = { 0.85, 0.85, 0.85 };
      ps_slice_layout_core_point (&l, p, core, &x, &y);
      int g = plan->group_of_core[core];
      if (g >= 0)
        group_color (g, rgb);
      cairo_rectangle (cr, x - w / 2, y - w / 2, w, w);
      cairo_set_source_rgb (cr, rgb[0], rgb[1], rgb[2]);
      cairo_fill (cr);
    }
  /* Ring transfers as arcs bulging to the left of their direction, so the
   * two directions of a bidirectional ring stay apart. */
  for (int g = 0; g < plan->n_groups; g++)
    {
      double rgb[3];
      group_color (g, rgb);
      cairo_set_source_rgba (cr, rgb[0] * 0.55, rgb[1] * 0.55, rgb[2] * 0.55, 0.8);
      GPtrArray *phases = plan->groups[g].phases;
      for (guint ph = 0; ph < phases->len; ph++)
        {
          PsPhase *phase = phases->pdata[ph];
          for (guint i = 0; i < phase->flows->len; i++)
            {
              PsFlow *fl = &g_array_index (phase->flows, PsFlow, i);
              double x0, y0, x1, y1;
              ps_slice_layout_core_point (&l, p, fl->src_core, &x0, &y0);
              ps_slice_layout_core_point (&l, p, fl->dst_core, &x1, &y1);
              double dx = x1 - x0, dy = y1 - y0, len = hypot (dx, dy);
              if (len <= 0)
                continue;
              double bulge = MIN (0.18 * len, 0.25 * l.cell);
              double mx = (x0 + x1) / 2 + dy / len * bulge, my = (y0 + y1) / 2 - dx / len * bulge;
              double lw = MAX (1.0, 0.018 * l.cell);
              /* From the edge of the source's square to the edge of the
               * destination's (along the curve's end tangents), so the
               * head is not hidden under the device id drawn on top. */
              double tx = x1 - mx, ty = y1 - my, tl = hypot (tx, ty), h = MAX (6.0, 4 * lw);
              double sx = mx - x0, sy = my - y0, sl = hypot (sx, sy), inset = 0.5 * w + 1;
              if (sl > 0)
                x0 += sx / sl * inset, y0 += sy / sl * inset;
              if (tl > 0)
                x1 -= tx / tl * inset, y1 -= ty / tl * inset;
              cairo_set_line_width (cr, lw);
              cairo_move_to (cr, x0, y0);
              cairo_curve_to (cr, mx, my, mx, my, x1, y1);
              cairo_stroke (cr);
              /* Head at the end, along the curve's last tangent. */
              if (tl > 0)
                {
                  tx /= tl, ty /= tl;
                  cairo_move_to (cr, x1, y1);
                  cairo_line_to (cr, x1 - tx * h - ty * h * 0.5, y1 - ty * h + tx * h * 0.5);
                  cairo_line_to (cr, x1 - tx * h + ty * h * 0.5, y1 - ty * h - tx * h * 0.5);
                  cairo_close_path (cr);
                  cairo_fill (cr);
                }
            }
        }
    }
  /* Device ids on top of the arrows, on a white patch. */
  double fs = MIN (w * 0.45, 12.0);
  for (int core = 0; fs >= 6 && core < n_cores; core++)
    {
      double x, y;
      ps_slice_layout_core_point (&l, p, core, &x, &y);
      g_autofree char *id = g_strdup_printf ("%d", device_of_core ? device_of_core[core] : core);
      cairo_set_font_size (cr, fs);
      cairo_text_extents_t e;
      cairo_text_extents (cr, id, &e);
      cairo_set_source_rgba (cr, 1, 1, 1, 0.85);
      cairo_rectangle (cr, x - e.x_advance / 2 - 1, y - fs * 0.45, e.x_advance + 2, fs * 0.95);
      cairo_fill (cr);
      cairo_set_source_rgb (cr, 0.05, 0.05, 0.05);
      text (cr, x, y + fs * 0.35, fs, id, 0.5);
    }
  cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
  g_autofree char *legend = g_strdup_printf ("%d group%s of %d; colors: groups; arrows: the transfers "
                                             "the simulator plans (rings)", plan->n_groups,
                                             plan->n_groups == 1 ? "" : "s", plan->group_size);
  text (cr, 10, l.height - 14, 11, legend, 0);
  return canvas_end (&c, error);
}

/* ---- breakdown bars ------------------------------------------------------------- */

static void
seg_color (int k, double rgb[3])
{
  static const double colors[3][3] = { { 0.30, 0.47, 0.65 }, { 0.88, 0.34, 0.35 }, { 0.75, 0.75, 0.75 } };
  memcpy (rgb, colors[k], sizeof colors[k]);
}

/* A time axis tick, in the unit of the tick spacing: "2 s", "500 ms". */
static char *
tick_label (double v, double tick)
{
  static const struct { double scale; const char *unit; } units[] = {
    { 1, "s" }, { 1e3, "ms" }, { 1e6, "us" }, { 1e9, "ns" } };
  gsize i = 0;
  while (i + 1 < G_N_ELEMENTS (units) && tick * units[i].scale < 1 - 1e-9)
    i++;
  return g_strdup_printf ("%.6g %s", v * units[i].scale, units[i].unit);
}

gboolean
ps_picture_breakdown (const PsBreakdownRow *rows, int n, const char *title, PsPictureFormat f, GString *out,
                      GError **error)
{
  const double label_w = 220, bar_w = 540, row_h = 46, top = 40, legend = 50, axis = 30;
  double width = label_w + bar_w + 150, height = top + n * row_h + axis + legend;
  double max_t = 0;
  for (int i = 0; i < n; i++)
    max_t = MAX (max_t, MAX (rows[i].compute_s + rows[i].exposed_s + rows[i].idle_s, rows[i].published_step_s));
  if (!(max_t > 0))
    max_t = 1;
  Canvas c;
  canvas_begin (&c, f, width, height, out);
  cairo_t *cr = c.cr;
  title_text (cr, title, width);
  for (int i = 0; i < n; i++)
    {
      double y = top + i * row_h;
      cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
      cairo_set_font_size (cr, 11);
      cairo_text_extents_t e;
      cairo_text_extents (cr, rows[i].label, &e);
      double fs = e.x_advance > label_w - 16 ? MAX (6.0, 11 * (label_w - 16) / e.x_advance) : 11;
      text (cr, label_w - 8, y + 15, fs, rows[i].label, 1);
      double v[3] = { rows[i].compute_s, rows[i].exposed_s, rows[i].idle_s }, x = label_w;
      for (int k = 0; k < 3; k++)
        {
          double rgb[3], w = bar_w * v[k] / max_t;
          seg_color (k, rgb);
          cairo_set_source_rgb (cr, rgb[0], rgb[1], rgb[2]);
          cairo_rectangle (cr, x, y + 4, w, 16);
          cairo_fill (cr);
          x += w;
        }
      g_autofree char *sim = ps_format_seconds (v[0] + v[1] + v[2]);
      cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
      text (cr, x + 4, y + 16, 10, sim, 0);
      if (rows[i].published_step_s > 0)
        {
          double w = bar_w * rows[i].published_step_s / max_t;
          cairo_set_source_rgb (cr, 0.35, 0.35, 0.35);
          cairo_rectangle (cr, label_w, y + 24, w, 7);
          cairo_fill (cr);
          g_autofree char *pub = ps_format_seconds (rows[i].published_step_s);
          g_autofree char *lab = g_strdup_printf ("published %s", pub);
          text (cr, label_w + w + 4, y + 32, 10, lab, 0);
        }
    }
  /* A time axis under the bars: ticks at 1, 2 or 5 times a power of ten. */
  double ay = top + n * row_h + 4, unit = pow (10, floor (log10 (max_t / 4)));
  double tick = max_t / unit / 4 > 5 ? 10 * unit : max_t / unit / 4 > 2 ? 5 * unit : max_t / unit / 4 > 1 ? 2 * unit : unit;
  cairo_set_source_rgb (cr, 0.25, 0.25, 0.25);
  cairo_set_line_width (cr, 1);
  cairo_move_to (cr, label_w, ay + 0.5);
  cairo_line_to (cr, label_w + bar_w, ay + 0.5);
  cairo_stroke (cr);
  for (int i = 0; i * tick <= max_t * (1 + 1e-9); i++)
    {
      double tx = label_w + bar_w * i * tick / max_t;
      cairo_move_to (cr, tx + 0.5, ay);
      cairo_line_to (cr, tx + 0.5, ay + 5);
      cairo_stroke (cr);
      g_autofree char *t = i == 0 ? g_strdup ("0") : tick_label (i * tick, tick);
      text (cr, tx, ay + 17, 10, t, 0.5);
    }
  const char *names[] = { "compute", "exposed communication", "idle" };
  double lx = label_w;
  for (int k = 0; k < 3; k++)
    {
      double rgb[3];
      seg_color (k, rgb);
      cairo_set_source_rgb (cr, rgb[0], rgb[1], rgb[2]);
      cairo_rectangle (cr, lx, height - legend + 18, 14, 10);
      cairo_fill (cr);
      cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
      text (cr, lx + 18, height - legend + 27, 11, names[k], 0);
      lx += 40 + 7 * strlen (names[k]);
    }
  cairo_set_source_rgb (cr, 0.35, 0.35, 0.35);
  cairo_rectangle (cr, lx, height - legend + 20, 14, 6);
  cairo_fill (cr);
  cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
  text (cr, lx + 18, height - legend + 27, 11, "published step", 0);
  text (cr, label_w, height - 8, 10, "simulated step per core (means over cores); published: items per step / "
        "published throughput", 0);
  return canvas_end (&c, error);
}

/* ---- scaling curves ------------------------------------------------------------- */

static int
cmp_cores (gconstpointer a, gconstpointer b)
{
  const PsScalingPoint *x = a, *y = b;
  return x->cores < y->cores ? -1 : x->cores > y->cores;
}

/* One panel: x log2(cores), y log10 (log) or linear. */
static void
panel (cairo_t *cr, const PsScalingPoint *pts, int n, double x0, double y0, double w, double h, gboolean log_y,
       gboolean utilization, const char *ylabel, double xmin, double xmax)
{
  double ymin = G_MAXDOUBLE, ymax = 0;
  for (int i = 0; i < n; i++)
    {
      double v[2] = { utilization ? 100 * pts[i].utilization : pts[i].throughput, utilization ? 0 : pts[i].published };
      for (int k = 0; k < 2; k++)
        if (v[k] > 0)
          {
            ymin = MIN (ymin, v[k]);
            ymax = MAX (ymax, v[k]);
          }
    }
  if (ymax <= 0)
    ymin = 1, ymax = 10;
  if (log_y)
    {
      ymin = pow (10, floor (log10 (ymin)));
      ymax = pow (10, ceil (log10 (ymax)));
      if (ymax <= ymin)
        ymax = ymin * 10;
    }
  else
    ymin = 0, ymax = utilization ? MAX (100.0 * ceil (ymax / 100 * 10) / 10, 10.0) : ymax * 1.1;
  double lxmin = log2 (xmin), lxmax = log2 (xmax);
  if (lxmax <= lxmin)
    lxmin -= 1, lxmax += 1;
#define PX(c) (x0 + w * (log2 (c) - lxmin) / (lxmax - lxmin))
#define PY(v) (log_y ? y0 + h - h * (log10 (v) - log10 (ymin)) / (log10 (ymax) - log10 (ymin)) \
                     : y0 + h - h * ((v) - ymin) / (ymax - ymin))
  cairo_set_source_rgb (cr, 0.5, 0.5, 0.5);
  cairo_set_line_width (cr, 1);
  cairo_rectangle (cr, x0, y0, w, h);
  cairo_stroke (cr);
  cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
  text (cr, x0, y0 - 6, 11, ylabel, 0);
  char buf[64];
  if (log_y)
    for (double v = ymin; v <= ymax * 1.0001; v *= 10)
      {
        g_snprintf (buf, sizeof buf, "%g", v);
        text (cr, x0 - 4, PY (v) + 4, 10, buf, 1);
      }
  else
    for (int k = 0; k <= 4; k++)
      {
        double v = ymin + (ymax - ymin) * k / 4;
        g_snprintf (buf, sizeof buf, "%.3g", v);
        text (cr, x0 - 4, PY (v) + 4, 10, buf, 1);
      }
  for (int i = 0; i < n; i++)
    if (i == 0 || pts[i].cores != pts[i - 1].cores)
      {
        g_snprintf (buf, sizeof buf, "%g", pts[i].cores);
        text (cr, PX (pts[i].cores), y0 + h + 14, 10, buf, 0.5);
      }
  for (int series = 0; series < (utilization ? 1 : 2); series++)
    {
      gboolean pub = series == 1;
      double rgb[3];
      seg_color (pub ? 1 : 0, rgb);
      cairo_set_source_rgb (cr, rgb[0], rgb[1], rgb[2]);
      gboolean started = FALSE;
      for (int i = 0; i < n; i++)
        {
          double v = utilization ? 100 * pts[i].utilization : pub ? pts[i].published : pts[i].throughput;
          if (!(v > 0))
            continue;
          if (!started)
            cairo_move_to (cr, PX (pts[i].cores), PY (v));
          else
            cairo_line_to (cr, PX (pts[i].cores), PY (v));
          started = TRUE;
        }
      cairo_set_line_width (cr, 1.5);
      cairo_stroke (cr);
      for (int i = 0; i < n; i++)
        {
          double v = utilization ? 100 * pts[i].utilization : pub ? pts[i].published : pts[i].throughput;
          if (!(v > 0))
            continue;
          if (pub)
            cairo_rectangle (cr, PX (pts[i].cores) - 4, PY (v) - 4, 8, 8);
          else
            cairo_arc (cr, PX (pts[i].cores), PY (v), 4, 0, 2 * G_PI);
          cairo_fill (cr);
          if (!pub)
            {
              cairo_set_source_rgb (cr, 0.2, 0.2, 0.2);
              text (cr, PX (pts[i].cores) + 6, PY (v) - 6, 9, pts[i].label, 0);
              cairo_set_source_rgb (cr, rgb[0], rgb[1], rgb[2]);
            }
        }
    }
#undef PX
#undef PY
}

gboolean
ps_picture_scaling (const PsScalingPoint *pts_in, int n, const char *unit, const char *title, PsPictureFormat f,
                    GString *out, GError **error)
{
  g_autofree PsScalingPoint *pts = g_memdup2 (pts_in, sizeof *pts * (gsize) MAX (n, 1));
  qsort (pts, (size_t) n, sizeof *pts, cmp_cores);
  double xmin = n ? pts[0].cores : 1, xmax = n ? pts[n - 1].cores : 2;
  const double width = 840, height = 620, x0 = 90, w = 560, h = 220;
  Canvas c;
  canvas_begin (&c, f, width, height, out);
  cairo_t *cr = c.cr;
  title_text (cr, title, width);
  g_autofree char *yl = g_strdup_printf ("throughput (%s/s): simulated (circles) and published (squares)", unit);
  panel (cr, pts, n, x0, 60, w, h, TRUE, FALSE, yl, xmin, xmax);
  panel (cr, pts, n, x0, 60 + h + 70, w, h, FALSE, TRUE, "MXU utilization (%), simulated", xmin, xmax);
  cairo_set_source_rgb (cr, 0.1, 0.1, 0.1);
  text (cr, x0 + w / 2, height - 12, 11, "TensorCores (log scale)", 0.5);
  return canvas_end (&c, error);
}
