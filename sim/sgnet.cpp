// SimGrid glue; see sgnet.h. The only C++ file of podsim: the C API of
// SimGrid 3.32 has no platform creation, no custom routing and no
// host-to-host transfers.
#include "config.h"

#include <simgrid/kernel/routing/NetPoint.hpp>
#include <simgrid/kernel/routing/NetZoneImpl.hpp>
#include <simgrid/s4u.hpp>
#include <xbt/log.h>

#include <string>
#include <vector>

#include "sim/sgnet.h"

namespace sg4 = simgrid::s4u;
namespace sgr = simgrid::kernel::routing;

namespace {

// Routes between hosts of this zone come from ps_platform_route(), so the
// simulator and the link statistics share one definition of a route.
class PodZone : public sgr::NetZoneImpl
{
public:
  explicit PodZone (const std::string &name, const PsPlatform *p) : sgr::NetZoneImpl (name), platform_ (p)
  {
    route_buf_.resize ((size_t) ps_platform_max_route_links (p));
  }

  void
  get_local_route (const sgr::NetPoint *src, const sgr::NetPoint *dst, sgr::Route *into,
                   double *latency) override
  {
    int a = core_of_netpoint_.at (src->id ());
    int b = core_of_netpoint_.at (dst->id ());
    int n = ps_platform_route (platform_, a, b, route_buf_.data (), nullptr);
    for (int i = 0; i < n; i++)
      into->link_list_.push_back (links_[(size_t) route_buf_[(size_t) i]]->get_impl ());
    // No latency: see the header (latency is added per phase by sim/).
    (void) latency;
  }

  const PsPlatform *platform_;
  std::vector<int> core_of_netpoint_;
  std::vector<sg4::Link *> links_;
  std::vector<int> route_buf_;
};

bool engine_created = false;

} // namespace

// Transfers go through mailboxes, one per core, whose permanent receiver
// is a daemon actor on that core's host: a put to such a mailbox starts at
// once, from the sending actor's host (the sender moves to the source core
// first) to the receiver's, on the same route and with the same max-min
// variable as Comm::sendto_async. sendto_async would be simpler, but
// SimGrid 3.32 detaches every host-to-host comm and keeps it in the
// maestro's std::list of activities, which CommImpl::finish() searches
// from end to end on every completion: with thousands of transfers in
// flight (a cluster of overlapping pod-wide collectives) that search was
// about 75 % of the replay's CPU time (perf: std::list::remove under
// CommImpl::finish). A put's comm is in its sender's list only, and
// senders hold at most FLOWS_PER_SENDER (sim/collectives.c).
struct PsSgNet
{
  sg4::Engine *engine;
  std::vector<sg4::Host *> hosts;
  std::vector<sg4::Mailbox *> rx;   // per core
  std::vector<char> rx_live;        // a receiver serves rx[core] in this run
  std::vector<int> rx_used;         // the cores whose receivers this run made
  sg4::SemaphorePtr never;          // receivers block on it until killed
  bool mailboxes = false;           // ps_sgnet_set_mailboxes
};

struct PsSgComm
{
  sg4::CommPtr comm;
};

struct PsSgActor
{
  sg4::ActorPtr actor;
};

struct PsSgSem
{
  sg4::SemaphorePtr sem;
};

extern "C" PsSgNet *
ps_sgnet_new (const PsPlatform *p, GError **error)
{
  if (engine_created)
    {
      g_set_error (error, PS_ERROR, PS_ERROR_UNSUPPORTED,
                   "only one SimGrid engine per process");
      return nullptr;
    }
  engine_created = true;
  static int argc = 1;
  static char arg0[] = "podsim";
  static char *argv_store[] = { arg0, nullptr };
  char **argv = argv_store;
  auto *net = new PsSgNet;
  net->engine = new sg4::Engine (&argc, argv);
  xbt_log_control_set ("root.thresh:critical");
  sg4::Engine::set_config ("network/model:CM02");
  sg4::Engine::set_config ("network/crosstraffic:0");
  sg4::Engine::set_config ("network/TCP-gamma:1e30");
  sg4::Engine::set_config ("network/latency-factor:1");
  sg4::Engine::set_config ("network/bandwidth-factor:1");
  sg4::Engine::set_config ("network/weight-S:0");

  auto *zone = new PodZone ("pod", p);
  int n_cores = ps_slice_n_cores (&p->slice);
  for (int c = 0; c < n_cores; c++)
    {
      sg4::Host *h = zone->create_host ("core" + std::to_string (c), std::vector<double>{ 1e9 });
      h->seal ();
      unsigned long id = h->get_netpoint ()->id ();
      if (zone->core_of_netpoint_.size () <= id)
        zone->core_of_netpoint_.resize (id + 1, -1);
      zone->core_of_netpoint_[id] = c;
      net->hosts.push_back (h);
      net->rx.push_back (sg4::Mailbox::by_name ("rx" + std::to_string (c)));
    }
  net->rx_live.assign ((size_t) n_cores, 0);
  net->never = sg4::Semaphore::create (0);
  zone->links_.assign ((size_t) p->n_links, nullptr);
  for (int l = 0; l < p->n_links; l++)
    {
      if (!ps_platform_link_present (p, l))
        continue;
      char *name = ps_platform_link_name (p, l);
      sg4::Link *link = zone->create_link (name, std::vector<double>{ ps_platform_link_bw (p, l) });
      g_free (name);
      link->set_latency (0);
      link->seal ();
      zone->links_[(size_t) l] = link;
    }
  zone->seal ();
  return net;
}

