// launch::init / finalize / run (launch.h).
#include <troupe/launch/launch.h>

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <troupe/comm/local.h>
#include <troupe/tensor/ops.h>
#ifdef TROUPE_HAVE_MPI
#include <troupe/comm/mpi.h>
#endif
#ifdef TROUPE_HAVE_NCCL
#include <troupe/comm/nccl.h>
#endif
#ifdef TROUPE_HAVE_ACTORS
#include <troupe/actors/runtime.h>
#endif
#ifdef TROUPE_HAVE_DASHBOARD
#include <troupe/launch/dashboard.h>
#endif

namespace troupe::launch {
namespace {

std::mutex g_mu;
bool g_inited = false;
bool g_finalized = false;
bool g_uses_mpi = false;
Context g_ctx;
std::mutex g_print_mu;

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

/// argv[0] without its directory, for one-line errors ("swa_actor: ...").
std::string program_name(char** argv) {
  std::string p = argv && argv[0] ? argv[0] : "troupe";
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

void announce(const Context& c) {
  std::lock_guard<std::mutex> g(g_print_mu);
  std::printf("[troupe] rank %d/%d backend %s device %s host %s\n", c.rank, c.size, c.backend.c_str(),
              c.device.str().c_str(), c.host.c_str());
  std::fflush(stdout);
}

void finalize_at_exit() { finalize(); }

/// TROUPE_ACTORS=0 leaves the actor system off.
bool actors_wanted() {
#ifdef TROUPE_HAVE_ACTORS
  const char* v = std::getenv("TROUPE_ACTORS");
  return !(v && std::strcmp(v, "0") == 0);
#else
  return false;
#endif
}

#ifdef TROUPE_HAVE_ACTORS
/// Finalizes when the main thread's thread-local objects are destroyed, which is before any atexit
/// handler runs: CAF keeps per-thread caches of message memory, and stopping the actor system after
/// the main thread's cache is gone (from the atexit handler) corrupts the heap. Made after the main
/// thread has sent a message, so CAF's cache exists already and outlives this guard.
struct FinalizeGuard {
  ~FinalizeGuard() { finalize(); }
};

void finalize_before_main_thread_ends(actors::Runtime& rt) {
  if (getpid() != static_cast<pid_t>(gettid())) return;  // not the main thread: the atexit handler does it
  rt.service(rt.rank()).request<int64_t>("ping").get();
  static thread_local FinalizeGuard guard;
  (void)&guard;
}
#endif

/// Stops the process's actor system (if one runs) on scope exit.
struct StopActors {
  ~StopActors() {
#ifdef TROUPE_HAVE_ACTORS
    actors::stop();
#endif
  }
};

/// Takes --ranks N / --ranks=N out of argv (in place); 0 when absent.
int take_ranks_flag(int& argc, char** argv) {
  int ranks = 0;
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* value = nullptr;
    if (std::strcmp(a, "--ranks") == 0) {
      if (i + 1 >= argc) throw std::invalid_argument("[launch::run] --ranks needs a value (a number of ranks)");
      value = argv[++i];
    } else if (std::strncmp(a, "--ranks=", 8) == 0) {
      value = a + 8;
    } else {
      argv[out++] = argv[i];
      continue;
    }
    char* end = nullptr;
    long n = std::strtol(value, &end, 10);
    if (end == value || *end != '\0' || n < 1 || n > 4096) {
      throw std::invalid_argument(std::string("[launch::run] --ranks needs a number of ranks in [1, 4096], got '") +
                                  value + "'");
    }
    ranks = static_cast<int>(n);
  }
  if (out < argc) argv[out] = nullptr;
  argc = out;
  return ranks;
}

/// --dashboard's value when given (take_dashboard_flag takes it out of argv).
std::optional<std::string> g_dashboard_flag;

/// Takes --dashboard V / --dashboard=V out of argv (in place) into g_dashboard_flag, checking V.
void take_dashboard_flag(int& argc, char** argv) {
  int out = 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strcmp(a, "--dashboard") == 0) {
      if (i + 1 >= argc) throw std::invalid_argument("[launch] --dashboard needs a value (PORT or ADDR:PORT)");
      g_dashboard_flag = argv[++i];
    } else if (std::strncmp(a, "--dashboard=", 12) == 0) {
      g_dashboard_flag = a + 12;
    } else {
      argv[out++] = argv[i];
      continue;
    }
#ifdef TROUPE_HAVE_DASHBOARD
    (void)parse_dashboard_option(*g_dashboard_flag);  // a bad value fails here, on every rank alike
#else
    throw std::invalid_argument("[launch] --dashboard: troupe was built without the dashboard (it needs CAF and "
                                "cpp-httplib: apt-get install libcaf-dev libcpp-httplib-dev, then rebuild)");
#endif
  }
  if (out < argc) argv[out] = nullptr;
  argc = out;
}

