// SummaryWriter: files on the writing rank, records gathered over the group at flush().
#include <troupe/metrics/summary_writer.h>

#include <troupe/metrics/live.h>
#include <troupe/metrics/tfrecord.h>
#include <troupe/tensor/ops.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <unistd.h>

namespace troupe::metrics {

namespace fs = std::filesystem;

double wall_time_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

std::atomic<int64_t> g_event_files{0};

std::FILE* open_file(const std::string& path, const char* mode) {
  std::FILE* f = std::fopen(path.c_str(), mode);
  if (!f) throw MetricsError("[SummaryWriter] cannot open '" + path + "' for writing: " + std::strerror(errno));
  return f;
}

void put(std::FILE* f, const std::string& s, const std::string& path) {
  if (std::fwrite(s.data(), 1, s.size(), f) != s.size())
    throw MetricsError("[SummaryWriter] cannot write to '" + path + "': " + std::strerror(errno));
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

SummaryWriter::SummaryWriter(std::string log_dir, SummaryWriterOptions options)
    : log_dir_(std::move(log_dir)), options_(std::move(options)) {
  if (log_dir_.empty()) throw MetricsError("[SummaryWriter] log_dir is empty");
  const auto& g = options_.group();
  if (g) {
    rank_ = g->rank();
    writer_ = rank_ == 0;
  } else if (auto w = comm::world()) {
    rank_ = w->rank();
  }
  std::string error;
  if (writer_) {
    try {
      open_files();
    } catch (const MetricsError& e) {
      close_files();
      error = e.what();
    }
  }
  if (g && g->size() > 1) {
    // Every rank learns whether rank 0 could open its files, and fails alike when not (else the others
    // would wait for it in their next collective).
    Tensor len = tensor(std::vector<int64_t>{static_cast<int64_t>(error.size())});
    g->broadcast(len, 0);
    if (const int64_t n = len.item<int64_t>(); n > 0) {
      Tensor text = zeros({n}, kUInt8);
      if (writer_) std::memcpy(text.data_ptr(), error.data(), error.size());
      g->broadcast(text, 0);
      error.assign(static_cast<const char*>(text.data_ptr()), static_cast<size_t>(n));
    }
  }
  if (!error.empty()) throw MetricsError(error);
}

void SummaryWriter::open_files() {
  std::error_code ec;
  if (fs::exists(log_dir_, ec) && !fs::is_directory(log_dir_, ec))
    throw MetricsError("[SummaryWriter] cannot create log directory '" + log_dir_ + "': a file of that name exists");
  fs::create_directories(log_dir_, ec);
  if (ec) throw MetricsError("[SummaryWriter] cannot create log directory '" + log_dir_ + "': " + ec.message());
  const fs::path dir(log_dir_);
  const bool append = options_.append();
  if (options_.jsonl()) {
    jsonl_path_ = (dir / "metrics.jsonl").string();
    jsonl_ = open_file(jsonl_path_, append ? "a" : "w");
  }
  if (options_.csv()) {
    csv_path_ = (dir / "metrics.csv").string();
    csv_ = open_file(csv_path_, append ? "a" : "w");
    if (std::ftell(csv_) == 0) put(csv_, std::string(csv_header()) + "\n", csv_path_);
  }
  if (options_.tensorboard()) {
    if (!append) {  // a fresh run: the directory's older event files would show as part of it
      for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) fs::remove(e.path(), ec);
    }
    const double now = wall_time_now();
    event_path_ = (dir / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host_name() +
                          "." + std::to_string(getpid()) + "." + std::to_string(g_event_files++) +
                          options_.filename_suffix()))
                      .string();
    events_ = open_file(event_path_, "wb");
    put(events_, tfrecord_frame(encode_file_version_event(now)), event_path_);
    std::fflush(events_);
  }
}

SummaryWriter::~SummaryWriter() {
  try {
    for (const auto& r : pending_)
      if (writer_) write(r);
  } catch (...) {
  }
  close_files();
}

void SummaryWriter::add_scalar(const std::string& tag, double scalar_value, int64_t global_step,
                               std::optional<double> walltime) {
  if (closed_) throw MetricsError("[SummaryWriter] add_scalar(\"" + tag + "\") after close() (log_dir '" + log_dir_ + "')");
  if (tag.empty()) throw MetricsError("[SummaryWriter] add_scalar: empty tag (log_dir '" + log_dir_ + "')");
  Record r{tag, global_step, scalar_value, walltime ? *walltime : wall_time_now(), rank_};
  if (writer_) write(r);
  else pending_.push_back(std::move(r));
}

void SummaryWriter::write(const Record& r) {
  if (jsonl_) put(jsonl_, to_json(r) + "\n", jsonl_path_);
  if (csv_) put(csv_, to_csv(r) + "\n", csv_path_);
  if (events_)
    put(events_, tfrecord_frame(encode_scalar_event(r.wall_time, r.step, r.tag, static_cast<float>(r.value))),
        event_path_);
  LiveLog::instance().append(r);  // kept only while a live view (the dashboard) is on
  ++written_;
}

void SummaryWriter::flush() {
  if (closed_) return;
  const auto& g = options_.group();
  if (g && g->size() > 1) {
    // Every rank's pending records as JSON lines; sizes first, then the bytes padded to the longest.
    std::string mine;
    for (const auto& r : pending_) mine += to_json(r) + "\n";
    pending_.clear();
    const int n = g->size();
    Tensor size = tensor(std::vector<int64_t>{static_cast<int64_t>(mine.size())});
    Tensor sizes = empty({n}, kInt64);
    g->all_gather_into_tensor(sizes, size);
    const auto lens = sizes.to_vector<int64_t>();
    int64_t longest = 0;
    for (auto l : lens) longest = std::max(longest, l);
    if (longest > 0) {
      Tensor buf = zeros({longest}, kUInt8);
      if (!mine.empty()) std::memcpy(buf.data_ptr(), mine.data(), mine.size());
      Tensor all = empty({n * longest}, kUInt8);
      g->all_gather_into_tensor(all, buf);
      if (writer_) {
        const char* base = static_cast<const char*>(all.data_ptr());
        for (int r = 1; r < n; ++r) {
          std::string_view text(base + r * longest, static_cast<size_t>(lens[r]));
          size_t at = 0;
          while (at < text.size()) {
            size_t end = text.find('\n', at);
            write(parse_json(text.substr(at, end - at)));
            at = end + 1;
          }
        }
      }
    }
  }
  if (writer_) {
    for (std::FILE* f : {jsonl_, csv_, events_})
      if (f) std::fflush(f);
  }
}

void SummaryWriter::close() {
  if (closed_) return;
  flush();
  close_files();
}

void SummaryWriter::close_files() {
  closed_ = true;
  for (std::FILE** f : {&jsonl_, &csv_, &events_}) {
    if (*f) std::fclose(*f);
    *f = nullptr;
  }
}

}  // namespace troupe::metrics
