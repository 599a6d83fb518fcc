// Authentication of the connections between actor systems (CAF-free): every connection to a rank's
// endpoint must prove, before CAF's BASP reads one byte of it, that it holds the job's secret, and the
// listener proves it back. Mutual HMAC-SHA256 challenge-response over fixed-size messages:
//
//   listener -> peer   "TRPAUTH1" nonce_l[32]                                       (40 bytes)
//   peer -> listener   "TRPAUTH1" nonce_p[32] HMAC(secret, "P" nonce_l nonce_p)     (72 bytes)
//   listener -> peer   HMAC(secret, "L" nonce_p nonce_l)                            (32 bytes)
//
// A peer that sends anything else, or nothing within the timeout, is disconnected: the listener reads
// exactly 72 bytes from it, allocates nothing by what it claims, and dispatches nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

namespace troupe::actors::auth {

/// Bytes of the listener's challenge, the peer's response and the listener's proof.
inline constexpr size_t kChallengeSize = 40;
inline constexpr size_t kResponseSize = 72;
inline constexpr size_t kProofSize = 32;

/// 32 fresh random bytes: the per-job secret (launch makes it on rank 0 and shares it over the world).
std::string random_secret();
/// SHA-256 of TROUPE_SECRET when it is set (every rank derives the same secret), else "".
std::string secret_from_env();

/// The job's secret in this process: what start_connected settled (TROUPE_SECRET's hash, or rank 0's
/// random bytes shared over the world); without it, TROUPE_SECRET's hash or 32 random bytes made on the
/// first call. Other services of the job (the dashboard) derive their tokens from it.
std::string job_secret();
/// @private: start_connected records the secret it settled.
void set_job_secret(const std::string& secret);
/// A token for one service of the job that does not reveal the secret: the first 16 bytes of
/// HMAC-SHA256(secret, "troupe/" + purpose) as 32 lowercase hex digits.
std::string derive_token(const std::string& secret, const std::string& purpose);
/// Equality of `a` and `b` in time independent of where they differ.
bool same_token(const std::string& a, const std::string& b);

/// The listener's side on a connected socket `fd` (made blocking, timeouts set): true when the peer
/// proved it holds `secret` (and was sent the listener's proof). On false the caller closes `fd`.
bool accept_peer(int fd, const std::string& secret, std::chrono::milliseconds timeout);
/// The connecting side on a connected socket `fd`: true when both proofs checked out.
bool prove_to_listener(int fd, const std::string& secret, std::chrono::milliseconds timeout);

}  // namespace troupe::actors::auth
