/* TPU v3 pod slices: chip grids, wrap links and device assignment.
 *
 * A slice ("v3-512") is a grid of chips_x x chips_y chips (tpuv3.md), each
 * chip holding cores_per_chip TensorCores. A dimension has wrap-around links
 * only when it spans the full pod (32 chips): smaller slices are 2-D meshes
 * (Lingvo's GetNonPod2dMesh comments, MLPerf v0.7 system descriptions).
 * `--wrap on|off` overrides that for what-if studies.
 *
 * Cores are numbered globally as core = (x * chips_y + y) * cores_per_chip + c,
 * which is also the default device assignment: logical device id d runs on
 * global core d. This is the order Lingvo's GetNonPod2dMesh assumes when it
 * reshapes np.arange(devices) to the physical shape [x, y, cores], so device
 * orders written in a trace (arange, arange_T, nonpod2d, lists; see
 * traces/trace.h) mean what they mean on real hardware. An explicit list
 * assignment replaces the default.
 *
 * Usage:
 *   g_autoptr (PsSlice) s = ps_slice_new ("v3-512", PS_WRAP_AUTO, 2, &error);
 *   int x, y, c; ps_slice_core_coords (s, core, &x, &y, &c);
 *
 * Ownership: PsSlice and PsDeviceAssignment are transfer full from their
 * constructors; free with ps_slice_free / ps_device_assignment_free.
 */
#ifndef PS_TOPOLOGY_SLICE_H
#define PS_TOPOLOGY_SLICE_H

#include <glib.h>
#include "common/params.h"

#include "common/error.h"

G_BEGIN_DECLS

/* Chips along one side of a full TPU v3 pod (32x32 chips, tpuv3.md). */
#define PS_POD_SIDE_CHIPS 32

typedef enum {
  PS_WRAP_AUTO, /* wrap links only on dimensions spanning the full pod */
  PS_WRAP_ON,   /* wrap links on every dimension of 3 chips or more */
  PS_WRAP_OFF,  /* a mesh: no wrap links at all */
} PsWrapMode;

typedef struct {
  char *name;          /* "v3-512" */
  int chips_x, chips_y;
  int cores_per_chip;
  gboolean wrap_x, wrap_y;
} PsSlice;

/* "auto" | "on" | "off". FALSE with a PS_ERROR_OPTION error otherwise. */
/* The options this module reads, as a run's model file and command line
 * declare them (common/params.h): [slice] slice and wrap. */
extern const PsParamSpec ps_slice_param_slice;
extern const PsParamSpec ps_slice_param_wrap;

gboolean ps_wrap_mode_parse (const char *text, PsWrapMode *out, GError **error);
const char *ps_wrap_mode_name (PsWrapMode mode);

/* Looks up a published slice ("v3-8" .. "v3-2048"). An unknown name is a
 * PS_ERROR_OPTION error listing the known ones. cores_per_chip comes from the
 * hardware file (2 on TPU v3). transfer full. */
PsSlice *ps_slice_new (const char *name, PsWrapMode wrap, int cores_per_chip,
                       GError **error);
void ps_slice_free (PsSlice *slice);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsSlice, ps_slice_free)

/* The known slice names, NULL-terminated. transfer none. */
const char *const *ps_slice_names (void);

int ps_slice_n_chips (const PsSlice *slice);
int ps_slice_n_cores (const PsSlice *slice);
int ps_slice_chip_index (const PsSlice *slice, int x, int y);
void ps_slice_core_coords (const PsSlice *slice, int core, int *x, int *y, int *c);
int ps_slice_core_index (const PsSlice *slice, int x, int y, int c);

/* ---- device assignment ---------------------------------------------------- */

typedef struct {
  int n_devices;
  int *core_of_device;   /* logical device id -> global core, owned */
} PsDeviceAssignment;

/* The default assignment (device d on core d) for n_devices devices. A trace
 * with more devices than the slice has cores is a PS_ERROR_INVALID error
 * naming both. transfer full. */
PsDeviceAssignment *ps_device_assignment_default (const PsSlice *slice, int n_devices,
                                                  GError **error);
/* An explicit assignment: text is a comma-separated list of global cores, or
 * of "x:y:c" triples, one per device id. Each core at most once.
 * transfer full. */
PsDeviceAssignment *ps_device_assignment_parse (const PsSlice *slice, const char *text,
                                                GError **error);
void ps_device_assignment_free (PsDeviceAssignment *a);
G_DEFINE_AUTOPTR_CLEANUP_FUNC (PsDeviceAssignment, ps_device_assignment_free)

G_END_DECLS

#endif