#ifdef TROUPE_HAVE_DASHBOARD
std::unique_ptr<Dashboard> g_dashboard;

/// Starts the dashboard (on the launching rank) and prints its address; nothing without --dashboard.
std::unique_ptr<Dashboard> start_dashboard(DashboardSource source) {
  if (!g_dashboard_flag) return nullptr;
  auto d = std::make_unique<Dashboard>(parse_dashboard_option(*g_dashboard_flag), std::move(source));
  std::printf("[troupe] dashboard %s\n", d->url().c_str());
  std::fflush(stdout);
  return d;
}

/// start_dashboard on rank 0 of `world`; its error, if any, is thrown on every rank (a broadcast), so
/// no rank waits for one that gave up.
std::unique_ptr<Dashboard> start_dashboard_collective(const Context& c) {
  if (!g_dashboard_flag) return nullptr;
  std::unique_ptr<Dashboard> d;
  std::string error;
  if (c.rank == 0) {
    try {
      d = start_dashboard(DashboardSource{c.size, c.backend, c.host, c.actor_runtime});
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (c.size > 1) {
    constexpr int64_t n = 512;
    Tensor msg = zeros({n}, TensorOptions().dtype(kByte));
    std::memcpy(msg.data_ptr(), error.data(), std::min<size_t>(error.size(), n - 1));
    c.world->broadcast(msg, 0);
    error = static_cast<const char*>(msg.data_ptr());
  }
  if (!error.empty()) throw std::runtime_error(error);
  return d;
}
#endif

}  // namespace

actors::Runtime& Context::actors() const {
  if (!actor_runtime) {
    throw std::runtime_error(
        "[launch] Context::actors(): no actor runtime (troupe was built without CAF, or TROUPE_ACTORS=0)");
  }
  return *actor_runtime;
}

// With GPUs and NCCL: the rank's device is cuda:<local_rank % GPUs> and gpu_world an NCCL group of the
// world's ranks (the unique id travels over the world). Collective over the world.
void attach_gpus(Context& c) {
#ifdef TROUPE_HAVE_NCCL
  const char* off = std::getenv("TROUPE_NO_NCCL");
  if (off && *off && std::strcmp(off, "0") != 0) return;
  // Building the NCCL group is collective: every rank must have a GPU of its own (NCCL refuses two
  // ranks of one communicator on one device), or none builds it.
  const int ngpu = comm::nccl_device_count();
  Tensor ok = full({1}, ngpu > 0 && c.local_rank < ngpu ? 1.0 : 0.0, TensorOptions().dtype(kInt32));
  c.world->all_reduce(ok, comm::ReduceOp::MIN);
  if (ok.item<int>() == 0) return;
  c.device = Device(kCUDA, c.local_rank);
  c.gpu_world = comm::make_nccl_group(c.world, c.local_rank);
  c.backend += "+nccl";
#else
  (void)c;
#endif
}

#if defined(TROUPE_HAVE_ACTORS) || defined(TROUPE_HAVE_DASHBOARD)
namespace {
/// Undoes what init() did so far when a collective step of it failed on every rank (the actors' start,
/// the dashboard's): as if it had never started, MPI finalized.
void unwind_start(Context& c) {
  c.actor_runtime.reset();
#ifdef TROUPE_HAVE_ACTORS
  actors::stop();
#endif
  comm::set_world(nullptr);
  c.gpu_world.reset();
  c.world.reset();
#ifdef TROUPE_HAVE_MPI
  if (g_uses_mpi) comm::mpi_finalize();
#endif
}
}  // namespace
#endif

Context init(int& argc, char**& argv) {
  std::lock_guard<std::mutex> g(g_mu);
  if (g_inited && !g_finalized) return g_ctx;
  if (g_finalized) throw std::runtime_error("[launch::init] called after launch::finalize()");
  Context c;
  c.host = host_name();
  c.device = Device(kCPU);
  if (under_mpirun()) {
#ifdef TROUPE_HAVE_MPI
    c.world = comm::make_mpi_world();
    c.backend = "mpi";
    c.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
    g_uses_mpi = true;
#else
    throw std::runtime_error(std::string("[launch::init] started by mpirun (OMPI_COMM_WORLD_SIZE=") +
                             std::getenv("OMPI_COMM_WORLD_SIZE") +
                             ") but troupe was built without MPI; rebuild with MPI found (TROUPE_MPI=ON)");
#endif
  } else {
    c.world = comm::make_local_groups(1).at(0);
    c.backend = c.world->backend();
    c.local_rank = 0;
  }
  c.rank = c.world->rank();
  c.size = c.world->size();
  attach_gpus(c);
  comm::set_world(c.world);
#ifdef TROUPE_HAVE_ACTORS
  // A CUDA tensor from another process lands on this rank's GPU (one process per rank here; between the
  // threads of --ranks N tensors pass by handle).
  if (c.device.is_cuda()) actors::set_cuda_arrival_device(c.device.index());
  if (actors_wanted()) {
    try {
      c.actor_runtime = c.backend.rfind("mpi", 0) == 0 ? actors::start_connected(c.world) : actors::start_local(1).at(0);
    } catch (...) {  // every rank throws it (start_connected): leave as if never started
      unwind_start(c);
      throw;
    }
  }
#endif
#ifdef TROUPE_HAVE_DASHBOARD
  take_dashboard_flag(argc, argv);
  try {
    g_dashboard = start_dashboard_collective(c);
  } catch (...) {  // every rank throws it: leave as if never started
    unwind_start(c);
    throw;
  }
#endif
  g_ctx = c;
  g_inited = true;
#ifdef TROUPE_HAVE_ACTORS
  if (c.actor_runtime) finalize_before_main_thread_ends(*c.actor_runtime);
#endif
  std::atexit(finalize_at_exit);
  announce(c);
  return c;
}

void finalize() {
  std::lock_guard<std::mutex> g(g_mu);
  if (!g_inited || g_finalized) return;
  g_finalized = true;
  if (g_ctx.world) {
    try {
      g_ctx.world->barrier();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "[troupe] rank %d: launch::finalize: barrier failed: %s\n", g_ctx.rank, e.what());
    }
  }
#ifdef TROUPE_HAVE_DASHBOARD
  g_dashboard.reset();  // it asks the actors; stops before them
#endif
  g_ctx.actor_runtime.reset();
#ifdef TROUPE_HAVE_ACTORS
  actors::stop();  // after the barrier: no rank still talks to the others
#endif
  comm::set_world(nullptr);
  g_ctx.gpu_world.reset();  // NCCL before MPI: its destruction may still talk to peers
  g_ctx.world.reset();
#ifdef TROUPE_HAVE_MPI
  if (g_uses_mpi) comm::mpi_finalize();
#endif
}

