#include "lib/io/transport.h"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "asio/connect.hpp"
#include "asio/ip/address.hpp"
#include "asio/ip/tcp.hpp"
#include "asio/local/stream_protocol.hpp"
#include "asio/ssl/context.hpp"
#include "asio/ssl/error.hpp"
#include "asio/ssl/host_name_verification.hpp"
#include "asio/ssl/stream.hpp"
#include "asio/steady_timer.hpp"
#include "asio/write.hpp"

namespace relock {
namespace io {
namespace {

bool IsIpLiteral(const std::string& host) {
  asio::error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

// What kind of file `mode` is, for messages.
const char* FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// ClientOptions.tls.<option> must name a regular file this process can read,
// or (`directory`) a directory it can search: checked before OpenSSL opens
// it, since OpenSSL would block on a FIFO and looks into a ca_dir only at
// the handshake (a missing one then reads as "self-signed certificate in
// chain").
absl::Status CheckPath(absl::string_view option, const std::string& path,
                       bool directory) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.tls.", option, " \"", path, "\": ", why));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return bad(std::error_code(errno, std::system_category()).message());
  }
  if (directory) {
    if (!S_ISDIR(st.st_mode)) {
      return bad(absl::StrCat("is ", FileKind(st.st_mode),
                              ", not a directory of CA certificates"));
    }
    // OpenSSL opens <dir>/<hash>.N by name: searching is enough.
    if (::access(path.c_str(), X_OK) != 0) {
      return bad(std::error_code(errno, std::system_category()).message());
    }
    return absl::OkStatus();
  }
  if (!S_ISREG(st.st_mode)) {
    return bad(absl::StrCat("is ", FileKind(st.st_mode),
                            ", not a regular (PEM) file"));
  }
  // Readable? (Non-blocking, should it have become a FIFO meanwhile.)
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return bad(std::error_code(errno, std::system_category()).message());
  }
  ::close(fd);
  return absl::OkStatus();
}

// Whether a failed client handshake met an answer that is not TLS at all
// (a plaintext server, an HTTP server): OpenSSL's record layer says so.
bool NotTlsAnswer(const asio::error_code& ec) {
  if (ec.category() != asio::error::get_ssl_category()) return false;
  const int reason = ERR_GET_REASON(static_cast<unsigned long>(ec.value()));
  return reason == SSL_R_WRONG_VERSION_NUMBER ||
         reason == SSL_R_PACKET_LENGTH_TOO_LONG ||
         reason == SSL_R_UNKNOWN_PROTOCOL ||
         reason == SSL_R_RECORD_LENGTH_MISMATCH || reason == SSL_R_HTTP_REQUEST;
}

absl::Status ConnectError(const redis::Endpoint& ep, absl::string_view step,
                          const asio::error_code& ec) {
  return absl::UnavailableError(absl::StrCat(step, " Redis at ", ep.ToString(),
                                             " failed: ", ec.message()));
}

// Reads and writes for every kind of stream; Open() is the kind's connect.
template <class Stream>
class StreamTransport : public Transport {
 public:
  // `args` after the io_context construct the stream; `tls` is for TLS.
  template <class... Args>
  StreamTransport(asio::io_context& io, redis::Endpoint ep,
                  std::shared_ptr<TlsContext> tls, Args&&... args)
      : ep_(std::move(ep)),
        tls_(std::move(tls)),
        resolver_(io),
        stream_(io, std::forward<Args>(args)...) {}

  void Connect(std::function<void(absl::Status)> done) override {
    Open(std::move(done));
  }
  void Write(asio::const_buffer data, IoHandler done) override {
    asio::async_write(stream_, data, KeepAlive(std::move(done)));
  }
  void ReadSome(asio::mutable_buffer into, IoHandler done) override {
    stream_.async_read_some(into, KeepAlive(std::move(done)));
  }
  ~StreamTransport() override {
    if (parked_fd_ >= 0) ::close(parked_fd_);
  }

