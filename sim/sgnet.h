/* A thin C interface to the SimGrid engine for the rest of sim/: one engine
 * per process, configured as a dedicated fabric, with a platform built from a
 * topology/platform.h description, and the few s4u calls the collectives and
 * the replay need (actors, sleeps, host-to-host transfers, semaphores).
 *
 * The platform is one SimGrid host per TensorCore and one SimGrid link per
 * directed link of the PsPlatform. Routes come from ps_platform_route() via a
 * small custom NetZone, because SimGrid's TORUS cluster always has wrap links
 * and has no on-chip path; the one zone type serves torus, mesh and the
 * partial tori (v3-1024) alike.
 *
 * Network model: CM02 (max-min sharing of link bandwidth), no cross-traffic,
 * TCP-gamma 1e30 (SimGrid's default window silently caps multi-hop flows),
 * latency and bandwidth factors 1, weight-S 0; logs quiet. Links have zero
 * latency in SimGrid: CM02 weighs a flow's share by its route latency (TCP
 * RTT unfairness), so with latencies every multi-hop flow would get less than
 * its max-min share; sim/collectives.c adds route latencies analytically.
 *
 * SimGrid allows one engine per process: ps_sgnet_new() may be called once;
 * ps_sgnet_run() may be called several times (the clock keeps running), which
 * is how the replay simulates its collective cache before the step.
 *
 * All functions except ps_sgnet_new/free/run/spawn must be called from inside
 * an actor. Ownership: the PsSgNet borrows the PsPlatform (transfer none, it
 * must outlive the net); comms and semaphores are transfer full.
 */
#ifndef PS_SIM_SGNET_H
#define PS_SIM_SGNET_H

#include <glib.h>

#include "topology/platform.h"

G_BEGIN_DECLS

typedef struct PsSgNet PsSgNet;
typedef struct PsSgComm PsSgComm;
typedef struct PsSgSem PsSgSem;

typedef void (*PsSgActorFn) (void *data);

/* FALSE when an engine already exists in this process. transfer full. */
PsSgNet *ps_sgnet_new (const PsPlatform *platform, GError **error);
void ps_sgnet_free (PsSgNet *net);

/* Starts an actor on the host of `core`. `name` is copied. */
void ps_sgnet_spawn (PsSgNet *net, int core, const char *name, PsSgActorFn fn, void *data);
/* Same, from inside an actor, returning a handle to wait for it with
 * ps_sgnet_join() (which releases the handle). */
typedef struct PsSgActor PsSgActor;
PsSgActor *ps_sgnet_spawn_joinable (PsSgNet *net, int core, const char *name, PsSgActorFn fn,
                                    void *data);
void ps_sgnet_join (PsSgActor *actor);
/* Runs until every actor has finished. */
void ps_sgnet_run (PsSgNet *net);

double ps_sgnet_clock (void);
/* Lets the other runnable actors run; simulated time does not advance while
 * any actor is runnable. */
void ps_sgnet_yield (void);
void ps_sgnet_sleep (double seconds);

/* Starts a transfer of `bytes` from the host of src_core to that of
 * dst_core, routed on the platform's links. src_core != dst_core. The
 * calling actor moves to src_core's host (the transfer leaves from its
 * sender's host; see sgnet.cpp for why it is not Comm::sendto_async).
 * transfer full: ps_sgnet_wait_all() frees it. */
PsSgComm *ps_sgnet_send_async (PsSgNet *net, int src_core, int dst_core, double bytes);
/* Whether the next transfers go through the per-core mailboxes (on) or
 * Comm::sendto_async (off, the default). Both give the same start, route
 * and max-min variable, so the same times; mailboxes cost a receiver actor
 * per destination core and run, and pay off only with thousands of
 * transfers in flight (a cluster of overlapping collectives: sgnet.cpp). */
void ps_sgnet_set_mailboxes (PsSgNet *net, int on);
/* Waits for all comms and frees them. */
void ps_sgnet_wait_all (PsSgComm **comms, gsize n);

PsSgSem *ps_sgnet_sem_new (int initial);
void ps_sgnet_sem_acquire (PsSgSem *sem);
void ps_sgnet_sem_release (PsSgSem *sem);
void ps_sgnet_sem_free (PsSgSem *sem);

G_END_DECLS

#endif