extern "C" void
ps_sgnet_free (PsSgNet *net)
{
  // The engine lives until the process exits: SimGrid cannot be restarted.
  delete net;
}

extern "C" void
ps_sgnet_spawn (PsSgNet *net, int core, const char *name, PsSgActorFn fn, void *data)
{
  sg4::Actor::create (name, net->hosts.at ((size_t) core), [fn, data] () { fn (data); });
}

extern "C" PsSgActor *
ps_sgnet_spawn_joinable (PsSgNet *net, int core, const char *name, PsSgActorFn fn, void *data)
{
  auto *a = new PsSgActor;
  a->actor = sg4::Actor::create (name, net->hosts.at ((size_t) core), [fn, data] () { fn (data); });
  return a;
}

extern "C" void
ps_sgnet_join (PsSgActor *actor)
{
  actor->actor->join ();
  delete actor;
}

extern "C" void
ps_sgnet_run (PsSgNet *net)
{
  net->engine->run ();
  // The receivers were daemons and died with the run; their mailboxes
  // still hold every comm they received (finished: clear() only frees
  // them).
  for (int c : net->rx_used)
    {
      net->rx[(size_t) c]->clear ();
      net->rx_live[(size_t) c] = 0;
    }
  net->rx_used.clear ();
}

extern "C" double
ps_sgnet_clock (void)
{
  return sg4::Engine::get_clock ();
}

extern "C" void
ps_sgnet_yield (void)
{
  sg4::this_actor::yield ();
}

extern "C" void
ps_sgnet_sleep (double seconds)
{
  if (seconds > 0)
    sg4::this_actor::sleep_for (seconds);
}

extern "C" PsSgComm *
ps_sgnet_send_async (PsSgNet *net, int src_core, int dst_core, double bytes)
{
  static char payload;
  sg4::Host *src = net->hosts.at ((size_t) src_core);
  if (!net->mailboxes)
    {
      auto *c = new PsSgComm;
      c->comm = sg4::Comm::sendto_async (src, net->hosts.at ((size_t) dst_core), (uint64_t) bytes);
      return c;
    }
  if (!net->rx_live.at ((size_t) dst_core))
    {
      sg4::SemaphorePtr never = net->never;
      sg4::ActorPtr r = sg4::Actor::create ("rx", net->hosts.at ((size_t) dst_core),
                                            [never] () { never->acquire (); });
      r->daemonize ();
      net->rx[(size_t) dst_core]->set_receiver (r);
      net->rx_live[(size_t) dst_core] = 1;
      net->rx_used.push_back (dst_core);
    }
  sg4::Actor *self = sg4::Actor::self ();
  if (self->get_host () != src)
    self->set_host (src);
  auto *c = new PsSgComm;
  c->comm = net->rx[(size_t) dst_core]->put_async (&payload, (uint64_t) bytes);
  return c;
}

extern "C" void
ps_sgnet_set_mailboxes (PsSgNet *net, int on)
{
  net->mailboxes = on != 0;
}

extern "C" void
ps_sgnet_wait_all (PsSgComm **comms, gsize n)
{
  // One wait after the other: Comm::wait_all() goes through wait_any and
  // costs O(n) per completion, O(n^2) for the thousands of transfers of a
  // pod-wide phase.
  for (gsize i = 0; i < n; i++)
    {
      comms[i]->comm->wait ();
      delete comms[i];
    }
}

extern "C" PsSgSem *
ps_sgnet_sem_new (int initial)
{
  auto *s = new PsSgSem;
  s->sem = sg4::Semaphore::create ((unsigned) initial);
  return s;
}

extern "C" void
ps_sgnet_sem_acquire (PsSgSem *sem)
{
  sem->sem->acquire ();
}

extern "C" void
ps_sgnet_sem_release (PsSgSem *sem)
{
  sem->sem->release ();
}

extern "C" void
ps_sgnet_sem_free (PsSgSem *sem)
{
  delete sem;
}