  void Close() override {
    asio::error_code ignored;
    resolver_.cancel();
    stream_.lowest_layer().close(ignored);
    if (parked_fd_ >= 0) ::close(parked_fd_);
    parked_fd_ = -1;
    StopProbe();
  }
  int Park() override;
  void Unpark() override;

 private:
  void Open(std::function<void(absl::Status)> done);
  // TCP (also under TLS): resolve, connect, then `then`.
  void ConnectTcp(std::function<void(absl::Status)> done,
                  std::function<void(std::function<void(absl::Status)>)> then) {
    resolver_.async_resolve(
        ep_.host, std::to_string(ep_.port),
        [this, self = shared_from_this(), done = std::move(done),
         then = std::move(then)](
            const asio::error_code& ec,
            const asio::ip::tcp::resolver::results_type& results) {
          if (ec) return done(ConnectError(ep_, "resolve host of", ec));
          asio::async_connect(
              stream_.lowest_layer(), results,
              [this, self, done, then](const asio::error_code& ec2,
                                       const asio::ip::tcp::endpoint& to) {
                if (ec2) return done(ConnectError(ep_, "connect to", ec2));
                peer_ = to;
                ipv6_ = to.address().is_v6();
                asio::error_code ignored;
                stream_.lowest_layer().set_option(asio::ip::tcp::no_delay(true),
                                                  ignored);
                stream_.lowest_layer().set_option(
                    asio::socket_base::keep_alive(true), ignored);
                then(done);
              });
        });
  }
  void Handshake(std::function<void(absl::Status)> done);
  // TLS: a handshake without an answer may be a plaintext Redis, which
  // waits for a line the ClientHello never ends (its NUL bytes stop the
  // inline parser), so the handshake would take the whole connect_timeout.
  // After kPlaintextProbeAfter without an answer, a second connection sends
  // the inline command PING; a RESP answer ('+' or '-') proves a plaintext
  // port, and `finish` fails the handshake at once. A TLS server drops it.
  void StartProbe(const std::function<void(absl::Status)>& finish);
  void StopProbe() {
    asio::error_code ignored;
    if (probe_timer_ != nullptr) probe_timer_->cancel();
    if (probe_ != nullptr) probe_->close(ignored);
  }

  // Park() for plain sockets: `protocol` rebuilds the socket in Unpark().
  int ParkSocket() {
    asio::error_code ec;
    const int fd = stream_.release(ec);
    if (ec) return -1;  // still the loop's
    parked_fd_ = fd;
    return fd;
  }
  template <class Protocol>
  void UnparkSocket(const Protocol& protocol) {
    if (parked_fd_ < 0) return;
    asio::error_code ec;
    stream_.assign(protocol, parked_fd_, ec);
    // On failure the stream stays closed: its next operation fails, and
    // the connection with it.
    if (ec) ::close(parked_fd_);
    parked_fd_ = -1;
  }

  const redis::Endpoint ep_;
  const std::shared_ptr<TlsContext> tls_;  // TLS only
  asio::ip::tcp::resolver resolver_;
  Stream stream_;
  int parked_fd_ = -1;
  bool ipv6_ = false;  // TCP: the connected socket's family (for Unpark)
  asio::ip::tcp::endpoint peer_;  // TCP: the address connected to
  // TLS: the plaintext probe (see StartProbe()).
  std::unique_ptr<asio::steady_timer> probe_timer_;
  std::unique_ptr<asio::ip::tcp::socket> probe_;
  std::array<char, 64> probe_answer_{};
};

constexpr std::chrono::milliseconds kPlaintextProbeAfter{250};

using TcpTransport = StreamTransport<asio::ip::tcp::socket>;
using UnixTransport = StreamTransport<asio::local::stream_protocol::socket>;
using TlsTransport = StreamTransport<asio::ssl::stream<asio::ip::tcp::socket>>;

template <>
int TcpTransport::Park() {
  return ParkSocket();
}

template <>
void TcpTransport::Unpark() {
  UnparkSocket(ipv6_ ? asio::ip::tcp::v6() : asio::ip::tcp::v4());
}

