// The connection handshake (auth.h): HMAC-SHA256 (OpenSSL's libcrypto) over fixed-size messages.
#include <troupe/actors/auth.h>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

namespace troupe::actors::auth {
namespace {

constexpr char kMagic[8] = {'T', 'R', 'P', 'A', 'U', 'T', 'H', '1'};

std::string random_bytes(size_t n) {
  std::string out(n, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) != 1) {
    throw std::runtime_error("[actors] auth: RAND_bytes failed");
  }
  return out;
}

std::string hmac(const std::string& key, const std::string& msg) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(msg.data()),
       msg.size(), out, &len);
  return std::string(reinterpret_cast<char*>(out), len);
}

bool equal_secret(const std::string& a, const char* b, size_t n) {
  return a.size() == n && CRYPTO_memcmp(a.data(), b, n) == 0;
}

void prepare(int fd, std::chrono::milliseconds timeout) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void restore(int fd) {
  timeval tv{};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

// Reads exactly n bytes (never more: what follows belongs to BASP).
bool read_exact(int fd, char* buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::recv(fd, buf + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

bool write_all(int fd, const char* buf, size_t n) {
  size_t put = 0;
  while (put < n) {
    ssize_t r = ::send(fd, buf + put, n - put, MSG_NOSIGNAL);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    put += static_cast<size_t>(r);
  }
  return true;
}

}  // namespace

std::string random_secret() { return random_bytes(32); }

namespace {
std::mutex g_secret_mu;
std::string g_secret;
}  // namespace

std::string job_secret() {
  std::lock_guard<std::mutex> g(g_secret_mu);
  if (g_secret.empty()) {
    g_secret = secret_from_env();
    if (g_secret.empty()) g_secret = random_secret();
  }
  return g_secret;
}

void set_job_secret(const std::string& secret) {
  std::lock_guard<std::mutex> g(g_secret_mu);
  g_secret = secret;
}

std::string derive_token(const std::string& secret, const std::string& purpose) {
  const std::string mac = hmac(secret, "troupe/" + purpose);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < 16 && i < mac.size(); ++i) {
    const auto b = static_cast<unsigned char>(mac[i]);
    out += hex[b >> 4];
    out += hex[b & 15];
  }
  return out;
}

bool same_token(const std::string& a, const std::string& b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string secret_from_env() {
  const char* v = std::getenv("TROUPE_SECRET");
  if (!v || !*v) return "";
  unsigned char d[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(v), std::strlen(v), d);
  return std::string(reinterpret_cast<char*>(d), sizeof d);
}

bool accept_peer(int fd, const std::string& secret, std::chrono::milliseconds timeout) {
  prepare(fd, timeout);
  const std::string nonce_l = random_bytes(32);
  std::string challenge(kMagic, 8);
  challenge += nonce_l;
  if (!write_all(fd, challenge.data(), challenge.size())) return false;
  char resp[kResponseSize];
  if (!read_exact(fd, resp, sizeof resp)) return false;
  if (std::memcmp(resp, kMagic, 8) != 0) return false;
  const std::string nonce_p(resp + 8, 32);
  if (!equal_secret(hmac(secret, "P" + nonce_l + nonce_p), resp + 40, 32)) return false;
  const std::string proof = hmac(secret, "L" + nonce_p + nonce_l);
  if (!write_all(fd, proof.data(), proof.size())) return false;
  restore(fd);
  return true;
}

bool prove_to_listener(int fd, const std::string& secret, std::chrono::milliseconds timeout) {
  prepare(fd, timeout);
  char challenge[kChallengeSize];
  if (!read_exact(fd, challenge, sizeof challenge)) return false;
  if (std::memcmp(challenge, kMagic, 8) != 0) return false;
  const std::string nonce_l(challenge + 8, 32);
  const std::string nonce_p = random_bytes(32);
  std::string resp(kMagic, 8);
  resp += nonce_p;
  resp += hmac(secret, "P" + nonce_l + nonce_p);
  if (!write_all(fd, resp.data(), resp.size())) return false;
  char proof[kProofSize];
  if (!read_exact(fd, proof, sizeof proof)) return false;
  if (!equal_secret(hmac(secret, "L" + nonce_p + nonce_l), proof, sizeof proof)) return false;
  restore(fd);
  return true;
}

}  // namespace troupe::actors::auth
