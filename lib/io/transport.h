// A byte stream to one Redis endpoint on the event loop: TCP, a unix socket,
// or TLS over TCP (asio's OpenSSL stream). Connect() covers name resolution,
// the connect and the TLS handshake. Used only on the loop thread; one read
// and one write may be outstanding at a time. Writes never raise SIGPIPE
// (asio sends with MSG_NOSIGNAL).

#ifndef RELOCK_LIB_IO_TRANSPORT_H_
#define RELOCK_LIB_IO_TRANSPORT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "asio/buffer.hpp"
#include "asio/error_code.hpp"
#include "asio/io_context.hpp"
#include "lib/redis/url.h"
#include "relock/options.h"

namespace asio {
namespace ssl {
class context;
}  // namespace ssl
}  // namespace asio

namespace relock {
namespace io {

using IoHandler = std::function<void(const asio::error_code&, size_t)>;

// The TLS settings of an endpoint, prepared once (certificates read and
// checked): InvalidArgument naming a file that cannot be used.
class TlsContext {
 public:
  static absl::StatusOr<std::shared_ptr<TlsContext>> Create(
      const TlsOptions& options, const std::string& host);
  ~TlsContext();
  asio::ssl::context& context() { return *context_; }
  const std::string& server_name() const { return server_name_; }
  bool verify() const { return verify_; }

 private:
  TlsContext() = default;
  std::unique_ptr<asio::ssl::context> context_;
  std::string server_name_;
  bool verify_ = true;
};

// Every asynchronous operation keeps its transport alive until its handler
// has run, so a transport may be dropped with operations outstanding.
class Transport : public std::enable_shared_from_this<Transport> {
 public:
  // `tls` is required for a TLS endpoint and ignored otherwise.
  static std::shared_ptr<Transport> Create(asio::io_context& io,
                                           const redis::Endpoint& endpoint,
                                           std::shared_ptr<TlsContext> tls);
  virtual ~Transport() = default;

  // Resolves, connects and (TLS) handshakes. The status names the step that
  // failed.
  virtual void Connect(std::function<void(absl::Status)> done) = 0;
  virtual void Write(asio::const_buffer data, IoHandler done) = 0;
  virtual void ReadSome(asio::mutable_buffer into, IoHandler done) = 0;
  // Cancels outstanding operations (their handlers see an error) and closes.
  virtual void Close() = 0;
  // Parking, for calls that do their own I/O (see "Direct calls" in
  // connection.h). Park(), with no operation outstanding, takes a connected
  // plain socket (TCP, unix) out of the event loop, so that its traffic no
  // longer wakes the loop, and returns its descriptor: whoever has exclusive
  // use of the transport may then send(2)/recv(2) on it (non-blocking as
  // the loop left it; the connection may switch it to blocking while parked
  // and back, see ParkBlocking() in connection_direct.cc; Asio sets
  // non-blocking again before its first operation after Unpark() anyway) until
  // Unpark() gives it back to the loop. -1 for TLS, whose bytes only the
  // OpenSSL stream may touch (nothing changes). Close() and the destructor
  // close a parked socket too.
  virtual int Park() = 0;
  virtual void Unpark() = 0;

 protected:
  // `done`, holding this transport alive until it runs.
  IoHandler KeepAlive(IoHandler done) {
    return [self = shared_from_this(), done = std::move(done)](
               const asio::error_code& ec, size_t n) { done(ec, n); };
  }
};

}  // namespace io
}  // namespace relock

#endif  // RELOCK_LIB_IO_TRANSPORT_H_