template <>
int UnixTransport::Park() {
  return ParkSocket();
}

template <>
void UnixTransport::Unpark() {
  UnparkSocket(asio::local::stream_protocol());
}

template <>
int TlsTransport::Park() {
  return -1;
}

template <>
void TlsTransport::Unpark() {}

template <>
void TcpTransport::Open(std::function<void(absl::Status)> done) {
  ConnectTcp(std::move(done),
             [](const std::function<void(absl::Status)>& connected) {
               connected(absl::OkStatus());
             });
}

template <>
void UnixTransport::Open(std::function<void(absl::Status)> done) {
  stream_.async_connect(asio::local::stream_protocol::endpoint(ep_.path),
                        [this, self = shared_from_this(),
                         done = std::move(done)](const asio::error_code& ec) {
                          if (ec)
                            return done(ConnectError(ep_, "connect to", ec));
                          done(absl::OkStatus());
                        });
}

template <>
void TlsTransport::StartProbe(const std::function<void(absl::Status)>& finish) {
  probe_ = std::make_unique<asio::ip::tcp::socket>(stream_.get_executor());
  probe_->async_connect(peer_, [this, self = shared_from_this(),
                                finish](const asio::error_code& ec) {
    if (ec) return;  // no verdict: the handshake decides
    static constexpr char kPing[] = "PING\r\n";
    asio::async_write(
        *probe_, asio::buffer(kPing, sizeof(kPing) - 1),
        [this, self, finish](const asio::error_code& ec2, size_t /*n*/) {
          if (ec2) return;
          probe_->async_read_some(
              asio::buffer(probe_answer_),
              [this, self, finish](const asio::error_code& ec3, size_t n) {
                if (ec3 || n == 0 ||
                    (probe_answer_[0] != '+' && probe_answer_[0] != '-')) {
                  return;
                }
                asio::error_code ignored;
                stream_.lowest_layer().close(ignored);
                finish(absl::FailedPreconditionError(absl::StrCat(
                    "the server at ", ep_.ToString(),
                    " does not speak TLS (it did not answer the TLS "
                    "handshake, and answers plaintext Redis commands); is "
                    "it a plaintext port? use a redis:// URL")));
              });
        });
  });
}

template <>
void TlsTransport::Handshake(std::function<void(absl::Status)> done) {
  const std::string& name = tls_->server_name();
  // SNI carries DNS names only (RFC 6066).
  if (!IsIpLiteral(name)) {
    SSL_set_tlsext_host_name(stream_.native_handle(), name.c_str());
  }
  if (tls_->verify()) {
    stream_.set_verify_mode(asio::ssl::verify_peer);
    stream_.set_verify_callback(asio::ssl::host_name_verification(name));
  } else {
    stream_.set_verify_mode(asio::ssl::verify_none);
  }
  // Once, by the handshake or by the probe, whichever ends first.
  auto finished = std::make_shared<bool>(false);
  std::function<void(absl::Status)> finish =
      [this, self = shared_from_this(), finished,
       done = std::move(done)](absl::Status s) {
        if (*finished) return;
        *finished = true;
        StopProbe();
        done(std::move(s));
      };
  probe_timer_ = std::make_unique<asio::steady_timer>(stream_.get_executor());
  probe_timer_->expires_after(kPlaintextProbeAfter);
  probe_timer_->async_wait([this, self = shared_from_this(), finished,
                            finish](const asio::error_code& ec) {
    if (!ec && !*finished) StartProbe(finish);
  });
  stream_.async_handshake(
      asio::ssl::stream_base::client,
      [this, self = shared_from_this(),
       done = std::move(finish)](const asio::error_code& ec) {
        if (!ec) return done(absl::OkStatus());
        if (NotTlsAnswer(ec)) {
          return done(absl::FailedPreconditionError(absl::StrCat(
              "the server at ", ep_.ToString(),
              " does not speak TLS (its answer to the TLS handshake is not "
              "TLS: ",
              ec.message(), "); is it a plaintext port? use a redis:// URL")));
        }
        std::string why = ec.message();
        const long verify =  // NOLINT(google-runtime-int): OpenSSL's type
            SSL_get_verify_result(stream_.native_handle());
        if (verify != X509_V_OK) {
          absl::StrAppend(&why, " (", X509_verify_cert_error_string(verify),
                          "; expected name \"", tls_->server_name(), "\")");
        }
        // Retrying cannot help: the server's identity is not proven.
        done(absl::UnauthenticatedError(absl::StrCat(
            "TLS handshake with Redis at ", ep_.ToString(), " failed: ", why)));
      });
}