int run(int argc, char** argv, std::function<int(Context&)> main_fn) {
  int ranks = take_ranks_flag(argc, argv);
  g_dashboard_flag.reset();  // this run's flag only
  take_dashboard_flag(argc, argv);
  if (under_mpirun() || ranks == 0) {
    if (ranks > 0 && ranks != env_int("OMPI_COMM_WORLD_SIZE", ranks)) {
      throw std::invalid_argument("[launch::run] --ranks " + std::to_string(ranks) + " under mpirun -np " +
                                  std::getenv("OMPI_COMM_WORLD_SIZE") +
                                  ": the ranks are mpirun's processes; drop --ranks");
    }
    Context c;
    try {
      c = init(argc, argv);
    } catch (const std::exception& e) {  // a start that cannot happen (a bad TROUPE_* variable, ...): one line
      std::fprintf(stderr, "%s: %s\n", program_name(argv).c_str(), e.what());
      return 1;
    }
    int code = main_fn(c);
    c.actor_runtime.reset();
    c.world.reset();
    c.gpu_world.reset();
    finalize();
    return code;
  }
  std::vector<int> codes(ranks, 0);
  std::string host = host_name();
  StopActors stop_actors;
#ifdef TROUPE_HAVE_ACTORS
  std::vector<std::shared_ptr<actors::Runtime>> runtimes;
  if (actors_wanted()) {
    try {
      runtimes = actors::start_local(ranks);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", program_name(argv).c_str(), e.what());
      return 1;
    }
  }
#endif
#ifdef TROUPE_HAVE_DASHBOARD
  // Destroyed before stop_actors runs: it asks rank 0's runtime.
  auto dash = start_dashboard(DashboardSource{ranks, "local", host, runtimes.empty() ? nullptr : runtimes[0]});
#endif
  comm::run_local(ranks, [&](comm::ProcessGroupPtr pg) {
    Context c;
    c.rank = pg->rank();
    c.size = pg->size();
    c.local_rank = c.rank;
    c.backend = pg->backend();
    c.host = host;
    c.device = Device(kCPU);
    c.world = pg;
#ifdef TROUPE_HAVE_ACTORS
    if (!runtimes.empty()) c.actor_runtime = runtimes[c.rank];
#endif
    attach_gpus(c);
    announce(c);
    codes[c.rank] = main_fn(c);
  });
  return *std::max_element(codes.begin(), codes.end());
}

}  // namespace troupe::launch