template <>
void TlsTransport::Open(std::function<void(absl::Status)> done) {
  ConnectTcp(std::move(done),
             [this](std::function<void(absl::Status)> connected) {
               Handshake(std::move(connected));
             });
}

}  // namespace

TlsContext::~TlsContext() = default;

absl::StatusOr<std::shared_ptr<TlsContext>> TlsContext::Create(
    const TlsOptions& options, const std::string& host) {
  std::shared_ptr<TlsContext> tls(new TlsContext);
  tls->context_ =
      std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
  asio::ssl::context& ctx = *tls->context_;
  auto bad = [](absl::string_view what, const std::string& file,
                const asio::error_code& ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.tls.", what, " \"", file, "\": ", ec.message()));
  };
  asio::error_code ec;
  ctx.set_options(
      asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
          asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
          asio::ssl::context::no_tlsv1_1,
      ec);
  if (options.cert_file.empty() != options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "ClientOptions.tls: cert_file and key_file go together (mutual TLS "
        "needs both)");
  }
  for (const auto& [option, path, directory] :
       {std::make_tuple("ca_file", &options.ca_file, false),
        std::make_tuple("ca_dir", &options.ca_dir, true),
        std::make_tuple("cert_file", &options.cert_file, false),
        std::make_tuple("key_file", &options.key_file, false)}) {
    if (path->empty()) continue;
    if (absl::Status s = CheckPath(option, *path, directory); !s.ok()) {
      return s;
    }
  }
  if (!options.ca_file.empty()) {
    ctx.load_verify_file(options.ca_file, ec);
    if (ec) {
      return bad("ca_file", options.ca_file, ec);
    }
  }
  if (!options.ca_dir.empty()) {
    ctx.add_verify_path(options.ca_dir, ec);
    if (ec) {
      return bad("ca_dir", options.ca_dir, ec);
    }
  }
  if (options.ca_file.empty() && options.ca_dir.empty()) {
    ctx.set_default_verify_paths(ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ClientOptions.tls: no ca_file or ca_dir, and the system's trust "
          "store cannot be used: ",
          ec.message()));
    }
  }
  if (!options.cert_file.empty()) {
    ctx.use_certificate_chain_file(options.cert_file, ec);
    if (ec) {
      return bad("cert_file", options.cert_file, ec);
    }
    ctx.use_private_key_file(options.key_file, asio::ssl::context::pem, ec);
    if (ec) {
      return bad("key_file", options.key_file, ec);
    }
    if (SSL_CTX_check_private_key(ctx.native_handle()) != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ClientOptions.tls.key_file \"", options.key_file,
          "\" does not match cert_file \"", options.cert_file, "\""));
    }
  }
  tls->server_name_ = options.server_name.empty() ? host : options.server_name;
  tls->verify_ = !options.dangerously_skip_verification;
  return tls;
}

std::shared_ptr<Transport> Transport::Create(asio::io_context& io,
                                             const redis::Endpoint& endpoint,
                                             std::shared_ptr<TlsContext> tls) {
  if (endpoint.kind == redis::Endpoint::Kind::kUnix) {
    return std::make_shared<UnixTransport>(io, endpoint, nullptr);
  }
  if (endpoint.tls) {
    asio::ssl::context& context = tls->context();
    return std::make_shared<TlsTransport>(io, endpoint, std::move(tls),
                                          context);
  }
  return std::make_shared<TcpTransport>(io, endpoint, nullptr);
}

}  // namespace io
}  // namespace relock
